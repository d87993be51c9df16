"""Conformance results as a matrix, ``conformance.json`` and a markdown certificate.

One record type, :class:`CheckResult` (one test: one check on one case on one device), feeds
every output. The plugin builds records from in-process test reports; isolated runs write the
same fields as JSONL, and :func:`results_from_records` reads either back, so the matrix is the
same however the session ran. Host-emulated (CPU) results are labelled as such everywhere:
they prove ordering and interface logic, never GPU memory behaviour.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fd_conformance.isolation.results import ResultsFile

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).parent / "schemas" / "conformance.schema.json"
JSON_NAME = "conformance.json"
CERTIFICATE_NAME = "certificate.md"
JUNIT_NAME = "junit.xml"

PASSED, FAILED, SKIPPED, XFAILED = "passed", "failed", "skipped", "xfailed"
OUTCOMES = (PASSED, FAILED, SKIPPED, XFAILED)

# A planned test without a result (its run was interrupted). Never written into conformance.json's
# results (it has no outcome pytest reported); it makes its cell NOT RUN and its row INCOMPLETE.
MISSING = "missing"
# A check its row owes that was deselected (-k, -m, a plugin): like MISSING, it makes the row
# INCOMPLETE and is listed under ``run.deselected``, never under ``results``.
DESELECTED = "deselected"
NOT_RAN = frozenset({MISSING, DESELECTED})  # placeholders: planned checks without a result

# Per-case verdicts. A mutant is "caught" when the suite reports exactly its expected codes.
CERTIFIED, VIOLATIONS, NOT_RUN, CAUGHT, MISSED = "certified", "violations", "not-run", "caught", "missed"
INCOMPLETE = "incomplete"  # a check the row owes has no result: the run did not finish
# Only these pass: a row is certified when every check it owes ran (or skipped for its stated
# reason) and passed; a row that ran nothing (not-run) certified nothing, so it is not a pass.
PASSING_VERDICTS = frozenset({CERTIFIED, CAUGHT})

CERTIFICATE_LIMIT = 60_000  # characters; GitHub rejects PR comments over 65,536
LINE_LIMIT = 400  # one certificate line (a finding message can be a whole traceback)
CELL_REASON_LIMIT = 40  # a failing cell without a finding code shows this much of its reason
MESSAGE_LIMIT = 1_200  # a finding's message in the certificate; its fix is never cut


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


def render_records(records: Iterable[Mapping[str, Any]]) -> str:
    """The matrix for ``fd-conformance report FILE`` (isolation's JSONL records)."""
    results = [r for r in results_from_records(records)]
    return format_matrix(results) if results else "no results"


def read_jsonl(path: Path) -> list[CheckResult]:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return results_from_records(records)


# --- aggregation ----------------------------------------------------------------------


def _row_key(result: CheckResult) -> tuple[str, str]:
    return (result.case, result.device)


def checks_of(results: Sequence[CheckResult]) -> list[str]:
    """Column order: first appearance, which follows the suite's module order."""
    return list(dict.fromkeys(r.check for r in results))


def cell(results: Sequence[CheckResult]) -> str:
    """One matrix cell from every test of one check on one case (parametrized variants merge)."""
    codes = sorted({c for r in results for c in r.codes})
    if any(r.outcome == FAILED for r in results):
        if codes:
            return "FAIL " + ",".join(codes)
        # No finding code (a factory that raised, an assertion of the suite): the reason, short.
        failed = next((r for r in results if r.outcome == FAILED and r.message), None)
        reason = failed.message.replace(f"{failed.case}: ", "", 1) if failed is not None else "error"
        return "FAIL " + _shorten(reason, CELL_REASON_LIMIT)
    if any(r.outcome == MISSING for r in results):
        return "NOT RUN"
    if any(r.outcome == DESELECTED for r in results):
        return "DESELECTED"
    if any(r.outcome == XFAILED for r in results):
        return "CAUGHT " + ",".join(codes)
    if any(r.outcome == PASSED for r in results):
        warned = sorted({c for r in results for c in r.warnings})
        return "PASS" + (f" (warn {','.join(warned)})" if warned else "")
    return "SKIP" if results else "-"


def _shorten(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def failure_reason(result: CheckResult) -> str:
    """One line saying why a result failed: its first error finding, else its message."""
    for finding in result.findings:
        if finding.get("severity", "error") == "error":
            return f"{finding['code']} {finding.get('message', '')}".strip()
    return result.message or (",".join(result.codes) if result.codes else "failed without a message (see pytest.log)")


def case_verdict(results: Sequence[CheckResult], expect_mutants: bool) -> tuple[str, list[str]]:
    """(verdict, observed codes) for one case on one device; warnings count as observed, so a
    mutant built to draw a warning (FDC002) is caught by it. A row with a planned check that has
    no result (it did not run, or was deselected) is INCOMPLETE whatever the others say: its verdict
    is not final, unless a check of a model (not a mutant) failed: that is final. A failure that carries finding codes is explained by them: a mutant caught by a
    hang (FDC501) or crash (FDC502), whose report the isolation parent makes, is caught like any other."""
    observed = sorted(
        {c for r in results if r.outcome in (FAILED, XFAILED) for c in r.codes} | {c for r in results for c in r.warnings}
    )
    expected = sorted({c for r in results for c in r.expected})
    if any(r.outcome in NOT_RAN for r in results):
        # A failure of a model (not a mutant, whose codes must be complete) is final however
        # many checks did not run: the row can never be certified, and "incomplete" would hide it.
        failed = any(r.outcome == FAILED for r in results)
        return (VIOLATIONS if failed and not (expect_mutants and expected) else INCOMPLETE), observed
    ran = any(r.outcome != SKIPPED for r in results)
    if not ran:
        # A mutant that ran nothing proved nothing: with expect_mutants it is MISSED (a check
        # lost its reach, e.g. a device row skipping it), unless its framework is absent here.
        if expect_mutants and expected and not all(_runtime_missing(r) for r in results):
            return MISSED, observed
        return NOT_RUN, observed
    if expect_mutants and expected:
        failed_unexplained = any(r.outcome == FAILED and not r.codes for r in results)
        return (CAUGHT if observed == expected and not failed_unexplained else MISSED), observed
    if any(r.outcome == FAILED for r in results):
        return VIOLATIONS, observed
    return CERTIFIED, observed


# Skip reasons meaning "this machine cannot run the row" (the plugin's fd_runtime skip for a
# missing framework, devices.no_gpu_reason for a cuda row on a GPU-less host), not "the check
# chose not to run": only these excuse a mutant that ran nothing.
UNAVAILABLE_SKIP_MARKERS = ("is not installed", "no GPU")


def _runtime_missing(result: CheckResult) -> bool:
    """A skip because the row's framework or device is absent here, which proves nothing either way."""
    return result.outcome == SKIPPED and any(marker in result.message for marker in UNAVAILABLE_SKIP_MARKERS)


def _rows(results: Sequence[CheckResult]) -> dict[tuple[str, str], list[CheckResult]]:
    rows: dict[tuple[str, str], list[CheckResult]] = {}
    for result in results:
        rows.setdefault(_row_key(result), []).append(result)
    return rows


def graphs_label(results: Sequence[CheckResult]) -> str:
    real = {r.graphs_real for r in results if r.graphs_real is not None}
    if real == {True}:
        return "real"
    if real == {False}:
        return "host-emulated"
    return "mixed" if real else "n/a"


def format_matrix(results: Sequence[CheckResult], expect_mutants: bool = False) -> str:
    """Cases x checks as a fixed-width text table, with a verdict column."""
    return format_document_matrix(build_document(results, expect_mutants))


def format_document_matrix(document: Mapping[str, Any]) -> str:
    """The matrix of a conformance.json document: the cells and verdicts it holds, so every route
    (pytest's summary, `run`, `report`) prints the verdict computed once, placeholders included."""
    checks = list(dict.fromkeys(k for c in document["cases"] for k in c["checks"]))
    header = ["case [device, graphs]", *checks, "verdict"]
    table = [header]
    for c in document["cases"]:
        cells = [c["checks"].get(check, {}).get("cell", "-") for check in checks]
        table.append([f"{c['name']} [{c['device']}, {c['graphs']}]", *cells, c["verdict"]])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[i]) for i, text in enumerate(line)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def exit_code(results: Sequence[CheckResult], expect_mutants: bool = False) -> int:
    """EXIT_OK when every row is certified (or every mutant caught exactly); EXIT_INCOMPLETE when
    a planned check has no result; EXIT_NOTHING_CERTIFIED when rows exist but no check ran in any;
    else EXIT_VIOLATIONS. No rows at all is EXIT_OK: an empty selection certifies nothing on purpose."""
    from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_NOTHING_CERTIFIED, EXIT_OK, EXIT_VIOLATIONS

    verdicts = [case_verdict(row, expect_mutants)[0] for row in _rows(results).values()]
    if INCOMPLETE in verdicts:
        return EXIT_INCOMPLETE
    if verdicts and all(v == NOT_RUN for v in verdicts):
        return EXIT_NOTHING_CERTIFIED
    return EXIT_OK if all(v in PASSING_VERDICTS for v in verdicts) else EXIT_VIOLATIONS


def nothing_ran_reason(results: Sequence[CheckResult]) -> str:
    """Why no check ran: the most common skip reason (no GPU, framework missing, deselected)."""
    reasons = [r.message for r in results if r.outcome == SKIPPED and r.message]
    if not reasons:
        return "no conformance check was collected (no case selected, or every check deselected)"
    common = max(set(reasons), key=reasons.count)
    return f"all {len(results)} conformance checks skipped, e.g. {common!r}"


# --- conformance.json --------------------------------------------------------------------


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
    from fd_conformance.session_plan import owed_checks

    owed = owed_checks(planned)
    results = with_expected(results, owed)
    return results + missing_results(owed, results)


def build_document(
    results: Sequence[CheckResult], expect_mutants: bool = False, interrupted: str | None = None
) -> dict[str, Any]:
    """The conformance.json document (validated against schemas/conformance.schema.json).
    ``results`` may hold MISSING placeholders (planned checks without a result): they make rows
    incomplete and are listed under ``run.not_run``, never under ``results``; ``interrupted``
    says why the run ended early (e.g. "SIGTERM")."""
    ran = [r for r in results if r.outcome not in NOT_RAN]
    not_run = [r.nodeid for r in results if r.outcome == MISSING]
    deselected = [r.nodeid for r in results if r.outcome == DESELECTED]
    cases = []
    for (case, device), row in _rows(results).items():
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
                checks[check]["reason"] = _shorten(failure_reason(failed[0]), LINE_LIMIT)
        cases.append(
            {
                "name": case,
                "device": device,
                "runtime": next((r.runtime for r in row if r.runtime), ""),
                "graphs": graphs_label(row),
                "mutant": any(r.expected for r in row),
                "expected_findings": sorted({c for r in row for c in r.expected}),
                "observed_findings": observed,
                "verdict": verdict,
                "checks": checks,
            }
        )
    status = "interrupted" if interrupted else ("incomplete" if not_run or deselected else "finished")
    code = exit_code(results, expect_mutants)
    if interrupted:
        from fd_conformance.errors import EXIT_INCOMPLETE

        code = EXIT_INCOMPLETE  # even when every planned check has a result: the session did not end normally
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "environment": environment(ran),
        "expect_mutants": expect_mutants,
        "exit_code": code,
        "summary": {o: sum(1 for r in ran if r.outcome == o) for o in OUTCOMES},
        "run": {"status": status, "reason": interrupted or "", "not_run": not_run, "deselected": deselected},
        "cases": cases,
        "results": [r.to_dict() for r in ran],
    }


def verdicts_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a conformance.json says that must not depend on scheduling (serial, ``-n 2``, ``-n 4``,
    isolation on or off): each row's verdict and cells, each test's outcome and codes."""
    rows = {
        (c["name"], c["device"]): (c["verdict"], {k: (v["cell"], sorted(v["codes"])) for k, v in c["checks"].items()})
        for c in document["cases"]
    }
    tests = {r["nodeid"]: (r["outcome"], sorted(r["codes"])) for r in document["results"]}
    return {"rows": rows, "tests": tests}


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


# --- certificate.md ------------------------------------------------------------------------


def _line(text: str) -> str:
    return text if len(text) <= LINE_LIMIT else text[: LINE_LIMIT - 3] + "..."


def _fit(sections: list[tuple[list[str], list[str], str]], budget: int) -> list[str]:
    """Lay out (heading lines, item lines, overflow text) sections within ``budget`` characters:
    each section gets an even share of what is left (what one leaves unused goes to the next);
    items that do not fit are counted in one overflow line ("{n}" in the text)."""
    out: list[str] = []
    left = budget
    for index, (heading, items, overflow) in enumerate(sections):
        share = left // (len(sections) - index)
        used = sum(len(h) + 1 for h in heading)
        kept: list[str] = []
        reserve = len(overflow) + 12  # room for the overflow line with its count
        for position, item in enumerate(items):
            cost = len(item) + 1
            last = position == len(items) - 1
            if used + cost + (0 if last else reserve) > share:
                break
            kept.append(item)
            used += cost
        if len(kept) < len(items):
            kept.append(overflow.format(n=len(items) - len(kept)))
            used += len(kept[-1]) + 1
        if items or heading:
            out += heading + kept
        left -= used
    return out


def format_certificate(document: Mapping[str, Any]) -> str:
    """A markdown certificate for a PR comment, at most CERTIFICATE_LIMIT characters whatever the
    run: environment, the summary table (one row per case and device), findings grouped by code
    (each with its fix and the rows it hit), failures without a code with their reason, missed
    mutants, and a pointer to conformance.json, which keeps every detail."""
    env = document["environment"]
    run = document.get("run", {"status": "finished", "reason": "", "not_run": []})
    lines = ["# fd-conformance certificate", ""]
    if run["status"] != "finished":
        title = "INTERRUPTED" if run["status"] == "interrupted" else "INCOMPLETE"
        why = f" ({run['reason']})" if run["reason"] else ""
        left_out = len(run.get("deselected", []))
        also = f" and {left_out} were deselected" if left_out else ""
        lines += [
            f"> **{title}**{why}: {len(run['not_run'])} planned check(s) did not run{also}; rows that miss one are `incomplete`.",
            "",
        ]
    lines.append(_line(f"- kit: fd-conformance {env['kit_version']} (Python {env['python']}, {env['platform']})"))
    for rt in env["runtimes"]:
        lines.append(
            _line(f"- runtime: {rt['name']} {rt['version']} on {rt['device']} ({rt['device_name']}), graphs: {rt['graphs']}")
        )
    if not env["runtimes"]:
        lines.append("- runtime: none (no check ran)")
    lines.append(f"- generated: {document['generated_at']}")
    overall = {0: "PASS", 3: "INCOMPLETE", 4: "NOTHING CERTIFIED"}.get(document["exit_code"], "FAIL")
    verdict_counts: dict[str, int] = {}
    for c in document["cases"]:
        verdict_counts[c["verdict"]] = verdict_counts.get(c["verdict"], 0) + 1
    rows_text = ", ".join(f"{n} {v}" for v, n in verdict_counts.items()) or "no rows"
    tests_text = ", ".join(f"{k} {v}" for k, v in document["summary"].items())
    lines.append(f"- result: **{overall}** (rows: {rows_text}; tests: {tests_text})")
    if any(c["graphs"] != "real" for c in document["cases"]):
        lines += [
            "",
            "> Rows marked host-emulated ran on CPU with emulated graphs: they certify interface and ordering,",
            "> not GPU memory behaviour. Run `fd-conformance run` on a CUDA host for real graphs.",
        ]
    footer = ["", "Details: every result with its findings, messages and fixes is in `conformance.json` (`results`)."]

    checks = list(dict.fromkeys(k for c in document["cases"] for k in c["checks"]))
    columns = ["case", "device", "graphs", *checks, "verdict"]
    table_head = ["", "## Summary", ""]
    if document["cases"]:
        table_head += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    else:
        table_head.append("No rows: no model case was selected, so nothing was checked.")
    table = []
    for c in document["cases"]:
        cells = [c["checks"].get(k, {}).get("cell", "-") for k in checks]
        mark = "mutant " if c["mutant"] else ""
        table.append(
            _line(f"| {mark}`{c['name']}` | {c['device']} | {c['graphs']} | " + " | ".join(cells) + f" | **{c['verdict']}** |")
        )

    by_code: dict[str, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for r in document["results"]:
        for f in r["findings"]:
            by_code.setdefault(f["code"], []).append((r, f))
    findings_items: list[str] = []
    for code in sorted(by_code):
        hits = by_code[code]
        first = hits[0][1]
        rows = list(dict.fromkeys(f"`{r['case']}` [{r['device']}] {r['check']}" for r, _ in hits))
        shown = ", ".join(rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
        # The message may be long (a traceback); the fix is what the reader acts on, so it is never cut.
        message = _shorten(first["message"], MESSAGE_LIMIT)
        findings_items.append(f"- **{code}** ({first['severity']}, {len(hits)}x): {message} (fix: {first['hint']})")
        findings_items.append(_line(f"  - in {shown}"))

    # One line per distinct reason: a factory that raises fails every check of its row alike.
    reasons = _grouped_reasons(r for r in document["results"] if r["outcome"] == FAILED and not r["codes"])
    skips = _grouped_reasons(r for r in document["results"] if r["outcome"] == SKIPPED)
    not_run = [_line(f"- `{nodeid}`") for nodeid in run["not_run"]]
    deselected = [_line(f"- `{nodeid}`") for nodeid in run.get("deselected", [])]
    missed = [
        _line(
            f"- `{c['name']}` [{c['device']}]: expected {', '.join(c['expected_findings'])}; "
            f"observed {', '.join(c['observed_findings']) or 'none'} -> {c['verdict']}"
        )
        for c in document["cases"]
        if c["mutant"] and c["verdict"] != CAUGHT
    ]
    caught = sum(1 for c in document["cases"] if c["mutant"] and c["verdict"] == CAUGHT)
    mutants_head = (
        ["", "## Mutants", "", f"{caught} caught exactly; not caught:"] if any(c["mutant"] for c in document["cases"]) else []
    )
    sections = [
        (table_head, table, "| ... {n} more rows: see conformance.json |"),
        (["", "## Findings by code", ""] if findings_items else [], findings_items, "- ... {n} more lines: see conformance.json"),
        (["", "## Failures without a finding code", ""] if reasons else [], reasons, "- ... {n} more: see conformance.json"),
        (["", "## Skipped, and why", ""] if skips else [], skips, "- ... {n} more: see conformance.json"),
        (["", "## Not run", ""] if not_run else [], not_run, "- ... {n} more: see conformance.json (run.not_run)"),
        (
            ["", "## Deselected", "", "Checks these rows owe that the selection (-k, -m) left out; each such row is incomplete:"]
            if deselected
            else [],
            deselected,
            "- ... {n} more: see conformance.json (run.deselected)",
        ),
        (mutants_head if mutants_head else [], missed if mutants_head else [], "- ... {n} more: see conformance.json"),
    ]
    fixed = sum(len(text) + 1 for text in lines + footer)
    body = _fit(sections, CERTIFICATE_LIMIT - fixed - 1)
    text = "\n".join(lines + body + footer) + "\n"
    assert len(text) <= CERTIFICATE_LIMIT, len(text)  # _fit's budget arithmetic is the guarantee
    return text


def _grouped_reasons(results: Iterable[Mapping[str, Any]]) -> list[str]:
    """One certificate line per distinct reason, naming the checks it hit (a factory that raises
    fails a whole row alike; "no draft model" skips several columns)."""
    by_reason: dict[str, list[str]] = {}
    for r in results:
        reason = (r["message"] or "no reason given").removeprefix("Skipped: ")
        by_reason.setdefault(reason, []).append(f"`{r['case']}` [{r['device']}] {r['check']}")
    lines = []
    for reason, hits in by_reason.items():
        places = list(dict.fromkeys(hits))
        shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
        count = f" ({len(hits)}x)" if len(hits) > 1 else ""
        lines.append(_line(f"- {shown}{count}: {reason}"))
    return lines


def write_reports(
    out_dir: Path, results: Sequence[CheckResult], expect_mutants: bool = False, interrupted: str | None = None
) -> dict[str, Any]:
    """Write conformance.json and certificate.md into ``out_dir``; returns the document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = build_document(results, expect_mutants, interrupted)
    (out_dir / JSON_NAME).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out_dir / CERTIFICATE_NAME).write_text(format_certificate(document), encoding="utf-8")
    return document


# --- reading a results JSONL back (`fd-conformance report FILE`, and `run` after an interruption) ---


def results_of_file(parsed: ResultsFile) -> list[CheckResult]:
    """A results file's results with the plan folded in: expected codes for mutants, and a
    MISSING placeholder for every planned conformance check that has no result line."""
    return with_plan(results_from_records(parsed.results), parsed.planned.values())


def verdict_line(document: Mapping[str, Any]) -> str:
    """The last line of `run` and `report`: the overall verdict and its counts."""
    from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_NOTHING_CERTIFIED, EXIT_OK

    counts: dict[str, int] = {}
    for c in document["cases"]:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    rows = ", ".join(f"{n} {v}" for v, n in counts.items())
    tests = ", ".join(f"{n} {o}" for o, n in document["summary"].items() if n)
    run = document.get("run", {})
    code = document["exit_code"]
    if run.get("status") == "interrupted":
        head = f"INTERRUPTED ({run['reason']})"
    elif code == EXIT_INCOMPLETE:
        head = "INCOMPLETE"
    elif code == EXIT_NOTHING_CERTIFIED:
        head = "NOTHING CERTIFIED"
    else:
        head = "PASS" if code == EXIT_OK else "FAIL"
    missing = f"; {len(run['not_run'])} planned check(s) did not run" if run.get("not_run") else ""
    if run.get("deselected"):
        missing += f"; {len(run['deselected'])} owed check(s) deselected"
    return f"fd-conformance: {head} (rows: {rows or 'none'}; tests: {tests or 'none'}{missing})"


def not_run_summary(not_run: Sequence[str], shown: int = 10) -> str:
    """``N planned check(s) did not run: a, b, ... and K more`` for one terminal line."""
    names = ", ".join(not_run[:shown]) + (f" and {len(not_run) - shown} more" if len(not_run) > shown else "")
    return f"{len(not_run)} planned check(s) did not run: {names}"


def report_results_file(parsed: ResultsFile, out: Path | None = None, quiet: bool = False) -> int:
    """`fd-conformance report FILE`: the matrix and verdicts of a results JSONL; its exit code
    (0 certified, 1 anything not certified, 3 incomplete, 4 nothing ran). With ``out`` it also
    writes conformance.json and certificate.md there, as `run` would have."""
    import sys

    from fd_conformance.errors import EXIT_NOTHING_CERTIFIED

    results = results_of_file(parsed)
    interrupted = next((s["detail"] for s in parsed.sessions if s["status"] == "interrupted"), None)
    if parsed.torn and not interrupted:
        interrupted = "the results file ends in a torn line: its writer was killed"
    if out is not None:
        document = write_reports(out, results, parsed.expect_mutants, interrupted)
    else:
        document = build_document(results, parsed.expect_mutants, interrupted)
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
        print(f"fd-conformance: certified nothing: {nothing_ran_reason(results)}", file=sys.stderr)
    print(verdict_line(document))
    return int(document["exit_code"])
