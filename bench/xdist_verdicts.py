"""Same verdicts under any scheduling: one suite session per worker count, wall time of each, and
whether every row and every test was judged the same as the first (serial) session.

    python bench/xdist_verdicts.py                                  # cpu rows, -n 0, 2, 4, good cases
    python bench/xdist_verdicts.py --device cuda --include-mutants  # on one GPU: -n 0 vs -n 4 ...
    python bench/xdist_verdicts.py --model tests/fixtures/outside_models/acme_lm.py:CASES
    python bench/xdist_verdicts.py --quick      # cpu, -n 0 vs -n 1, one case's config check

Exits 1 when a session disagrees with the first one (the differing rows are printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _quick import add_quick, quick_selection

from fd_conformance.cli.run import NO_HYPOTHESIS_PLUGIN
from fd_conformance.report import verdicts_of


def session(device: str, workers: int, args: argparse.Namespace) -> tuple[float, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="fdc-xdist-") as out:
        cmd = [
            sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-q", "-p", "no:cacheprovider", *NO_HYPOTHESIS_PLUGIN,
            f"--fd-report={out}", f"--fd-cycles={args.cycles}", f"--fd-device={device}",
        ]  # fmt: skip
        cmd += [f"--fd-model={spec}" for spec in args.model]
        if args.include_mutants:
            cmd.append("--fd-include-mutants")
        if workers:
            cmd += ["-n", str(workers)]
        if args.quick:
            cmd += quick_selection(device)
        env = {**os.environ, **({"FD_CONFORMANCE_GPU": "0"} if device == "cpu" else {})}
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - start
        path = Path(out) / "conformance.json"
        if not path.is_file():
            sys.exit(f"-n {workers}: no report (exit {proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        return wall, json.loads(path.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[0, 2, 4], help="xdist worker counts; the first is the reference"
    )
    parser.add_argument("--model", action="append", default=[], help="--fd-model spec (repeatable); default: installed cases")
    parser.add_argument("--include-mutants", action="store_true")
    parser.add_argument("--cycles", type=int, default=3)
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.device, args.workers = "cpu", [0, 1]
    reference: dict[str, Any] | None = None
    first_wall = 0.0
    differs = False
    print(f"| -n | wall s | speed-up | rows | tests | same verdicts as -n {args.workers[0]} |")
    print("|---|---|---|---|---|---|")
    for workers in args.workers:
        wall, document = session(args.device, workers, args)
        judged = verdicts_of(document)
        if reference is None:
            reference, first_wall = judged, wall
        same = judged == reference
        differs |= not same
        print(
            f"| {workers} | {wall:.1f} | {first_wall / wall:.2f}x | {len(judged['rows'])} | {len(judged['tests'])} | {'yes' if same else 'NO'} |"
        )
        if not same:
            for key in sorted(set(reference["rows"]) | set(judged["rows"]), key=str):
                if reference["rows"].get(key) != judged["rows"].get(key):
                    print(f"    row {key}: {reference['rows'].get(key)} -> {judged['rows'].get(key)}")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
