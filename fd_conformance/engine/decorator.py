"""``@support_graph_optimization`` for an INNER model, and the helpers that set and switch it.

FastDeploy decorates the inner model; the engine-facing wrapper stays undecorated and delegates
``clear_graph_opt_backend()`` to it. The decorator keeps the undecorated forward as
``eager_forward`` (the reference a replay is compared with) and routes ``forward`` through a
:class:`~fd_conformance.engine.backend.GraphOptBackend` built on first use, only while graphs are on.
Attributes go into ``__dict__`` directly: ``torch.nn.Module``/``paddle.nn.Layer`` ``__setattr__``
would try to register them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from fd_conformance.engine.backend import GraphOptBackend
from fd_conformance.engine.config import GraphOptConfig
from fd_conformance.runtime.base import CLEAR_BEGIN_MARK, CLEAR_END_MARK, Graph, Runtime

__all__ = [
    "BACKEND_ATTR",
    "graph_opt_backend",
    "init_graph_opt",
    "set_graph_opt_enabled",
    "support_graph_optimization",
]

ModelT = TypeVar("ModelT", bound=type)
BACKEND_ATTR = "graph_opt_backend"


def support_graph_optimization(cls: ModelT) -> ModelT:
    """Class decorator for an INNER model: dispatch ``forward`` through a :class:`GraphOptBackend`.

    The backend exists only when ``graph_opt_config.use_cudagraph`` is on (as in FastDeploy);
    ``clear_graph_opt_backend()`` is added and is a safe no-op without one. Adds ``eager_forward``
    (the undecorated forward), ``make_graph_fn`` and ``graphs()``.
    """
    target: Any = cls  # members are added at run time: a type checker cannot know them on ModelT
    eager = target.forward

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

    target.forward = forward
    target.eager_forward = eager
    if "make_graph_fn" not in vars(cls):
        target.make_graph_fn = make_graph_fn
    if "clear_graph_opt_backend" not in vars(cls):
        target.clear_graph_opt_backend = clear_graph_opt_backend
    target.graphs = graphs
    target.supports_graph_optimization = True
    return cls


def graph_opt_backend(model: Any) -> GraphOptBackend | None:
    """The model's backend, built on first use when graphs are on (None when they are off)."""
    backend: GraphOptBackend | None = model.__dict__.get(BACKEND_ATTR)
    if backend is None and model.graph_opt_config.use_cudagraph:
        backend = GraphOptBackend(model, functools.partial(type(model).eager_forward, model))
        model.__dict__[BACKEND_ATTR] = backend
    return backend


def set_graph_opt_enabled(model: Any, enabled: bool) -> None:
    """Switch graphs on/off for one inner model (the runner's ``use_cudagraph`` flags land here).

    Switching off does not clear: graphs already captured stay owned until ``clear_graph_opt_backend()``.
    """
    model.__dict__["graph_opt_config"] = dataclasses.replace(model.graph_opt_config, use_cudagraph=bool(enabled))


def init_graph_opt(model: Any, runtime: Runtime, config: GraphOptConfig, owner: str) -> None:
    """Set the attributes a decorated model needs; call from the inner model's ``__init__``
    (after ``super().__init__()``). ``owner`` labels its graphs in events and findings."""
    model.__dict__["runtime"] = runtime
    model.__dict__["graph_opt_config"] = config
    model.__dict__["graph_owner"] = owner
