"""``fd-conformance report FILE``: the matrix and verdicts rebuilt from a results JSONL.

The file is what ``run`` writes into ``--out`` (or pytest ``--fd-results``); reading it belongs to
:mod:`fd_conformance.isolation.results`, the verdicts to :mod:`fd_conformance.report`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fd_conformance.cli.run import RESULTS_NAME
from fd_conformance.isolation.results import load_results_file
from fd_conformance.report import report_results_file

REPORT_HELP = (
    "rebuild the matrix and verdicts from a results JSONL (OUT/results.jsonl of `run`, or pytest --fd-results); "
    "exit 0 all certified, 1 anything not certified, 3 an incomplete or unreadable file"
)
REPORT_FILE_HELP = (
    "the JSONL file: OUT/results.jsonl written by `fd-conformance run` (or OUT itself), or pytest --fd-results FILE"
)
REPORT_OUT_HELP = "also write conformance.json and certificate.md (marked INTERRUPTED when incomplete) into DIR"
QUIET_HELP = "print only the verdict line"


def run_report(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if path.is_dir():  # `report OUT`: the directory `run --out` wrote, whose results file is the record
        path = path / RESULTS_NAME
    parsed = load_results_file(path)
    return report_results_file(parsed, Path(args.out) if args.out else None, quiet=args.quiet)


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance report FILE`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser("report", help=REPORT_HELP, description=REPORT_HELP)
    parser.add_argument("file", metavar="FILE", help=REPORT_FILE_HELP)
    parser.add_argument("--out", default=None, metavar="DIR", help=REPORT_OUT_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.set_defaults(func=run_report)
