"""conformance.json: the document every report is rendered from (schemas/conformance.schema.json),
and writing it with its certificate into a run's output directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fd_conformance.report.markdown import format_certificate, format_document_matrix
from fd_conformance.report.results import (
    DESELECTED,
    FAILED,
    MISSING,
    NOT_RAN,
    OUTCOMES,
    SKIPPED,
    CheckResult,
    results_from_lines,
)
from fd_conformance.report.verdicts import (
    LINE_LIMIT,
    case_verdict,
    cell,
    checks_of,
    graphs_label,
    result_failure_reason,
    rows_by_key,
    session_exit_code,
    shorten,
)

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "conformance.schema.json"
JSON_NAME = "conformance.json"
CERTIFICATE_NAME = "certificate.md"
JUNIT_NAME = "junit.xml"


def environment(results: Sequence[CheckResult]) -> dict[str, Any]:
    from fd_conformance import __version__

    runtimes: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        if r.runtime and r.outcome != SKIPPED:
            runtimes.setdefault(
                (r.runtime, r.device),
                {
                    "name": r.runtime,
                    "version": r.runtime_version,
                    "device": r.device,
                    "device_name": r.device_name,
                    "graphs": "real" if r.graphs_real else "host-emulated",
                },
            )
    return {
        "kit_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "runtimes": list(runtimes.values()),
    }


def build_document(
    results: Sequence[CheckResult],
    expect_mutants: bool = False,
    interrupted: str | None = None,
    nothing_certified: str | None = None,
    allow_empty: bool = False,
    outside_failures: Sequence[str] = (),
) -> dict[str, Any]:
    """The conformance.json document (validated against schemas/conformance.schema.json).
    ``results`` may hold MISSING placeholders (planned checks without a result): they make rows
    incomplete and are listed under ``run.not_run``, never under ``results``; ``interrupted``
    says why the run ended early (e.g. "SIGTERM"). ``nothing_certified``: why a session whose
    results cannot show it certified nothing (every check deselected leaves no row), which makes
    it EXIT_NOTHING_CERTIFIED, the reason in ``run.reason``. ``allow_empty`` (--allow-empty): a
    session that certified nothing is EXIT_OK, as its command exits. ``outside_failures``: node ids of
    failed tests that are no conformance check (the session exits 1; so does the document)."""
    ran = [r for r in results if r.outcome not in NOT_RAN]
    not_run = [r.nodeid for r in results if r.outcome == MISSING]
    deselected = [r.nodeid for r in results if r.outcome == DESELECTED]
    cases = []
    for (case, device), row in rows_by_key(results).items():
        verdict, observed = case_verdict(row, expect_mutants)
        checks = {}
        for check in checks_of(row):
            chosen = [r for r in row if r.check == check]
            checks[check] = {
                "cell": cell(chosen),
                "codes": sorted({c for r in chosen for c in r.codes}),
                "outcomes": sorted({r.outcome for r in chosen if r.outcome not in NOT_RAN}),
            }
            failed = [r for r in chosen if r.outcome == FAILED]
            if failed:
                checks[check]["reason"] = shorten(result_failure_reason(failed[0]), LINE_LIMIT)
        cases.append(
            {
                "name": case,
                "device": device,
                "runtime": next((r.runtime for r in row if r.runtime), ""),
                "graphs": graphs_label(row),
                "contract": next((r.contract for r in row if r.contract), "recapture"),
                "mutant": any(r.expected for r in row),
                "expected_findings": sorted({c for r in row for c in r.expected}),
                "observed_findings": observed,
                "verdict": verdict,
                "checks": checks,
            }
        )
    status = "interrupted" if interrupted else ("incomplete" if not_run or deselected else "finished")
    code = session_exit_code(results, expect_mutants, interrupted, nothing_certified, allow_empty, outside_failures)
    run: dict[str, Any] = {
        "status": status,
        "reason": interrupted or nothing_certified or "",
        "not_run": not_run,
        "deselected": deselected,
        "owed": [owed_entry(r) for r in results if r.outcome in NOT_RAN],
    }
    if outside_failures:
        run["outside_failures"] = sorted(outside_failures)
        run["reason"] = run["reason"] or f"{len(outside_failures)} test(s) outside the matrix failed"
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(ran),
        "expect_mutants": expect_mutants,
        "exit_code": code,
        "summary": {o: sum(1 for r in ran if r.outcome == o) for o in OUTCOMES},
        "run": run,
        "cases": cases,
        "results": [r.to_dict() for r in ran],
    }


def owed_entry(result: CheckResult) -> dict[str, Any]:
    """A check a row owes without a result, keyed as the plan keyed it (never parsed back out of its
    test id, which a case named ``my-cuda-model`` would misread): what ``merge`` rebuilds it from."""
    keys = ("nodeid", "case", "device", "check", "outcome")
    return {**{key: getattr(result, key) for key in keys}, "expected": list(result.expected)}


def owed_result(entry: Mapping[str, Any]) -> CheckResult:
    """The placeholder :func:`owed_entry` wrote (a MISSING or DESELECTED result)."""
    if entry.get("outcome") not in NOT_RAN:
        raise ValueError(f"owed check {entry.get('nodeid', '?')!r} has unknown outcome {entry.get('outcome')!r}")
    nodeid, case, device, check, outcome = (str(entry[key]) for key in ("nodeid", "case", "device", "check", "outcome"))
    return CheckResult(nodeid, case, device, check, outcome, expected=list(entry.get("expected", [])))


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def format_matrix(results: Sequence[CheckResult], expect_mutants: bool = False) -> str:
    """Cases x checks as a fixed-width text table, with a verdict column."""
    return format_document_matrix(build_document(results, expect_mutants))


def render_records(records: Iterable[Mapping[str, Any]]) -> str:
    """The matrix of results-file lines."""
    results = results_from_lines(records)
    return format_matrix(results) if results else "no results"


def write_reports(
    out_dir: Path,
    results: Sequence[CheckResult],
    expect_mutants: bool = False,
    interrupted: str | None = None,
    nothing_certified: str | None = None,
    allow_empty: bool = False,
    outside_failures: Sequence[str] = (),
) -> dict[str, Any]:
    """Write conformance.json and certificate.md into ``out_dir`` (arguments: :func:`build_document`);
    returns the document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = build_document(results, expect_mutants, interrupted, nothing_certified, allow_empty, outside_failures)
    (out_dir / JSON_NAME).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out_dir / CERTIFICATE_NAME).write_text(format_certificate(document), encoding="utf-8")
    return document
