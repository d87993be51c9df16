"""First-result latency: how long a user waits for the first check of a suite session, and where
that time goes.

Two figures, each from fresh processes (what a user pays, warm OS file cache):
1. session: ``pytest --pyargs fd_conformance.suite`` on one case, streamed; seconds from launch to
   the first result line, and to the end.
2. phases: the same first check's steps timed one by one in a fresh interpreter without pytest
   (framework import, runtime/device init, model build, warm-up, capture of every size, one
   replay), so a cut can be aimed at the phase that costs.

    python bench/first_result.py                       # cuda when visible, else cpu
    python bench/first_result.py --device cpu --case torch-glm4-moe
    python bench/first_result.py --quick         # cpu; the session in-process, one case's config check
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

from _quick import add_quick, quick_selection

from fd_conformance.cli.run import NO_HYPOTHESIS_PLUGIN
from fd_conformance.devices import visible_gpu_count

RESULT_LINE = re.compile(r"\b(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")

PHASES = r"""
import json, sys, time
t = time.perf_counter(); marks = {}
def mark(name):
    global t
    now = time.perf_counter(); marks[name] = round(now - t, 3); t = now
    print(f"phase {name}: {marks[name]:.3f} s", flush=True)  # streamed: a phase that hangs is the one not printed
import torch; mark("import torch")
from fd_conformance.runtime import get_runtime
runtime = get_runtime("torch", sys.argv[1]); runtime.synchronize(); runtime.memory_stats(); mark("runtime + device init")
import transformers; mark("import transformers")
from fd_reference_models import cases
case = next(c for c in cases.all_cases() if c.name == sys.argv[2])
if len(sys.argv) > 3:  # --profile: where the first build's seconds go, by cumulative time
    import cProfile, io, pstats
    profiler = cProfile.Profile(); profiler.enable()
subject = case.factory(runtime); runtime.synchronize(); mark("model build (imports included)")
if len(sys.argv) > 3:
    profiler.disable(); text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(int(sys.argv[3]))
    print("\n".join("profile " + line for line in text.getvalue().splitlines() if line.strip()), flush=True)
from fd_conformance.suite._support import graphs_on
graphs_on(subject)
subject.eager_forward(subject.make_inputs(max(case.capture_sizes))); runtime.synchronize(); mark("eager warm-up")
subject.runner.capture_model(); runtime.synchronize(); mark(f"capture {len(case.capture_sizes)} sizes")
subject.forward(subject.make_inputs(case.capture_sizes[0])); runtime.synchronize(); mark("first replay")
subject.runner.close()  # the reference runner holds a comm group: one open per process at a time
again = case.factory(runtime); runtime.synchronize(); mark("second model build (warm)")
again.runner.close()
print(json.dumps(marks))
"""


SESSION_BOUND_S = 120.0  # a session past this is reported as such, not waited for


def session(device: str, selection: list[str], extra: list[str]) -> tuple[dict[str, float | None], float, str]:
    """Seconds from launch to pytest's "collected" line, to the first result line and to the first
    result of a check that builds the model (C6 config runs first and needs no framework), the
    session's total, and the first result line. launch -> collected is pytest's own start and
    collection; collected -> first result is the isolation worker's start plus the first check."""
    with tempfile.TemporaryDirectory(prefix="fdc-first-") as out:
        # --fd-device: only this device's rows exist, so C6 runs on this row (as in `run --device`)
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-v", "-p", "no:cacheprovider", *NO_HYPOTHESIS_PLUGIN,
               f"--fd-report={out}", f"--fd-device={device}", *selection, *extra]  # fmt: skip
        if device == "cuda":
            cmd += ["-m", "gpu"]
        start = time.perf_counter()
        marks: dict[str, float | None] = {"collected": None, "first result": None, "first model check": None}
        line_seen, lines = "", []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # a pipe is block-buffered: lines would arrive late
        # cwd: an empty directory, as a user's project would be; from this repository pytest would
        # also load tests/conftest.py (its initial conftests), 2-3 s a user never pays.
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=out) as proc:
            assert proc.stdout is not None
            timer = threading.Timer(SESSION_BOUND_S, proc.kill)
            timer.start()
            for line in proc.stdout:
                lines.append(line)
                now = time.perf_counter() - start
                if marks["collected"] is None and "collected" in line:
                    marks["collected"] = now
                if "::" in line and RESULT_LINE.search(line):
                    if marks["first result"] is None:
                        marks["first result"], line_seen = now, line.strip()
                    if marks["first model check"] is None and "test_config" not in line:
                        marks["first model check"] = now
            timer.cancel()
        if time.perf_counter() - start >= SESSION_BOUND_S:
            line_seen = f"killed at the {SESSION_BOUND_S:.0f} s bound; last lines: " + "".join(lines[-3:]).strip().replace(
                "\n", " | "
            )
        elif marks["first result"] is None:  # say why instead of printing a figure that means nothing
            line_seen = "no result: " + "".join(lines[-5:]).strip().replace("\n", " | ")
        return marks, time.perf_counter() - start, line_seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--case", default="torch-glm4-moe", help="a bundled case name (default torch-glm4-moe)")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print the N costliest calls (cumulative) of the first model build"
    )
    parser.add_argument(
        "--sessions",
        nargs="*",
        choices=("isolated", "in-process"),
        default=["isolated", "in-process"],
        help="which suite sessions to time after the phases (none: phases only)",
    )
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.device, args.case, args.sessions = "cpu", "torch-glm4-moe", ["in-process"]
    device = args.device if args.device != "auto" else ("cuda" if visible_gpu_count() else "cpu")
    case = args.case
    exact = f"{case}-{device}"  # -k on the parameter id: not its -mtp sibling
    selection = quick_selection(device) if args.quick else ["-k", exact]
    try:
        argv = [sys.executable, "-c", PHASES, device, case, *([str(args.profile)] if args.profile else [])]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=SESSION_BOUND_S)
    except subprocess.TimeoutExpired as err:
        done = (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        print(f"phases: killed at the {SESSION_BOUND_S:.0f} s bound after:\n{done}")
        return 1
    if proc.returncode:
        print(f"phases failed:\n{proc.stdout}{proc.stderr[-2000:]}")
        return 1
    marks = json.loads(proc.stdout.strip().splitlines()[-1])
    profile = [line[len("profile ") :] for line in proc.stdout.splitlines() if line.startswith("profile ")]
    if profile:
        print("first model build, costliest calls (cProfile, cumulative):", *profile, sep="\n")
    print(f"phases of the first check ({case} on {device}, fresh interpreter, no pytest):")
    for name, seconds in marks.items():
        print(f"  {name:<32} {seconds:7.3f} s")
    print(f"  {'total':<32} {sum(marks.values()):7.3f} s")
    modes = {"isolated": ("isolated (default)", []), "in-process": ("in-process (--fd-isolate=off)", ["--fd-isolate=off"])}
    for label, extra in (modes[m] for m in args.sessions):
        marks, total, line = session(device, selection, extra)
        shown = ", ".join(f"{name} {t:.1f} s" if t is not None else f"{name} none" for name, t in marks.items())
        print(f"session {label:<30} {shown}, session {total:.1f} s  [{line[:200]}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
