"""``fd-conformance report FILE``: the matrix and verdicts rebuilt from a results JSONL.

The file is what ``run`` writes into ``--out`` (or pytest ``--fd-results``); reading it belongs to
:mod:`fd_conformance.isolation.results`, the verdicts to :mod:`fd_conformance.report`; printing them is this module's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from fd_conformance.cli.outdir import RESULTS_NAME, OutLock, refuse_foreign
from fd_conformance.cli.summary import not_run_summary, verdict_line
from fd_conformance.errors import validate_directory
from fd_conformance.isolation.results import ResultsFile, load_results_file
from fd_conformance.report import (
    CERTIFICATE_NAME,
    JSON_NAME,
    all_deselected_reason,
    build_document,
    format_matrix,
    nothing_ran_reason,
    results_of_file,
    write_reports,
)

REPORT_HELP = (
    "rebuild the matrix and verdicts from a results JSONL (OUT/results.jsonl of `run`, or pytest --fd-results); "
    "exit 0 all certified, 1 anything not certified, 3 an incomplete or unreadable file"
)
REPORT_FILE_HELP = (
    "the JSONL file: OUT/results.jsonl written by `fd-conformance run` (or OUT itself), or pytest --fd-results FILE"
)
REPORT_OUT_HELP = (
    "also write conformance.json and certificate.md (marked INTERRUPTED when incomplete) into DIR; a file of those "
    "names that fd-conformance did not write stops the command, as it stops `run --out`"
)
QUIET_HELP = "print only the verdict line"


def run_report(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if path.is_dir():  # `report OUT`: the directory `run --out` wrote, whose results file is the record
        path = path / RESULTS_NAME
    parsed = load_results_file(path)
    if args.out is None:
        return report_results_file(parsed, quiet=args.quiet)
    out = Path(validate_directory(args.out, "--out")).resolve()
    with OutLock(out):  # refused, it leaves nothing behind; a run writing into DIR refuses it (exit 5)
        refuse_foreign(out, (JSON_NAME, CERTIFICATE_NAME))
        return report_results_file(parsed, out, quiet=args.quiet)


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance report FILE`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser("report", help=REPORT_HELP, description=REPORT_HELP)
    parser.add_argument("file", metavar="FILE", help=REPORT_FILE_HELP)
    parser.add_argument("--out", default=None, metavar="DIR", help=REPORT_OUT_HELP)
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.set_defaults(func=run_report)


def report_results_file(parsed: ResultsFile, out: Path | None = None, quiet: bool = False) -> int:
    """`fd-conformance report FILE`: the matrix and verdicts of a results JSONL; its exit code
    (0 certified, 1 anything not certified, 3 incomplete, 4 nothing ran). With ``out`` it also
    writes conformance.json and certificate.md there, as `run` would have."""
    from fd_conformance.errors import EXIT_NOTHING_CERTIFIED

    results = results_of_file(parsed)
    # Every check deselected (-k nomatch) leaves no row: only the plan says the session certified nothing.
    nothing_certified = None if results else all_deselected_reason(parsed.planned.values())
    interrupted = next((s["detail"] for s in parsed.sessions if s["status"] == "interrupted"), None)
    if parsed.torn and not interrupted:
        interrupted = "the results file ends in a torn line: its writer was killed"
    if out is not None:
        document = write_reports(out, results, parsed.expect_mutants, interrupted, nothing_certified)
    else:
        document = build_document(results, parsed.expect_mutants, interrupted, nothing_certified)
    if not quiet and results:
        print(format_matrix(results, parsed.expect_mutants))
        print()
    if parsed.results and not parsed.plans:
        print(
            f"fd-conformance report: note: {parsed.path} has results but no plan line (an older kit wrote it): tests that never ran cannot be listed",
            file=sys.stderr,
        )
    if document["run"]["not_run"] and not quiet:
        print(f"not run: {not_run_summary(document['run']['not_run'])}")
    if document["exit_code"] == EXIT_NOTHING_CERTIFIED:
        print(f"fd-conformance: certified nothing: {nothing_certified or nothing_ran_reason(results)}", file=sys.stderr)
    print(verdict_line(document))
    return int(document["exit_code"])
