"""The results file: one JSON line per finished test, appended and fsynced as the test ends.

Why a JSONL log and not only JUnit: JUnit XML is written once, at session end, so a controller
killed mid-session (CI timeout, OOM killer, a hang nobody caught) leaves nothing. An append-only
log with an fsync per record loses at most the test in flight, and ``fd-conformance report FILE``
rebuilds the matrix from whatever survived. A result line is a
:class:`~fd_conformance.matrix_keys.check_record.CheckRecord`'s encoding; the plan and session
lines, the writer and the strict reader are this module's.
"""

from __future__ import annotations

import errno
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypedDict

# typing has NotRequired from 3.11 on; requires-python is >=3.10.
from typing_extensions import NotRequired

from fd_conformance.errors import EXIT_INCOMPLETE, UsageError
from fd_conformance.matrix_keys.check_record import SCHEMA_VERSION, CheckRecord, ResultRecord, is_result_line

# Besides result lines the file holds two kinds of bookkeeping lines (``kind`` set), so a reader can
# tell a finished session from one that was cut short: which tests the session planned to run
# (written once collection is final), and how the session ended (written by whoever saw it end).
PLAN_KIND: Final = "plan"
SESSION_KIND: Final = "session"
FINISHED, INTERRUPTED = "finished", "interrupted"


class PlannedTest(TypedDict):
    nodeid: str
    case: str  # "" for a test that is not a conformance check
    device: str
    check: str
    expected: list[str]  # the case's expected finding codes (mutants)
    # Collected for its row, then deselected (-k, -m, a plugin): the row owes it, so a row that
    # lost some of its checks this way is incomplete (rows deselected whole are simply not run).
    deselected: NotRequired[bool]


class PlanRecord(TypedDict):
    schema: int
    kind: Literal["plan"]
    tests: list[PlannedTest]
    expect_mutants: bool
    created: float


class SessionRecord(TypedDict):
    schema: int
    kind: Literal["session"]
    status: str  # FINISHED | INTERRUPTED
    detail: str  # "SIGTERM", "pytest exited 0", ...
    finished: float


def plan_record(tests: list[PlannedTest], expect_mutants: bool) -> PlanRecord:
    return PlanRecord(schema=SCHEMA_VERSION, kind=PLAN_KIND, tests=tests, expect_mutants=expect_mutants, created=time.time())


def session_record(status: str, detail: str) -> SessionRecord:
    return SessionRecord(schema=SCHEMA_VERSION, kind=SESSION_KIND, status=status, detail=detail, finished=time.time())


def new_record(nodeid: str, *, started: float, pid: int) -> ResultRecord:
    """The line of a test that has not ended yet (outcome filled in by the caller)."""
    return CheckRecord(nodeid, started=started).line(finished=started, pid=pid)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data``: ``os.write`` may write fewer (a signal, a file-size limit, a full
    pipe) and says how many; stopping there would leave a torn line that a later line runs into."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # nothing written and no error: retrying would spin
            raise OSError(errno.EIO, f"write of {len(view)} bytes wrote none")
        view = view[written:]


class ResultLog:
    """Append-only JSONL writer. One ``os.write`` per record on an ``O_APPEND`` descriptor, so
    several writers (pytest-xdist workers) can share one file without interleaving lines; a short
    write is continued (write_all), the line's rest then lands where the file ends at that moment."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            self._end_torn_line()
        except OSError as err:
            raise UsageError(
                f"cannot open results file {str(self.path)!r} ({err.strerror})",
                "pass --fd-results a writable path",
            ) from None

    def _end_torn_line(self) -> None:
        """A writer killed mid-line left no newline: end that line, so the torn record stays one
        malformed line and what we append next is a line of its own."""
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            write_all(self._fd, b"\n")

    def append(self, record: ResultRecord | PlanRecord | SessionRecord) -> None:
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        write_all(self._fd, line)
        os.fsync(self._fd)  # the point of the log: survive the controller being killed next

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class IncompleteInput(UsageError):
    """A results file that cannot stand for a finished session: empty, torn, not a results file.
    Its own exit code (EXIT_INCOMPLETE), because CI must not read it as "bad command line"."""

    exit_code = EXIT_INCOMPLETE


EXPECTED_FILE = "the results.jsonl that `fd-conformance run` writes into --out (or pytest --fd-results FILE)"


@dataclass
class ResultsFile:
    """Everything a results file says: results, the plan, how the session ended, whether it was torn."""

    path: Path
    results: list[ResultRecord] = field(default_factory=list)
    plans: list[PlanRecord] = field(default_factory=list)
    sessions: list[SessionRecord] = field(default_factory=list)
    torn: bool = False  # the last line was cut mid-write: the writer was killed

    @property
    def planned(self) -> dict[str, PlannedTest]:
        """Every test some plan names (xdist workers each write the same plan), deselected ones included."""
        return {t["nodeid"]: t for plan in self.plans for t in plan["tests"]}

    @property
    def expect_mutants(self) -> bool:
        return any(plan["expect_mutants"] for plan in self.plans)

    @property
    def missing(self) -> list[str]:
        """Planned (selected) tests without a result line: they never finished."""
        done = {r["nodeid"] for r in self.results}
        return [nodeid for nodeid, t in self.planned.items() if nodeid not in done and not t.get("deselected")]

    @property
    def interruption(self) -> str | None:
        """Why the session ended early, or None: an interrupted session record, a torn tail, missing results."""
        for session in self.sessions:
            if session["status"] == INTERRUPTED:
                return f"interrupted ({session['detail']})"
        if self.torn:
            return "the file ends in a torn line (its writer was killed)"
        if self.missing:
            return f"{len(self.missing)} planned test(s) have no result"
        return None


def _looks_like(text: str) -> str:
    """What a non-results file probably is, for the error line."""
    head = text.lstrip()[:200]
    if head.startswith("<?xml") or head.startswith("<testsuite"):
        return "it is XML (JUnit?)"
    if head.startswith("{") and '"schema_version"' in text[:2000]:
        return "it is a conformance.json document"
    return "its first line is not a JSON object"


def _only_session_lines(lines: list[str]) -> bool:
    for line in lines:
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            return False
        if not isinstance(data, dict) or data.get("kind") != SESSION_KIND:
            return False
    return True


def load_results_file(path: str | os.PathLike[str]) -> ResultsFile:
    """Read a results file strictly: one line naming the file and what was expected when it is
    empty, not JSONL, or malformed before its last line; a torn last line is kept as ``torn``."""
    source = Path(path)
    if not source.is_file():
        raise UsageError(f"results file {str(source)!r} does not exist", f"pass {EXPECTED_FILE}")
    try:
        text = source.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise IncompleteInput(f"cannot read results file {str(source)!r} ({err.strerror})", f"pass {EXPECTED_FILE}") from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise IncompleteInput(
            f"results file {str(source)!r} is empty (the session wrote no line: killed before collection?)",
            f"rerun, or pass {EXPECTED_FILE}",
        )
    parsed = ResultsFile(source)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            if line.lstrip().startswith("{") and _only_session_lines(lines[number:]):
                # A killed writer's last line (possibly followed by the session line `run` appends
                # after the kill): exactly the case the log exists for.
                parsed.torn = True
                continue
            what = _looks_like(text) if number == 1 else f"line {number} is not JSON"
            raise IncompleteInput(f"{source} is not a results file: {what}", f"pass {EXPECTED_FILE}") from None
        kind = data.get("kind") if isinstance(data, dict) else None
        if kind == PLAN_KIND and isinstance(data.get("tests"), list):
            parsed.plans.append(data)
        elif kind == SESSION_KIND:
            parsed.sessions.append(data)
        elif is_result_line(data):
            parsed.results.append(data)
        else:
            what = _looks_like(text) if number == 1 else f"line {number} is not a result record (needs nodeid and outcome)"
            raise IncompleteInput(f"{source} is not a results file: {what}", f"pass {EXPECTED_FILE}")
    if parsed.torn and not (parsed.results or parsed.plans):
        raise IncompleteInput(
            f"results file {str(source)!r} is truncated: it ends mid-line before any complete record",
            f"rerun, or pass {EXPECTED_FILE}",
        )
    return parsed


def read_results(path: str | os.PathLike[str]) -> list[ResultRecord]:
    """The result records of a results file (plan and session lines left out); a torn last line
    (writer killed mid-write) is dropped, not fatal."""
    return load_results_file(path).results
