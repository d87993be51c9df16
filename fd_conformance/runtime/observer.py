"""Native mode's interface: a runtime observing the graphs a model makes with its framework's own
API, and the framework graph classes being watched now.

Apart from :mod:`.graph` because only native mode needs it: the kit's own graphs report themselves.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from fd_conformance.runtime.graph import Graph

# Framework graph classes a GraphObserver is watching now: the ownership walk (suite/_support)
# counts their instances as graphs, as it counts the kit's own Graph objects.
OBSERVED_GRAPH_TYPES: list[type] = []


class GraphObserver(abc.ABC):
    """Native mode: the runtime OBSERVES the graphs a model makes with its framework's own API.

    A model written without the kit (``torch.cuda.CUDAGraph`` directly, weights swapped with
    ``param.data = new``) never calls ``new_graph`` or ``release_parameter``; while an observer is
    installed, the adapter derives the same :class:`RuntimeEvent`s from the framework's graph
    calls and from the storage of the parameters those graphs captured, so the lifecycle rules
    and the suites read them unchanged. Installed for one check (a context manager).
    """

    @property
    @abc.abstractmethod
    def graph_types(self) -> tuple[type, ...]:
        """The framework graph classes observed (their instances are graphs to the ownership walk)."""

    @abc.abstractmethod
    def graphs(self) -> list[Graph]:
        """A :class:`Graph` stand-in for every framework graph captured while observing, in capture
        order, alive or not (``reset()`` on one resets the framework's graph)."""

    @abc.abstractmethod
    def set_roots(self, roots: Sequence[tuple[str, Any]]) -> None:
        """The models under test as (role, model): they name captured parameters and graph owners."""

    @abc.abstractmethod
    def observe(self, point: str) -> None:
        """An observation point (a lifecycle call's entry or exit): emit every storage change seen
        since the last one, then a MARK named ``point``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop observing and restore the framework's classes; idempotent."""

    def unknown_captures(self) -> list[str]:
        """Labels of graphs whose captured weights could not be read (their check is not judged)."""
        return []

    def __enter__(self) -> GraphObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
