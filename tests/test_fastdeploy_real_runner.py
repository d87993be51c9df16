"""The real runner's teardown over the real wrappers (table 5 of `fd-conformance fastdeploy`), on
our own FastDeploy-shaped fixture tree (tests/fixtures/fastdeploy_bridge, stdlib only).

The base tree's runner clears the main model (legacy spelling) and the MTP draft (canonical), each
under its own flag, before the weights go; its TinyMoeForCausalLM has TinyMTPForCausalLM as draft
(FastDeploy's Moe -> MTP rule), built sharing its embedding. Every finding is shown firing on a
bad tree and silent on the good one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_fastdeploy_bridge import (  # the autouse fixture: every test here leaves no fastdeploy import behind
    MODELS,
    RUNNER,
    _no_fastdeploy_left,  # noqa: F401
    bridge_cli_args,
    make_tree,
)

from fd_conformance.cli import fastdeploy as bridge_cli
from fd_conformance.errors import EXIT_OK, EXIT_VIOLATIONS
from fd_conformance.fastdeploy.checkout import import_environment, locate
from fd_conformance.fastdeploy.history import row_verdicts
from fd_conformance.fastdeploy.real_runner import RealRunnerReport, check_real_runner
from fd_conformance.fastdeploy.runner_bridge import Combo, RunnerRow, check_runner

MTP_DRAFT_ON = [Combo(main, True, "mtp") for main in (True, False)]
QWEN3_VL = {"qwen3_vl_moe.py": f"{MODELS}/qwen3_vl/qwen3_vl_moe.py"}
TINY_MTP = f"{MODELS}/tiny_mtp.py"
# The runner calling the main model's clear by the canonical spelling (as FastDeploy's develop does).
CANONICAL_MAIN = ((RUNNER, "self.model.clear_grpah_opt_backend()", "self.model.clear_graph_opt_backend()"),)


def real_runner_of(root: Path) -> RealRunnerReport:
    checkout = locate(root)
    with import_environment(checkout):
        return check_real_runner(checkout)


def rows_of(report: RealRunnerReport, main: str) -> list[RunnerRow]:
    (pair,) = [p for p in report.pairs if p.pairing.main == main]
    return pair.rows


def failing(rows: list[RunnerRow], method: str = "clear_parameters") -> dict[Combo, set[str]]:
    return {r.combo: {f.code for f in r.findings} for r in rows if r.method == method and r.findings}


def test_clean_tree_every_main_wrapper_runs_with_its_draft_and_nothing_fires(tmp_path: Path) -> None:
    report = real_runner_of(make_tree(tmp_path))
    assert report.error is None and report.not_built == {}
    pairs = {p.pairing.main: p for p in report.pairs}
    assert set(pairs) == {"TinyDenseForCausalLM", "TinyMoeForCausalLM"}  # the draft runs under its main, not alone
    moe = pairs["TinyMoeForCausalLM"]
    assert moe.pairing.draft == "TinyMTPForCausalLM" and not any(r.skipped for r in moe.rows) and len(moe.rows) == 24
    assert moe.pairing.draft_wrapper.model.embed_tokens is moe.pairing.main_wrapper.model.embed_tokens  # shared, as FastDeploy's
    dense = pairs["TinyDenseForCausalLM"]
    assert {r.combo.spec_method for r in dense.rows if r.skipped} == {"mtp"} and "no MTP draft" in str(
        dense.pairing.draft_problem
    )
    assert [(r.combo, r.method, r.findings, r.error) for r in report.rows if r.findings or r.error] == []


def test_seed_000_release_first_over_the_real_wrappers(tmp_path: Path) -> None:
    """The draft's real graphs are alive when the weights (the main's embedding among them, which the
    draft shares) go and the group shuts down; the dense wrapper, without a draft, is unaffected."""
    report = real_runner_of(make_tree(tmp_path, runner="runner_release_first.py"))
    rows = rows_of(report, "TinyMoeForCausalLM")
    assert failing(rows) == {combo: {"FDC201", "FDC202"} for combo in MTP_DRAFT_ON}
    fdc201 = next(f for r in rows for f in r.findings if f.code == "FDC201")
    assert "owner draft" in fdc201.message and "'model.embed_tokens'" in fdc201.message
    assert failing(rows_of(report, "TinyDenseForCausalLM")) == {}


def test_a_real_clear_missing_the_vision_tower_fails_here_while_the_stand_in_runner_passes(tmp_path: Path) -> None:
    """Issue 26.2: the stand-in runner table cannot see it (its models clear everything); over the
    real wrapper every combination that clears the main model leaves ``visual``'s graphs (FDC203),
    alive when the group goes (FDC202)."""
    root = make_tree(tmp_path, extra=QWEN3_VL)
    rows = rows_of(real_runner_of(root), "TinyQwen3VLMoeForConditionalGeneration")
    main_on = {r.combo for r in rows if r.combo.use_cudagraph and not r.skipped and r.method == "clear_parameters"}
    assert main_on and failing(rows) == {combo: {"FDC202", "FDC203"} for combo in main_on}
    assert all("'main:" in f.message for r in rows for f in r.findings)
    checkout = locate(root)
    with import_environment(checkout):
        assert [r for r in check_runner(checkout).rows if r.findings or r.error] == []


def test_a_draft_without_a_clear_is_fdc001_where_the_runner_calls_it(tmp_path: Path) -> None:
    """The Ernie MTP draft's defect: the runner calls the draft's clear, which does not exist, so
    the sync stops there and the draft's graphs outlive it; with draft graphs off it is not called."""
    edits = ((TINY_MTP, "    def clear_graph_opt_backend(self):", "    def drop_graphs(self):"),)
    rows = rows_of(real_runner_of(make_tree(tmp_path, edits=edits)), "TinyMoeForCausalLM")
    assert failing(rows) == {combo: {"FDC001", "FDC203"} for combo in MTP_DRAFT_ON}
    row = next(r for r in rows if r.combo == MTP_DRAFT_ON[0] and r.method == "clear_parameters")
    assert row.error is None and "clear_graph_opt_backend() on the draft TinyMTPForCausalLM" in row.findings[0].message
    assert "no clear under either spelling" in row.findings[0].message


def test_a_spelling_the_wrapper_lacks_is_fdc001_and_a_raising_clear_is_fdc303(tmp_path: Path) -> None:
    root = make_tree(tmp_path, models=("model_clear_wrong_argument.py",), edits=CANONICAL_MAIN)
    report = real_runner_of(root)
    strict, dense = rows_of(report, "TinyStrictForCausalLM"), rows_of(report, "TinyDenseForCausalLM")
    main_on = {r.combo for r in strict if r.combo.use_cudagraph and not r.skipped and r.method == "clear_parameters"}
    assert failing(strict) == {combo: {"FDC303", "FDC203"} for combo in main_on}
    assert "TinyStrictForCausalLM's own clear raised inside GPUModelRunner.clear_parameters" in failing_message(strict)
    assert failing(dense) == {combo: {"FDC001", "FDC203"} for combo in main_on}
    assert "it has only clear_grpah_opt_backend()" in failing_message(dense)


def failing_message(rows: list[RunnerRow]) -> str:
    return next(f.message for r in rows for f in r.findings)


def test_an_error_the_wrappers_did_not_cause_stays_an_error(tmp_path: Path) -> None:
    """The known-bad twin of the two above: the body raising on its own is not blamed on a wrapper."""
    edit = (
        (
            RUNNER,
            "    def clear_parameters(self, pid):\n",
            "    def clear_parameters(self, pid):\n        raise KeyError('fixture')\n",
        ),
    )
    report = real_runner_of(make_tree(tmp_path, edits=edit))
    clears = [r for r in report.rows if r.method == "clear_parameters" and not r.skipped]
    assert clears and all(r.error and "KeyError" in r.error for r in clears)
    assert {f.code for r in clears for f in r.findings} == {"FDC203"}  # the graphs it never cleared; no wrapper blamed


def test_a_draft_or_a_main_that_does_not_build_is_said_never_passed(tmp_path: Path) -> None:
    edits = (
        (TINY_MTP, "        self.depth = 1\n", "        raise RuntimeError('fixture: the draft needs a GPU')\n"),
        (f"{MODELS}/tiny_dense.py", "        self.layers = [object()]\n", "        raise RuntimeError('fixture: no')\n"),
    )
    report = real_runner_of(make_tree(tmp_path, edits=edits))
    assert list(report.not_built) == ["TinyDenseForCausalLM"] and "tiny_dense.py:" in report.not_built["TinyDenseForCausalLM"]
    (pair,) = report.pairs
    assert "the draft TinyMTPForCausalLM does not build on CPU: RuntimeError: fixture: the draft needs a GPU" in str(
        pair.pairing.draft_problem
    )
    assert {r.combo.spec_method for r in pair.rows if r.skipped} == {"mtp"}


def test_cli_prints_table_5_and_history_keys_its_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good"
    assert bridge_cli.run(bridge_cli_args(make_tree(good), "--only", "real-runner")) == EXIT_OK
    assert "## 5. Runner teardown over the real wrappers" in capsys.readouterr().out
    bad, out_json = tmp_path / "bad", tmp_path / "bridge.json"
    args = bridge_cli_args(make_tree(bad, runner="runner_release_first.py"), "--only", "real-runner", "--json", str(out_json))
    assert bridge_cli.run(args) == EXIT_VIOLATIONS
    out = capsys.readouterr().out
    assert "| TinyMoeForCausalLM | TinyMTPForCausalLM | FAIL | main=on draft=on spec=mtp: FDC201 x2, FDC202 x2;" in out
    verdicts = row_verdicts(json.loads(out_json.read_text()))
    assert verdicts["real-runner TinyMoeForCausalLM main=on draft=on spec=mtp clear_parameters"] == "FAIL FDC201 FDC202"
    assert verdicts["real-runner TinyDenseForCausalLM main=on draft=on spec=mtp clear_parameters"] == "n/a"
