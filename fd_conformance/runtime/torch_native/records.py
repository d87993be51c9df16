"""A framework graph as native mode knows it: the observer's record, and the kit's stand-in for it.

Neither holds the framework's graph alive: the model decides when its graphs die.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fd_conformance.errors import UsageError
from fd_conformance.runtime.base import BufferRef, Graph
from fd_conformance.runtime.torch_native.storage import Slot


@dataclass
class GraphRecord:
    """What the observer knows of one framework graph object."""

    graph: weakref.ref[Any]
    proxy: NativeGraph
    alive: bool = False
    slots: tuple[Slot, ...] = ()
    modules: dict[int, torch.nn.Module] = field(default_factory=dict)  # ran during the open capture
    tokens: int | None = None  # leading dim of the first module's first tensor input (the label's size)
    groups: set[int] = field(default_factory=set)  # id() of the process groups its collectives ran on
    # Where the open capture runs: only modules and collectives called on that thread are its own
    # (torch captures per thread and stream); on a CUDA graph, only while this thread's current
    # stream is capturing too (a side stream joined into the capture is; an unrelated one is not).
    thread: int = 0
    stream_checked: bool = False
    # Its slots' refs as its events carry them, and the observer's move count they were read at:
    # the same tuple at every replay while nothing moved (the recorder compares it by identity)
    refs: tuple[BufferRef, ...] = ()
    refs_at: int = -1
    compiled: bool = False  # recorded by torch.compile's cudagraph trees (it dies with its tree)


class NativeGraph(Graph):
    """The kit's view of one framework graph: what the suites read (label, owner, alive, reset),
    without holding the framework's graph alive (the model decides when it dies)."""

    def __init__(self, record_of: Callable[[int], GraphRecord | None], graph: Any, number: int) -> None:
        self._record_of = record_of
        self._graph = weakref.ref(graph)
        self._identity = id(graph)
        self.label = f"{type(graph).__name__}#{number}"
        self.owner = ""

    @property
    def identity(self) -> int:
        return self._identity

    @property
    def alive(self) -> bool:
        record = self._record_of(self._identity)
        return record is not None and record.proxy is self and record.alive and self._graph() is not None

    def capture(self, fn: Callable[[], Any], *, buffers: Any = (), groups: Sequence[Any] = ()) -> Any:
        raise UsageError(
            f"native graph {self.label!r} is captured by the model itself",
            "capture with torch.cuda.graph(...) in the model; the kit only observes native graphs",
        )

    def replay(self) -> None:
        graph = self._graph()
        if graph is None or not self.alive:
            raise RuntimeError(f"native graph {self.label!r} is not captured")
        graph.replay()

    def reset(self) -> None:
        graph = self._graph()
        if graph is not None and self.alive:
            record = self._record_of(self._identity)
            if record is not None and record.compiled:
                # A tree's graph reset alone leaves its node to replay it later ("replay without a
                # preceding capture"): the compiled state goes, and its graphs die with it.
                torch.compiler.reset()
                return
            graph.reset()  # through the wrapped class method: GRAPH_DESTROYED is emitted there
