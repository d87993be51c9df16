"""Same verdict idle and under load: the main job (and outside-style models) run several times on an
idle host, then as many times with every core busy, and each report is compared with the first.

    python bench/verdict_stability.py                       # bundled cases + mutants, 3 idle + 3 busy
    python bench/verdict_stability.py --outside --runs 2    # Acme/arena/... fixtures instead
    python bench/verdict_stability.py --quick               # one config check, 1 idle + 1 busy

A gate that flakes once gets switched off: a verdict may depend on the model, never on host speed.
The burner is one process per core spinning in pure Python (``os.cpu_count()`` of them, or
``--burners``), started before a run and stopped after it. Every report must equal the first in rows,
findings and per-test outcomes (the check of scripts/same_report.py: timings and paths left out).
Prints one line per run and exits 1 when any run disagrees.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _quick import ROOT, add_quick, quick_selection

sys.path.insert(0, str(ROOT / "scripts"))
from same_report import differences, normalised

from fd_conformance.report import verdicts_of

OUTSIDE = ROOT / "tests" / "fixtures" / "outside_models"
OUTSIDE_SPECS = [f"{OUTSIDE / name}:CASES" for name in ("acme_lm.py", "arena_lm.py", "sizes_lm.py", "descriptors_lm.py")]


def _spin(parent: int) -> None:
    """Spin until the bench that started it is gone (a burner must never outlive its bench: one
    left behind loads every later measurement on the host)."""
    while os.getppid() == parent:
        for _ in range(1_000_000):
            pass


@contextmanager
def burning(count: int) -> Iterator[None]:
    """``count`` processes spinning on the CPU for the length of the block."""
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_spin, args=(os.getpid(),), daemon=True) for _ in range(count)]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.join()


def run_once(args: argparse.Namespace) -> tuple[float, int, dict[str, Any]]:
    """One ``fd-conformance run``: wall seconds, exit code, its conformance.json."""
    with tempfile.TemporaryDirectory(prefix="fdc-stability-") as tmp:
        out = Path(tmp) / "report"
        cmd = [sys.executable, "-m", "fd_conformance.cli", "run", "-q", "--device", "cpu", "--out", str(out)]
        cmd += ["--cycles", str(args.cycles), "-n", str(args.workers)]
        if args.outside:
            for spec in OUTSIDE_SPECS:
                cmd += ["--model", spec]
        else:
            cmd.append("--include-mutants")
        if args.quick:
            cmd += ["--", *quick_selection("cpu")]
        env = {**os.environ, "FD_CONFORMANCE_GPU": "0"}
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        path = out / "conformance.json"
        if not path.is_file():
            sys.exit(f"no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return wall, proc.returncode, json.loads(path.read_text(encoding="utf-8"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs idle, then as many with every core busy")
    parser.add_argument("--burners", type=int, default=os.cpu_count() or 1, help="spinning processes while busy")
    parser.add_argument("--workers", default="0", help="-n for each run (0 = serial)")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--outside", action="store_true", help="the outside-style fixtures instead of the bundled cases")
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:  # one burner is enough to go through the busy path; more only slows the tests beside it
        args.runs, args.burners = 1, 1
    which = "outside-style fixtures" if args.outside else "bundled cases + mutants"
    print(f"verdict stability: {which}, -n {args.workers}, {args.runs} idle + {args.runs} busy ({args.burners} burners)")
    print("| run | load | wall s | exit | rows | tests | same as run 1 |")
    print("|---|---|---|---|---|---|---|")
    reference: Any = None
    reference_code = 0
    disagreements = 0
    for index, busy in enumerate([False] * args.runs + [True] * args.runs, start=1):
        if busy:
            with burning(args.burners):
                wall, code, document = run_once(args)
        else:
            wall, code, document = run_once(args)
        judged = verdicts_of(document)
        # Results are listed in the order they ended, which -n N changes: compare them by node id.
        whole = normalised({**document, "results": sorted(document["results"], key=lambda r: r["nodeid"])})
        if reference is None:
            reference, reference_code = (judged, whole), code
        diffs = differences(reference[1], whole)
        same = judged == reference[0] and code == reference_code and not diffs
        disagreements += not same
        load = "busy" if busy else "idle"
        print(
            f"| {index} | {load} | {wall:.1f} | {code} | {len(judged['rows'])} | {len(judged['tests'])} | {'yes' if same else 'NO'} |"
        )
        for line in diffs[:20]:
            print(f"    {line}")
    print(f"{disagreements} of {2 * args.runs} runs disagree with run 1" if disagreements else "every run gave the same verdicts")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
