"""Do two conformance.json files say the same thing, apart from timings?

Used to prove a refactor or a speed-up changed no behaviour: run ``fd-conformance run
--include-mutants --out A`` before and ``--out B`` after, then ``python scripts/same_report.py
A/conformance.json B/conformance.json``. Exit 0 when equal; else the first differences, exit 1.
Timings (durations, the generation time) and volatile paths are left out of the comparison.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

VOLATILE_KEYS = {"duration", "generated_at", "started", "worker_pid", "worker_spawned", "worker_wait_s"}
# Timings, temp paths, pids and heap addresses (an object's id in a message) change every run.
# Where a checkout's own files are named: everything up to the models/ or fd_conformance/ folder
REPO_PATH = re.compile(r"/[^\s'\"]*?/(?=models/|fd_conformance/|tests/)")
TIMING_TEXT = re.compile(r"\d+(\.\d+)? ?(s|ms)\b|/tmp/[^\s'\"]+|pid \d+|0x[0-9a-f]{6,}")


def normalised(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalised(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list):
        return [normalised(v) for v in value]
    if isinstance(value, str):
        return TIMING_TEXT.sub("<t>", value)
    return value


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}/{k}: only in {'first' if k in a else 'second'}" for k in sorted(set(a) ^ set(b))]
        for key in sorted(set(a) & set(b)):
            out += differences(a[key], b[key], f"{path}/{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]


def comparable(document: dict[str, Any]) -> Any:
    """The document with ``results`` in node-id order (under ``-n N`` they are listed in the order
    they finished, which is no verdict) and the checkout it ran from written as ``<repo>`` (two
    checkouts of one commit name their models' files differently)."""
    results = document.get("results")
    if isinstance(results, list):
        document["results"] = sorted(results, key=lambda r: str(r.get("nodeid", "")))
    return json.loads(REPO_PATH.sub("<repo>/", json.dumps(document)))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/same_report.py A/conformance.json B/conformance.json", file=sys.stderr)
        return 2
    a, b = (normalised(comparable(json.load(open(path, encoding="utf-8")))) for path in argv)
    diffs = differences(a, b)
    for line in diffs[:40]:
        print(line)
    print("same, apart from timings" if not diffs else f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
