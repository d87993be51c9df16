"""A/B wall time of the main job (`fd-conformance run`) between source trees, runs interleaved.

A speed claim needs the same machine, the same file cache and the same minute: one tree timed
today against another's figure from another session compares two machines' moods (the H200
host's imports alone vary by seconds between starts). Each run is a fresh
``python -m fd_conformance.cli run`` with PYTHONPATH pointing at one tree (and its models/),
from an empty directory; trees alternate A B A B so drift hits both. Per run it prints the wall
time, when collection was done (the plan record: launch, xdist's start and collection before it),
when the last check finished and when the session ended (from results.jsonl: the tail after the
last check is shutdown), and the verdict line, so a faster tree that judges
differently shows it.

    python bench/main_job_ab.py /tmp/old /tmp/new --repeat 2 -- --device cuda
    python bench/main_job_ab.py --quick         # this checkout, one cpu run of one case's config check
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import ROOT, add_quick, quick_selection

from fd_conformance.isolation.results import load_results_file


def one_run(tree: Path, run_args: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="fdc-ab-") as where:
        out = Path(where) / "report"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(tree / "models"), os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, "-m", "fd_conformance.cli", "run", f"--out={out}", "-q", *run_args]
        start = time.time()
        proc = subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True)
        wall = time.time() - start
        results = out / "results.jsonl"
        if not results.is_file():
            sys.exit(f"{tree}: the run wrote no results (exit {proc.returncode}):\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        parsed = load_results_file(results)  # the kit's reader: plan, session and result lines apart
        finished = [float(r["finished"]) for r in parsed.results]
        ended = [float(s["finished"]) for s in parsed.sessions]
        planned = [float(p["created"]) for p in parsed.plans]  # collection done
        verdict = next((line for line in proc.stdout.splitlines() if line.startswith("fd-conformance:")), proc.stdout[-300:])
        return {
            "wall": wall,
            "plan": min(planned) - start if planned else float("nan"),
            "last_check": max(finished) - start if finished else float("nan"),
            "session_end": ended[-1] - start if ended else float("nan"),
            "exit": proc.returncode,
            "verdict": verdict.strip(),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="after --: arguments of `fd-conformance run`")
    parser.add_argument("trees", nargs="*", type=Path, help="source trees (each holds fd_conformance/ and models/)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per tree, interleaved (default 2)")
    add_quick(parser)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    run_args = argv[cut + 1 :]  # after --: arguments of `fd-conformance run`
    if args.quick:
        args.trees, args.repeat = args.trees or [ROOT], 1
        run_args = run_args or ["--device", "cpu", "--", *quick_selection()]
    if not args.trees:
        parser.error("pass at least one source tree (or --quick)")
    for tree in args.trees:
        if not (tree / "fd_conformance" / "cli").is_dir():
            parser.error(f"{tree} holds no fd_conformance/cli: pass a checkout of this repository")
    walls: dict[Path, list[float]] = {tree: [] for tree in args.trees}
    for round_ in range(args.repeat):
        for tree in args.trees:
            got = one_run(tree, run_args)
            walls[tree].append(float(got["wall"]))  # type: ignore[arg-type]
            print(
                f"round {round_ + 1} {tree.name}: wall {got['wall']:.1f} s, plan (collection done) at {got['plan']:.1f} s, last check at {got['last_check']:.1f} s, "
                f"session end at {got['session_end']:.1f} s, exit {got['exit']}: {got['verdict']}",
                flush=True,
            )
    print("| tree | runs (s) | median s |\n|---|---|---|")
    for tree, values in walls.items():
        print(f"| {tree.name} | {' / '.join(f'{v:.1f}' for v in values)} | {statistics.median(values):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
