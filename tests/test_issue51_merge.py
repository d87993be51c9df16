"""Issue 51, items 6-8: the shard-and-merge route gives the unsharded verdict, and refuses what it cannot.

Real pytest sessions (the kit's plugin, a project's own conformance checks over two cases that build
no model: a second each) unsharded and as shards 1/2 and 2/2, merged by ``fd-conformance merge``:

* 6: a check failing in call AND teardown is one result with both failures, in the live session's
  report, the one rebuilt from its results file, and the merged one (the phases fold in one place);
* 7: shards of other run settings (--fd-cycles), Python or framework versions, or runs are refused
  naming the difference; shards that agree merge, and the merged report names their environment;
* 8: a check owed without a result is placed by the plan's (case, device, check), so a case named
  ``my-cuda-model`` keeps its deselected check on its own row (it was put on a phantom cuda row).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_shard import comparable

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_SHARDS, EXIT_VIOLATIONS, UsageError
from fd_conformance.matrix_keys.check_record import CheckRecord, PhaseFold
from fd_conformance.plugin.shard import RUN_ID_ENV
from fd_conformance.report import CheckResult, build_document, result_of
from fd_conformance.report.document import owed_result

CASES = """
from fd_conformance.cases import ModelCase

def _factory(runtime):
    raise AssertionError("these checks build no model")

CASES = [
    ModelCase(name="alpha", runtime="torch", factory=_factory, capture_sizes=(1,)),
    ModelCase(name="my-cuda-model", runtime="torch", factory=_factory, capture_sizes=(1,)),
]
"""
CHECKS = """
import pytest

from fd_conformance.findings import make_finding

@pytest.fixture
def breaks_on_teardown(fd_case, fd_verdict):
    yield
    if fd_case.name == "alpha":
        fd_verdict.add(make_finding("FDC201", "teardown found a graph alive"))
        raise RuntimeError("teardown broke")

@pytest.mark.conformance("clear")
def test_clear_check(fd_case, fd_device, breaks_on_teardown):
    assert fd_case.name != "alpha", "call broke"

@pytest.mark.conformance("protocol")
def test_protocol_check(fd_case, fd_device):
    pass
"""
ALPHA_CLEAR = "test_checks.py::test_clear_check[alpha-cpu]"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "cases.py").write_text(CASES)
    (root / "test_checks.py").write_text(CHECKS)
    return root


@pytest.fixture(scope="module")
def base(project: Path) -> tuple[Path, list[Path]]:
    """The project certified unsharded and as shards 1/2 and 2/2, all under the default settings."""
    return session(project, "whole"), [session(project, f"shard-{k}", f"--fd-shard={k}/2") for k in (1, 2)]


def session(project: Path, out: str, *args: str, env: dict[str, str] | None = None) -> Path:
    """One pytest session over the project's checks, its report in ``project/out``."""
    clean = {k: v for k, v in os.environ.items() if k not in RUN_ID_ENV and k != "PYTEST_ADDOPTS"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_checks.py", "--fd-model=cases.py:CASES"]
    command += ["--fd-device=cpu", f"--fd-report={out}", f"--fd-results={out}/results.jsonl", *args]
    proc = subprocess.run(command, cwd=project, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1, 3), proc.stdout + proc.stderr
    return project / out


def merge(out: Path, *dirs: Path) -> int:
    return main(["merge", "-q", *map(str, dirs), "--out", str(out)])


def document(directory: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((directory / "conformance.json").read_text())
    return loaded


def edit_stamp(source: Path, target: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of a shard's report whose shard stamp ``change`` edits (another machine's, say)."""
    shutil.copytree(source, target)
    edited = document(target)
    change(edited["shard"])
    (target / "conformance.json").write_text(json.dumps(edited))
    return target


# --- item 6 ------------------------------------------------------------------------------------------
def test_a_check_failing_in_call_and_teardown_is_one_result_on_every_route(base: tuple[Path, list[Path]], tmp_path: Path) -> None:
    unsharded, shards = base
    assert merge(tmp_path / "merged", *shards) == EXIT_VIOLATIONS
    rebuilt = tmp_path / "rebuilt"
    assert main(["report", str(unsharded / "results.jsonl"), "--out", str(rebuilt), "-q"]) == EXIT_VIOLATIONS
    routes = {"live session": unsharded, "results file": rebuilt, "merge": tmp_path / "merged"}
    seen = {}
    for route, directory in routes.items():
        doc = document(directory)
        alpha = [r for r in doc["results"] if r["nodeid"] == ALPHA_CLEAR]
        assert len(alpha) == 1, (route, alpha)  # the live session had one per failing phase
        (result,) = alpha
        assert result["outcome"] == "failed" and result["codes"] == ["FDC201"], (route, result)
        assert "call broke" in result["message"] and "FDC201 teardown found a graph alive" in result["message"], route
        certificate = (directory / "certificate.md").read_text().splitlines()
        seen[route] = (comparable(doc), result["message"], [line for line in certificate if "generated:" not in line])
    assert seen["live session"] == seen["results file"] == seen["merge"]
    assert "| `alpha` | cpu | n/a | FAIL FDC201 | PASS | **violations** |" in seen["merge"][2]


def _report(when: str, outcome: str, longrepr: Any, props: list[tuple[str, object]]) -> pytest.TestReport:
    return pytest.TestReport(ALPHA_CLEAR, ("test_checks.py", 0, "t"), {}, outcome, longrepr, when, user_properties=props)  # type: ignore[arg-type]


def test_a_caught_mutant_whose_teardown_fails_is_a_failure_on_both_routes() -> None:
    """The call's caught mutant (a skip carrying wasxfail) must not hide the teardown's failure once the
    phases are one record: the results file read it as failed, the live session as caught."""
    keys = [("fd_case", "alpha"), ("fd_device", "cpu"), ("fd_check", "clear"), ("fd_expected", "FDC201")]
    finding = {"code": "FDC201", "severity": "error", "message": "caught"}
    findings = [*keys, ("fd_findings", json.dumps([finding]))]
    call = _report("call", "skipped", "FDC201 caught", findings)
    call.wasxfail = "mutant alpha caught: FDC201"
    fold = PhaseFold()
    assert fold.add(_report("setup", "passed", None, [])) is None and fold.add(call) is None
    record = fold.add(_report("teardown", "failed", "RuntimeError: teardown broke", findings))
    assert record is not None and not fold.partial
    live = result_of(record)
    from_file = result_of(CheckRecord.from_line(json.loads(json.dumps(record.line(finished=0.0, pid=1)))))
    assert live.outcome == from_file.outcome == "failed" and live.codes == from_file.codes == ["FDC201"]


# --- item 8 ------------------------------------------------------------------------------------------
def test_an_owed_check_stays_on_its_own_row_whatever_the_case_is_called(project: Path, tmp_path: Path) -> None:
    unsharded = document(session(project, "i8-whole", "-k", "not protocol"))
    shards = [session(project, f"i8-{k}", "-k", "not protocol", f"--fd-shard={k}/2") for k in (1, 2)]
    owed = document(shards[1])["run"]["owed"]
    assert owed == [
        {
            "nodeid": "test_checks.py::test_protocol_check[my-cuda-model-cpu]",
            "case": "my-cuda-model",
            "device": "cpu",
            "check": "protocol",
            "outcome": "deselected",
            "expected": [],
        }
    ]
    assert merge(tmp_path / "merged", *shards) == EXIT_INCOMPLETE  # a row owes a check, as the unsharded run
    merged = document(tmp_path / "merged")
    rows = {(c["name"], c["device"]): c for c in merged["cases"]}
    assert sorted(rows) == [("alpha", "cpu"), ("my-cuda-model", "cpu")]  # no phantom ("my-cuda-model-cpu", "cuda") row
    row = rows["my-cuda-model", "cpu"]
    assert row["verdict"] == "incomplete" and row["checks"]["protocol"]["cell"] == "DESELECTED"
    assert comparable(merged) == comparable(unsharded)


def test_owed_checks_round_trip_through_the_document() -> None:
    owed = CheckResult("t.py::test_clear[a-cuda-b-cpu]", "a-cuda-b", "cpu", "clear", "missing", expected=["FDC301"])
    done = CheckResult("t.py::test_protocol[a-cuda-b-cpu]", "a-cuda-b", "cpu", "protocol", "passed")
    doc = build_document([done, owed])
    assert doc["run"]["not_run"] == [owed.nodeid] and doc["exit_code"] == EXIT_INCOMPLETE
    assert [owed_result(entry) for entry in doc["run"]["owed"]] == [owed]
    with pytest.raises(ValueError, match="unknown outcome"):
        owed_result({**doc["run"]["owed"][0], "outcome": "passed"})


# --- item 7 ------------------------------------------------------------------------------------------
def test_shards_of_other_settings_environments_or_runs_are_refused(
    project: Path, base: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unsharded, (one, two) = base
    stamp = document(one)["shard"]
    assert stamp["settings"]["cycles"] == 5 and stamp["settings"]["timeout_s"] == 300.0
    assert stamp["run_id"] == document(two)["shard"]["run_id"]  # one local run: one id, from its settings
    other_cycles = session(project, "other-cycles", "--fd-shard=2/2", "--fd-cycles=3")
    other_run = session(project, "other-run", "--fd-shard=2/2", env={"GITHUB_RUN_ID": "4242"})
    torch_found = stamp["environment"]["frameworks"]["torch"]
    refusals = {
        f"different run settings (cycles): {one} (shard 1/2) has 5, {other_cycles} (shard 2/2) has 3": other_cycles,
        "different Python versions: ": edit_stamp(two, tmp_path / "py", lambda s: s["environment"].update(python="3.10.4")),
        f"different torch versions: {one} (shard 1/2) has {torch_found}, ": edit_stamp(
            two, tmp_path / "torch", lambda s: s["environment"]["frameworks"].update(torch="2.1.0")
        ),
        "different runs (run ids)": other_run,
        "written by an older fd-conformance": edit_stamp(two, tmp_path / "old", lambda s: s.pop("settings")),
    }
    for needle, shard in refusals.items():
        assert merge(tmp_path / "refused", one, shard) == EXIT_SHARDS, needle
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
        assert not (tmp_path / "refused").exists()
    assert document(other_run)["shard"]["run_id"] == "GITHUB_RUN_ID=4242"
    # Shards that agree merge to the unsharded verdict; the merged report names their Python, not this machine's.
    elsewhere = [
        edit_stamp(d, tmp_path / f"elsewhere-{i}", lambda s: s["environment"].update(python="3.99.1"))
        for i, d in enumerate((one, two))
    ]
    assert merge(tmp_path / "merged", *elsewhere) == EXIT_VIOLATIONS
    merged = document(tmp_path / "merged")
    assert merged["environment"]["python"] == "3.99.1" and "Python 3.99.1" in (tmp_path / "merged" / "certificate.md").read_text()
    assert comparable(merged) == comparable(document(unsharded))


def test_run_id_needs_a_shard_and_reaches_the_plugin() -> None:
    from fd_conformance.cli import build_parser
    from fd_conformance.cli.shard import shard_pytest_args, validate_shard_args

    args = build_parser().parse_args(["run", "--shard", "1/2", "--run-id", " nightly-7 "])
    validate_shard_args(args)
    assert "--fd-run-id=nightly-7" in shard_pytest_args(args)
    for given, problem in ((["--run-id", "x"], "no --shard was given"), (["--shard", "1/2", "--run-id", " "], "is empty")):
        with pytest.raises(UsageError, match=problem):
            validate_shard_args(build_parser().parse_args(["run", *given]))


def test_shards_that_certified_nothing_still_merge_as_shards(tmp_path: Path) -> None:
    """``run --shard K/N --device cuda`` on a host without a GPU: every check skips, ``run`` rewrites
    the report as "certified nothing", and that rewrite kept no shard stamp, so ``merge`` refused the
    shard as "not a shard's report" instead of judging the run (exit 4, certified nothing)."""
    from fd_conformance.devices import visible_gpu_count
    from fd_conformance.errors import EXIT_NOTHING_CERTIFIED

    if visible_gpu_count():
        pytest.skip("a GPU is visible: the cuda rows would run")
    acme = f"{Path(__file__).resolve().parent / 'fixtures' / 'outside_models' / 'acme_lm.py'}:GOOD"
    dirs = []
    for index in (1, 2):
        out = tmp_path / f"shard{index}"
        command = [sys.executable, "-m", "fd_conformance.cli", "run", "-q", "--model", acme, "--device", "cuda"]
        proc = subprocess.run([*command, "--shard", f"{index}/2", "--out", str(out)], capture_output=True, text=True, timeout=600)
        assert proc.returncode in (0, EXIT_NOTHING_CERTIFIED), proc.stdout + proc.stderr
        assert "shard" in document(out), f"shard {index}/2 lost its stamp"
        dirs.append(out)
    assert merge(tmp_path / "merged", *dirs) == EXIT_NOTHING_CERTIFIED
