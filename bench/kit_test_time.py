"""Wall and CPU time of the kit's own tests as the README runs them (``python -m pytest -n 2``), and
where it goes: the tests that cost the most wall and the most CPU (their inner sessions and
workers included), from the per-test log tests/conftest.py writes when FDC_TEST_CPU_LOG is set.

CPU time is the figure to compare on a shared machine: wall time moves with whatever else runs
(say what did), CPU time (user+sys of pytest and every process it waited for) much less.

    python bench/kit_test_time.py              # the README's command, top 25 by wall and by CPU
    python bench/kit_test_time.py --write      # ... and record tests/durations.json (xdist's order)
    python bench/kit_test_time.py -- -m gpu    # anything after -- goes to pytest
    python bench/kit_test_time.py --quick      # the same machinery over one small test file
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _quick import ROOT, add_quick

DURATIONS = ROOT / "tests" / "durations.json"  # read by tests/conftest.py to start the longest work first
QUICK_TARGET = "tests/test_lint_snapshots.py"  # small, and imports no framework


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_quick(parser)
    parser.add_argument("--workers", default="2", help="pytest -n (the README's: 2)")
    parser.add_argument("--top", type=int, default=25, help="how many tests to list by wall and by CPU")
    parser.add_argument("--write", action="store_true", help=f"record per-test wall seconds in {DURATIONS.relative_to(ROOT)}")
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="fdc-kit-time-") as tmp:
        log = Path(tmp) / "cpu.jsonl"
        # a clean environment for a top-level run: none of an enclosing pytest's worker variables
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
        env["FDC_TEST_CPU_LOG"] = str(log)
        cmd = [sys.executable, "-m", "pytest", "-n", args.workers, "-p", "no:cacheprovider", "-q", *args.pytest_args]
        if args.quick:
            cmd.append(QUICK_TARGET)
        print("command:", " ".join(["python", *cmd[1:]]), flush=True)
        cpu0, start = children_cpu(), time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, children_cpu() - cpu0
        tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
        print(f"exit {proc.returncode}: {tail[0]}")
        for line in proc.stdout.splitlines():
            if line.startswith(("FAILED ", "ERROR ")):
                print(line[:300])
        load = os.getloadavg()
        print(f"wall {wall:.1f} s, cpu {cpu:.1f} s (user+sys, every process waited for), cores {os.cpu_count()}")
        print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (others' work shows here)")
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    print(f"tests timed: {len(records)}; their cpu {sum(r['cpu'] for r in records):.1f} s")
    for key in ("wall", "cpu"):
        print(f"\ntop {args.top} by {key}:")
        print("| wall s | cpu s | test |")
        print("|---:|---:|---|")
        for r in sorted(records, key=lambda r: -r[key])[: args.top]:
            print(f"| {r['wall']:.1f} | {r['cpu']:.1f} | {r['nodeid']} |")
    if args.write and not args.quick:
        # the nodeid as collected: without the "@group" xdist appends to a grouped test's
        recorded = {r["nodeid"].split("@", 1)[0]: round(r["wall"], 1) for r in records if r["wall"] >= 1.0}
        DURATIONS.write_text(json.dumps(dict(sorted(recorded.items())), indent=1) + "\n")
        print(f"\nwrote {DURATIONS.relative_to(ROOT)}: {len(recorded)} tests of 1 s or more")
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
