"""Wall time of the full conformance suite: CPU (host-emulated) always, GPU (real graphs) when a
GPU is visible. Each run is a fresh ``pytest --pyargs fd_conformance.suite`` process, so the
figure includes interpreter start, framework import and (by default) the isolation workers --
what a CI job pays.

    python bench/suite_time.py                     # bundled good models, default 5 cycles
    python bench/suite_time.py --include-mutants   # the mutant-verification session
    python bench/suite_time.py --isolate off       # in-process, to see the isolation overhead
    python bench/suite_time.py --device cuda --workers 0 2 4 8   # serial vs -n N on one GPU, speed-up
    python bench/suite_time.py --quick             # cpu, one case's config check
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from _quick import add_quick, quick_selection

from fd_conformance.cli.run import NO_HYPOTHESIS_PLUGIN
from fd_conformance.devices import visible_gpu_count


def run_suite(device: str, args: argparse.Namespace, workers: int = 0) -> tuple[float, dict[str, object]]:
    """(wall seconds, conformance.json) of one suite session on ``device`` rows, ``-n workers``
    (0: serial; on one GPU every worker shares it)."""
    # --fd-device, not -k: with -k cuda the cpu rows still exist (deselected), so C6, which runs on
    # the first device row, was skipped on the cuda rows and the config mutants counted as missed.
    with tempfile.TemporaryDirectory(prefix="fdc-bench-") as out:
        cmd = [
            sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-q", "-p", "no:cacheprovider", *NO_HYPOTHESIS_PLUGIN,
            f"--fd-report={out}", f"--fd-cycles={args.cycles}", f"--fd-isolate={args.isolate}", f"--fd-device={device}",
        ]  # fmt: skip
        if device == "cuda":
            cmd += ["-m", "gpu"]
        if args.include_mutants:
            cmd.append("--fd-include-mutants")
        if workers:
            cmd += ["-n", str(workers)]
        if args.quick:
            cmd += quick_selection(device)
        start = time.perf_counter()
        # cwd: an empty directory, as a user's project is; from this repository every pytest
        # process (xdist and isolation workers too) would load tests/conftest.py, 2-3 s each.
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
        wall = time.perf_counter() - start
        path = Path(out) / "conformance.json"
        if not path.is_file():
            sys.exit(
                f"suite run on {device} wrote no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            )
        return wall, json.loads(path.read_text())


def describe(device: str, wall: float, document: dict[str, object]) -> str:
    results = [r for r in document["results"] if r["device"] == device]  # type: ignore[index,union-attr]
    per_check: dict[str, float] = defaultdict(float)
    for r in results:
        per_check[r["check"]] += r["duration"]
    ran = sum(1 for r in results if r["outcome"] != "skipped")
    cases = sorted({r["case"] for r in results})
    graphs = "real graphs" if device == "cuda" else "host-emulated graphs"
    lines = [
        f"{device} ({graphs}): wall {wall:.1f} s for {ran} checks over {len(cases)} cases (exit_code {document['exit_code']})"
    ]
    lines += [f"  {check:<16} {seconds:7.2f} s in tests" for check, seconds in sorted(per_check.items())]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=5, help="--fd-cycles for the weight-cycle check (default 5)")
    parser.add_argument(
        "--isolate", default="marked", choices=("marked", "all", "off"), help="--fd-isolate mode (default marked)"
    )
    parser.add_argument("--include-mutants", action="store_true", help="time the mutant-verification session instead")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="auto: cpu, and cuda when visible")
    parser.add_argument("--workers", type=int, nargs="+", default=[0], metavar="N", help="-n values to time (0 = serial)")
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.device, args.cycles, args.workers = "cpu", 3, [0]
    gpu = visible_gpu_count() > 0
    devices = {"auto": ["cpu"] + (["cuda"] if gpu else []), "cpu": ["cpu"], "cuda": ["cuda"] if gpu else []}[args.device]
    for device in devices:
        walls: dict[int, float] = {}
        for workers in args.workers:
            walls[workers], document = run_suite(device, args, workers)
            print(f"-n {workers}: " + describe(device, walls[workers], document))
        if len(walls) > 1:
            base = walls[args.workers[0]]
            print(f"| {device} -n | wall s | speed-up vs -n {args.workers[0]} |\n|---|---|---|")
            for workers, wall in walls.items():
                print(f"| {workers} | {wall:.1f} | {base / wall:.2f}x |")
    if "cuda" not in devices and args.device != "cpu":
        print("cuda: skipped (no GPU visible)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
