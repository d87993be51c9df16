"""The report of a run whose pytest did not finish its session: interrupted (Ctrl-C, SIGTERM), killed
(the kernel's out-of-memory killer sends SIGKILL), or ended by an INTERNALERROR.

Such a run still writes conformance.json, certificate.md and junit.xml, rebuilt from results.jsonl
(the only file the dead child wrote reliably, one fsynced line per finished check), marked
INTERRUPTED with the reason and with what did not run: a CI job that uploads the reports always finds
them, and they never say PASS for a session that did not end (their exit_code is EXIT_INCOMPLETE).
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path
from typing import Any

from fd_conformance.cli.outdir import REPORT_FILES, RESULTS_NAME

# The last line of a Python traceback ("ImportError: ..."), or pytest's INTERNALERROR> copy of it.
_ERROR_LINE = re.compile(r"^(?:INTERNALERROR> )?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b.*)$")

#: Errors pytest dies of before its session begins that are the command line's, not the kit's or the
#: model's: the run is refused as a usage error (exit 2) with this fix, not reported INTERRUPTED.
STARTUP_USAGE_ERRORS = {
    "ImportError: Error importing plugin ": "install that plugin, or drop its -p from PYTEST_ADDOPTS or the arguments after --",
}


def pytest_end_reason(returncode: int) -> str:
    """How pytest ended, in words, for the reports and the error line."""
    if returncode >= 0:
        return f"pytest exited {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"pytest was killed by {name}" + (" (out of memory?)" if returncode == -signal.SIGKILL else "")


def pytest_end_fix(returncode: int) -> str:
    """What to do about it: a SIGKILL nobody sent by hand is most often the out-of-memory killer."""
    if returncode == -signal.SIGKILL:
        return "if `dmesg` shows the out-of-memory killer, run fewer -n workers; else rerun with -v to see why"
    return "rerun with -v to see why"


def collected(out: Path) -> bool:
    """Did the session get as far as its plan (results.jsonl names the checks it collected)?"""
    from fd_conformance.errors import UsageError
    from fd_conformance.isolation.results import load_results_file

    try:
        return bool(load_results_file(out / RESULTS_NAME).plans)
    except UsageError:  # no results file, or an empty one: stopped before the plugin wrote a line
        return False


def last_error_line(log: str) -> str | None:
    """The error a session died of, as its traceback's last line says it (None when none is there)."""
    for line in reversed(log.splitlines()):
        found = _ERROR_LINE.match(line.strip())
        if found:
            return found.group(1)
    return None


def startup_usage_fix(error: str | None) -> str | None:
    """The fix when ``error`` is one of :data:`STARTUP_USAGE_ERRORS`, else None."""
    return next((fix for start, fix in STARTUP_USAGE_ERRORS.items() if error and error.startswith(start)), None)


def write_unfinished_reports(out: Path, reason: str) -> tuple[dict[str, Any], bool, list[Any]]:
    """Close results.jsonl with an interrupted session line naming ``reason``, and write the reports
    from it, marked INTERRUPTED. Returns (the document, whether the suites were collected, the results)."""
    from fd_conformance.cli.junit import write_interrupted_junit
    from fd_conformance.isolation.results import (
        INTERRUPTED,
        IncompleteInput,
        ResultLog,
        ResultsFile,
        load_results_file,
        session_record,
    )
    from fd_conformance.report import results_of_file, write_reports

    log = ResultLog(out / RESULTS_NAME)
    log.append(session_record(INTERRUPTED, reason))
    log.close()
    try:
        parsed = load_results_file(out / RESULTS_NAME)
    except IncompleteInput:
        parsed = ResultsFile(out / RESULTS_NAME)
    results = results_of_file(parsed)
    document = write_reports(out, results, parsed.expect_mutants, interrupted=reason)
    # pytest never finished its junit.xml: the partial one, from the same document as
    # conformance.json, marked interrupted, replaces whatever pytest left.
    write_interrupted_junit(out / "junit.xml", document, reason)
    return document, bool(parsed.plans), results


def print_report_paths(out: Path) -> None:
    for name in (*REPORT_FILES, RESULTS_NAME):
        print(f"  {out / name}")


def report_interrupted(out: Path, signum: int, quiet: bool) -> int:
    """The partial report of an interrupted run, marked INTERRUPTED with what did not run; exit 128+signal."""
    from fd_conformance.cli.summary import not_run_summary, verdict_line
    from fd_conformance.report import format_matrix

    name = signal.Signals(signum).name
    document, collected, results = write_unfinished_reports(out, name)
    if not quiet and results:
        print(format_matrix(results, document["expect_mutants"]))
        print()
    not_run = document["run"]["not_run"]
    if not collected:
        print(f"fd-conformance run: interrupted by {name} before the suites were collected", file=sys.stderr)
    elif not_run:
        print(f"fd-conformance run: interrupted by {name}; {not_run_summary(not_run)}", file=sys.stderr)
    print(verdict_line(document))
    print_report_paths(out)
    return 128 + signum
