""":class:`CheckResult`, one check on one case on one device as the report judges it, and the plan folded in.

A result is made from one record type, :class:`~fd_conformance.matrix_keys.check_record.CheckRecord`,
by :func:`result_of`, whether the record was decoded from the session's report or from a line of
the results file: the verdicts are the same however the session ran. conformance.json's
``results`` are CheckResults as they are (:meth:`CheckResult.to_dict` / :meth:`CheckResult.from_dict`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fd_conformance.matrix_keys.check_record import REASON_LIMIT, CheckRecord, split_codes_by_severity

if TYPE_CHECKING:
    from fd_conformance.isolation.results import ResultsFile

PASSED, FAILED, SKIPPED, XFAILED = "passed", "failed", "skipped", "xfailed"
OUTCOMES = (PASSED, FAILED, SKIPPED, XFAILED)

# A planned test without a result (its run was interrupted). Never written into conformance.json's
# results (it has no outcome pytest reported); it makes its cell NOT RUN and its row INCOMPLETE.
MISSING = "missing"
# A check its row owes that was deselected (-k, -m, a plugin): like MISSING, it makes the row
# INCOMPLETE and is listed under ``run.deselected``, never under ``results``.
DESELECTED = "deselected"
NOT_RAN = frozenset({MISSING, DESELECTED})  # placeholders: planned checks without a result


@dataclass
class CheckResult:
    """One check on one case on one device, as the report needs it."""

    nodeid: str
    case: str
    device: str  # "cpu" | "cuda"
    check: str
    outcome: str  # one of OUTCOMES
    codes: list[str] = field(default_factory=list)  # error finding codes
    warnings: list[str] = field(default_factory=list)  # warning finding codes (reported, never fail)
    findings: list[dict[str, Any]] = field(default_factory=list)  # Finding.to_dict() each
    expected: list[str] = field(default_factory=list)  # the case's expected codes (mutants)
    message: str = ""
    duration: float = 0.0
    runtime: str = ""
    runtime_version: str = ""
    device_name: str = ""
    graphs_real: bool | None = None
    contract: str = ""  # the case's weight-update contract when not the default ("in_place")
    trace: dict[str, Any] | None = None  # a failing check's lifecycle trace (report/lifecycle_trace.py)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if data["trace"] is None:  # passing checks carry none: conformance.json stays their size
            del data["trace"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        """A result of conformance.json's ``results`` (what :meth:`to_dict` wrote)."""
        if data.get("outcome") not in OUTCOMES:
            raise ValueError(f"result {data.get('nodeid', '?')!r} has unknown outcome {data.get('outcome')!r}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def result_of(record: CheckRecord) -> CheckResult:
    """The report's reading of a record: a hang or crash is a failure (its code, FDC501/FDC502, says
    which), a caught mutant an xfail (unless a later phase failed: its teardown's failure is not
    what the mutant was built with), the device and check read from the test id when not recorded."""
    caught = record.caught and record.outcome == "skipped"
    outcome = FAILED if record.outcome in ("hang", "crash") else XFAILED if caught else record.outcome
    message = record.reason or ""
    if record.outcome in ("hang", "crash"):
        message = str(record.run.get("cause") or record.details or record.outcome)[:REASON_LIMIT]
    codes, warnings = split_codes_by_severity(record.codes)
    return CheckResult(
        nodeid=record.nodeid,
        case=record.case or record.nodeid,
        device=record.device or device_from_nodeid(record.nodeid),
        check=record.check or _check_from_nodeid(record.nodeid),
        outcome=outcome,
        codes=codes,
        warnings=warnings,
        findings=list(record.findings or []),
        expected=list(record.expected or []),
        message=message,
        duration=record.duration,
        runtime=str(record.runtime or ""),
        runtime_version=str(record.runtime_version or ""),
        device_name=str(record.device_name or ""),
        graphs_real=record.graphs_real if isinstance(record.graphs_real, bool) else None,
        contract=str(record.contract or ""),
        trace=record.trace,
    )


def device_from_nodeid(nodeid: str) -> str:
    """The device parameter of a suite test id (``test_x[case-cuda]``), or "" when absent."""
    params = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else ""
    for device in ("cuda", "cpu"):
        if params.endswith("-" + device) or params == device or f"-{device}-" in params:
            return device
    return ""


def _check_from_nodeid(nodeid: str) -> str:
    name = nodeid.rpartition("::")[2].partition("[")[0]
    return name[5:] if name.startswith("test_") else name


def results_from_records(records: Iterable[Mapping[str, Any]]) -> list[CheckResult]:
    """conformance.json's ``results`` back into results; the last of a test id wins."""
    return [CheckResult.from_dict(r) for r in _latest(records)]


def results_from_lines(lines: Iterable[Mapping[str, Any]]) -> list[CheckResult]:
    """Results-file lines back into results; the last line of a test id wins, as a re-run
    appended to the file supersedes older lines."""
    return [result_of(CheckRecord.from_line(line)) for line in _latest(lines)]


def _latest(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    latest: dict[str, Mapping[str, Any]] = {}
    for record in records:
        latest[str(record.get("nodeid", ""))] = record
    return list(latest.values())


def read_jsonl(path: Path) -> list[CheckResult]:
    """The results of a file of result lines only (``fd-conformance report`` reads a whole results file)."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return results_from_lines(lines)


def missing_results(planned: Iterable[Mapping[str, Any]], results: Sequence[CheckResult]) -> list[CheckResult]:
    """Placeholders for the owed conformance checks that have no result: MISSING for a selected one
    that never ended, DESELECTED for one left out of the selection."""
    done = {r.nodeid for r in results}
    return [
        CheckResult(
            nodeid=t["nodeid"],
            case=t["case"],
            device=t["device"],
            check=t["check"],
            outcome=DESELECTED if t.get("deselected") else MISSING,
            expected=list(t.get("expected", [])),
        )
        for t in planned
        if t.get("case") and t["nodeid"] not in done
    ]


def with_expected(results: Sequence[CheckResult], planned: Iterable[Mapping[str, Any]]) -> list[CheckResult]:
    """Results whose record lacked the case's expected codes (older isolation records) get them
    from the plan, so a mutant read back from a JSONL is judged as a mutant."""
    expected = {t["nodeid"]: list(t.get("expected", [])) for t in planned}
    for r in results:
        if not r.expected and expected.get(r.nodeid):
            r.expected = expected[r.nodeid]
    return list(results)


def with_plan(results: Sequence[CheckResult], planned: Iterable[Mapping[str, Any]]) -> list[CheckResult]:
    """The results judged against the plan: expected codes filled in, and a placeholder for every
    check a row owes without a result. The one place both routes (the session, a results file)
    fold the plan in, so they give one verdict."""
    from fd_conformance.isolation.session_plan import owed_checks

    owed = owed_checks(planned)
    results = with_expected(results, owed)
    return results + missing_results(owed, results)


def results_of_file(parsed: ResultsFile) -> list[CheckResult]:
    """A results file's results with the plan folded in: expected codes for mutants, and a
    MISSING placeholder for every planned conformance check that has no result line."""
    return with_plan(results_from_lines(parsed.results), parsed.planned.values())
