"""``fd_conformance.engine`` is the public author kit: runtime-neutral, and the very objects the
reference models use (their old import paths are aliases, not copies)."""

from __future__ import annotations

import pytest

import fd_conformance.engine as engine


def test_public_names_are_exported_and_documented() -> None:
    for name in engine.__all__:
        obj = getattr(engine, name)
        if callable(obj):
            assert obj.__doc__, f"fd_conformance.engine.{name} has no docstring"


def test_reference_models_use_the_engine_objects() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("paddle")
    from fd_reference_models import graph_opt, runner
    from fd_reference_models.paddle_models import layers as paddle_layers
    from fd_reference_models.torch_models import common as torch_common

    assert runner.ReferenceModelRunner is engine.WeightCycleRunner
    assert runner.clear_graphs_of is engine.clear_graphs_of
    assert graph_opt.support_graph_optimization is engine.support_graph_optimization
    assert graph_opt.GraphOptConfig is engine.GraphOptConfig
    assert graph_opt.graph_opt_backend is engine.graph_opt_backend
    assert torch_common.CommGroupMixin is paddle_layers.CommGroupMixin is engine.CommGroupMixin
