"""The author kit: the graph-opt backend, runner and helpers the reference models are built from.

Write a model the way FastDeploy does and reuse these instead of re-deriving the contract:

* :func:`support_graph_optimization` on the INNER model (``forward(**inputs)`` keyword-only,
  token-first tensors), :func:`init_graph_opt` in its ``__init__``, :class:`CommGroupMixin` for
  the group its collectives run on;
* an engine-facing wrapper (:class:`EngineWrapper`) whose ``clear_graph_opt_backend()``
  delegates to the inner model;
* :class:`WeightCycleRunner` for the RL weight cycle (``capture_model``, ``clear_parameters``,
  ``update_parameters``) in the order that does not hang.

Runtime-neutral: everything here talks to :class:`fd_conformance.runtime.base.Runtime` only and
never imports torch or paddle. The README's "Tutorial: from zero to certified" walks through it.
"""

from __future__ import annotations

from fd_conformance.engine.backend import GraphEntry, GraphOptBackend, GraphOptimizable
from fd_conformance.engine.comm_group import CommGroupMixin
from fd_conformance.engine.config import DEFAULT_WARMUP_RUNS, GraphOptConfig
from fd_conformance.engine.decorator import (
    BACKEND_ATTR,
    graph_opt_backend,
    init_graph_opt,
    set_graph_opt_enabled,
    support_graph_optimization,
)
from fd_conformance.engine.runner import DRAFT_PREFIX, WeightCycleRunner, clear_graphs_of
from fd_conformance.engine.wrapper import EngineWrapper

__all__ = [
    "BACKEND_ATTR",
    "DEFAULT_WARMUP_RUNS",
    "DRAFT_PREFIX",
    "CommGroupMixin",
    "EngineWrapper",
    "GraphEntry",
    "GraphOptBackend",
    "GraphOptConfig",
    "GraphOptimizable",
    "WeightCycleRunner",
    "clear_graphs_of",
    "graph_opt_backend",
    "init_graph_opt",
    "set_graph_opt_enabled",
    "support_graph_optimization",
]
