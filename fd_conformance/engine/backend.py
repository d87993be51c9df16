"""Per-size capture/replay dispatch for one graph-optimised inner model (FastDeploy's graph-opt backend).

One entry per padded token count: a call is padded up to the nearest capture size, the first
``warmup_runs`` calls of a size run eagerly, the next one captures, later ones replay. Clearing
destroys every graph, drops the persistent output buffers (a graph pool's memory stays held while
they live), empties the allocator cache and rebuilds empty entries so warm-ups run again.

Framework-free: it talks only to :class:`fd_conformance.runtime.base.Runtime` (``new_graph``,
``copy_into``, ``clone``, ``empty_cache``); the model supplies what is framework specific
(:class:`GraphOptimizable`).

Padding contract: every graph input is token-first and padding rows are appended at the END; a
model with causal attention and per-token MLP/MoE never lets padding change the real rows.
Unlike FastDeploy, clearing is a safe no-op when nothing was captured yet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from fd_conformance.engine.config import GraphOptConfig
from fd_conformance.runtime.base import Graph, Group, Runtime

__all__ = ["GraphEntry", "GraphOptBackend", "GraphOptimizable"]


@runtime_checkable
class GraphOptimizable(Protocol):
    """What an inner model decorated with :func:`~fd_conformance.engine.support_graph_optimization` provides.

    ``forward(**inputs)`` takes token-first tensors as KEYWORD arguments (the backend calls it with
    its persistent buffers by name) and returns ONE token-first tensor. ``runtime``,
    ``graph_opt_config`` and ``graph_owner`` are set by :func:`~fd_conformance.engine.init_graph_opt`.
    An optional ``fill_static_inputs(static, inputs, num_tokens)`` replaces the default row copy.
    """

    runtime: Runtime
    graph_opt_config: GraphOptConfig
    graph_owner: str  # "main" | "draft" | any label: lifecycle events and findings name it

    def named_parameters(self) -> Iterable[tuple[str, Any]]: ...

    def graph_groups(self) -> Sequence[Group]:
        """Communication groups whose collectives the forward runs (captured with the graph)."""
        ...

    def new_static_inputs(self, size: int) -> dict[str, Any]:
        """Fresh persistent input buffers for ``size`` tokens (padding rows included)."""
        ...


@dataclass
class GraphEntry:
    """One padded token count: warm-up counter, its graph, static inputs and output buffer."""

    size: int
    warmups_done: int = 0
    graph: Graph | None = None
    static_inputs: dict[str, Any] | None = None
    output_buffer: Any = None


@dataclass
class GraphOptBackend:
    """Per-size capture/replay dispatch for one decorated inner model."""

    model: Any  # a GraphOptimizable, plus the make_graph_fn the decorator installs
    eager_forward: Callable[..., Any]  # the undecorated forward, bound to ``model``
    entries: dict[int, GraphEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rebuild_entries()

    @property
    def config(self) -> GraphOptConfig:
        config: GraphOptConfig = self.model.graph_opt_config
        return config

    @property
    def runtime(self) -> Runtime:
        runtime: Runtime = self.model.runtime
        return runtime

    def rebuild_entries(self) -> None:
        """Empty entries for every capture size: warm-ups run again before the next capture."""
        self.entries = {size: GraphEntry(size) for size in self.config.capture_sizes}

    def graphs(self) -> list[Graph]:
        return [entry.graph for entry in self.entries.values() if entry.graph is not None]

    def __call__(self, **inputs: Any) -> Any:
        num_tokens = _num_tokens(inputs)
        size = self.config.padded_size(num_tokens)
        if size is None:
            return self.eager_forward(**inputs)  # above the largest capture size: eager, as FastDeploy
        entry = self.entries[size]
        if entry.static_inputs is None:
            entry.static_inputs = self.model.new_static_inputs(size)
        _fill_static_inputs(self.model, entry.static_inputs, inputs, num_tokens)
        if entry.graph is None:
            if entry.warmups_done < self.config.warmup_runs:
                entry.warmups_done += 1
                return self.eager_forward(**entry.static_inputs)[:num_tokens]
            self._capture(entry)
        assert entry.graph is not None
        entry.graph.replay()
        # A copy: the output buffer is overwritten by the next replay of this size.
        return self.runtime.clone(entry.output_buffer[:num_tokens])

    def _capture(self, entry: GraphEntry) -> None:
        assert entry.static_inputs is not None
        model = self.model
        graph = self.runtime.new_graph(f"{model.graph_owner}:{entry.size}", owner=model.graph_owner)
        buffers = {name: tensor for name, tensor in model.named_parameters()}
        buffers.update({f"static_input.{name}": tensor for name, tensor in entry.static_inputs.items()})
        fn = model.make_graph_fn(entry.static_inputs)
        entry.output_buffer = graph.capture(fn, buffers=buffers, groups=tuple(model.graph_groups()))
        entry.graph = graph

    def clear(self) -> None:
        """Destroy every graph, drop output buffers, empty the cache, rebuild empty entries."""
        for entry in self.entries.values():
            if entry.graph is not None:
                entry.graph.reset()
            entry.graph = None
            entry.output_buffer = None  # the graph pool's memory stays held while this lives
            entry.static_inputs = None
        self.runtime.empty_cache()
        self.rebuild_entries()


def _num_tokens(inputs: Mapping[str, Any]) -> int:
    if not inputs:
        raise TypeError("graph-optimised forward needs token-first tensor keyword inputs")
    return int(next(iter(inputs.values())).shape[0])


def _fill_static_inputs(model: Any, static: dict[str, Any], inputs: Mapping[str, Any], num_tokens: int) -> None:
    """Copy the real rows into the persistent buffers; padding rows keep what they hold."""
    fill = getattr(model, "fill_static_inputs", None)
    if fill is not None:
        fill(static, inputs, num_tokens)
        return
    runtime: Runtime = model.runtime
    for name, value in inputs.items():
        runtime.copy_into(static[name][:num_tokens], value)
