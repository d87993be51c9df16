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
from typing import Any

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).parent / "schemas" / "conformance.schema.json"
JSON_NAME = "conformance.json"
CERTIFICATE_NAME = "certificate.md"
JUNIT_NAME = "junit.xml"

PASSED, FAILED, SKIPPED, XFAILED = "passed", "failed", "skipped", "xfailed"
OUTCOMES = (PASSED, FAILED, SKIPPED, XFAILED)

# Per-case verdicts. A mutant is "caught" when the suite reports exactly its expected codes.
CERTIFIED, VIOLATIONS, NOT_RUN, CAUGHT, MISSED = "certified", "violations", "not-run", "caught", "missed"
PASSING_VERDICTS = frozenset({CERTIFIED, NOT_RUN, CAUGHT})


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
        return "FAIL " + (",".join(codes) if codes else "error")
    if any(r.outcome == XFAILED for r in results):
        return "CAUGHT " + ",".join(codes)
    if any(r.outcome == PASSED for r in results):
        warned = sorted({c for r in results for c in r.warnings})
        return "PASS" + (f" (warn {','.join(warned)})" if warned else "")
    return "SKIP" if results else "-"


def case_verdict(results: Sequence[CheckResult], expect_mutants: bool) -> tuple[str, list[str]]:
    """(verdict, observed codes) for one case on one device; warnings count as observed, so a
    mutant built to draw a warning (FDC002) is caught by it."""
    observed = sorted({c for r in results if r.outcome in (FAILED, XFAILED) for c in r.codes} | {c for r in results for c in r.warnings})
    expected = sorted({c for r in results for c in r.expected})
    ran = any(r.outcome != SKIPPED for r in results)
    if not ran:
        # A mutant that ran nothing proved nothing: with expect_mutants it is MISSED (a check
        # lost its reach, e.g. a device row skipping it), unless its framework is absent here.
        if expect_mutants and expected and not all(_runtime_missing(r) for r in results):
            return MISSED, observed
        return NOT_RUN, observed
    if expect_mutants and expected:
        failed_unexplained = any(r.outcome == FAILED for r in results)
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
    checks = checks_of(results)
    header = ["case [device, graphs]", *checks, "verdict"]
    table = [header]
    for (case, device), row in _rows(results).items():
        verdict, _ = case_verdict(row, expect_mutants)
        cells = [cell([r for r in row if r.check == check]) for check in checks]
        table.append([f"{case} [{device}, {graphs_label(row)}]", *cells, verdict])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ["  ".join(text.ljust(widths[i]) for i, text in enumerate(line)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def exit_code(results: Sequence[CheckResult], expect_mutants: bool = False) -> int:
    """0 when every case passes (or every mutant is caught exactly), else 1."""
    for row in _rows(results).values():
        if case_verdict(row, expect_mutants)[0] not in PASSING_VERDICTS:
            return 1
    return 0


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


def build_document(results: Sequence[CheckResult], expect_mutants: bool = False) -> dict[str, Any]:
    """The conformance.json document (validated against schemas/conformance.schema.json)."""
    cases = []
    for (case, device), row in _rows(results).items():
        verdict, observed = case_verdict(row, expect_mutants)
        checks = {}
        for check in checks_of(row):
            chosen = [r for r in row if r.check == check]
            checks[check] = {
                "cell": cell(chosen),
                "codes": sorted({c for r in chosen for c in r.codes}),
                "outcomes": sorted({r.outcome for r in chosen}),
            }
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
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "environment": environment(results),
        "expect_mutants": expect_mutants,
        "exit_code": exit_code(results, expect_mutants),
        "summary": {o: sum(1 for r in results if r.outcome == o) for o in OUTCOMES},
        "cases": cases,
        "results": [r.to_dict() for r in results],
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
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


# --- certificate.md ------------------------------------------------------------------------


def format_certificate(document: Mapping[str, Any]) -> str:
    """A markdown certificate for a PR comment: environment, matrix, per-case verdicts, findings."""
    env = document["environment"]
    lines = ["# fd-conformance certificate", ""]
    lines.append(f"- kit: fd-conformance {env['kit_version']} (Python {env['python']}, {env['platform']})")
    for rt in env["runtimes"] or [{"name": "none ran", "version": "", "device": "", "device_name": "", "graphs": "n/a"}]:
        lines.append(f"- runtime: {rt['name']} {rt['version']} on {rt['device']} ({rt['device_name']}), graphs: {rt['graphs']}")
    lines.append(f"- generated: {document['generated_at']}")
    overall = "PASS" if document["exit_code"] == 0 else "FAIL"
    lines.append(f"- result: **{overall}** ({', '.join(f'{k} {v}' for k, v in document['summary'].items())})")
    if any(c["graphs"] != "real" for c in document["cases"]):
        lines += [
            "",
            "> Rows marked host-emulated ran on CPU with emulated graphs: they certify interface and ordering,",
            "> not GPU memory behaviour. Run `fd-conformance run` on a CUDA host for real graphs.",
        ]
    checks = list(dict.fromkeys(k for c in document["cases"] for k in c["checks"]))
    lines += ["", "| case | device | graphs | " + " | ".join(checks) + " | verdict |"]
    lines.append("|" + "---|" * (len(checks) + 4))
    for c in document["cases"]:
        cells = [c["checks"].get(k, {}).get("cell", "-") for k in checks]
        mark = "mutant " if c["mutant"] else ""
        lines.append(f"| {mark}`{c['name']}` | {c['device']} | {c['graphs']} | " + " | ".join(cells) + f" | **{c['verdict']}** |")
    details = [r for r in document["results"] if r["findings"]]
    if details:
        lines += ["", "## Findings", ""]
        for r in details:
            for f in r["findings"]:
                lines.append(f"- `{r['case']}` [{r['device']}] {r['check']}: **{f['code']}** {f['message']} (fix: {f['hint']})")
    mutants = [c for c in document["cases"] if c["mutant"]]
    if mutants:
        lines += ["", "## Mutants", ""]
        for c in mutants:
            lines.append(
                f"- `{c['name']}` [{c['device']}]: expected {', '.join(c['expected_findings'])}; "
                f"observed {', '.join(c['observed_findings']) or 'none'} -> {c['verdict']}"
            )
    return "\n".join(lines) + "\n"


def write_reports(out_dir: Path, results: Sequence[CheckResult], expect_mutants: bool = False) -> dict[str, Any]:
    """Write conformance.json and certificate.md into ``out_dir``; returns the document."""
    out_dir.mkdir(parents=True, exist_ok=True)
    document = build_document(results, expect_mutants)
    (out_dir / JSON_NAME).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    (out_dir / CERTIFICATE_NAME).write_text(format_certificate(document), encoding="utf-8")
    return document
