"""Engines the kit never saw (tests/fixtures/outside_models/banked_engine.py: a runner named
``Engine`` holding the graph banks, ``self.target`` / ``self.speculator``, its own switches),
certified through ``--fd-model`` as a user certifies them (issue 24, items 4, 5 and 13):

* a runner that keys each clear on the flag it reads at clear time strands graphs when a flag is
  switched off after capture: FDC205 (a warning) or, where the case declares run-time switches,
  FDC206 (an error);
* a runner that keeps the FIRST capture's graph list breaks only at the second weight sync: the
  weight-cycle check reports it with the cycle (it used to skip, and the row was certified);
* a runner that never clears the speculator gets FDC203 blaming ``NeverDropsSpeculator.clear_parameters()``
  and naming the draft model, while the speculator's own clear passes the clear check;
* the correct multi-cycle engine is certified with no finding at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.findings import fix_hint

torch = pytest.importorskip("torch")

OUTSIDE = Path(__file__).resolve().parent / "fixtures" / "outside_models"
ENGINES = f"{OUTSIDE / 'banked_engine.py'}:CASES"


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One in-process CPU session over the engines (three weight cycles: the defect shows at the second)."""
    out = tmp_path_factory.mktemp("banked-engine")
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        f"--fd-model={ENGINES}", "--fd-cycles=3", f"--fd-report={out}", "--fd-isolate=off", "--fd-device=cpu",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "FD_CONFORMANCE_GPU": "0"}, timeout=900)
    path = out / "conformance.json"
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return {"proc": proc, "doc": json.loads(path.read_text())}


def results(session: dict[str, Any], case: str, check: str) -> list[dict[str, Any]]:
    found = [r for r in session["doc"]["results"] if r["case"] == case and r["check"] == check]
    assert found, f"no {check} result for {case}"
    return found


def findings(session: dict[str, Any], case: str, check: str, code: str) -> list[dict[str, Any]]:
    return [f for r in results(session, case, check) for f in r["findings"] if f["code"] == code]


def test_every_engine_draws_exactly_its_codes(session: dict[str, Any]) -> None:
    from fd_conformance.cases import load_spec

    rows = {row["name"]: row for row in session["doc"]["cases"]}
    for case in load_spec(ENGINES):
        row = rows[case.name]
        assert row["observed_findings"] == sorted(case.expected_findings), (case.name, row["checks"])
        warning_only = case.expected_findings == {"FDC205"}
        want = "certified" if not case.is_mutant or warning_only else "violations"
        assert row["verdict"] == want, (case.name, row["checks"])


def test_correct_multi_cycle_engine_is_certified_without_a_warning(session: dict[str, Any]) -> None:
    rows = {row["name"]: row for row in session["doc"]["cases"]}
    assert rows["banked-engine"]["verdict"] == "certified" and rows["banked-engine"]["observed_findings"] == []
    (cycle,) = results(session, "banked-engine", "weight_cycle")
    assert cycle["outcome"] == "passed", cycle  # all three cycles ran and were judged


def test_first_capture_list_is_reported_at_the_second_weight_sync(session: dict[str, Any]) -> None:
    case = "banked-engine-remembers-first-capture"
    (cycle,) = results(session, case, "weight_cycle")
    assert cycle["outcome"] == "failed" and set(cycle["codes"]) == {"FDC201", "FDC202", "FDC203"}, cycle
    assert all(f["message"].startswith("weight cycle 2: ") for f in cycle["findings"]), cycle["findings"]
    # One clear after the first capture (C3) cannot see it: the graphs it listed are the ones alive then.
    assert {r["outcome"] for r in results(session, case, "teardown_order")} <= {"passed", "skipped"}
    (left,) = [f for f in cycle["findings"] if f["code"] == "FDC203" and "'lm/4'" in f["message"]]
    assert "RemembersFirstCapture.clear_parameters()" in left["message"] and "main model TargetLM" in left["message"]


@pytest.mark.parametrize("switch", ["mainSwitchedOff", "draftSwitchedOff", "bothSwitchedOff"])
def test_clear_keyed_on_the_flag_now_is_a_warning(session: dict[str, Any], switch: str) -> None:
    case = "banked-engine-drops-by-current-switch"
    (result,) = [r for r in results(session, case, "teardown_order") if r["nodeid"].endswith(f"-{switch}]")]
    assert result["outcome"] == "passed" and result["warnings"] == ["FDC205"], result
    flags = {"mainSwitchedOff": "use_cudagraph switched", "draftSwitchedOff": "draft_model_use_cudagraph switched"}
    for finding in result["findings"]:
        assert finding["severity"] == "warning"
        assert "DropsByCurrentSwitch.clear_parameters()" in finding["message"], finding
        assert flags.get(switch, "switched off after capture") in finding["message"], finding
        assert "clear_graph_opt_backend() (main AND draft) unconditionally" in finding["hint"], finding
    models = {"mainSwitchedOff": {"main model TargetLM"}, "draftSwitchedOff": {"draft model Speculator"}}
    named = {m for m in ("main model TargetLM", "draft model Speculator") if any(m in f["message"] for f in result["findings"])}
    assert named == models.get(switch, {"main model TargetLM", "draft model Speculator"}), result["findings"]


def test_clear_keyed_on_the_flag_now_is_an_error_when_flags_switch_at_run_time(session: dict[str, Any]) -> None:
    case = "banked-engine-drops-by-current-switch-run-time"
    flipped = [r for r in results(session, case, "teardown_order") if "SwitchedOff]" in r["nodeid"]]
    assert len(flipped) == 3 and all(r["outcome"] == "failed" and r["codes"] == ["FDC206"] for r in flipped), flipped
    assert all(f["severity"] == "error" for r in flipped for f in r["findings"])


def test_runner_that_never_clears_the_speculator_is_blamed_not_the_clear(session: dict[str, Any]) -> None:
    case = "banked-engine-never-drops-speculator"
    assert {r["outcome"] for r in results(session, case, "clear")} == {"passed"}  # the speculator's clear works
    left = findings(session, case, "teardown_order", "FDC203")
    assert left, results(session, case, "teardown_order")
    for finding in left:
        message, hint = finding["message"], finding["hint"]
        assert "still alive after NeverDropsSpeculator.clear_parameters()" in message, message
        assert "for the draft model Speculator" in message and "Speculator.clear_graph_opt_backend() destroys it" in message
        assert hint == fix_hint("FDC203"), hint  # the code's one fix; the message says which call is at fault


def test_a_graph_no_model_clear_reaches_is_blamed_on_the_runner_it_is_held_by() -> None:
    """In process, on the real torch runtime: the three ways a survivor is blamed. The speculator is
    cut off from its bank, so its graphs are held by the runner alone and no model's clear reaches them."""
    from fd_conformance.cases import load_spec
    from fd_conformance.lifecycle import LifecycleRecorder
    from fd_conformance.runtime import get_runtime
    from fd_conformance.suite._support import survivors

    runtime = get_runtime("torch", "cpu")
    good = next(case for case in load_spec(ENGINES) if not case.is_mutant)
    subject = good.factory(runtime)  # banked_engine.EngineSubject
    with LifecycleRecorder(runtime) as recorder:
        subject.runner.capture_model()
        subject.draft.bank_ref = lambda: None  # the speculator's clear now reaches nothing
        left = survivors(recorder, subject)
    by_label = {s.graph.label: s for s in left}
    assert set(by_label) == {"lm/4", "lm/2", "lm/1", "spec/4", "spec/2", "spec/1"}
    lm, spec = by_label["lm/2"], by_label["spec/2"]
    assert (lm.role, lm.destroyer, lm.runner_at_fault) == ("main", "TargetLM.clear_graph_opt_backend()", True)
    assert (spec.role, spec.holder, spec.destroyer, spec.runner_at_fault) == ("runner", "the runner Engine", "", True)
    found = spec.finding("FDC203", "Engine.clear_parameters()", "Engine")
    assert "no model's clear_graph_opt_backend() destroys it" in found.message
    assert "held by the runner Engine" in found.message and found.hint == fix_hint("FDC203")
    for graph in subject.graphs():
        graph.reset()
