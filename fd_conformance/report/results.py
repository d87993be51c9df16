"""Decoding: results records (isolation JSONL lines, conformance.json's ``results``) into
:class:`CheckResult`, one check on one case on one device, and the plan folded in.

One record type feeds every output: the plugin builds records from in-process test reports;
isolated runs write the same fields as JSONL, and :func:`results_from_records` reads either back,
so the verdicts are the same however the session ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        """A result from our own dict or from an isolation JSONL record (ResultRecord, schema 1).

        Isolation records carry finding *codes* and the extra outcomes "hang"/"crash", which
        count as failures (their codes FDC501/FDC502 say which); the device is read back from
        the test id's ``-cpu``/``-cuda`` parameter when the record does not name it.
        """
        known = set(cls.__dataclass_fields__)
        kwargs: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        outcome = kwargs.get("outcome")
        if outcome in ("hang", "crash"):
            kwargs["outcome"] = FAILED
            kwargs.setdefault("message", str(data.get("cause") or data.get("details") or outcome)[:300])
        elif outcome not in OUTCOMES:
            raise ValueError(f"result {data.get('nodeid', '?')!r} has unknown outcome {outcome!r}")
        raw_findings = kwargs.get("findings", [])
        if raw_findings and all(isinstance(f, str) for f in raw_findings):
            # Isolation records carry bare codes: their severity comes from the registry, so a
            # warning (FDC002) is never read back as an error.
            errors, warned = split_codes_by_severity(raw_findings)
            kwargs["findings"] = []
            kwargs.setdefault("codes", errors)
            kwargs.setdefault("warnings", warned)
            # The plugin turns a caught mutant's failure into a skip carrying wasxfail; isolation
            # logs that as "skipped" with the caught error codes. A real skip has no error code.
            if kwargs.get("outcome") == SKIPPED and kwargs["codes"]:
                kwargs["outcome"] = XFAILED
        if data.get("reason") and not kwargs.get("message"):
            kwargs["message"] = str(data["reason"])[:300]
        if data.get("finding_details"):
            kwargs["findings"] = list(data["finding_details"])  # the full findings, when the writer kept them
        if "message" not in kwargs and data.get("details"):
            kwargs["message"] = str(data["details"]).strip().splitlines()[0][:300]
        if not kwargs.get("device"):
            kwargs["device"] = device_from_nodeid(str(data.get("nodeid", "")))
        if not kwargs.get("case"):
            kwargs["case"] = str(data.get("nodeid", "?"))
        if not kwargs.get("check"):
            kwargs["check"] = _check_from_nodeid(str(data.get("nodeid", "")))
        return cls(**kwargs)


def split_codes_by_severity(codes: Iterable[str]) -> tuple[list[str], list[str]]:
    """(error codes, warning codes) by the finding registry; an unknown code counts as an error
    (a hang, crash or newer kit's code must never pass silently)."""
    from fd_conformance.findings import RULES, Severity

    unique = sorted(set(codes))
    warned = [c for c in unique if c in RULES and RULES[c].severity is Severity.WARNING]
    return [c for c in unique if c not in warned], warned


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
    """Records (isolation JSONL or conformance.json's ``results``) back into results; the last
    record of a test id wins, as a re-run appended to a JSONL supersedes older lines."""
    latest: dict[str, Mapping[str, Any]] = {}
    for record in records:
        latest[str(record.get("nodeid", ""))] = record
    return [CheckResult.from_dict(r) for r in latest.values()]


def read_jsonl(path: Path) -> list[CheckResult]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return results_from_records(records)


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
    return with_plan(results_from_records(parsed.results), parsed.planned.values())
