"""The verdict cannot be talked into "certified": what each row owes, one answer through every route.

Each session is a real ``pytest --pyargs fd_conformance.suite`` or ``fd-conformance run`` subprocess on
Acme's models (tests/fixtures/outside_models: another team's names, caches and engine), so what is
asserted is what a CI job sees: the exit code, conformance.json and the certificate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance import report
from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE

OUTSIDE = Path(__file__).resolve().parent / "fixtures" / "outside_models"
ACME = OUTSIDE / "acme_lm.py"
ACME_HANG = OUTSIDE / "acme_hang.py"
ENV = {**os.environ, "FD_CONFORMANCE_GPU": "0", "PYTHONPATH": os.pathsep.join([str(OUTSIDE), os.environ.get("PYTHONPATH", "")])}


def suite(out: Path, spec: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    """One pytest session over the suites; its exit code, conformance.json and output."""
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        f"--fd-model={spec}", "--fd-cycles=3", f"--fd-report={out}", *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=out.parent, timeout=600)
    return proc.returncode, json.loads((out / "conformance.json").read_text()), proc.stdout + proc.stderr


def run_cli(out: Path, spec: str, *pytest_args: str) -> tuple[int, dict[str, Any], str]:
    cmd = [sys.executable, "-m", "fd_conformance.cli", "run", f"--model={spec}", f"--out={out}", "--device=cpu", "--cycles=3"]
    if pytest_args:
        cmd += ["--", *pytest_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=out.parent, timeout=600)
    path = out / "conformance.json"
    return proc.returncode, json.loads(path.read_text()) if path.exists() else {}, proc.stdout + proc.stderr


def row(document: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in document["cases"] if c["name"] == name)


@pytest.mark.parametrize("workers", [0, 2])
def test_deselecting_the_check_that_fails_leaves_the_row_incomplete(tmp_path: Path, workers: int) -> None:
    """Issue 24.1: the wrapper has no working clear; every lifecycle check skips deferring to the
    protocol check, so leaving that one out (-k "not protocol") once certified the row. Under xdist
    the controller never collects: the workers' plans must reach it."""
    xdist = ["-n", str(workers)] if workers else []
    rc, document, output = suite(tmp_path / "r", f"{ACME}:BAD", "-k", "shim-only and not protocol", *xdist)
    shim = row(document, "acme-lm-shim-only")
    assert shim["verdict"] == report.INCOMPLETE, output
    assert shim["checks"]["protocol"]["cell"] == "DESELECTED"
    assert document["run"]["deselected"] == ["test_protocol.py::test_protocol[acme-lm-shim-only-cpu]"]
    assert rc == document["exit_code"] == EXIT_INCOMPLETE, output
    assert "## Deselected" in (tmp_path / "r" / "certificate.md").read_text()


# One session read by three tests (each once ran its own: the same spec and selection, or a part
# of it): on one xdist worker, so that it runs once under `-n 2` too (tests/conftest.py).
ACME_MTP_SESSION = pytest.mark.xdist_group("test_verdict-acme_mtp_session")


@pytest.fixture(scope="module")
def acme_mtp_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str]:
    """Every Acme case given, -k picking the good one's row whole: exit code, document, output."""
    return suite(tmp_path_factory.mktemp("acme-mtp") / "r", f"{ACME}:CASES", "-k", "acme-lm-mtp")


@ACME_MTP_SESSION
def test_rows_deselected_whole_leave_the_selected_rows_certified(acme_mtp_session: tuple[int, dict[str, Any], str]) -> None:
    """No false incomplete: -k that picks whole rows (a case name) owes nothing for the others."""
    rc, document, output = acme_mtp_session
    assert [(c["name"], c["verdict"]) for c in document["cases"]] == [("acme-lm-mtp", report.CERTIFIED)], output
    assert document["run"]["deselected"] == [] and rc == EXIT_OK, output


def test_run_and_pytest_give_one_answer_for_a_partial_selection(tmp_path: Path) -> None:
    """Issue 24.1-2: `-x -k protocol` (run --help's example) on an engine whose draft clear sits under
    the main model's switch certified it; both routes must say incomplete, with one exit code."""
    spec = f"{ACME}:BAD"
    keyword = "spec-under-lm-switch and protocol"
    rc_run, via_run, out_run = run_cli(tmp_path / "run", spec, "-x", "-k", keyword)
    rc_pytest, via_pytest, out_pytest = suite(tmp_path / "pytest", spec, "-x", "-k", keyword, "--fd-device=cpu")
    assert row(via_run, "acme-engine-spec-under-lm-switch")["verdict"] == report.INCOMPLETE, out_run
    assert rc_run == rc_pytest == via_run["exit_code"] == via_pytest["exit_code"] == EXIT_INCOMPLETE, (out_run, out_pytest)
    assert report.verdicts_of(via_run)["rows"] == report.verdicts_of(via_pytest)["rows"]
    assert "owed check(s) deselected" in out_run


@pytest.mark.parametrize("device", ["all", pytest.param(None, marks=ACME_MTP_SESSION)])
def test_pytest_exit_status_is_the_reports(tmp_path: Path, device: str | None, request: pytest.FixtureRequest) -> None:
    """Issue 24.2: on a CPU host --fd-device=all adds a cuda row that cannot run; the certificate
    said FAIL while pytest exited 0. Whatever the rows, pytest's exit status is the report's; the
    default selects the rows this machine can run, as `run` does (the shared session: no device given)."""
    if device is None:
        rc, document, output = request.getfixturevalue("acme_mtp_session")
    else:
        rc, document, output = suite(tmp_path / "r", f"{ACME}:GOOD", "-k", "acme-lm-mtp", f"--fd-device={device}")
    assert rc == document["exit_code"], output
    if device is None:
        assert {c["device"] for c in document["cases"]} == {"cpu"} and rc == EXIT_OK, output


def test_hang_and_crash_mutants_are_caught_by_their_isolation_codes(tmp_path: Path) -> None:
    """Issue 24.6: the parent's synthetic hang/crash report carried no verdict, so a mutant built to
    hang (FDC501) or crash (FDC502) was "missed" although its code was reported exactly."""
    rc, document, output = suite(
        # 5 s: the one hang waits it out; a crash check ends in 0.3-0.4 s here (15x margin)
        tmp_path / "r",
        f"{ACME_HANG}:CASES",
        "--fd-include-mutants",
        "-k",
        "acme-clear",
        "--fd-timeout=5",
        "--fd-device=cpu",
    )
    verdicts = {c["name"]: (c["verdict"], c["observed_findings"]) for c in document["cases"]}
    assert verdicts == {
        "acme-clear-waits-forever": (report.CAUGHT, ["FDC501"]),
        "acme-clear-kills-process": (report.CAUGHT, ["FDC502"]),
    }, output
    assert rc == document["exit_code"] == EXIT_OK, output


def test_a_runtime_no_named_case_is_written_for_is_a_usage_error(tmp_path: Path) -> None:
    """Issue 24.14: --runtime paddle on a torch-only case printed 13 "[no-cases]" pseudo-rows."""
    cmd = [
        sys.executable,
        "-m",
        "fd_conformance.cli",
        "run",
        f"--model={ACME}:GOOD",
        "--runtime=paddle",
        f"--out={tmp_path / 'r'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == EXIT_USAGE and len(lines) == 1, proc.stdout + proc.stderr
    assert "'paddle' matches none of the 1 case(s) given: acme-lm-mtp (torch)" in lines[0]
    assert "fix: drop the runtime option or set it to torch" in lines[0]


@ACME_MTP_SESSION
def test_a_user_session_shows_no_assert_rewrite_warning(acme_mtp_session: tuple[int, dict[str, Any], str]) -> None:
    """Issue 24.15: the plugin's own modules drew three PytestAssertRewriteWarnings per session."""
    _, _, output = acme_mtp_session
    assert "PytestAssertRewriteWarning" not in output, output


# --- the certificate, from documents (no session needed) ----------------------------------------


def _result(
    case: str,
    check: str,
    outcome: str,
    message: str = "",
    findings: list[dict[str, Any]] | None = None,
    expected: tuple[str, ...] = (),
) -> Any:
    findings = findings or []
    return report.CheckResult(
        nodeid=f"test_{check}.py::test_{check}[{case}-cpu]",
        case=case,
        device="cpu",
        check=check,
        outcome=outcome,
        codes=[f["code"] for f in findings],
        findings=findings,
        message=message,
        expected=list(expected),
    )


def test_a_run_with_no_rows_writes_well_formed_markdown() -> None:
    """Issue 24.14: a 5-column header over 4 separators and "runtime: none ran on ()"."""
    text = report.format_certificate(report.build_document([]))
    assert "|" not in text and "()" not in text, text
    assert "- runtime: none (no check ran)" in text and "No rows" in text


def test_checks_that_ended_before_any_runtime_are_not_called_none() -> None:
    """Issue 51.12: an interrupted run whose only ended check skipped before starting a runtime read
    "runtime: none (no check ran)" after a check ran."""
    text = report.format_certificate(report.build_document([_result("m", "config", "skipped", "no postprocessor")]))
    assert "- runtime: none recorded (1 check(s) ended, none on a runtime)" in text, text


def test_the_same_failure_on_a_whole_row_is_one_line() -> None:
    """Issue 24.13: a factory that raises fails every check alike: one line with its count."""
    checks = ["protocol", "clear", "teardown_order", "weight_cycle", "capture_replay"]
    results = [_result("broken", c, report.FAILED, "error in setup: RuntimeError: no such layer") for c in checks]
    text = report.format_certificate(report.build_document(results))
    lines = [line for line in text.splitlines() if "no such layer" in line]
    assert len(lines) == 1 and "(5x)" in lines[0] and "and 2 more" in lines[0], text


def test_a_long_finding_keeps_its_whole_fix_and_skips_say_why() -> None:
    """Issue 24.15: findings were cut at 400 characters mid-fix; SKIP cells gave no reason."""
    hint = "call every wrapper's clear_graph_opt_backend() before releasing weights " + "and say why " * 20 + "END-OF-FIX"
    finding = {"code": "FDC201", "severity": "error", "message": "graph freed late " * 60, "hint": hint, "location": {}}
    results = [
        _result("long", "teardown_order", report.FAILED, findings=[finding]),
        _result("long", "clear", report.SKIPPED, "Skipped: long has no draft model"),
    ]
    text = report.format_certificate(report.build_document(results))
    assert "END-OF-FIX)" in text, text
    assert "- `long` [cpu] clear: long has no draft model" in text, text


def test_report_reads_the_results_file_of_a_run_directory(tmp_path: Path) -> None:
    """Issue 24.14: `report DIR` should read DIR/results.jsonl, and a fresh file is no "older kit"'s."""
    rc, document, output = run_cli(tmp_path / "r", f"{ACME}:GOOD", "-k", "acme-lm-mtp and protocol")
    proc = subprocess.run(
        [sys.executable, "-m", "fd_conformance.cli", "report", str(tmp_path / "r"), "-q"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    assert proc.returncode == rc, proc.stdout + proc.stderr + output
    assert "older kit" not in proc.stderr and proc.stdout.startswith("fd-conformance: "), proc.stdout + proc.stderr


def test_a_declared_draft_the_factory_does_not_build_fails_the_row(tmp_path: Path) -> None:
    """Issue 24.16: ModelCase.capabilities was read by nothing; a case declaring a draft whose
    factory returns none was certified with every draft check skipped."""
    rc, document, output = suite(tmp_path / "r", f"{OUTSIDE / 'acme_promises.py'}:CASES")
    promised = row(document, "acme-draft-promised-not-built")
    assert promised["verdict"] == report.VIOLATIONS and rc == 1, output
    assert "declares capability 'draft' but its factory returned no draft" in promised["checks"]["clear"]["reason"]


def test_report_rebuilt_from_the_results_file_judges_as_the_session_did(tmp_path: Path) -> None:
    """Issue 24 ("How"): codes reached the results file scraped from failure text, so an engine error
    that merely cites a code (a guard's message) became that finding in `report`, not in the session."""
    spec = f"{OUTSIDE / 'acme_raises.py'}:CASES"
    rc, session_document, output = run_cli(tmp_path / "r", spec)
    rebuilt = tmp_path / "rebuilt"
    proc = subprocess.run(
        [sys.executable, "-m", "fd_conformance.cli", "report", str(tmp_path / "r"), f"--out={rebuilt}", "-q"],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    )
    rebuilt_document = json.loads((rebuilt / "conformance.json").read_text())
    assert row(session_document, "acme-reload-raises")["observed_findings"] == [], output
    assert report.verdicts_of(rebuilt_document) == report.verdicts_of(session_document)
    assert proc.returncode == rc == 1, proc.stdout + proc.stderr + output
