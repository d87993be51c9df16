"""xdist speed-up on GPUs: wall time of the single-GPU conformance suites with 1 vs 2 xdist workers.

Each worker gets its own GPU from the plugin (fd_conformance/plugin/gpus.py, assigned in plugin/xdist.py), so with 2 GPUs the
two sessions differ only in parallelism. Both are fresh ``python -m pytest`` processes running
``--pyargs fd_conformance.suite -m gpu`` (plus any extra pytest arguments after ``--``); the best of
--repeat runs is kept. Prints the figures and the speed-up; asserts nothing. Needs >= 2 visible
GPUs and pytest-xdist. Usage: python bench/xdist_speedup.py [--repeat 2] [--quick] [-- --fd-model SPEC ...]
(--quick: one session per setting, one case's config check; without 2 GPUs it says so, exit 2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from _quick import add_quick, quick_selection

ROOT = Path(__file__).resolve().parent.parent
SUITE_ARGS = ["--pyargs", "fd_conformance.suite", "-m", "gpu", "-q", "-p", "no:cacheprovider"]


def session_wall(workers: int, extra: list[str]) -> tuple[float, str]:
    """Wall seconds of one whole pytest session with ``workers`` xdist workers, and its summary line."""
    cmd = [sys.executable, "-m", "pytest", *SUITE_ARGS, "-n", str(workers), *extra]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ))
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):  # 1 = some check failed: still a valid timing, shown below
        raise SystemExit(
            f"session with -n {workers} did not run (exit {done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
        )
    summary = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return wall, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="sessions per setting; the fastest is kept")
    parser.add_argument("extra", nargs="*", help="extra pytest arguments (after --)")
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.repeat, args.extra = 1, [*args.extra, *quick_selection("cuda")]
    from fd_conformance.devices import visible_gpu_count

    gpus = visible_gpu_count()
    if gpus < 2:
        print(f"needs 2 GPUs, {gpus} visible: run on a 2-GPU host (e.g. nvidia-h200-x2)", file=sys.stderr)
        return 2
    results = {}
    for workers in (1, 2):
        runs = [session_wall(workers, args.extra) for _ in range(args.repeat)]
        results[workers] = min(runs)
    print(f"fd_conformance.suite -m gpu on {gpus} GPUs, best of {args.repeat} sessions (wall seconds, whole pytest process)")
    for workers, (wall, summary) in results.items():
        print(f"-n {workers:<3} {wall:8.2f}   {summary}")
    print(f"speed-up  {results[1][0] / results[2][0]:8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
