"""How a ``fd-conformance run`` session ended, turned into the command's exit code: pytest's exit
status and the conformance.json it wrote, the matrix and report paths printed, an unfinished
session's reports rewritten from results.jsonl.

Apart from the command because judging needs only the output directory and pytest's status:
what started the session does not matter here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fd_conformance.cli import shard as shard_cli
from fd_conformance.cli.outdir import LOG_NAME, REPORT_FILES, RESULTS_NAME, RUN_FILES
from fd_conformance.cli.unfinished import (
    collected,
    last_error_line,
    print_report_paths,
    pytest_end_fix,
    pytest_end_reason,
    startup_usage_fix,
    write_unfinished_reports,
)
from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_NOTHING_CERTIFIED, EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS

# Imports inside functions below are for speed: cli/__init__ loads this module (through run) for
# every subcommand, and only `run` needs the reports and the results log.

# pytest.ExitCode values, without importing pytest here: OK and TESTS_FAILED are the only exits
# after which conformance.json holds a whole session; NO_TESTS_COLLECTED (e.g. `-- -k nomatch`)
# leaves an empty one, which report_run turns into a usage error.
PYTEST_OK, PYTEST_TESTS_FAILED, PYTEST_USAGE_ERROR, PYTEST_NO_TESTS_COLLECTED = 0, 1, 4, 5
LOG_TAIL_LINES = 15
EMPTY_JUNIT = '<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="fd-conformance" tests="0" errors="0" failures="0" skipped="0" /></testsuites>\n'


def usage_line(text: str) -> str:
    """pytest's one-line usage error without its prefix. argparse errors come as two lines,
    "ERROR: usage: ..." then "...: error: REASON": the reason is the line worth showing."""
    lines = text.splitlines()
    for line in lines:
        if ": error: " in line:
            return line.partition(": error: ")[2].strip()
    for line in lines:
        if line.startswith("ERROR: "):
            return line[len("ERROR: ") :]
    return text.strip().splitlines()[-1] if text.strip() else "pytest rejected the arguments"


def _log_tail(log: str) -> str:
    return "\n".join(log.strip().splitlines()[-LOG_TAIL_LINES:])


def session_judged(returncode: int, out: Path) -> bool:
    """Whether pytest ended normally and its exit status is the session's verdict: pytest's own
    normal statuses, or the exit code the kit's session set from conformance.json (3: a row owes a
    check that did not run, e.g. one -k deselected)."""
    if returncode in (PYTEST_OK, PYTEST_TESTS_FAILED, PYTEST_NO_TESTS_COLLECTED):
        return True
    try:
        return bool(json.loads((out / "conformance.json").read_text(encoding="utf-8"))["exit_code"] == returncode)
    except (OSError, ValueError, KeyError):
        return False


def record_session_end(out: Path, returncode: int) -> None:
    """The session line of a run that ended by itself (under xdist no worker writes one)."""
    from fd_conformance.isolation.results import FINISHED, ResultLog, session_record

    if not (out / RESULTS_NAME).exists():
        return  # pytest stopped before collection: nothing to close
    log = ResultLog(out / RESULTS_NAME)
    log.append(session_record(FINISHED, f"pytest exited {returncode}"))
    log.close()


def judge_session(
    returncode: int, log: str, out: Path, quiet: bool = False, allow_empty: bool = False, renames: dict[str, str] | None = None
) -> int:
    """The command's exit code from pytest's and the document's: a session pytest did not finish
    normally (INTERNALERROR, interrupted) is never a PASS, whatever partial results it wrote.
    ``renames``: the child's words for the user's (its option and spec -> the command's)."""
    json_path = out / "conformance.json"
    if returncode == PYTEST_USAGE_ERROR:
        line = usage_line(log)
        for child, user in (renames or {}).items():
            line = line.replace(child, user)
        print(f"fd-conformance run: error: {line}", file=sys.stderr)
        for name in RUN_FILES:  # a refused run leaves no file: what the child began goes
            (out / name).unlink(missing_ok=True)
        return EXIT_USAGE
    if not session_judged(returncode, out) or not json_path.is_file():
        # Died before it collected: the error it died of says what happened (the run's own words
        # for a bad -p plugin, a usage error; else the reason the reports carry).
        early = not collected(out)
        error = last_error_line(log) if early else None
        fix = startup_usage_fix(error)
        if fix is not None:
            print(f"fd-conformance run: error: pytest could not start: {error}; fix: {fix}", file=sys.stderr)
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
            return EXIT_USAGE
        # The reports are written all the same, from results.jsonl, marked with why the session did
        # not end: a conformance.json the child wrote before dying (or none) must not stand.
        reason = (
            pytest_end_reason(returncode) + (" before collecting the suites" if early else "") + (f": {error}" if error else "")
        )
        document = write_unfinished_reports(out, reason)[0]
        where = f"{out / LOG_NAME}" if log else "the output above"
        print(
            f"fd-conformance run: {reason} (an incomplete session; see {where}); fix: {pytest_end_fix(returncode)}\n{_log_tail(log)}",
            file=sys.stderr,
        )
        from fd_conformance.cli.summary import verdict_line

        print(verdict_line(document))
        if not quiet:
            print_report_paths(out)
        return EXIT_INCOMPLETE
    document = json.loads(json_path.read_text(encoding="utf-8"))
    if shard_cli.is_empty_shard(document) and returncode == PYTEST_OK:
        return shard_cli.report_empty_shard(document, out, quiet=quiet)
    # pytest failing while the matrix passes: something outside the matrix failed (a fixture
    # error in a non-suite test, a plugin's own check), which the matrix alone would hide.
    outside = returncode == PYTEST_TESTS_FAILED and (
        document["exit_code"] == EXIT_OK or bool(document["run"].get("outside_failures"))
    )
    code = report_run(document, out, outside_failures=outside, quiet=quiet, allow_empty=allow_empty)
    if outside:
        print(_log_tail(log), file=sys.stderr)
    return code


def report_nothing_to_certify(cases_file: Path, out: Path, expect_mutants: bool) -> int:
    """An empty selection (the change touches no model) is a success, not a usage error: CI must
    pass a PR that changes no model. The reports are still written, valid and empty, with the
    reason in the certificate, so a workflow that posts or uploads them never finds them missing."""
    from fd_conformance.report import CERTIFICATE_NAME, write_reports

    write_reports(out, [], expect_mutants)
    reason = f"Nothing to certify: the cases file `{cases_file}` selects no model case."
    with (out / CERTIFICATE_NAME).open("a", encoding="utf-8") as certificate:
        certificate.write(f"\n{reason}\n")
    (out / "junit.xml").write_text(EMPTY_JUNIT, encoding="utf-8")
    print(f"fd-conformance: PASS (nothing to certify: {cases_file} selects no case)")
    for name in ("conformance.json", "junit.xml", "certificate.md"):
        print(f"  {out / name}")
    return EXIT_OK


def report_run(
    document: dict[str, Any], out: Path, outside_failures: bool = False, quiet: bool = False, allow_empty: bool = False
) -> int:
    """Print the matrix and where the reports are; the exit code from the verdicts (and from
    failures pytest reported outside the matrix). No check ran: EXIT_NOTHING_CERTIFIED with the
    reason (a CI job must not go green having certified nothing), unless ``allow_empty``."""
    from fd_conformance.cli.summary import verdict_line
    from fd_conformance.report import format_document_matrix, nothing_ran_reason, results_from_records, write_reports
    from fd_conformance.report.merge import SHARD_FIELD, stamp_shard

    results = results_from_records(document["results"])
    owed_left_out = document["run"].get("deselected") or document["run"]["not_run"]
    if not any(r.outcome != "skipped" for r in results) and not owed_left_out:
        # The child judged with --fd-allow-empty (see pytest_command): its reports say what this
        # command exits with only once rewritten with the user's own --allow-empty.
        reason = nothing_ran_reason(results)
        write_reports(out, results, bool(document["expect_mutants"]), nothing_certified=reason, allow_empty=allow_empty)
        if document.get(SHARD_FIELD):  # a shard that certified nothing is still a shard `merge` must take
            stamp_shard(out, document[SHARD_FIELD])
        print(
            f"fd-conformance run: certified nothing: {reason}; fix: pass --model SPEC or install a package "
            "registering fd_conformance.cases, check --runtime/--device (cuda rows and graphs='native' cases need a GPU), or pass --allow-empty",
            file=sys.stderr,
        )
        return EXIT_OK if allow_empty else EXIT_NOTHING_CERTIFIED
    if not quiet:
        print(format_document_matrix(document))
        print()
    code = EXIT_VIOLATIONS if outside_failures else int(document["exit_code"])
    line = verdict_line({**document, "exit_code": code})
    if outside_failures:
        line += " pytest reported failures outside the matrix, see pytest.log"
    print(line)
    if not quiet:  # -q: the verdict line only, as its help says
        for name in (*REPORT_FILES, RESULTS_NAME):
            print(f"  {out / name}")
    return code
