"""The event-emitting graph every adapter's graph builds on: capture, replay and reset (or the
garbage collector) report GRAPH_CAPTURED/REPLAYED/DESTROYED here once, for both frameworks and
the host emulation.

Apart from the :class:`~fd_conformance.runtime.base.Runtime` interface: it is the graph side of an
adapter, the runtime side being :class:`~fd_conformance.runtime.base.Runtime` itself.
"""

from __future__ import annotations

import abc
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fd_conformance.runtime.events import BufferRef, EventBus, EventKind
from fd_conformance.runtime.graph import Graph
from fd_conformance.runtime.group import Group

if TYPE_CHECKING:
    from fd_conformance.runtime.base import Runtime

BufferSpec = Iterable[Any] | Mapping[str, Any]  # tensors, or name -> tensor for readable findings


def named_buffers(buffers: BufferSpec) -> tuple[tuple[str, Any], ...]:
    """Normalise ``capture(buffers=...)``: a mapping keeps its names, a plain iterable gets none."""
    if isinstance(buffers, Mapping):
        return tuple((str(name), tensor) for name, tensor in buffers.items())
    return tuple(("", tensor) for tensor in buffers)


def _emit_collected(events: EventBus, label: str, owner: str, graph_id: int) -> None:
    """Finalizer body: kept free of any reference to the graph so the graph can be collected."""
    events.emit(EventKind.GRAPH_DESTROYED, label, graph_id, owner=owner)


class RecordedGraph(Graph):
    """A :class:`Graph` whose capture/replay/reset emit lifecycle events; adapters subclass it.

    The event logic lives here once so the CUDA graphs of both frameworks and the host emulation
    report identically. Subclasses implement ``_capture``/``_replay``/``_reset`` only. A graph that
    is garbage-collected without ``reset()`` still reports GRAPH_DESTROYED, because dropping the
    last reference to a framework graph destroys it (FastDeploy clears by dropping entries).
    """

    def __init__(self, runtime: Runtime, label: str, owner: str = "main") -> None:
        self.runtime = runtime
        self.label = label
        self.owner = owner
        self._alive = False
        self._buffers: tuple[tuple[str, Any], ...] = ()
        self._groups: tuple[Group, ...] = ()
        self._finalizer: weakref.finalize[..., RecordedGraph] | None = None
        # Captured while a native observer watched the framework's class: the observer reports
        # this graph (the same events, derived from the framework), so it stays silent itself.
        self._observed = False

    # --- framework-specific parts ---------------------------------------------------
    @abc.abstractmethod
    def _capture(self, fn: Callable[[], Any]) -> Any:
        """Capture ``fn`` and return its static outputs."""

    @abc.abstractmethod
    def _replay(self) -> None: ...

    @abc.abstractmethod
    def _reset(self) -> None:
        """Destroy the framework graph and drop every reference to its outputs and pool."""

    # --- the Graph interface ----------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def captured_buffers(self) -> tuple[tuple[str, Any], ...]:
        """(name, tensor) pairs given at capture; empty once destroyed."""
        return self._buffers

    @property
    def captured_groups(self) -> tuple[Group, ...]:
        return self._groups

    def current_refs(self) -> tuple[BufferRef, ...]:
        """The captured buffers at their addresses *now* (0 when released)."""
        return tuple(self.runtime.buffer_ref(tensor, name) for name, tensor in self._buffers)

    def capture(
        self,
        fn: Callable[[], Any],
        *,
        buffers: BufferSpec = (),
        groups: Sequence[Group] = (),
    ) -> Any:
        """Capture through the adapter's ``_capture`` and record what the graph baked in.

        The buffer addresses and groups are recorded HERE, once for every adapter, because the
        lifecycle checks (stale weights, group shut down under a live graph) compare against
        exactly what was true at capture time.
        """
        if self._alive:
            raise RuntimeError(f"graph {self.label!r} ({self.owner}) is already captured; reset() it first")
        self._buffers = named_buffers(buffers)
        self._groups = tuple(groups)
        refs = self.current_refs()  # addresses at capture: what the graph baked in
        try:
            outputs = self._capture(fn)
        except BaseException:
            self._buffers, self._groups = (), ()
            raise
        self._alive = True
        self.runtime._live_graphs.add(self)
        self._observed = self.runtime.observes_natively()
        if self._observed:
            return outputs
        self._finalizer = weakref.finalize(self, _emit_collected, self.runtime.events, self.label, self.owner, id(self))
        self._finalizer.atexit = False  # at interpreter exit nobody is listening; stay quiet
        self.runtime.events.emit(
            EventKind.GRAPH_CAPTURED,
            self.label,
            id(self),
            owner=self.owner,
            buffers=refs,
            groups=tuple(id(group) for group in self._groups),
        )
        return outputs

    def replay(self) -> None:
        if not self._alive:
            raise RuntimeError(f"graph {self.label!r} ({self.owner}) is not captured; capture() before replay()")
        # Emitted before replaying with the buffers' CURRENT addresses, so the recorder can judge a
        # replay on a GPU, where replaying a stale graph does not raise.
        if not self._observed:
            self.runtime.events.emit(
                EventKind.GRAPH_REPLAYED, self.label, id(self), owner=self.owner, buffers=self.current_refs()
            )
        self._replay()

    def reset(self) -> None:
        if not self._alive:
            return  # idempotent: clearing twice must be a safe no-op
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._reset()
        self._alive = False
        self.runtime._live_graphs.discard(self)
        self._buffers, self._groups = (), ()
        if not self._observed:
            self.runtime.events.emit(EventKind.GRAPH_DESTROYED, self.label, id(self), owner=self.owner)
