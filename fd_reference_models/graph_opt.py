"""A FastDeploy-shaped, runtime-neutral graph-opt backend for the reference models.

FastDeploy decorates the *inner* model (``@support_graph_optimization``); the engine-facing
wrapper stays undecorated and delegates ``clear_graph_opt_backend()`` to it. The backend keeps one
entry per padded token count: real calls are padded up to the nearest capture size, the first
``warmup_runs`` calls of a size run eagerly, the next one captures, later ones replay. Clearing
destroys every graph, drops the persistent output buffers, empties the allocator cache and
rebuilds empty entries so warm-ups run again.

Framework-free on purpose: the Paddle and PyTorch reference models both use it, talking only to
:class:`fd_conformance.runtime.base.Runtime`. The decorated class supplies what is framework
specific (see :class:`GraphOptimizable`).

Padding contract: every graph input is token-first and padding rows are appended at the END; the
models use causal attention and per-token MLP/MoE, so padding never changes the real rows.
Unlike FastDeploy, clearing is a safe no-op when graphs are off or nothing was captured yet
(FastDeploy raises AttributeError there; :mod:`fd_reference_models.mutants` reproduces that).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from fd_conformance.errors import UsageError
from fd_conformance.runtime.base import CLEAR_BEGIN_MARK, CLEAR_END_MARK, Graph, Group, Runtime

DEFAULT_WARMUP_RUNS = 2  # FastDeploy's default cudagraph warm-up count


@dataclass(frozen=True)
class GraphOptConfig:
    """The slice of FastDeploy's graph-opt config one model needs."""

    use_cudagraph: bool = True
    capture_sizes: tuple[int, ...] = (4, 2, 1)
    warmup_runs: int = DEFAULT_WARMUP_RUNS

    def __post_init__(self) -> None:
        sizes = self.capture_sizes
        if not sizes or any(int(s) <= 0 for s in sizes) or len(set(sizes)) != len(sizes):
            raise UsageError(
                f"graph-opt capture_sizes {sizes!r} must be unique positive token counts",
                "give e.g. capture_sizes=(4, 2, 1)",
            )
        if self.warmup_runs < 0:
            raise UsageError(f"graph-opt warmup_runs={self.warmup_runs} is negative", "use 0 or more warm-up runs")
        # Descending, as FastDeploy captures decode sizes (largest first reserves the pool once).
        object.__setattr__(self, "capture_sizes", tuple(sorted((int(s) for s in sizes), reverse=True)))

    def padded_size(self, num_tokens: int) -> int | None:
        """Smallest capture size that holds ``num_tokens``; None means run eagerly."""
        fitting = [size for size in self.capture_sizes if size >= num_tokens]
        return min(fitting) if fitting else None


@runtime_checkable
class GraphOptimizable(Protocol):
    """What a class decorated with :func:`support_graph_optimization` must provide.

    ``forward(**inputs)`` takes token-first tensors and returns ONE token-first tensor.
    """

    runtime: Runtime
    graph_opt_config: GraphOptConfig
    graph_owner: str  # "main" | "draft": lifecycle events and findings name it

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

    model: Any  # a GraphOptimizable
    eager_forward: Callable[..., Any]  # the undecorated forward, bound to ``model``
    entries: dict[int, GraphEntry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rebuild_entries()

    @property
    def config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    @property
    def runtime(self) -> Runtime:
        return self.model.runtime  # type: ignore[no-any-return]

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


ModelT = TypeVar("ModelT", bound=type)


def support_graph_optimization(cls: ModelT) -> ModelT:
    """Class decorator for an INNER model: dispatch ``forward`` through a :class:`GraphOptBackend`.

    The backend exists only when ``graph_opt_config.use_cudagraph`` is on (as in FastDeploy);
    ``clear_graph_opt_backend()`` is added and is a safe no-op without one.
    """
    eager = cls.forward

    @functools.wraps(eager)
    def forward(self: Any, **inputs: Any) -> Any:
        if not self.graph_opt_config.use_cudagraph:
            return eager(self, **inputs)  # graphs off (possibly switched off after a capture)
        backend = graph_opt_backend(self)
        assert backend is not None
        return backend(**inputs)

    def make_graph_fn(self: Any, static_inputs: dict[str, Any]) -> Callable[[], Any]:
        """The callable a graph captures: the eager forward on the persistent inputs."""
        return lambda: eager(self, **static_inputs)

    def clear_graph_opt_backend(self: Any) -> None:
        """Destroy this model's graphs and buffers; safe before capture, twice, and with graphs off."""
        self.runtime.events.mark(CLEAR_BEGIN_MARK, owner=self.graph_owner)
        backend = graph_opt_backend(self)
        if backend is not None:
            backend.clear()
        self.runtime.events.mark(CLEAR_END_MARK, owner=self.graph_owner)

    def graphs(self: Any) -> list[Graph]:
        backend = graph_opt_backend(self)
        return [] if backend is None else backend.graphs()

    cls.forward = forward
    cls.eager_forward = eager
    if "make_graph_fn" not in vars(cls):
        cls.make_graph_fn = make_graph_fn
    if "clear_graph_opt_backend" not in vars(cls):
        cls.clear_graph_opt_backend = clear_graph_opt_backend
    cls.graphs = graphs
    cls.supports_graph_optimization = True
    return cls


BACKEND_ATTR = "graph_opt_backend"


def graph_opt_backend(model: Any) -> GraphOptBackend | None:
    """The model's backend, built on first use when graphs are on (None when they are off)."""
    backend: GraphOptBackend | None = model.__dict__.get(BACKEND_ATTR)
    if backend is None and model.graph_opt_config.use_cudagraph:
        backend = GraphOptBackend(model, functools.partial(type(model).eager_forward, model))
        # Plain __dict__ write: torch.nn.Module/paddle.nn.Layer __setattr__ would try to register it.
        model.__dict__[BACKEND_ATTR] = backend
    return backend


def set_graph_opt_enabled(model: Any, enabled: bool) -> None:
    """Switch graphs on/off for one inner model (the runner's ``use_cudagraph`` flags land here).

    Switching off does not clear: graphs already captured stay owned until ``clear_graph_opt_backend()``.
    """
    model.__dict__["graph_opt_config"] = dataclasses.replace(model.graph_opt_config, use_cudagraph=bool(enabled))


def init_graph_opt(model: Any, runtime: Runtime, config: GraphOptConfig, owner: str) -> None:
    """Set the attributes :class:`GraphOptimizable` needs; call from the inner model's __init__."""
    model.__dict__["runtime"] = runtime
    model.__dict__["graph_opt_config"] = config
    model.__dict__["graph_owner"] = owner
