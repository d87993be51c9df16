"""Sharded and merged against unsharded: the same verdicts, findings and per-check outcomes (issue 38).

Runs ``fd-conformance run --device cpu`` once unsharded, then in 1, 2, 3 and 7 shards, one shard
after another (this machine's stand-in for a CI matrix), merges each set with ``fd-conformance
merge``, and compares every merged conformance.json with the unsharded one through
scripts/same_report.py's normalisation and :func:`fd_conformance.report.verdicts_of` (rows' verdicts
and cells, each test's outcome and codes) plus each row's observed findings. Two case sets: the
bundled cases with their mutants (``--include-mutants``), and the outside-style fixtures
(tests/fixtures/outside_models, named by --model). Prints one table row per shard count; exits 1
when any differs.

    python bench/shard_merge.py            # the whole comparison (minutes on a 2-core machine)
    python bench/shard_merge.py --quick    # 2 config mutants (no model build), 7 shards (2 hold one each)
    python bench/shard_merge.py --device cuda --shards 2   # on one GPU: real graphs, 2 shards
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _quick import add_quick

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from same_report import normalised  # noqa: E402

from fd_conformance.report import verdicts_of  # noqa: E402

OUTSIDE = ROOT / "tests" / "fixtures" / "outside_models"
SHARD_COUNTS = (1, 2, 3, 7)
# --quick: 3 shards over 2 cases: two hold one case each and one nothing: every path of the loop
# below (a shard with work, an empty one, the merge, the comparison) in 4 runs instead of 14
# (--quick took 32.0 s of CPU with 1/2/3/7, 18.4 s with 7 alone); tests/test_shard.py proves 1, 2, 3, 7.
QUICK_SHARD_COUNTS = (3,)
QUICK_CASES = ("cfg-mutant-keeping-user-order", "cfg-mutant-forcing-prefill-graphs")


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """What must not depend on sharding: verdicts_of's rows and tests, and each row's findings."""
    doc = normalised(document)
    findings = {(c["name"], c["device"]): (c["observed_findings"], c["expected_findings"]) for c in doc["cases"]}
    return {**verdicts_of(doc), "findings": findings, "summary": doc["summary"], "exit_code": doc["exit_code"]}


def fdc(args: list[str]) -> tuple[int, float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "fd_conformance.cli", *args], capture_output=True, text=True)
    if proc.returncode not in (0, 1):
        print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
    return proc.returncode, time.perf_counter() - start


def compare(label: str, run_args: list[str], work: Path, counts: tuple[int, ...] = SHARD_COUNTS) -> bool:
    base = work / f"{label}-unsharded"
    code, seconds = fdc(["run", "-q", *run_args, "--out", str(base)])
    unsharded = comparable(json.loads((base / "conformance.json").read_text()))
    rows = len(unsharded["rows"])
    print(f"\n{label}: {rows} rows, {len(unsharded['tests'])} tests; unsharded exit {code} in {seconds:.1f} s")
    print("| shards | shard exits | shard seconds (sum) | merge exit | rows | tests | same verdicts, findings, outcomes |")
    print("|---|---|---|---|---|---|---|")
    same_everywhere = True
    for count in counts:
        dirs, codes, total = [], [], 0.0
        for index in range(1, count + 1):
            out = work / f"{label}-{count}-{index}"
            shard_code, shard_seconds = fdc(["run", "-q", *run_args, "--shard", f"{index}/{count}", "--out", str(out)])
            dirs.append(str(out))
            codes.append(str(shard_code))
            total += shard_seconds
        merged = work / f"{label}-{count}-merged"
        merge_code, _ = fdc(["merge", "-q", *dirs, "--out", str(merged)])
        got = comparable(json.loads((merged / "conformance.json").read_text()))
        same = got == unsharded and merge_code == code
        same_everywhere &= same
        print(
            f"| {count} | {','.join(codes)} | {total:.1f} | {merge_code} | {len(got['rows'])} | {len(got['tests'])} | {'yes' if same else 'NO'} |"
        )
        if not same:
            for key in unsharded:
                if got.get(key) != unsharded[key]:
                    print(f"  differs in {key}")
    return same_everywhere


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="rows to certify (cuda: real graphs)")
    parser.add_argument("--shards", type=int, nargs="+", default=list(SHARD_COUNTS), help="shard counts to compare")
    add_quick(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fd-shard-merge-") as tmp:
        work = Path(tmp)
        if args.quick:
            selection = work / "cases.txt"
            selection.write_text("\n".join(QUICK_CASES) + "\n")
            sets = [
                ("bundled-quick", ["--include-mutants", "--device", "cpu", "--cases-file", str(selection)]),
            ]
        else:
            sets = [
                ("bundled", ["--include-mutants", "--device", args.device]),
                ("outside", ["--device", args.device, "--cycles", "3", "--model", f"{OUTSIDE / 'acme_lm.py'}:CASES"]),
            ]
        counts = QUICK_SHARD_COUNTS if args.quick else tuple(args.shards)
        same = all([compare(label, run_args, work, counts) for label, run_args in sets])
    print("\nevery merge gave the unsharded verdicts" if same else "\nA MERGE DIFFERS from the unsharded run")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
