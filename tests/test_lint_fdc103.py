"""FDC103: every door of a graph-owning class, followed through helpers, the weight manager and
``super()``, judged per model on every path of the graph facts (the rule's own fixtures are
snapshotted in test_lint_snapshots; these pin what each part of the analysis must see)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from fd_conformance.lint import LintConfig, lint_paths

CONFIG = LintConfig()


def _lint(tmp_path: Path, **files: str) -> list[str]:
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text), encoding="utf-8")
    result = lint_paths([tmp_path], CONFIG, tmp_path)
    return [f"{f.code} {f.message}" for f in result.findings if f.code in ("FDC101", "FDC102", "FDC103")]


# A tree where drafts can have graphs names their flag somewhere (FastDeploy's config does).
GRAPH_CONFIG = """
class GraphOptimizationConfig:
    def __init__(self):
        self.use_cudagraph = False
        self.draft_model_use_cudagraph = False
"""

MANAGER = """
class Manager:
    def __init__(self, cfg, models):
        self.model_list = models

    def clear_model_weight(self):
        for model in self.model_list:
            for param in model.state_dict().values():
                param._clear_data()

    def clear_communication_group(self):
        paddle.distributed.shutdown_process_group(self.tp_group)
"""


def _lint_runner(tmp_path: Path, models: str, methods: str, *, draft_flag: bool = False) -> list[str]:
    """A ``Runner`` whose weight manager is built with ``models`` (source) and which has ``methods``
    (source, at class level), beside MANAGER, and GRAPH_CONFIG when ``draft_flag``."""
    head = (
        f"class Runner:\n    def load_model(self):\n        self.dynamic_weight_manager = Manager(self.fd_config, {models})\n\n"
    )
    files = {"manager": MANAGER, "runner": head + textwrap.indent(textwrap.dedent(methods), "    ")}
    return _lint(tmp_path, **files, **({"config": GRAPH_CONFIG} if draft_flag else {}))


def test_a_missing_draft_clear_at_a_new_door_is_found_through_the_manager_in_another_file(tmp_path: Path) -> None:
    # develop's sleep(): the main graphs are cleared, the draft's never, and the manager was built
    # with both models. FDC101 (a late clear) cannot see it: there is no clear to be late.
    found = _lint(
        tmp_path,
        config=GRAPH_CONFIG,
        manager=MANAGER,
        runner="""
        class Runner:
            def load_model(self):
                if self.spec_method == SpecMethod.MTP:
                    self.dynamic_weight_manager = Manager(self.fd_config, [self.model, self.proposer.model])
                else:
                    self.dynamic_weight_manager = Manager(self.fd_config, self.model)

            def sleep(self, tags):
                if "weight" in tags.split(","):
                    if self.use_cudagraph:
                        self.model.clear_graph_opt_backend()
                    self.dynamic_weight_manager.clear_model_weight()
        """,
    )
    assert len(found) == 1, found
    assert found[0].startswith(
        "FDC103 Runner.sleep: the draft's graphs are alive at self.dynamic_weight_manager.clear_model_weight()"
    )
    assert "releases the main model's and the draft's weights" in found[0]
    assert "MTP draft with its graphs on" in found[0]


def test_a_manager_built_without_the_draft_releases_only_the_main_weights(tmp_path: Path) -> None:
    # The same door over a manager given only self.model: the draft's weights are not released,
    # so its live graphs are no finding (a rule keyed on the call's name would report one).
    found = _lint_runner(
        tmp_path,
        "self.model",
        """
        def sleep(self, tags):
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_model_weight()
        """,
    )
    assert found == []


def test_a_group_shutdown_needs_every_models_graphs_gone(tmp_path: Path) -> None:
    found = _lint_runner(
        tmp_path,
        "self.model",
        """
        def sleep(self, tags):
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_communication_group()
            if self.spec_method == SpecMethod.MTP:  # the runner knows its draft (Metax's shape)
                self.proposer.clear_mtp_cache()
        """,
        draft_flag=True,
    )
    assert len(found) == 1 and "the draft's graphs are alive" in found[0] and "shuts down communication groups" in found[0]


def test_graphs_of_a_model_the_class_never_names_are_not_its_to_destroy(tmp_path: Path) -> None:
    # The same door in a runner that names no draft at all (no flag, no method, no proposer):
    # it has no draft whose graphs could be alive.
    found = _lint_runner(
        tmp_path,
        "self.model",
        """
        def sleep(self, tags):
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_communication_group()
        """,
        draft_flag=True,
    )
    assert found == []


def test_a_clear_under_its_own_flags_on_every_path_is_clean(tmp_path: Path) -> None:
    found = _lint_runner(
        tmp_path,
        "[self.model, self.proposer.model]",
        """
        def sleep(self, tags):
            if self.is_weight_sleeping:
                return
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
            if self.speculative_decoding and self.spec_method == SpecMethod.MTP and self.draft_model_use_cudagraph:
                self.proposer.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_model_weight()
            self.dynamic_weight_manager.clear_communication_group()

        def update_weights(self, version=None):
            return self.dynamic_weight_manager.update_weights_by_rdma(version)
        """,
    )
    assert found == []


def test_super_and_helpers_are_followed_and_a_helper_is_no_door(tmp_path: Path) -> None:
    # A platform runner calls its base's door through super(); the base's helper releases, and is
    # judged from its caller (which clears first), never alone.
    found = _lint(
        tmp_path,
        manager=MANAGER,
        runner="""
        class BaseRunner:
            def load_model(self):
                self.dynamic_weight_manager = Manager(self.fd_config, self.model)

            def clear_parameters(self, pid):
                if self.use_cudagraph:
                    self.model.clear_graph_opt_backend()
                self._drop()

            def _drop(self):
                self.dynamic_weight_manager.clear_model_weight()


        class PlatformRunner(BaseRunner):
            def clear_parameters(self, pid):
                super(PlatformRunner, self).clear_parameters(pid)

            def release_only(self, pid):
                if self.ready:
                    super().clear_parameters(pid)
                else:
                    self._drop()
        """,
    )
    assert len(found) == 1, found
    assert found[0].startswith("FDC103 PlatformRunner.release_only: the main model's graphs are alive at self._drop()")


def test_a_late_or_wrongly_guarded_clear_is_left_to_fdc101_and_fdc102(tmp_path: Path) -> None:
    found = _lint_runner(
        tmp_path,
        "[self.model, self.proposer.model]",
        """
        def clear_parameters(self, pid):
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_parameters(pid)
            self.proposer.model.clear_graph_opt_backend()

        def sleep(self, tags):
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
                if self.draft_model_use_cudagraph:
                    self.proposer.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_model_weight()
        """,
    )
    assert [f.split(" ", 1)[0] for f in found] == ["FDC101", "FDC102"], found


def test_a_tree_that_never_names_a_draft_graph_flag_has_no_draft_graphs(tmp_path: Path) -> None:
    # FastDeploy before draft_model_use_cudagraph: a draft ran eagerly, so a door that leaves it
    # alone is right; the main model's graphs are still judged.
    found = _lint_runner(
        tmp_path,
        "[self.model, self.proposer.model]",
        """
        def clear_parameters(self, pid):
            if self.use_cudagraph:
                self.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_communication_group()

        def sleep(self, tags):
            if self.is_sleeping:
                self.model.clear_graph_opt_backend()
            self.dynamic_weight_manager.clear_model_weight()
        """,
    )
    assert len(found) == 1 and found[0].startswith("FDC103 Runner.sleep: the main model's graphs are alive"), found
