"""report.py: matrix cells, per-case verdicts (mutants caught exactly or missed), conformance.json
against its schema, the certificate, and matrices rebuilt from isolation's JSONL records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fd_conformance import report
from fd_conformance.report import CheckResult

FINDING = {"code": "FDC201", "severity": "error", "message": "graph 'draft:2' alive", "hint": "clear first", "location": {"obj": "x"}}


def result(case: str, check: str, outcome: str, codes: tuple[str, ...] = (), expected: tuple[str, ...] = (), **kw: object) -> CheckResult:
    return CheckResult(
        nodeid=f"suite/test_{check}.py::test_{check}[{case}-cpu]",
        case=case,
        device="cpu",
        check=check,
        outcome=outcome,
        codes=list(codes),
        findings=[dict(FINDING, code=c) for c in codes],
        expected=list(expected),
        runtime="torch",
        runtime_version="2.13.0+cpu",
        device_name="cpu (host-emulated graphs)",
        graphs_real=False,
        **kw,  # type: ignore[arg-type]
    )


def variant(res: CheckResult, suffix: str) -> CheckResult:
    """Another parametrized variant of the same check (its own test id)."""
    res.nodeid = res.nodeid[:-1] + f"-{suffix}]"
    return res


GOOD = [
    result("good", "protocol", "passed"),
    result("good", "teardown_order", "passed"),
    variant(result("good", "teardown_order", "skipped"), "mainOff-draftOn"),
]
BAD = [result("bad", "protocol", "passed"), result("bad", "teardown_order", "failed", ("FDC201", "FDC202"))]
MUTANT_CAUGHT = [result("m1", "protocol", "passed", expected=("FDC201",)), result("m1", "teardown_order", "xfailed", ("FDC201",), ("FDC201",))]
MUTANT_MISSED = [result("m2", "protocol", "passed", expected=("FDC302",)), result("m2", "teardown_order", "passed", expected=("FDC302",))]


def test_cells_merge_parametrized_variants() -> None:
    assert report.cell(GOOD[1:]) == "PASS"
    assert report.cell([GOOD[2]]) == "SKIP"
    assert report.cell([BAD[1], GOOD[1]]) == "FAIL FDC201,FDC202"
    assert report.cell([result("x", "c", "failed")]) == "FAIL error"  # a crash without findings
    assert report.cell(MUTANT_CAUGHT[1:]) == "CAUGHT FDC201"
    assert report.cell([result("w", "protocol", "passed", warnings=["FDC002"])]) == "PASS (warn FDC002)"


@pytest.mark.parametrize(
    ("rows", "expect_mutants", "verdict"),
    [
        (GOOD, False, "certified"),
        (BAD, False, "violations"),
        (MUTANT_CAUGHT, True, "caught"),
        (MUTANT_MISSED, True, "missed"),
        (MUTANT_CAUGHT, False, "certified"),  # an xfail is not a failure outside mutant mode
        ([GOOD[2]], False, "not-run"),
        # a mutant reporting a code it does not expect is missed even when the expected one shows
        ([*MUTANT_CAUGHT, result("m1", "clear", "failed", ("FDC302",), ("FDC201",))], True, "missed"),
    ],
)
def test_case_verdicts(rows: list[CheckResult], expect_mutants: bool, verdict: str) -> None:
    assert report.case_verdict(rows, expect_mutants)[0] == verdict


def test_warning_only_mutant_is_caught_by_its_warning() -> None:
    rows = [result("w", "protocol", "passed", expected=("FDC002",), warnings=["FDC002"])]
    assert report.case_verdict(rows, True) == ("caught", ["FDC002"])


def test_exit_code() -> None:
    assert report.exit_code(GOOD) == 0
    assert report.exit_code(GOOD + BAD) == 1
    assert report.exit_code(GOOD + MUTANT_CAUGHT, expect_mutants=True) == 0
    assert report.exit_code(GOOD + MUTANT_MISSED, expect_mutants=True) == 1


def test_matrix_text() -> None:
    text = report.format_matrix(GOOD + BAD)
    lines = text.splitlines()
    assert lines[0].split() == ["case", "[device,", "graphs]", "protocol", "teardown_order", "verdict"]
    assert lines[2].split()[-3:] == ["PASS", "PASS", "certified"]
    assert "FAIL FDC201,FDC202" in lines[3] and lines[3].endswith("violations")
    assert "good [cpu, host-emulated]" in lines[2]


def test_document_validates_against_schema_and_certificate(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")  # a dev extra the GPU host may lack
    document = report.write_reports(tmp_path, GOOD + BAD + MUTANT_CAUGHT, expect_mutants=True)
    on_disk = json.loads((tmp_path / report.JSON_NAME).read_text())
    jsonschema.validate(on_disk, report.load_schema())
    assert on_disk == json.loads(json.dumps(document))
    assert on_disk["exit_code"] == 1 and on_disk["summary"] == {"passed": 4, "failed": 1, "skipped": 1, "xfailed": 1}
    assert on_disk["environment"]["runtimes"] == [
        {"name": "torch", "version": "2.13.0+cpu", "device": "cpu", "device_name": "cpu (host-emulated graphs)", "graphs": "host-emulated"}
    ]
    cert = (tmp_path / report.CERTIFICATE_NAME).read_text()
    assert "**FAIL**" in cert and "host-emulated" in cert and "torch 2.13.0+cpu" in cert
    assert "| mutant `m1` | cpu | host-emulated |" in cert
    assert "**FDC201** graph 'draft:2' alive (fix: clear first)" in cert
    assert "- `m1` [cpu]: expected FDC201; observed FDC201 -> caught" in cert


def test_schema_rejects_a_malformed_document(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    document = json.loads(json.dumps(report.build_document(GOOD)))
    document["cases"][0]["verdict"] = "fine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, report.load_schema())
    document = json.loads(json.dumps(report.build_document(GOOD)))
    document["results"][0]["codes"] = ["E123"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, report.load_schema())


def test_round_trip_through_results() -> None:
    document = json.loads(json.dumps(report.build_document(GOOD + BAD)))
    assert report.results_from_records(document["results"]) == GOOD + BAD


def test_isolation_records_rebuild_the_matrix(tmp_path: Path) -> None:
    """Isolation's JSONL (ResultRecord, schema 1): codes as strings, hang/crash outcomes."""
    records = [
        {"schema": 1, "nodeid": "suite/test_clear.py::test_clear[m-cpu]", "case": "m", "check": "clear", "outcome": "passed",
         "findings": [], "duration": 0.1, "details": "", "worker_pid": 1, "started": 0.0, "finished": 0.1},
        {"schema": 1, "nodeid": "suite/test_teardown_order.py::test_teardown_order[m-cuda-mainOn-draftOn]", "case": "m",
         "check": "teardown_order", "outcome": "hang", "findings": ["FDC501"], "duration": 30.0,
         "details": "FDC501 hung in destroy_process_group", "worker_pid": 2, "started": 0.0, "finished": 30.0, "cause": "watchdog"},
        {"schema": 1, "nodeid": "tests/test_other.py::test_x", "case": "", "check": "", "outcome": "crash",
         "findings": ["FDC502"], "duration": 1.0, "details": "SIGSEGV", "worker_pid": 3, "started": 0.0, "finished": 1.0},
    ]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    results = report.read_jsonl(path)
    by_id = {r.nodeid: r for r in results}
    hang = by_id[records[1]["nodeid"]]
    assert (hang.outcome, hang.codes, hang.device, hang.message) == ("failed", ["FDC501"], "cuda", "watchdog")
    other = by_id["tests/test_other.py::test_x"]
    assert (other.case, other.check, other.codes) == ("tests/test_other.py::test_x", "x", ["FDC502"])
    text = report.render_records(records)
    assert "FAIL FDC501" in text and "FAIL FDC502" in text and "m [cpu," in text


def test_last_record_of_a_test_wins() -> None:
    base = {"nodeid": "a::t[c-cpu]", "case": "c", "check": "t", "findings": [], "duration": 0.0, "details": ""}
    results = report.results_from_records([dict(base, outcome="failed"), dict(base, outcome="passed")])
    assert [r.outcome for r in results] == ["passed"]


def test_unknown_outcome_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown outcome 'weird'"):
        CheckResult.from_dict({"nodeid": "n", "case": "c", "device": "cpu", "check": "x", "outcome": "weird"})


def _record(case: str, check: str, outcome: str, findings: list[str], details: str = "") -> dict[str, object]:
    return {"schema": 1, "nodeid": f"suite/test_{check}.py::test_{check}[{case}-cpu]", "case": case, "check": check,
            "outcome": outcome, "findings": findings, "duration": 0.1, "details": details, "worker_pid": 1,
            "started": 0.0, "finished": 0.1}  # fmt: skip


def test_isolation_records_keep_warnings_as_warnings_and_caught_mutants_as_caught() -> None:
    """Isolation logs bare codes and a caught mutant (the plugin's wasxfail skip) as "skipped":
    the registry decides severity, and a skip carrying error codes is the caught xfail."""
    warned = CheckResult.from_dict(_record("legacy", "protocol", "passed", ["FDC002"]))
    assert (warned.codes, warned.warnings) == ([], ["FDC002"])
    assert report.cell([warned]) == "PASS (warn FDC002)"
    caught = CheckResult.from_dict(_record("m", "teardown_order", "skipped", ["FDC201", "FDC002"], "teardown_order: 1 contract violation(s)"))
    assert (caught.outcome, caught.codes, caught.warnings) == ("xfailed", ["FDC201"], ["FDC002"])
    assert report.cell([caught]) == "CAUGHT FDC201"
    plain_skip = CheckResult.from_dict(_record("g", "config", "skipped", [], "no config_postprocessor"))
    assert plain_skip.outcome == "skipped"
    unknown = CheckResult.from_dict(_record("g", "clear", "failed", ["FDC999"]))
    assert unknown.codes == ["FDC999"]  # an unregistered code never passes silently as a warning


def test_mutant_that_ran_nothing_is_missed_unless_unavailable_here() -> None:
    """A mutant whose every check skipped proved nothing (e.g. C6 skipped on a GPU host's only row)."""
    skipped = [result("cfg", "config", "skipped", expected=("FDC401",), message="config rules are device-independent: checked once, on the cpu row")]
    assert report.case_verdict(skipped, True)[0] == report.MISSED
    assert report.exit_code(skipped, True) == 1
    assert report.case_verdict(skipped, False)[0] == report.NOT_RUN  # without --include-mutants: nothing expected
    for reason in ("runtime 'paddle' is not installed here", "no GPU: no /dev/nvidiaN device on this machine"):
        absent = [result("cfg", "config", "skipped", expected=("FDC401",), message=reason)]
        assert report.case_verdict(absent, True)[0] == report.NOT_RUN
    good_skipped = [result("g", "config", "skipped", message="anything")]
    assert report.case_verdict(good_skipped, True)[0] == report.NOT_RUN
