"""Hang latency: seconds from the timeout to the report, and tests lost, per hang class.

For each CPU hang class a three-test file (pass, hang, pass) runs in a fresh pytest session under
  * isolation   (--fd-isolate=all --fd-timeout=T): our watchdog in the parent process, warm spare
  * isolation-nospare (the same with --fd-no-spare): the replacement worker starts after the hang
  * signal      (pytest-timeout --timeout=T --timeout-method=signal, isolation off)
  * thread      (pytest-timeout --timeout=T --timeout-method=thread, isolation off)
A session still running at T + HARNESS_GRACE_S is killed by this script (counted as "stuck").
Prints a table; asserts nothing. Usage: python bench/hang_latency.py [--timeout 2] [--quick]
(--quick: one hang class, the isolation and signal methods, T = 1 s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from _quick import add_quick

from fd_conformance.isolation.results import read_results

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("python_loop", "c_wait_gil_released", "c_call_holding_gil", "thread_deadlock")
HARNESS_GRACE_S = 20.0
TEMPLATE = """
from hang_cases import hangs

def test_before():
    assert hangs.passes(1) == 2

def test_hang():
    hangs.{kind}()

def test_after():
    assert hangs.passes(2) == 3
"""


def run_one(kind: str, method: str, timeout: float, workdir: Path) -> dict[str, object]:
    test_file = workdir / f"test_bench_{kind}_{method}.py"
    test_file.write_text(TEMPLATE.format(kind=kind))
    junit, results = workdir / f"{kind}_{method}.xml", workdir / f"{kind}_{method}.jsonl"
    cmd = [sys.executable, "-m", "pytest", str(test_file), "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
    if method.startswith("isolation"):
        cmd += ["--fd-isolate=all", f"--fd-timeout={timeout}", f"--fd-results={results}"]
        if method == "isolation-nospare":
            cmd.append("--fd-no-spare")
    else:
        cmd += ["--fd-isolate=off", f"--timeout={timeout}", f"--timeout-method={method}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stuck = False
    try:
        out, _ = proc.communicate(timeout=timeout + HARNESS_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        stuck = True
    wall = time.monotonic() - started
    reported: set[str] = set()
    if junit.exists():
        reported = {case.get("name", "") for case in ET.parse(junit).getroot().iter("testcase")}
    hang_report_s: float | None = None
    replacement_s: float | None = None
    if results.exists():
        # The kit's own reader: the file also holds plan and session lines (and a killed
        # session's torn last line), which are not results.
        for record in read_results(results):
            reported.add(record["nodeid"].split("::")[1])
            if record["nodeid"].endswith("::test_hang") and record["outcome"] == "hang":
                hang_report_s = record["duration"] - timeout
            if record["nodeid"].endswith("::test_after") and "worker_wait_s" in record:
                replacement_s = record["worker_wait_s"]  # waiting for the hung worker's replacement
    if hang_report_s is None and "Timeout" in out and not stuck:
        hang_report_s = None  # pytest-timeout reports on stderr at an unknown instant; wall is shown instead
    return {
        "kind": kind,
        "method": method,
        "reported": len(reported),
        "lost": 3 - len(reported),
        "timeout_to_report_s": hang_report_s,
        "replacement_s": replacement_s,
        "wall_s": wall,
        "stuck": stuck,
        "rc": proc.returncode,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--methods", default="isolation,isolation-nospare,signal,thread")
    add_quick(parser)
    args = parser.parse_args()
    kinds = KINDS
    if args.quick:
        kinds, args.methods, args.timeout = KINDS[:1], "isolation,signal", 1.0
    rows = []
    with tempfile.TemporaryDirectory(prefix="fdc-bench-") as tmp:
        for kind in kinds:
            for method in args.methods.split(","):
                rows.append(run_one(kind, method, args.timeout, Path(tmp)))
                r = rows[-1]
                print(f"# {kind:<22} {method:<9} done in {r['wall_s']:.1f}s", file=sys.stderr)
    print(f"timeout T = {args.timeout:g}s; a session alive at T+{HARNESS_GRACE_S:g}s is killed (stuck)")
    print("replace s: how long the test after the hang waited for a ready worker (0 = warm spare)")
    print(
        f"{'hang class':<22} {'method':<18} {'T->report s':>12} {'replace s':>10} {'lost/3':>7} {'wall s':>7} {'stuck':>6} {'rc':>4}"
    )
    for r in rows:
        latency = f"{r['timeout_to_report_s']:.2f}" if r["timeout_to_report_s"] is not None else "-"
        replace = f"{r['replacement_s']:.2f}" if r["replacement_s"] is not None else "-"
        print(
            f"{r['kind']:<22} {r['method']:<18} {latency:>12} {replace:>10} {r['lost']:>7} {r['wall_s']:>7.1f}"
            f" {str(r['stuck']):>6} {r['rc']:>4}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
