"""Result records: one JSON line per finished test, appended and fsynced as the test ends.

Why a JSONL log and not only JUnit: JUnit XML is written once, at session end, so a controller
killed mid-session (CI timeout, OOM killer, a hang nobody caught) leaves nothing. An append-only
log with an fsync per record loses at most the test in flight, and ``fd-conformance report FILE``
rebuilds the matrix from whatever survived.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from fd_conformance.errors import EXIT_OK, EXIT_VIOLATIONS, UsageError

if TYPE_CHECKING:
    from typing_extensions import NotRequired

SCHEMA_VERSION = 1
Outcome = Literal["passed", "failed", "skipped", "hang", "crash"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped", "hang", "crash")
BAD_OUTCOMES: frozenset[str] = frozenset({"failed", "hang", "crash"})


class ResultRecord(TypedDict):
    """One line of the results file. Agreed schema (version 1) between isolation and report.

    ``case``/``check`` are empty when the test is not a parametrized conformance check.
    ``findings`` are finding codes (FDC501 for a hang, FDC502 for a crash, suite codes otherwise).
    The optional keys are present for isolated tests only.
    """

    schema: int
    nodeid: str
    case: str
    check: str
    outcome: Outcome
    findings: list[str]
    duration: float  # seconds, setup + call + teardown as the parent's clock saw them
    details: str  # human text: failure repr, hang report, crash cause; empty when passed
    worker_pid: int  # pid of the process that ran the test (the isolation worker if isolated)
    started: float  # epoch seconds
    finished: float  # epoch seconds
    isolated: NotRequired[bool]
    worker_spawned: NotRequired[float]  # epoch seconds its worker was spawned: before the test = warm worker/spare
    worker_wait_s: NotRequired[float]  # seconds the test waited for its worker's startup (0 when warm)
    cause: NotRequired[str]  # crash cause ("SIGSEGV", "os._exit(3)", "out of memory: ...") or hang reason
    last_event: NotRequired[str]  # last lifecycle mark the worker streamed before it went silent
    python_stacks: NotRequired[str]  # faulthandler dump of all threads of the hung worker
    native_stacks: NotRequired[str]  # py-spy dump --native, or why it is missing
    stuck_frame: NotRequired[str]  # innermost project frame of the hung thread


def new_record(nodeid: str, *, started: float, pid: int) -> ResultRecord:
    """A record for a test that has not ended yet (outcome filled in by the caller)."""
    return ResultRecord(
        schema=SCHEMA_VERSION,
        nodeid=nodeid,
        case="",
        check="",
        outcome="passed",
        findings=[],
        duration=0.0,
        details="",
        worker_pid=pid,
        started=started,
        finished=started,
    )


class ResultLog:
    """Append-only JSONL writer. One ``os.write`` per record on an ``O_APPEND`` descriptor, so
    several writers (pytest-xdist workers) can share one file without interleaving lines."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as err:
            raise UsageError(
                f"cannot open results file {str(self.path)!r} ({err.strerror})",
                "pass --fd-results a writable path",
            ) from None

    def append(self, record: ResultRecord) -> None:
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        os.write(self._fd, line)
        os.fsync(self._fd)  # the point of the log: survive the controller being killed next

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_results(path: str | os.PathLike[str]) -> list[ResultRecord]:
    """Load a results file. A torn last line (writer killed mid-write) is dropped, not fatal;
    any other malformed line is a usage error naming the line."""
    source = Path(path)
    if not source.is_file():
        raise UsageError(f"results file {str(source)!r} does not exist", "pass the file given to --fd-results")
    lines = source.read_text(encoding="utf-8", errors="replace").splitlines()
    records: list[ResultRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                continue  # torn tail from a killed writer: exactly the case the log exists for
            raise UsageError(
                f"{source}:{number} is not a JSON line", "pass a results file written by --fd-results"
            ) from None
        if not isinstance(data, dict) or "nodeid" not in data or data.get("outcome") not in OUTCOMES:
            raise UsageError(
                f"{source}:{number} is not a result record (needs nodeid and outcome)",
                "pass a results file written by --fd-results",
            )
        records.append(data)  # type: ignore[arg-type]
    return records


def latest_by_nodeid(records: Iterable[ResultRecord]) -> dict[str, ResultRecord]:
    """Last record wins per test: a re-run appended to the same file supersedes older lines."""
    latest: dict[str, ResultRecord] = {}
    for record in records:
        latest[record["nodeid"]] = record
    return latest


REPORT_HELP = "rebuild the result matrix from a --fd-results JSONL file (works on a partial file)"
REPORT_FILE_HELP = "the JSONL file written by pytest --fd-results"


def _run_report(args: argparse.Namespace) -> int:
    from fd_conformance.report import render_records  # the case x check matrix, shared with the suites

    records = read_results(args.file)
    print(render_records(records))
    latest = latest_by_nodeid(records).values()
    return EXIT_VIOLATIONS if any(r["outcome"] in BAD_OUTCOMES for r in latest) else EXIT_OK


def add_cli(subparsers: Any) -> None:
    """Register ``fd-conformance report FILE`` (called from fd_conformance.cli.build_parser)."""
    parser = subparsers.add_parser("report", help=REPORT_HELP, description=REPORT_HELP)
    parser.add_argument("file", metavar="FILE", help=REPORT_FILE_HELP)
    parser.set_defaults(func=_run_report)
