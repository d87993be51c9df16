"""A FastDeploy-shaped model runner driving the RL weight cycle (GPUModelRunner, reduced).

Runtime-neutral: it talks to the wrappers (:class:`~fd_conformance.engine.wrapper.EngineWrapper`)
and to :class:`~fd_conformance.runtime.base.Runtime` only, so Paddle and PyTorch models share it.
The order in :meth:`WeightCycleRunner.clear_parameters` is the fix of FastDeploy's MTP hang:
every graph (draft AND main, each whenever it has graphs) is destroyed before any weight is
released and before the comm group is shut down. Each step is its own method so a known-bad
variant (a mutant) changes exactly one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fd_conformance.engine.decorator import set_graph_opt_enabled
from fd_conformance.errors import UsageError
from fd_conformance.protocol import CANONICAL, LEGACY
from fd_conformance.runtime.base import Graph, Group, Runtime

__all__ = ["DRAFT_PREFIX", "WeightCycleRunner", "clear_graphs_of"]

DRAFT_PREFIX = "draft."  # weight-set names of draft-only parameters


class WeightCycleRunner:
    """Main wrapper plus optional MTP draft; ``use_cudagraph`` and ``draft_model_use_cudagraph`` are independent.

    Satisfies :class:`fd_conformance.cases.ModelRunner`. Built with its comm group started; call
    :meth:`close` when done outside the suites.
    """

    def __init__(self, runtime: Runtime, main: Any, draft: Any | None = None) -> None:
        self.runtime = runtime
        self.main = main
        self.draft = draft
        self.group: Group | None = None
        self._start_group()

    # --- flags: the models' graph-opt configs are the single source of truth -------------
    @property
    def use_cudagraph(self) -> bool:
        return bool(self.main.graph_opt_config.use_cudagraph)

    @use_cudagraph.setter
    def use_cudagraph(self, value: bool) -> None:
        set_graph_opt_enabled(self.main.model, value)

    @property
    def draft_model_use_cudagraph(self) -> bool:
        return self.draft is not None and bool(self.draft.graph_opt_config.use_cudagraph)

    @draft_model_use_cudagraph.setter
    def draft_model_use_cudagraph(self, value: bool) -> None:
        if self.draft is not None:
            set_graph_opt_enabled(self.draft.model, value)

    # --- weights, named the way update_parameters expects them --------------------------
    def named_parameters(self) -> list[tuple[str, Any]]:
        """Every parameter once: main names first, then draft-only ones under ``draft.``."""
        seen: set[int] = set()
        out: list[tuple[str, Any]] = []
        models = [("", self.main)] + ([(DRAFT_PREFIX, self.draft)] if self.draft is not None else [])
        for prefix, model in models:
            for name, param in model.named_parameters():
                if id(param) not in seen:  # a draft may share embedding and lm_head with main
                    seen.add(id(param))
                    out.append((prefix + name, param))
        return out

    # --- the cycle ----------------------------------------------------------------------------
    def capture_model(self) -> None:
        """Warm up and capture every size, main then draft, largest first (as FastDeploy)."""
        if self.use_cudagraph:
            self._capture(self.main)
        if self.draft is not None and self.draft_model_use_cudagraph:
            self._capture(self.draft)

    def clear_parameters(self) -> None:
        """Destroy all graphs, then release every weight, then shut the comm group down."""
        self.runtime.events.mark("clear_parameters:begin")
        self._clear_graphs()
        self._release_weights()
        self._shutdown_group()
        self.runtime.events.mark("clear_parameters:end")

    def update_parameters(self, weights: Mapping[str, Any]) -> None:
        """Restart the group, load ``weights`` into NEW buffers, reset inputs, capture again."""
        self.runtime.events.mark("update_parameters:begin")
        self._start_group()
        self._load_weights(weights)
        self.capture_model()
        self.runtime.events.mark("update_parameters:end")

    # --- steps (mutants override exactly one) --------------------------------------------------
    def _capture(self, wrapper: Any) -> None:
        config = wrapper.graph_opt_config
        for size in config.capture_sizes:  # GraphOptConfig keeps them descending
            for _ in range(config.warmup_runs + 1):  # warm-ups, then the capturing call
                wrapper.forward(wrapper.dummy_inputs(size))

    def _clear_graphs(self) -> None:
        # The draft's graphs captured main-model weights (shared embedding/lm_head) and the group,
        # so they go first; each model is cleared whenever it HAS graphs, whatever the flags say
        # now: a flag turned off after capture must not strand the graphs captured under it.
        if self.draft is not None and (self.draft_model_use_cudagraph or self.draft.model.graphs()):
            clear_graphs_of(self.draft)
        if self.use_cudagraph or self.main.model.graphs():
            clear_graphs_of(self.main)

    def _release_weights(self) -> None:
        for name, param in self.named_parameters():
            self.runtime.release_parameter(param, name)

    def _shutdown_group(self) -> None:
        if self.group is not None:
            self.runtime.shutdown_group(self.group)
            self.group = None

    def _start_group(self) -> None:
        if self.group is None or not self.group.alive:
            self.group = self.runtime.new_group("tp")
        for wrapper in (self.main, self.draft):
            if wrapper is not None:
                wrapper.model.set_comm_group(self.group)

    def _load_weights(self, weights: Mapping[str, Any]) -> None:
        params = self.named_parameters()
        missing = [name for name, _ in params if name not in weights]
        if missing:
            raise UsageError(
                f"weight set lacks {len(missing)} parameter(s), e.g. {missing[0]!r}",
                "build it with subject.new_weights(seed) (main names, draft-only ones prefixed 'draft.')",
            )
        for name, param in params:
            self.runtime.restore_parameter(param, weights[name], name)

    def close(self) -> None:
        """Shut the comm group down if it is alive: a runner is built with its group started, so a
        caller done with it (benchmarks, tests) must not leave one communicator per subject behind.
        Graphs go first (same order as clear_parameters); closing twice is a no-op."""
        if self.group is not None and self.group.alive:
            self._clear_graphs()
        self._shutdown_group()

    def graphs(self) -> list[Graph]:
        """Every graph main and draft currently own."""
        out = list(self.main.model.graphs())
        if self.draft is not None:
            out += self.draft.model.graphs()
        return out


def clear_graphs_of(wrapper: Any) -> None:
    """Call the wrapper's clear under either spelling (the kit's alias makes both reach one method).

    A wrapper with neither raises AttributeError here, as FastDeploy's engine did for Qwen3-VL.
    """
    method = getattr(wrapper, CANONICAL, None) or getattr(wrapper, LEGACY, None)
    if method is None:
        raise AttributeError(f"{type(wrapper).__name__} has no {CANONICAL}() (nor the legacy {LEGACY}())")
    method()
