"""A finished check as one typed record, :class:`CheckRecord`, and its one codec.

A check's result crosses processes on pytest's reports (isolation worker -> xdist worker ->
controller) as ``user_properties`` pairs, and is logged as one JSON line per test (results.jsonl).
Both encodings are written here and read back only here, so the worker, the results log, the
matrix and ``fd-conformance report`` cannot disagree about what a key means. Where and when a test
ran (its pid, the isolation evidence of a hang) rides on the reports as the attribute ``fd_run``:
xdist serialises it like ``wasxfail``, and JUnit XML never shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict

# typing has NotRequired from 3.11 on; requires-python is >=3.10.
from typing_extensions import NotRequired

if TYPE_CHECKING:
    import pytest

PROP_PREFIX = "fd_"  # user_properties keys travel through xdist and into JUnit XML
FINDINGS_PROP = PROP_PREFIX + "findings"
BUILD_PROP = PROP_PREFIX + "build_s"  # a user property: seconds the case factory took for this check
RUN_ATTR = "fd_run"  # a report attribute: where and when its test ran (see the module docstring)
TRACE_ATTR = "fd_trace"  # a report attribute, like RUN_ATTR: a failing check's lifecycle trace (report/lifecycle_trace.py)
SCHEMA_VERSION = 1
Outcome = Literal["passed", "failed", "skipped", "hang", "crash"]
OUTCOMES: tuple[Outcome, ...] = ("passed", "failed", "skipped", "hang", "crash")
BAD_OUTCOMES: frozenset[str] = frozenset({"failed", "hang", "crash"})
RUNTIME_KEYS = ("runtime", "runtime_version", "device_name", "graphs_real")
# Copied from the run facts into the line: the isolation evidence (optional keys of ResultRecord).
EVIDENCE_KEYS = (
    "isolated",
    "worker_spawned",
    "worker_wait_s",
    "deadline_s",
    "cause",
    "last_event",
    "python_stacks",
    "native_stacks",
    "stuck_frame",
    "build_s",  # seconds the case's factory took to build this check's model (BUILD_PROP)
)
REASON_LIMIT = 300


class ResultRecord(TypedDict):
    """One line of the results file (schema 1): :meth:`CheckRecord.line` writes it.

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
    deadline_s: NotRequired[float]  # the watchdog's deadline for the test (a hang is declared after it)
    cause: NotRequired[str]  # crash cause ("SIGSEGV", "os._exit(3)", "out of memory: ...") or hang reason
    last_event: NotRequired[str]  # last lifecycle mark the worker streamed before it went silent
    python_stacks: NotRequired[str]  # faulthandler dump of all threads of the hung worker
    native_stacks: NotRequired[str]  # py-spy dump --native, or why it is missing
    stuck_frame: NotRequired[str]  # innermost project frame of the hung thread
    reason: NotRequired[str]  # one line: why it failed or skipped (first error finding, exception type: message)
    # The matrix keys and what conformance.json shows, so a report rebuilt from the file alone says
    # what `run`'s says (suite tests only).
    device: NotRequired[str]
    contract: NotRequired[str]  # the case's weight-update contract when not the default ("in_place")
    expected: NotRequired[list[str]]  # the case's expected finding codes (mutants)
    runtime: NotRequired[str]
    runtime_version: NotRequired[str]
    device_name: NotRequired[str]
    graphs_real: NotRequired[bool | None]
    finding_details: NotRequired[list[dict[str, Any]]]  # Finding.to_dict() each ("findings" holds the codes)
    trace: NotRequired[dict[str, Any]]  # a failing check's lifecycle trace (its picture in the certificate)


@dataclass
class CheckRecord:
    """One test as the reports tell it: one phase's report, or the whole test once its phases are
    folded (:meth:`then`). ``None`` means "not reported" (the line then leaves the key out)."""

    nodeid: str
    outcome: Outcome = "passed"
    case: str | None = None
    device: str | None = None
    check: str | None = None
    contract: str | None = None  # the case's weight-update contract when not "recapture" (the default)
    expected: list[str] | None = None  # the case's expected finding codes (mutants)
    codes: list[str] = field(default_factory=list)  # finding codes, each once, in the order reported
    findings: list[dict[str, Any]] | None = None  # Finding.to_dict() each
    caught: bool = False  # a mutant's expected failure, made a skip carrying pytest's wasxfail
    reason: str | None = None  # one line: why it failed or skipped
    details: str = ""  # the failure's or skip's full text
    duration: float = 0.0
    started: float = 0.0
    runtime: str | None = None
    runtime_version: str | None = None
    device_name: str | None = None
    graphs_real: bool | None = None
    run: dict[str, Any] = field(default_factory=dict)  # where and when it ran (RUN_ATTR); hang/crash evidence
    trace: dict[str, Any] | None = None  # a failing check's lifecycle trace (TRACE_ATTR)

    # --- encoders ---------------------------------------------------------------------------
    def properties(self) -> list[tuple[str, object]]:
        """The ``user_properties`` pairs of this record's matrix keys, runtime and findings."""
        pairs: list[tuple[str, object]] = []
        if self.case is not None:
            pairs += [
                (PROP_PREFIX + "case", self.case),
                (PROP_PREFIX + "device", self.device or ""),
                (PROP_PREFIX + "check", self.check or ""),
                (PROP_PREFIX + "expected", ",".join(sorted(self.expected or []))),
            ]
            if self.contract is not None:
                pairs.append((PROP_PREFIX + "contract", self.contract))
        pairs += [(PROP_PREFIX + key, getattr(self, key)) for key in RUNTIME_KEYS if getattr(self, key) is not None]
        if self.findings is not None:
            pairs.append((FINDINGS_PROP, json.dumps(self.findings)))
        return pairs

    def line(self, finished: float, pid: int) -> ResultRecord:
        """This (folded) record as one results-file line; ``pid`` when no run fact names the process."""
        line = ResultRecord(
            schema=SCHEMA_VERSION,
            nodeid=self.nodeid,
            case=self.case or "",
            check=self.check or "",
            outcome=self.outcome,
            findings=list(self.codes),
            duration=self.duration,
            details=self.details,
            worker_pid=int(self.run.get("worker_pid", pid)),
            started=float(self.run.get("started", self.started)),
            finished=finished,
        )
        optional: dict[str, Any] = {key: self.run[key] for key in EVIDENCE_KEYS if key in self.run}
        optional.update(
            (key, getattr(self, key)) for key in ("device", "contract", *RUNTIME_KEYS) if getattr(self, key) is not None
        )
        if self.expected:
            optional["expected"] = self.expected
        if self.findings is not None:
            optional["finding_details"] = self.findings
        if self.trace is not None:
            optional["trace"] = self.trace
        if self.reason is not None:
            optional["reason"] = self.reason
        line.update(optional)  # type: ignore[typeddict-item]  # keys of ResultRecord, checked above
        return line

    # --- decoders ---------------------------------------------------------------------------
    @classmethod
    def from_report(cls, report: pytest.TestReport) -> CheckRecord:
        """One phase's report: its outcome and text, the keys its user_properties carry, its run facts."""
        props = dict(report.user_properties)
        findings = json.loads(str(props[FINDINGS_PROP])) if FINDINGS_PROP in props else None
        record = cls(
            report.nodeid,
            duration=report.duration,
            started=report.start,
            findings=findings,
            codes=_unique(f.get("code") for f in findings or []),
            caught=hasattr(report, "wasxfail"),
            run=dict(getattr(report, RUN_ATTR, None) or {}),
            trace=getattr(report, TRACE_ATTR, None),
        )
        if BUILD_PROP in props:
            record.run["build_s"] = float(props[BUILD_PROP])  # type: ignore[arg-type]
        for key in ("case", "device", "check", "contract", *RUNTIME_KEYS):
            if PROP_PREFIX + key in props:
                value = props[PROP_PREFIX + key]
                setattr(record, key, value if key == "graphs_real" else str(value))
        if props.get(PROP_PREFIX + "expected"):
            record.expected = [c for c in str(props[PROP_PREFIX + "expected"]).split(",") if c]
        skip_reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else None
        if report.failed:
            record.outcome, record.reason, record.details = "failed", failure_reason(report), str(report.longrepr)
        elif report.skipped:
            record.outcome, record.details = "skipped", str(skip_reason if skip_reason is not None else report.longrepr)
            record.reason = None if skip_reason is None else str(skip_reason)
        return record

    @classmethod
    def from_line(cls, data: Mapping[str, Any]) -> CheckRecord:
        """One results-file line (schema 1). A line without a reason gets its details' first line;
        a skip carrying error codes is a caught mutant (the plugin's wasxfail, logged as a skip)."""
        if not is_result_line(data):
            raise ValueError(f"result {data.get('nodeid', '?')!r} has unknown outcome {data.get('outcome')!r}")
        codes = [str(code) for code in data.get("findings", [])]
        details = str(data.get("details", ""))
        reason = str(data.get("reason") or "") or (details.strip().splitlines() or [""])[0]
        record = cls(
            str(data["nodeid"]),
            outcome=data["outcome"],
            codes=codes,
            findings=list(data["finding_details"]) if data.get("finding_details") else None,
            caught=data["outcome"] == "skipped" and bool(split_codes_by_severity(codes)[0]),
            reason=reason[:REASON_LIMIT],
            details=details,
            duration=float(data.get("duration", 0.0)),
            started=float(data.get("started", 0.0)),
            run={key: data[key] for key in ("worker_pid", *EVIDENCE_KEYS) if key in data},
            trace=data.get("trace"),
        )
        for key in ("case", "device", "check", "contract", "expected", *RUNTIME_KEYS):
            if data.get(key) is not None:
                setattr(record, key, data[key])
        return record

    # --- one test from its phases -----------------------------------------------------------
    def then(self, later: CheckRecord) -> None:
        """Fold a later phase in: time adds up, a failure wins, keys update. Every phase's findings
        and failure reasons stay: a check that fails in call and again in teardown reports both."""
        self.duration += later.duration
        for key in ("case", "device", "check", "contract", "expected", "trace", *RUNTIME_KEYS):
            if getattr(later, key) is not None:
                setattr(self, key, getattr(later, key))
        if later.findings is not None:  # a later phase's report repeats the verdict's earlier findings
            self.findings = (self.findings or []) + [f for f in later.findings if f not in (self.findings or [])]
        self.codes += [code for code in later.codes if code not in self.codes]
        self.caught = self.caught or later.caught
        self.run.update(later.run)
        if later.outcome == "failed":
            if self.outcome != "failed" or not self.reason:
                self.reason = later.reason
            elif later.reason and later.reason not in self.reason:
                self.reason = f"{self.reason}; {later.reason}"[:REASON_LIMIT]
            self.outcome, self.details = "failed", self.details + later.details
        elif later.outcome == "skipped" and self.outcome == "passed":
            self.outcome, self.details, self.reason = "skipped", later.details, self.reason or later.reason

    def ended(self) -> None:
        """The run facts' verdict, once the test's last report is in: a hang or crash the
        isolation parent saw overrides what the (partial) reports said."""
        if "outcome" not in self.run:
            return
        outcome = self.run["outcome"]
        details = str(self.run.get("details", ""))
        self.outcome, self.details = outcome, details
        cause = self.run.get("cause") or (details.strip().splitlines() or [""])[0]
        self.reason = f"{outcome}: {cause}"[:REASON_LIMIT]
        self.codes = sorted(set(self.codes) | set(self.run.get("findings", [])))


class PhaseFold:
    """A test's phase reports (setup, call, teardown) folded into one record as they arrive: the one
    fold of both the live session's matrix and the results file, so a test that fails in call and
    in teardown is one result, both failures in it, whichever route the report is built from."""

    def __init__(self) -> None:
        self.partial: dict[str, CheckRecord] = {}  # tests whose teardown report has not arrived

    def add(self, report: pytest.TestReport) -> CheckRecord | None:
        """Fold ``report`` in; the test's whole record once its teardown is in (run facts applied)."""
        phase = CheckRecord.from_report(report)
        record = self.partial.setdefault(report.nodeid, phase)
        if record is not phase:
            record.then(phase)
        if report.when != "teardown":
            return None
        del self.partial[report.nodeid]
        record.ended()
        return record


def split_codes_by_severity(codes: Iterable[str]) -> tuple[list[str], list[str]]:
    """(error codes, warning codes) by the finding registry; an unknown code counts as an error
    (a hang, crash or newer kit's code must never pass silently)."""
    from fd_conformance.findings import RULES, Severity

    unique = sorted(set(codes))
    warned = [c for c in unique if c in RULES and RULES[c].severity is Severity.WARNING]
    return [c for c in unique if c not in warned], warned


def is_result_line(data: object) -> bool:
    """A results-file line that reports a test (not a plan or session line)."""
    return isinstance(data, Mapping) and "nodeid" in data and data.get("outcome") in OUTCOMES


def is_check_report(report: pytest.TestReport) -> bool:
    """Whether a report carries a conformance check's matrix keys."""
    return any(key == PROP_PREFIX + "case" for key, _ in report.user_properties)


def add_finding(report: pytest.TestReport, finding: dict[str, Any]) -> None:
    """Merge ``finding`` into the report's findings: a second findings pair would hide the check's
    own (``dict(user_properties)`` keeps the last one)."""
    props = report.user_properties
    index = next((i for i, (key, _) in enumerate(props) if key == FINDINGS_PROP), None)
    if index is None:
        props.append((FINDINGS_PROP, json.dumps([finding])))
        return
    props[index] = (FINDINGS_PROP, json.dumps([*json.loads(str(props[index][1])), finding]))


def failure_reason(report: pytest.TestReport) -> str:
    """A failed report's reason in one line: its first error finding ("FDC203 graph ..."), else the
    exception as pytest's crash line has it ("ValueError: boom"), never a fixture's source repr."""
    props = dict(report.user_properties)
    for finding in json.loads(str(props.get(FINDINGS_PROP, "[]"))):
        if finding.get("severity") == "error":
            return f"{finding['code']} {finding.get('message', '')}"[:REASON_LIMIT]
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None and crash.message else str(report.longrepr or "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "failed"
    first = first.removeprefix("Failed: ")  # pytest.fail()'s exception name says nothing the check's text does not
    where = {"setup": "error in setup: ", "teardown": "error in teardown: "}.get(report.when, "")
    return (where + first)[:REASON_LIMIT]


def _unique(codes: Iterable[object]) -> list[str]:
    seen: list[str] = []
    for code in codes:
        if code and str(code) not in seen:
            seen.append(str(code))
    return seen
