"""Recorded graphs where FastDeploy keeps captured CUDA graphs: found in a wrapper's backends,
planted in their piecewise backends' entries, their capture and death events on an event bus.

Apart from the bridges that use them (the wrappers table and the runner over real wrappers):
where the graphs go is FastDeploy's layout (``graph_opt_backend`` -> its piecewise CUDA-graph
backend -> entries holding a ``cuda_graph``), and this module is the one place that knows it. A
recorded graph is alive while anything references it (FastDeploy frees a CUDA graph by dropping
its last reference), so survival is measured, not inferred.
"""

from __future__ import annotations

import inspect
import sys
import types
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from fd_conformance.lifecycle import LifecycleRecorder
from fd_conformance.runtime.base import EventBus, EventKind

if TYPE_CHECKING:
    from fd_conformance.runtime.base import Runtime

BACKEND_ATTR = "graph_opt_backend"
PIECEWISE_ATTR = "cudagraph_piecewise_backend"
PIECEWISE_CLASS = "CudaGraphPiecewiseBackend"
MAX_DEPTH = 6  # wrapper -> model -> layers list -> layer -> ...: backends sit on the first levels


class RecordedGraph:
    """Stands where FastDeploy keeps a captured CUDA graph; its death (last reference dropped) is
    the GRAPH_DESTROYED event. ``replay``/``reset`` exist so code that touches a graph runs."""

    def __init__(self, label: str) -> None:
        self.label = label

    def replay(self) -> None:
        return None

    def reset(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<RecordedGraph {self.label}>"


_ROUTINES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def backends_of(wrapper: Any) -> Iterator[tuple[str, Any]]:
    """(path, owner) for every object reachable from ``wrapper`` through attributes, lists and
    dicts (Paddle keeps sublayers in ``_sub_layers``) that has a graph-opt backend."""
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [("", wrapper, 0)]
    while stack:
        path, obj, depth = stack.pop()
        if id(obj) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(obj))
        if getattr(obj, "__dict__", None) is not None and BACKEND_ATTR in vars(obj):
            yield path or "(wrapper)", obj
        children: list[tuple[str, Any]] = []
        if isinstance(obj, dict):
            children = [(str(k), v) for k, v in obj.items()]
        elif isinstance(obj, list | tuple):
            children = [(str(i), v) for i, v in enumerate(obj)]
        elif hasattr(obj, "__dict__") and not isinstance(obj, type | types.ModuleType):
            children = [(k.removeprefix("_sub_layers"), v) for k, v in vars(obj).items() if k not in ("fd_config", BACKEND_ATTR)]
        for name, child in reversed(children):
            if child is None or isinstance(child, (str, int, float, bool, type, types.ModuleType, *_ROUTINES)):
                continue
            if type(child).__module__.split(".")[0] == "paddle" and not hasattr(child, "_sub_layers"):
                continue  # tensors, parameters, Paddle internals: never a FastDeploy backend holder
            stack.append((f"{path}.{name}".strip(".") if name else path, child, depth + 1))


def _piecewise(backend: Any) -> Any:
    """The backend's piecewise CUDA-graph backend: the one it has, or one made as its first
    graph step makes it (FastDeploy's own class, from the backend's module)."""
    existing = getattr(backend, PIECEWISE_ATTR, None)
    if existing is not None:
        return existing
    cls = getattr(sys.modules.get(type(backend).__module__), PIECEWISE_CLASS, None)
    if cls is None:
        raise LookupError(f"{type(backend).__qualname__} has no {PIECEWISE_ATTR} and its module no {PIECEWISE_CLASS}")
    offered = {
        "fd_config": backend.fd_config,
        "runnable": getattr(backend, "runnable", None),
        "dy_runnable": getattr(backend, "dy_runnable", getattr(backend, "runnable", None)),
    }
    accepted = inspect.signature(cls.__init__).parameters
    made = cls(**{k: v for k, v in offered.items() if k in accepted})
    setattr(backend, PIECEWISE_ATTR, made)
    return made


def _entries(piecewise: Any) -> list[Any]:
    """Where FastDeploy keeps captured graphs: entries (in a dict or list attribute) with a ``cuda_graph``."""
    found: list[Any] = []
    for value in vars(piecewise).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        found.extend(e for e in items if hasattr(e, "cuda_graph"))
    return found


def graph_entries(owner: Any) -> list[Any]:
    """The entries of ``owner``'s graph-opt backend that hold captured graphs (its piecewise
    backend made first, as the first step with graphs on makes it)."""
    return _entries(_piecewise(getattr(owner, BACKEND_ATTR)))


def record_graph(bus: EventBus, entry: Any, label: str, owner: str, **captured: Any) -> RecordedGraph:
    """A recorded graph put where FastDeploy keeps ``entry``'s captured graph; its capture and its
    death are events on ``bus`` (``captured``: the buffers and groups it captured)."""
    graph = RecordedGraph(label)
    entry.cuda_graph = graph
    if hasattr(entry, "captured"):
        entry.captured = True
    bus.emit(EventKind.GRAPH_CAPTURED, label, id(graph), owner=owner, **captured)
    weakref.finalize(graph, bus.emit, EventKind.GRAPH_DESTROYED, label, id(graph), owner=owner)
    return graph


class Recording:
    """The recorded graphs of one wrapper and the lifecycle recorder judging them."""

    def __init__(self) -> None:
        self.bus = EventBus()
        self.recorder = LifecycleRecorder(cast("Runtime", SimpleNamespace(events=self.bus)))  # reads only .events
        self.recorder.start()

    def plant(self, path: str, owner: Any) -> int:
        entries = graph_entries(owner)
        for index, entry in enumerate(entries):
            record_graph(self.bus, entry, f"{path}:{getattr(entry, 'real_shape', index)}", path)
        return len(entries)
