"""Where a session's wall time went, per isolation worker, from the ``results.jsonl`` it wrote.

A suite session's wall time is its slowest worker's path: the worker's spawn, the checks it ran
one after another, and the session's end. ``--durations`` shows checks, not that path; this
prints it per worker (seconds from the plan record or the first worker spawn, whichever is first): when the worker was spawned,
when its first check started, when its first *model* check (the first that is not C6, whose
setup pays the framework and model imports) ended, when its last check ended, and how many
checks it ran -- so a cut can be aimed at the part of the path that is long.

    python bench/timeline.py REPORT_DIR/results.jsonl
    python bench/timeline.py results-cuda.jsonl --checks    # also every check, in start order
    python bench/timeline.py --quick     # runs a tiny cpu session (one case's config check) and reads its file
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from _quick import add_quick, quick_selection

from fd_conformance.cli.run import NO_HYPOTHESIS_PLUGIN
from fd_conformance.isolation.results import load_results_file

FRAMEWORK_FREE_CHECKS = {"config"}  # C6 runs on data; every other check builds a model


def load(path: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[float]]:
    """(check records, session records, plan times) of one results.jsonl, read by the kit's own
    reader (plan and session lines, a killed session's torn last line)."""
    parsed = load_results_file(path)
    checks: list[dict[str, Any]] = [dict(r) for r in parsed.results if "started" in r]
    sessions: list[dict[str, Any]] = [dict(s) for s in parsed.sessions]
    plans = [float(p["created"]) for p in parsed.plans]
    if not checks:
        sys.exit(f"{path} holds no check records: pass the results.jsonl of a session that ran checks")
    return checks, sessions, plans


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "results", type=Path, nargs="?", help="results.jsonl of a run (fd-conformance run --out DIR, or --fd-report DIR)"
    )
    parser.add_argument("--checks", action="store_true", help="also list every check in start order")
    add_quick(parser)
    args = parser.parse_args()
    if args.quick and args.results is None:
        with tempfile.TemporaryDirectory(prefix="fdc-timeline-") as out:
            args.checks = True
            return show(quick_session(Path(out)), args.checks)
    if args.results is None:
        parser.error("pass a results.jsonl (or --quick)")
    return show(args.results, args.checks)


def quick_session(out: Path) -> Path:
    """A tiny real cpu suite session's results.jsonl (the --quick input)."""
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-q", "-p", "no:cacheprovider",
           *NO_HYPOTHESIS_PLUGIN, f"--fd-results={out / 'results.jsonl'}", "--fd-device=cpu", *quick_selection()]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out)  # cwd: no repository conftest
    if not (out / "results.jsonl").is_file():
        sys.exit(f"the quick session wrote no results.jsonl (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return out / "results.jsonl"


def show(path: Path, list_checks: bool) -> int:
    """Print the per-worker timeline of one results file."""
    checks, sessions, plans = load(path)
    # The origin: the plan (written once collection is done) or an earlier worker spawn.
    origin = min([float(r.get("worker_spawned") or r["started"]) for r in checks] + plans)
    by_worker: dict[object, list[dict[str, Any]]] = defaultdict(list)
    for record in checks:
        by_worker[record.get("worker_pid") or record.get("pid")].append(record)
    print("| worker | spawned s | first check s | first model check ended s | last check ended s | checks |")
    print("|---|---|---|---|---|---|")
    for worker, records in sorted(by_worker.items(), key=lambda kv: max(float(r["finished"]) for r in kv[1])):
        records.sort(key=lambda r: float(r["started"]))
        spawned = min(float(r.get("worker_spawned") or r["started"]) for r in records)
        model = [r for r in records if r.get("check") not in FRAMEWORK_FREE_CHECKS and r.get("outcome") != "skipped"]
        first_model = f"{float(model[0]['finished']) - origin:.1f}" if model else "-"
        print(
            f"| {worker} | {spawned - origin:.1f} | {float(records[0]['started']) - origin:.1f} | {first_model} "
            f"| {max(float(r['finished']) for r in records) - origin:.1f} | {len(records)} |"
        )
    last = max(float(r["finished"]) for r in checks)
    ended = max((float(r["finished"]) for r in sessions), default=last)
    print(f"last check ended at {last - origin:.1f} s; session ended at {ended - origin:.1f} s")
    if list_checks:
        for record in sorted(checks, key=lambda r: float(r["started"])):
            print(
                f"{float(record['started']) - origin:7.2f} {float(record['finished']) - origin:7.2f} "
                f"{record.get('worker_pid')!s:>8} {record.get('outcome', '?'):8} {record['nodeid']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
