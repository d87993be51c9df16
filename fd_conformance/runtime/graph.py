"""What a captured graph is to the kit (:class:`Graph`), and the error a stale one raises where
graphs are host-emulated (:class:`StaleGraphError`).

Apart from the :class:`~fd_conformance.runtime.base.Runtime` interface because models and the
engine hold graphs without holding a runtime's other parts.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fd_conformance.runtime.group import Group


class StaleGraphError(RuntimeError):
    """A graph was replayed after a buffer it captured was released or moved, or after a
    group whose collectives it captured was shut down.

    Only the host emulation raises this; on a real GPU the same replay silently reads
    freed or foreign memory (garbage outputs or an illegal-address fault) or hangs.
    """


class Graph(abc.ABC):
    """One captured graph: capture once on static buffers, replay many times, then destroy."""

    label: str
    owner: str

    @abc.abstractmethod
    def capture(
        self,
        fn: Callable[[], Any],
        *,
        buffers: Iterable[Any] | Mapping[str, Any] = (),
        groups: Sequence[Group] = (),
    ) -> Any:
        """Capture ``fn()``; returns its (static) outputs. ``buffers`` are the tensors the
        graph depends on (parameters, static inputs), optionally as name -> tensor;
        ``groups`` whose collectives it runs."""

    @abc.abstractmethod
    def replay(self) -> None: ...

    @abc.abstractmethod
    def reset(self) -> None:
        """Destroy the graph and return its memory; idempotent."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    @property
    def identity(self) -> int:
        """id() of the object that IS the graph: the one its events name and the ownership walk
        finds (a native mode stand-in answers for the framework's graph object)."""
        return id(self)


def reset_graphs(graphs: Iterable[Graph]) -> None:
    """Reset each of ``graphs``: cleanup after a check, whose model may have half torn one down
    already (its own bug, judged by the check); such a graph is left as it is."""
    for graph in list(graphs):
        try:
            graph.reset()
        except Exception:  # noqa: BLE001 - the check's findings are made; resetting is cleanup
            pass
