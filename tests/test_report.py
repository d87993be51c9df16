"""report.py: matrix cells, per-case verdicts (mutants caught exactly or missed), conformance.json
against its schema, the certificate, and matrices rebuilt from isolation's JSONL records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fd_conformance import report
from fd_conformance.matrix_keys.check_record import CheckRecord
from fd_conformance.report import CheckResult

FINDING = {
    "code": "FDC201",
    "severity": "error",
    "message": "graph 'draft:2' alive",
    "hint": "clear first",
    "location": {"obj": "x"},
}


def result(
    case: str, check: str, outcome: str, codes: tuple[str, ...] = (), expected: tuple[str, ...] = (), **kw: object
) -> CheckResult:
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
MUTANT_CAUGHT = [
    result("m1", "protocol", "passed", expected=("FDC201",)),
    result("m1", "teardown_order", "xfailed", ("FDC201",), ("FDC201",)),
]
MUTANT_MISSED = [
    result("m2", "protocol", "passed", expected=("FDC302",)),
    result("m2", "teardown_order", "passed", expected=("FDC302",)),
]


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
        {
            "name": "torch",
            "version": "2.13.0+cpu",
            "device": "cpu",
            "device_name": "cpu (host-emulated graphs)",
            "graphs": "host-emulated",
        }
    ]
    cert = (tmp_path / report.CERTIFICATE_NAME).read_text()
    assert "**FAIL**" in cert and "host-emulated" in cert and "torch 2.13.0+cpu" in cert
    assert "| mutant `m1` | cpu | host-emulated |" in cert
    # Findings grouped by code: the first message and fix, then the rows it hit.
    assert "- **FDC201** (error, 2x): graph 'draft:2' alive (fix: clear first)" in cert
    assert "  - in `bad` [cpu] teardown_order, `m1` [cpu] teardown_order" in cert
    assert "1 caught exactly, every one." in cert and "conformance.json" in cert


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
        {
            "schema": 1,
            "nodeid": "suite/test_clear.py::test_clear[m-cpu]",
            "case": "m",
            "check": "clear",
            "outcome": "passed",
            "findings": [],
            "duration": 0.1,
            "details": "",
            "worker_pid": 1,
            "started": 0.0,
            "finished": 0.1,
        },
        {
            "schema": 1,
            "nodeid": "suite/test_teardown_order.py::test_teardown_order[m-cuda-mainOn-draftOn]",
            "case": "m",
            "check": "teardown_order",
            "outcome": "hang",
            "findings": ["FDC501"],
            "duration": 30.0,
            "details": "FDC501 hung in destroy_process_group",
            "worker_pid": 2,
            "started": 0.0,
            "finished": 30.0,
            "cause": "watchdog",
        },
        {
            "schema": 1,
            "nodeid": "tests/test_other.py::test_x",
            "case": "",
            "check": "",
            "outcome": "crash",
            "findings": ["FDC502"],
            "duration": 1.0,
            "details": "SIGSEGV",
            "worker_pid": 3,
            "started": 0.0,
            "finished": 1.0,
        },
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
    results = report.results_from_lines([dict(base, outcome="failed"), dict(base, outcome="passed")])
    assert [r.outcome for r in results] == ["passed"]


def test_unknown_outcome_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown outcome 'weird'"):
        CheckResult.from_dict({"nodeid": "n", "case": "c", "device": "cpu", "check": "x", "outcome": "weird"})
    with pytest.raises(ValueError, match="unknown outcome 'xfailed'"):  # a line logs a caught mutant as a skip
        CheckRecord.from_line({"nodeid": "n", "outcome": "xfailed"})


def _from_line(line: dict[str, object]) -> CheckResult:
    return report.result_of(CheckRecord.from_line(line))


def _record(case: str, check: str, outcome: str, findings: list[str], details: str = "") -> dict[str, object]:
    return {"schema": 1, "nodeid": f"suite/test_{check}.py::test_{check}[{case}-cpu]", "case": case, "check": check,
            "outcome": outcome, "findings": findings, "duration": 0.1, "details": details, "worker_pid": 1,
            "started": 0.0, "finished": 0.1}  # fmt: skip


def test_isolation_records_keep_warnings_as_warnings_and_caught_mutants_as_caught() -> None:
    """Isolation logs bare codes and a caught mutant (the plugin's wasxfail skip) as "skipped":
    the registry decides severity, and a skip carrying error codes is the caught xfail."""
    warned = _from_line(_record("legacy", "protocol", "passed", ["FDC002"]))
    assert (warned.codes, warned.warnings) == ([], ["FDC002"])
    assert report.cell([warned]) == "PASS (warn FDC002)"
    caught = _from_line(
        _record("m", "teardown_order", "skipped", ["FDC201", "FDC002"], "teardown_order: 1 contract violation(s)")
    )
    assert (caught.outcome, caught.codes, caught.warnings) == ("xfailed", ["FDC201"], ["FDC002"])
    assert report.cell([caught]) == "CAUGHT FDC201"
    plain_skip = _from_line(_record("g", "config", "skipped", [], "no config_postprocessor"))
    assert plain_skip.outcome == "skipped"
    unknown = _from_line(_record("g", "clear", "failed", ["FDC999"]))
    assert unknown.codes == ["FDC999"]  # an unregistered code never passes silently as a warning


def test_mutant_that_ran_nothing_is_missed_unless_unavailable_here() -> None:
    """A mutant whose every check skipped proved nothing (e.g. C6 skipped on a GPU host's only row)."""
    skipped = [
        result(
            "cfg",
            "config",
            "skipped",
            expected=("FDC401",),
            message="config rules are device-independent: checked once, on the cpu row",
        )
    ]
    assert report.case_verdict(skipped, True)[0] == report.MISSED
    assert report.exit_code(skipped, True) == 1
    assert report.case_verdict(skipped, False)[0] == report.NOT_RUN  # without --include-mutants: nothing expected
    for reason in ("runtime 'paddle' is not installed here", "no GPU: no /dev/nvidiaN device on this machine"):
        absent = [result("cfg", "config", "skipped", expected=("FDC401",), message=reason)]
        assert report.case_verdict(absent, True)[0] == report.NOT_RUN
    good_skipped = [result("g", "config", "skipped", message="anything")]
    assert report.case_verdict(good_skipped, True)[0] == report.NOT_RUN


# --- issue 11: honest verdicts, results files read back, the certificate's size bound --------------

from fd_conformance.isolation.results import (  # noqa: E402 - grouped with the tests that use them
    ResultLog,
    load_results_file,
    plan_record,
    session_record,
)


def _planned(case: str, check: str, expected: tuple[str, ...] = ()) -> dict[str, object]:
    return {
        "nodeid": f"suite/test_{check}.py::test_{check}[{case}-cpu]",
        "case": case,
        "device": "cpu",
        "check": check,
        "expected": list(expected),
    }


def _write_run(path: Path, planned: list[dict[str, object]], records: list[dict[str, object]], *, expect_mutants: bool = False,
               session: tuple[str, str] | None = ("finished", "pytest exited 0")) -> Path:  # fmt: skip
    log = ResultLog(path)
    log.append(plan_record(planned, expect_mutants))  # type: ignore[arg-type]
    for record in records:
        log.append(record)  # type: ignore[arg-type]
    if session is not None:
        log.append(session_record(*session))
    log.close()
    return path


def _report(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from fd_conformance.cli import main

    code = main(["report", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_row_is_certified_only_when_every_planned_check_has_a_result() -> None:
    ran = [result("good", "protocol", "passed")]
    missing = report.missing_results([_planned("good", "protocol"), _planned("good", "clear")], ran)
    assert [m.check for m in missing] == ["clear"]
    assert report.case_verdict(ran + missing, False)[0] == report.INCOMPLETE
    assert report.cell(missing) == "NOT RUN"
    assert report.exit_code(ran + missing) == 3
    document = report.build_document(ran + missing, interrupted="SIGTERM")
    owed = [
        {"nodeid": missing[0].nodeid, "case": "good", "device": "cpu", "check": "clear", "outcome": "missing", "expected": []}
    ]
    assert document["run"] == {
        "status": "interrupted",
        "reason": "SIGTERM",
        "not_run": [missing[0].nodeid],
        "deselected": [],
        "owed": owed,
    }
    assert [r["nodeid"] for r in document["results"]] == [ran[0].nodeid]  # a placeholder is never a result
    assert document["exit_code"] == 3


def test_not_run_rows_are_not_certified_and_nothing_ran_is_exit_4() -> None:
    skipped = [result("g", "clear", "skipped", message="no GPU: no /dev/nvidiaN device on this machine")]
    assert report.case_verdict(skipped, False)[0] == report.NOT_RUN
    assert report.exit_code(skipped) == 4
    assert "no GPU" in report.nothing_ran_reason(skipped)
    # A row that ran nothing next to a certified one is not certified: exit 1, not 0.
    assert report.exit_code(GOOD + [result("other", "clear", "skipped", message="no GPU")]) == 1
    assert report.exit_code([]) == 0  # an empty selection certifies nothing on purpose


def test_failing_cell_without_a_code_says_its_reason() -> None:
    failed = result("f", "clear", "failed", message="error in setup: f: the case factory raised ValueError: no weights here")
    assert report.cell([failed]) == "FAIL error in setup: the case factory rais..."  # the case name is the row already
    document = report.build_document([failed])
    assert document["cases"][0]["checks"]["clear"]["reason"].endswith("ValueError: no weights here")
    assert "ValueError: no weights here" in report.format_certificate(document)


def test_report_of_a_finished_file_matches_the_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Mutants read back from a JSONL are judged as mutants (expected codes from the plan line)."""
    planned = [_planned("good", "protocol"), _planned("m1", "teardown_order", ("FDC201",)), _planned("m2", "clear", ("FDC302",))]
    records = [
        _record("good", "protocol", "passed", []),
        _record("m1", "teardown_order", "skipped", ["FDC201"], "caught"),  # the plugin's caught-mutant skip
        _record("m2", "clear", "passed", []),
    ]
    path = _write_run(tmp_path / "results.jsonl", planned, records, expect_mutants=True)
    code, out, _ = _report(capsys, str(path), "--out", str(tmp_path / "rebuilt"))
    assert code == 1, out
    document = json.loads((tmp_path / "rebuilt" / report.JSON_NAME).read_text())
    assert {c["name"]: c["verdict"] for c in document["cases"]} == {"good": "certified", "m1": "caught", "m2": "missed"}
    assert "fd-conformance: FAIL" in out and "missed" in out


def test_report_of_an_interrupted_file_is_incomplete_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    planned = [_planned("good", "protocol"), _planned("good", "clear")]
    path = _write_run(
        tmp_path / "results.jsonl", planned, [_record("good", "protocol", "passed", [])], session=("interrupted", "SIGTERM")
    )
    code, out, _ = _report(capsys, str(path))
    assert code == 3
    assert "NOT RUN" in out and "incomplete" in out and "fd-conformance: INTERRUPTED (SIGTERM)" in out
    assert "suite/test_clear.py::test_clear[good-cpu]" in out  # what did not run is named


def test_report_of_a_sigkilled_file_is_incomplete(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No session line (the writer was SIGKILLed) and a torn last line: rows incomplete, exit 3."""
    planned = [_planned("good", "protocol"), _planned("good", "clear")]
    path = _write_run(tmp_path / "results.jsonl", planned, [_record("good", "protocol", "passed", [])], session=None)
    with path.open("a") as handle:
        handle.write('{"nodeid": "suite/test_clear.py::test_clear[good-cpu]", "outc')
    assert load_results_file(path).torn
    code, out, _ = _report(capsys, str(path))
    assert code == 3 and "incomplete" in out and "certified" not in out.splitlines()[2]
    # `run` appends its session line after the torn one: the file still reads back.
    log = ResultLog(path)
    log.append(session_record("interrupted", "SIGTERM"))
    log.close()
    parsed = load_results_file(path)
    assert parsed.torn and parsed.interruption == "interrupted (SIGTERM)"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty"),
        ('<?xml version="1.0" encoding="utf-8"?>\n<testsuites></testsuites>\n', "is not a results file: it is XML (JUnit?)"),
        ('{\n  "schema_version": 1,\n  "cases": []\n}\n', "is not a results file: it is a conformance.json document"),
        ('{"kind": "plan", "tests": [{"nodeid": "a", "ca', "is truncated: it ends mid-line before any complete record"),
        ('{"nodeid": "a", "outcome": "passed"}\nnot json\n{"nodeid": "b", "outcome": "passed"}\n', "line 2 is not JSON"),
    ],
)
def test_unreadable_results_file_is_one_line_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(content)
    code, out, err = _report(capsys, str(path))
    assert code == 3 and out == ""
    (line,) = err.strip().splitlines()
    assert str(path) in line and message in line
    assert "pass the results.jsonl that `fd-conformance run` writes into --out" in line.partition("; fix: ")[2]


def test_missing_results_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _report(capsys, str(tmp_path / "nope.jsonl"))
    assert code == 2 and "does not exist" in err


def test_certificate_of_200_cases_with_many_findings_stays_under_the_limit() -> None:
    """200 cases x 2 devices x 6 checks, every check failing with 3 findings of long messages,
    200 missed mutants, 100 failures without a code, 50 checks not run: the bound holds, the
    summary and grouped findings are there, and the certificate points at conformance.json."""
    long = "graph 'main:4' (owner main, captured at event #0) is still alive after clear_graph_opt_backend() " * 3
    results: list[CheckResult] = []
    codes = ("FDC201", "FDC203", "FDC302")
    for index in range(200):
        for device in ("cpu", "cuda"):
            for check in ("protocol", "capture_replay", "clear", "teardown_order", "weight_cycle", "config"):
                res = result(f"case-{index:03d}", check, "failed", codes, expected=("FDC305",) if index % 2 else ())
                res.device, res.nodeid = device, res.nodeid.replace("-cpu]", f"-{device}]")
                res.findings = [dict(FINDING, code=c, message=long) for c in codes]
                results.append(res)
    for index in range(100):
        results.append(result(f"raiser-{index:03d}", "clear", "failed", message="error in setup: ValueError: " + "x" * 500))
    planned = [_planned(f"late-{i}", "clear") for i in range(50)]
    results += report.missing_results(planned, results)
    document = report.build_document(results, expect_mutants=True, interrupted="SIGTERM")
    text = report.format_certificate(document)
    assert len(text) <= report.CERTIFICATE_LIMIT == 60_000
    assert "**INTERRUPTED** (SIGTERM)" in text and "## Summary" in text and "## Findings by code" in text
    assert all(f"**{code}**" in text for code in codes)  # every code is grouped, none dropped
    assert "more rows: see conformance.json" in text  # the table was cut, and says where the rest is
    assert text.rstrip().endswith("is in `conformance.json` (`results`).")
    small = report.format_certificate(report.build_document(GOOD + BAD))
    assert "see conformance.json" not in small.replace("is in `conformance.json`", "")  # nothing cut when it fits


def test_report_out_refuses_files_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36 a: `report FILE --out DIR` with the user's own certificate.md and conformance.json in
    DIR refuses as `run --out` does (one line, exit 2; both files kept, nothing added, no lock file);
    its own earlier output is rewritten, and it leaves nothing but the two reports."""
    path = _write_run(tmp_path / "results.jsonl", [_planned("good", "protocol")], [_record("good", "protocol", "passed", [])])
    mine = tmp_path / "mine"
    mine.mkdir()
    own = {"certificate.md": "# Release notes\nsigned\n", "conformance.json": '{"mine": 1}\n'}
    for name, text in own.items():
        (mine / name).write_text(text)
    code, out, err = _report(capsys, str(path), "--out", str(mine))
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert f"--out '{mine}' holds certificate.md, conformance.json, which fd-conformance did not write" in line
    assert "; fix: pass another --out" in line
    assert {p.name: p.read_text() for p in mine.iterdir()} == own
    fresh = tmp_path / "new" / "deeper"
    for _ in range(2):
        assert _report(capsys, str(path), "--out", str(fresh))[0] == 0
        assert sorted(p.name for p in fresh.iterdir()) == ["certificate.md", "conformance.json"]


def test_report_of_an_all_deselected_file_certifies_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36 b: a session whose every check -k deselected has no rows; its file says exit 4 (was
    PASS, exit 0), and so do the conformance.json and certificate.md written from it."""
    planned = [dict(_planned("good", "protocol"), deselected=True), dict(_planned("good", "clear"), deselected=True)]
    path = _write_run(tmp_path / "results.jsonl", planned, [])
    code, out, err = _report(capsys, str(path), "--out", str(tmp_path / "rebuilt"))
    assert code == 4 and "fd-conformance: NOTHING CERTIFIED" in out
    assert "all 2 conformance checks were deselected (-k/-m)" in err
    document = json.loads((tmp_path / "rebuilt" / report.JSON_NAME).read_text())
    assert document["exit_code"] == 4 and document["run"]["reason"] == "all 2 conformance checks were deselected (-k/-m)"
    assert "**NOTHING CERTIFIED**" in (tmp_path / "rebuilt" / report.CERTIFICATE_NAME).read_text()
    allowed = report.build_document([], nothing_certified="why", allow_empty=True)
    assert allowed["exit_code"] == 0 and "(allowed by --allow-empty)" in report.format_certificate(allowed)
    ran = report.build_document(GOOD, nothing_certified="ignored: a check ran")
    assert ran["exit_code"] == 0


def test_the_mutants_section_says_when_every_mutant_was_caught() -> None:
    caught = report.format_certificate(report.build_document(GOOD + MUTANT_CAUGHT, expect_mutants=True))
    assert "1 caught exactly, every one." in caught and "not caught:" not in caught
    missed = report.format_certificate(report.build_document(GOOD + MUTANT_MISSED, expect_mutants=True))
    assert "0 caught exactly; not caught:" in missed
