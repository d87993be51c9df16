"""The shipped suites on CPU (host-emulated graphs), run the way users run them.

One real session (a subprocess: ``pytest --pyargs fd_conformance.suite --fd-include-mutants``)
runs every check over every bundled reference model and mutant (config mutants, ``cfg-mutant-*``,
run only the config check: the rest of them is the good GLM4 model again); the tests then read
its conformance.json: every good case is certified, every mutant reports
exactly its expected finding codes, and every suite/lifecycle/config code is tripped by some
mutant ("no check left that no mutant trips").
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import GPU_SESSION_WORKERS

from fd_conformance.findings import RULES
from fd_reference_models.cases import CONFIG_MUTANT_PREFIX

THIS_FILE = Path(__file__).resolve()
CYCLES = "3"  # plugin.MIN_CYCLES: the fewest that can show "growth in every cycle"; keeps the session short


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One full CPU session over good models and every mutant; its conformance.json."""
    out = tmp_path_factory.mktemp("suite-run")
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite",
        "-p", "no:cacheprovider", "-q",
        "--fd-model=fd_reference_models.cases:all_cases",
        "--fd-include-mutants", f"--fd-cycles={CYCLES}", f"--fd-report={out}",
        "--fd-isolate=off",  # in-process: the hang watchdog is the isolation suite's subject, not ours
        "--fd-device=cpu",
    ]  # fmt: skip
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    document = json.loads((out / "conformance.json").read_text())
    return {"proc": proc, "doc": document, "out": out}


def _rows(session: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in session["doc"]["cases"] if c["device"] == "cpu"}


def _mutant_names() -> list[str]:
    from fd_reference_models.cases import all_cases

    return [c.name for c in all_cases() if c.is_mutant]


def test_good_models_are_certified(session: dict[str, Any]) -> None:
    rows = _rows(session)
    good = {name: row for name, row in rows.items() if not row["mutant"]}
    assert {"torch-glm4-moe", "torch-glm4-moe-mtp", "torch-qwen3-vl"} <= set(good)
    assert {name: row["verdict"] for name, row in good.items()} == {name: "certified" for name in good}
    assert all(not row["observed_findings"] for row in good.values())


def test_good_models_run_the_config_check(session: dict[str, Any]) -> None:
    """Every good reference case ships its config post-processor, so C6 passes on it (no SKIP)."""
    config_results = {r["case"]: r for r in session["doc"]["results"] if r["check"] == "config"}
    good = [name for name, row in _rows(session).items() if not row["mutant"]]
    assert {name: config_results[name]["outcome"] for name in good} == {name: "passed" for name in good}


def test_config_mutants_run_only_the_config_check(session: dict[str, Any]) -> None:
    """Config mutants declare ``checks={"config"}``: every other check of theirs is skipped, not run."""
    ran = {(r["case"], r["check"]) for r in session["doc"]["results"]
           if r["case"].startswith(CONFIG_MUTANT_PREFIX) and r["outcome"] != "skipped"}  # fmt: skip
    assert ran and {check for _, check in ran} == {"config"}


@pytest.mark.parametrize("mutant", _mutant_names())
def test_mutant_reports_exactly_its_expected_codes(session: dict[str, Any], mutant: str) -> None:
    row = _rows(session)[mutant]
    assert row["observed_findings"] == row["expected_findings"], row["checks"]
    assert row["verdict"] == "caught"


def test_every_suite_lifecycle_and_config_code_is_tripped_by_a_mutant(session: dict[str, Any]) -> None:
    wanted = {
        code for code, rule in RULES.items() if {"suite", "lifecycle", "config"} & {w.strip() for w in rule.where.split(",")}
    }
    tripped = {code for row in _rows(session).values() if row["mutant"] for code in row["observed_findings"]}
    assert wanted - tripped == set(), f"codes no mutant trips on CPU: {sorted(wanted - tripped)}"


def test_session_exit_status_and_matrix(session: dict[str, Any]) -> None:
    proc = session["proc"]
    # Exit status 0 iff every good case is certified and every mutant caught exactly.
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "fd-conformance matrix" in proc.stdout
    assert "torch-glm4-moe [cpu, host-emulated]" in proc.stdout
    assert session["doc"]["expect_mutants"] is True


def test_every_failing_check_carries_a_finding_code(session: dict[str, Any]) -> None:
    """A failing cell without a code is a defect of the kit: the report cannot say which rule broke
    or how to fix it. Every failure of the session (each mutant's xfailed cells included) names a
    code; mutant-runner-forgets-draft reaches the check that once failed without one."""
    results = session["doc"]["results"]
    failing = [r for r in results if r["outcome"] in ("failed", "xfailed")]
    assert any(r["case"] == "mutant-runner-forgets-draft" and r["check"] == "teardown_order" for r in failing)
    assert [(r["nodeid"], r["message"][:200]) for r in failing if not r["codes"]] == []


def test_findings_name_the_model_class_and_the_call(session: dict[str, Any]) -> None:
    """Every FDC2xx/FDC3xx message names the wrapper or runner class it is about, and FDC201/FDC202
    the call during which the graph was found alive (issue 36.7 c)."""
    a_class = re.compile(r"\b(wrapper|model|runner) [A-Z]\w+|\b[A-Z]\w+\.\w+\(\)")  # "draft model X", "X.clear_parameters()"
    findings = [f for r in session["doc"]["results"] for f in r["findings"] if f["code"][:4] in ("FDC2", "FDC3")]
    assert {f["code"] for f in findings} >= {"FDC201", "FDC202", "FDC301", "FDC304", "FDC305", "FDC306"}
    assert [(f["code"], f["message"][:160]) for f in findings if not a_class.search(f["message"])] == []
    for finding in (f for f in findings if f["code"] in ("FDC201", "FDC202")):
        assert " held by the " in finding["message"] and ".clear_parameters()" in finding["message"], finding


def test_findings_carry_messages_and_hints(session: dict[str, Any]) -> None:
    results = [r for r in session["doc"]["results"] if r["case"] == "mutant-draft-cleared-after-release" and r["codes"]]
    assert results and results[0]["check"] == "teardown_order"
    finding = next(f for f in results[0]["findings"] if f["code"] == "FDC201")
    assert "draft" in finding["message"] and finding["hint"]


@pytest.mark.gpu
def test_gpu_suites_pass_good_and_catch_mutants(tmp_path: Path) -> None:
    """On the device: the same session on real CUDA graphs; every mutant caught exactly."""
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        "--fd-include-mutants", f"--fd-report={tmp_path}", "--fd-device=cuda",
        "-n", GPU_SESSION_WORKERS,  # workers share the one GPU (bench/xdist_verdicts.py shows serial judges the same)
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    document = json.loads((tmp_path / "conformance.json").read_text())
    rows = [c for c in document["cases"] if c["device"] == "cuda"]
    from fd_reference_models.cases import all_cases

    # Config-only mutants are checked on the first selected row -- cuda here -- so they must be
    # caught on it like every other mutant (a GPU host's default run selects only cuda rows).
    # They capture nothing, so their rows say graphs "n/a"; every other row ran real graphs.
    config_only = {case.name for case in all_cases() if case.checks == frozenset({"config"})}
    graphed = [c for c in rows if c["verdict"] != "not-run" and c["name"] not in config_only]
    assert graphed and all(c["graphs"] == "real" for c in graphed), [(c["name"], c["graphs"]) for c in graphed]
    assert all(c["graphs"] == "n/a" for c in rows if c["name"] in config_only)
    assert config_only <= {c["name"] for c in rows}
    bad = {
        c["name"]: (c["expected_findings"], c["observed_findings"], c["verdict"])
        for c in rows
        if c["verdict"] not in ("certified", "caught")
    }
    assert not bad, bad
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.parametrize(
    ("held", "resolution", "leak"),
    [
        ([1000, 1100, 1200, 1300], 4096, True),  # steady growth below the GPU resolution: a tiny model's leak
        ([1000, 1100, 1100, 1100], 4096, False),  # settles after one cycle: lazy state, not a leak
        ([1000, 1000 + 4096], 4096, True),  # the resolution is the smallest leak reported: 4 KiB is one
        ([1000, 1000 + 4095], 4096, False),  # one byte less, one delta: allocator rounding, not evidence
        ([1000, 1005], 1, True),  # host emulation: exact bytes, any growth
        ([1000], 1, False),
    ],
)
def test_memory_growth_criterion(held: list[int], resolution: int, leak: bool) -> None:
    from fd_conformance.suite._support import grows

    assert grows(held, resolution) is leak


# --- test-local mutants: branches no bundled mutant reaches ------------------------------------------

LOCAL_MUTANTS = '''
import dataclasses

from fd_reference_models import runner_mutants
from fd_reference_models.cases import all_cases
from fd_reference_models.torch_models.subject import glm4_moe_mtp_subject


class EarlyReturnRunner(runner_mutants.DraftGuardedByMainFlagRunner):
    """FastDeploy-style capture_model(): returns at once when use_cudagraph is off (graphs would
    come lazily on forward), with the draft clear guarded by the main flag besides."""

    def capture_model(self):
        if not self.use_cudagraph:
            return
        super().capture_model()


def early_return(runtime):
    return glm4_moe_mtp_subject(runtime, runner_cls=EarlyReturnRunner, use_cudagraph=False, draft_model_use_cudagraph=True)


def _good(name):
    return next(c for c in all_cases() if c.name == name)


def two_bodies(runtime):
    """The legacy spelling bound on the instance to another function: the alias cannot unify them."""
    subject = _good("torch-glm4-moe").factory(runtime)
    subject.wrapper.clear_grpah_opt_backend = lambda: None
    return subject


EARLY_RETURN = dataclasses.replace(_good("torch-glm4-moe-mtp"), name="local-early-return", factory=early_return, checks=None)
TWO_BODIES = dataclasses.replace(_good("torch-glm4-moe"), name="local-two-bodies", factory=two_bodies, checks=None)
'''


@pytest.fixture(scope="module")
def local_session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("local-mutants")
    (root / "local_mutants.py").write_text(LOCAL_MUTANTS)
    out = root / "report"
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        "--fd-model=local_mutants:EARLY_RETURN", "--fd-model=local_mutants:TWO_BODIES", f"--fd-report={out}",
        "--fd-isolate=off", "--fd-device=cpu", "-k", "teardown_order or protocol",
    ]  # fmt: skip
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0", "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert (out / "conformance.json").is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return {"proc": proc, "doc": json.loads((out / "conformance.json").read_text())}


def test_teardown_order_is_not_vacuous_under_an_early_returning_capture(local_session: dict[str, Any]) -> None:
    """main off, draft on: capture_model() captured nothing, so the draft's graphs must come from the
    forward steps (then the main-flag guard leaves them alive: FDC201/FDC203) or the check fails
    saying no draft graph exists -- never a vacuous pass."""
    (result,) = [r for r in local_session["doc"]["results"]
                 if r["case"] == "local-early-return" and r["nodeid"].endswith("mainOff-draftOn]")]  # fmt: skip
    assert result["outcome"] == "failed", result
    assert {"FDC201", "FDC203"} & set(result["codes"]) or (
        result["codes"] == ["FDC306"] and "no draft graph exists" in result["message"]
    ), result


def test_instance_bound_legacy_alias_with_another_body_is_fdc003(local_session: dict[str, Any]) -> None:
    (result,) = [r for r in local_session["doc"]["results"] if r["case"] == "local-two-bodies" and r["check"] == "protocol"]
    assert result["outcome"] == "failed" and "FDC003" in result["codes"], result
