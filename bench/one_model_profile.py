"""Where a one-model certification spends its wall time (issue 53): the tutorial's command,
``fd-conformance run --model tiny_lm.py:CASES``, sampled with py-spy across every process it
starts (the run command, its pytest session, xdist and isolation workers), the samples grouped
by what they were doing.

    python bench/one_model_profile.py --device cuda --out DIR   # needs py-spy (root or ptrace)
    python bench/one_model_profile.py --quick                   # cpu, its protocol check; without py-spy the wall alone

Prints the command's wall time, then per group the sampled seconds summed over processes (one
process busy for 2 s and another for 3 s is 5 s): imports, NCCL groups, graph capture, the
allocator (empty_cache, snapshots, synchronize), garbage collection, pytest's own machinery, the
model's work. A sample is put in the first group whose pattern any of its frames matches, in the
order of GROUPS, so an import inside a group's start counts as the import.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import add_quick

ROOT = Path(__file__).resolve().parents[1]
RATE = 100  # samples a second per process

#: (group, pattern over a frame "function (file:line)"), first match wins.
GROUPS = [
    ("import", re.compile(r"_find_and_load|_call_with_frames_removed|exec_module")),
    ("nccl/gloo groups", re.compile(r"new_group|init_process_group|destroy_process_group|_new_group_with_tag|all_reduce")),
    ("allocator (empty_cache, snapshot, synchronize)", re.compile(r"empty_cache|memory_snapshot|synchronize|memory_stats")),
    ("garbage collection", re.compile(r"gc_collect|\bcollect \(|freeze_long_lived|settled_memory")),
    ("graph capture", re.compile(r"\bcapture\b|capture_begin|capture_end|__exit__ \(.*graphs\.py")),
    ("graph replay", re.compile(r"\breplay\b")),
    ("model build (factory)", re.compile(r"build_subject|factory")),
    ("isolation (spawn, pipes)", re.compile(r"isolation/")),
    ("pytest collection", re.compile(r"pytest_collect|collect_one_node|genitems|_collect")),
    ("report writing", re.compile(r"report/|write_reports")),
]


def tutorial_module() -> str:
    sys.path.insert(0, str(ROOT))
    from tests.test_tutorial import tutorial_module as module  # the tutorial's tiny_lm.py, verbatim

    return module()


def group_of(stack: str) -> str:
    for name, pattern in GROUPS:
        if pattern.search(stack):
            return name
    return "other (model and kit work)"


def grouped(raw: Path) -> collections.Counter[str]:
    """Sampled seconds per group, from py-spy's raw (collapsed-stack) output. The process frames
    (``process N:"cmd"``) are left out: a command line naming --fd-report must not match a group."""
    seconds: collections.Counter[str] = collections.Counter()
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
            seconds[group_of(";".join(frames))] += int(count) / RATE
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=None, help="where to keep the raw samples (default: a temporary directory)")
    add_quick(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fdc-one-model-") as scratch:  # nothing left behind in /tmp
        return profile(Path(scratch), args)


def profile(work: Path, args: argparse.Namespace) -> int:
    (work / "tiny_lm.py").write_text(tutorial_module(), encoding="utf-8")
    out = Path(args.out) if args.out else work
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "one_model.raw"
    device = "cpu" if args.quick else args.device
    command = ["fd-conformance", "run", "--model", "tiny_lm.py:CASES", "--device", device, "--out", str(work / "report")]
    if args.quick:
        command += ["--", "-k", "protocol"]  # one cheap check of the tutorial's case
    spy = shutil.which("py-spy")
    sampled = [spy, "record", "--subprocesses", "--format", "raw", "--rate", str(RATE), "-o", str(raw), "--"] if spy else []
    if not spy:
        print("py-spy is not installed (pip install py-spy): the wall time alone, no groups")
    started = time.perf_counter()
    proc = subprocess.run([*sampled, *command], cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - started
    verdict = next((line for line in proc.stdout.splitlines() if line.startswith("fd-conformance: ")), "?")
    print(f"command: {' '.join(command)} (in {work})")
    print(f"wall {wall:.1f} s{' under py-spy' if spy else ''}, exit {proc.returncode}; verdict: {verdict}")
    seconds = grouped(raw) if spy and raw.exists() else collections.Counter()
    total = sum(seconds.values()) or 1.0
    print(f"{'group':48} {'s (all processes)':>18} {'share':>7}")
    for name, value in seconds.most_common():
        print(f"{name:48} {value:18.1f} {value / total:7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
