"""FDC101 (weights released before graphs are cleared) and FDC102 (a draft clear guarded by the main
flag only): configured helper names, the reachability of draft clears, messages that show the call."""

from __future__ import annotations

import textwrap
from pathlib import Path

from _lint_helpers import REACHABILITY, REPO, SPEC_ENGINE, codes_at

from fd_conformance.lint import CANONICAL, LintConfig, lint_paths, load_config


def test_configured_helpers_catch_the_reference_mutants(tmp_path: Path) -> None:
    """Cross-check with the runtime side: the reference runner's order mutants, linted with the
    repository's helper names configured, are caught statically; the good runner is clean."""
    mutants = REPO / "models" / "fd_reference_models" / "runner_mutants.py"
    runner = REPO / "fd_conformance" / "engine" / "runner.py"  # the runner body (the reference one re-exports it)
    assert mutants.is_file() and runner.is_file(), "the reference runner or its mutants moved: point this test at them"
    assert "def clear_parameters" in runner.read_text(), f"{runner} holds no clear_parameters to lint"
    cfg = tmp_path / "lint.toml"
    cfg.write_text(
        'graph-clear-calls = ["clear_graphs_of", "_clear_graphs"]\n'
        'release-calls = ["_release_weights", "_shutdown_group", "clear_parameters"]\n'
    )
    config = load_config(config_file=cfg)
    assert [f.format() for f in lint_paths([runner], config, root=REPO).findings if f.is_error] == []
    assert {"FDC101", "FDC102"} <= {f.code for f in lint_paths([mutants], config, root=REPO).findings}


def test_helper_call_with_draft_argument_is_guard_checked(tmp_path: Path) -> None:
    src = tmp_path / "r.py"
    src.write_text("def clear(self):\n    if self.use_cudagraph:\n        clear_graphs_of(self.draft)\n")
    cfg = LintConfig(graph_clear_calls=("clear_graphs_of",))
    assert codes_at(src, cfg) == [("FDC102", 3)]
    assert codes_at(src) == []  # not a graph-clear call unless configured


def test_fdc102_message_shows_the_call_as_written(tmp_path: Path) -> None:
    """Item 29: a helper call was printed as a method call on its argument."""
    src = tmp_path / "r.py"
    src.write_text(
        "def clear(self):\n    if self.use_cudagraph:\n        clear_graphs_of(self.draft)\n"
        "    if self.use_cudagraph:\n        self.proposer.model.clear_graph_opt_backend()\n"
    )
    cfg = LintConfig(graph_clear_calls=("clear_graphs_of", CANONICAL))
    messages = [f.message for f in lint_paths([src], cfg, root=tmp_path).findings]
    assert len(messages) == 2
    assert "(clear_graphs_of(self.draft))" in messages[0]
    assert f"(self.proposer.model.{CANONICAL}())" in messages[1]


def test_fdc102_flags_draft_clears_reachable_only_under_the_main_flag() -> None:
    """Defect 6: nested ifs, and-chains, elif, early return/raise, a local alias, a short-circuit,
    an assert and a proposer's self.model were all missed (the old rule only asked whether an
    enclosing if mentioned a draft flag), and the early-return shapes were invisible to it."""
    found = codes_at(REACHABILITY / "spec_engine_bad.py", SPEC_ENGINE)
    assert found == [("FDC102", line) for line in (13, 18, 24, 31, 37, 43, 48, 51, 60, 66)]


def test_fdc102_quiet_when_the_draft_clear_runs_with_the_main_flag_off() -> None:
    """Draft flag only, unguarded, an else/elif that clears the draft too, a clear before the
    main-flag return, either flag, unrelated returns, loop continue, a caught raise, a nested
    function, the main model under its own flag, a proposer's handle on the main model."""
    assert codes_at(REACHABILITY / "spec_engine_good.py", SPEC_ENGINE) == []


def test_fdc102_message_says_which_value_of_the_main_flag_the_clear_needs() -> None:
    result = lint_paths([REACHABILITY / "spec_engine_bad.py"], SPEC_ENGINE, root=REPO)
    by_line = {f.location.line: f for f in result.findings}
    assert "only when the main model's flag enable_graphs is on" in by_line[13].message
    assert "only when the main model's flag enable_graphs is off" in by_line[43].message
    assert by_line[13].location.obj == "SpecEngine.release_nested"
    assert by_line[60].location.obj == "EagleProposer.drop_graphs"


def test_fdc102_nested_fix_shape_with_default_names(tmp_path: Path) -> None:
    """The upstream hang fix's shape, default flag names: the draft's own flag is tested, but
    inside the main one. Its twin with the draft block beside the main one is clean."""
    src = tmp_path / "runner.py"
    src.write_text(
        textwrap.dedent("""\
        class Worker:
            def drop_weights(self, rank):
                if self.graph_cfg.use_cudagraph:
                    self.net.clear_graph_opt_backend()
                    if self.spec_on and self.graph_cfg.draft_model_use_cudagraph:
                        self.drafter.net.clear_graph_opt_backend()
                self.weights.clear_parameters(rank)
        """)
    )
    assert codes_at(src) == [("FDC102", 6)]
    src.write_text(
        src.read_text()
        .replace("            if self.spec_on and", "        if self.spec_on and")
        .replace("                self.drafter", "            self.drafter")
    )
    assert "\n        if self.spec_on" in src.read_text()
    assert codes_at(src) == []


def test_fdc102_ignores_unreachable_draft_clears(tmp_path: Path) -> None:
    src = tmp_path / "r.py"
    src.write_text("def f(self):\n    return\n    if self.use_cudagraph:\n        self.draft.clear_graph_opt_backend()\n")
    assert codes_at(src) == []
