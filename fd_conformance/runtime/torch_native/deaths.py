"""When a native graph's death is reported: where the program's own acts put it, never where the
garbage collector happened to run.

A graph whose last reference is dropped dies at that statement, and its weakref callback is an
observation point like any graph call: the storage is scanned first, so a weight released before
the drop reads as released under a live graph (FDC201). A graph held by a reference cycle
(``make_graphed_callables`` keeps its graphs in a local class's closures) dies whenever the
collector runs -- automatically, by the model's own ``gc.collect()``, or by the observer's. A scan
from inside that collection would put the weights released before it ahead of the graph's death
or not, depending on when the collector ran. So a death found during a collection is queued and
reported, without a scan, when the collection ends; and a death found while an observation point
is under way (a finalizer fired by a listener mid-scan) is reported when that point is done: a
scan never runs inside another.

The verdict this gives: a graph the program can no longer reach is dead by the first observation
point after it became unreachable, before any release or group shutdown observed there (the
observer collects before judging one against a live graph, whether or not the collector ran
already). A drop of a cycle-held graph and a release with no observation point between them thus
read as drop-then-release, in either order: the observer cannot see which came first, no replay
can follow the drop, and the other choice would fail correct models whose clear only drops such
graphs. A release before a drop by the last reference is still FDC201.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class DeathQueue(Generic[T]):
    """The deaths that must wait, and whether one must: :meth:`phase` is a ``gc.callbacks`` entry
    (installed for the observer's lifetime), ``busy`` is set while an observation point is under way."""

    def __init__(self, report: Callable[[T], None]) -> None:
        self._report = report
        self._pending: list[T] = []
        self._collector: int | None = None  # the thread running a collection now (its finalizers run there)
        self.busy = False

    def must_wait(self) -> bool:
        """A death found now is reported later: it was found by a collection, or inside an observation point."""
        return self.busy or self._collector == threading.get_ident()

    def defer(self, item: T) -> None:
        self._pending.append(item)

    def flush(self) -> None:
        """Report every waiting death, in the order found (one reported by a listener's flush is not reported twice)."""
        pending = self._pending
        while pending:
            self._report(pending.pop(0))

    def phase(self, phase: str, info: dict[str, Any]) -> None:
        """A collection starts or stops: its deaths are reported when it stops, unless an
        observation point is under way (it reports them itself, after what it had already seen)."""
        if phase == "start":
            self._collector = threading.get_ident()
            return
        self._collector = None
        if not self.busy:
            self.flush()
