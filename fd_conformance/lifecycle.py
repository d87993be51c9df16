"""Lifecycle recorder: teardown-order rules checked against the runtime's real calls.

The runtime adapters emit a :class:`RuntimeEvent` from every real graph capture/replay/destroy,
parameter release/restore and group create/shutdown. :class:`LifecycleRecorder` listens, keeps
the ordered record and the set of live graphs, and turns rule violations into findings at the
moment they happen, naming the graph, its owner (main/draft) and the event that broke the rule:

* FDC201 a graph is alive when parameters it captured are released: ONE finding per graph
  capture, counting the parameters and naming the first few (a release loop frees hundreds,
  and one defect must read as one finding, not hundreds);
* FDC202 a graph is alive when a group it captured is shut down (the MTP hang: NCCL's destroy
  waits on graphs that captured the communicator);
* FDC203 graphs are alive after ``clear_graph_opt_backend()``. Two ways in, both supported:
  explicitly with :meth:`LifecycleRecorder.check_cleared` right after calling clear (the suites
  do this; it needs nothing from the model), and automatically at the MARK
  ``clear_graph_opt_backend:end`` when a model or runner emits it (owner "" means every graph,
  otherwise only graphs of that owner). Both first run the garbage collector, because a graph
  that is unreachable is being destroyed: dropping an entry is how FastDeploy clears;
* FDC204 a graph is replayed after a captured buffer was released or replaced. Judged from the
  addresses the replay event carries, so it works on a real GPU, where such a replay does not
  raise but silently reads freed or foreign memory.

A graph alive after a clear is blamed on the call at fault (:class:`Survivor`): the suites say
which object holds it (main model, draft model, or the runner itself) and whether that model's own
clear destroys it when called -- if it does, the runner's ``clear_parameters()`` left it (FDC203
naming the runner; FDC205/FDC206 when a graph flag was switched off after capture), not the clear.

The recorder is framework-neutral: it never touches tensors, only events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from fd_conformance.findings import EventRef, Finding, Location, make_finding
from fd_conformance.runtime.base import CLEAR_END_MARK, BufferRef, EventKind, RuntimeEvent

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from fd_conformance.runtime.base import Runtime

    #: Graph ids -> who holds each ("the draft model AcmeMTP"), for a finding to name (see judging()).
    HolderNames = Callable[[Sequence[int]], Mapping[int, str]]

#: Parameter names an FDC201 finding spells out; the rest are counted.
NAMES_SHOWN = 3


@dataclass
class _ReleaseBreach:
    """Parameters one live graph capture saw released: what its single FDC201 finding says."""

    graph: LiveGraph
    first_event: RuntimeEvent
    names: list[str]
    about: str  # the graph, and who holds it when the recorder was told (LifecycleRecorder.about)
    during: str  # " during Engine.clear_parameters()", or ""

    def finding(self) -> Finding:
        count = len(self.names)
        if count == 1:
            what = f"parameter {self.names[0]!r} it captured was released ({format_event(self.first_event)})"
        else:
            shown = ", ".join(repr(n) for n in self.names[:NAMES_SHOWN])
            more = f" and {count - NAMES_SHOWN} more" if count > NAMES_SHOWN else ""
            what = f"{count} parameters it captured were released ({shown}{more}; first at {format_event(self.first_event)})"
        found = make_finding("FDC201", f"{self.about} was alive when {what}{self.during}", self.graph.where)
        return at_event(found, self.first_event.seq, self.graph)


@dataclass(frozen=True)
class LiveGraph:
    """A graph the recorder saw captured and not yet destroyed."""

    graph_id: int
    label: str
    owner: str
    buffers: tuple[BufferRef, ...]
    groups: tuple[int, ...]
    captured_at: int  # seq of its GRAPH_CAPTURED event

    @property
    def where(self) -> Location:
        return Location(obj=f"graph {self.label!r} (owner {self.owner or '?'})")

    def describe(self) -> str:
        return f"graph {self.label!r} (owner {self.owner or '?'}, captured at event #{self.captured_at})"


def at_event(finding: Finding, seq: int | None, graph: LiveGraph) -> Finding:
    """``finding`` marked as being about event ``seq`` (None: the check's verdict stamps the event it
    is added after) and ``graph``: the step the check's lifecycle picture flags."""
    return dataclasses.replace(finding, event=EventRef(seq, graph.label))


def format_event(event: RuntimeEvent) -> str:
    """One line per event, for reports and the hang watchdog's "last lifecycle event"."""
    owner = f" [{event.owner}]" if event.owner else ""
    return f"#{event.seq} {event.kind.value} {event.subject!r}{owner}"


class LifecycleRecorder:
    """Records a runtime's events while active and evaluates the teardown-order rules on them.

    Use as a context manager (``with LifecycleRecorder(runtime) as rec: ...``) or with
    :meth:`start`/:meth:`stop`. Graphs captured before recording started are unknown to it.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._events: list[RuntimeEvent] = []
        self._live: dict[int, LiveGraph] = {}
        # In the order they happened; an FDC201 slot is a _ReleaseBreach that grows until read.
        self._findings: list[Finding | _ReleaseBreach] = []
        self._breaches: dict[tuple[int, int], _ReleaseBreach] = {}  # (graph id, capture seq)
        self._param_names: dict[int, str] = {}
        self._group_names: dict[int, str] = {}
        self._stale_reported: set[tuple[int, int]] = set()  # (graph id, capture seq): once per capture
        self._unsubscribe: Callable[[], None] | None = None
        self._call = ""  # the call under judgement (judging())
        self._holder_names: HolderNames | None = None
        self._holders: dict[int, str] = {}  # graph id -> who holds it, asked once per graph

    # --- recording ----------------------------------------------------------------------
    def start(self) -> LifecycleRecorder:
        if self._unsubscribe is None:
            self._unsubscribe = self.runtime.events.subscribe(self._on_event)
        return self

    def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def __enter__(self) -> LifecycleRecorder:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    @property
    def events(self) -> tuple[RuntimeEvent, ...]:
        return tuple(self._events)

    @property
    def last_event(self) -> RuntimeEvent | None:
        return self._events[-1] if self._events else None

    def live_graphs(self, owner: str | None = None) -> list[LiveGraph]:
        """Graphs alive now (by the record), optionally only one owner's."""
        return [g for g in self._live.values() if owner is None or g.owner == owner]

    def findings(self) -> list[Finding]:
        return [f.finding() if isinstance(f, _ReleaseBreach) else f for f in self._findings]

    @contextlib.contextmanager
    def judging(self, call: str, holder_names: HolderNames | None = None) -> Iterator[None]:
        """Findings made inside the block name ``call``, the call under judgement
        (``"Engine.clear_parameters()"``), and the object holding each graph: the recorder sees
        only events, so whoever knows the models passes ``holder_names`` (graph ids -> "the draft
        model AcmeMTP"), asked at a finding only, while the graph is alive and still held."""
        saved = self._call, self._holder_names
        self._call, self._holder_names, self._holders = call, holder_names, {}
        try:
            yield
        finally:
            (self._call, self._holder_names), self._holders = saved, {}

    def about(self, graph: LiveGraph) -> str:
        """The graph as a finding names it: label, owner label, capture event, and (while
        :meth:`judging` with holder names) the object holding it."""
        if self._holder_names is not None and graph.graph_id not in self._holders:
            asked = [g.graph_id for g in self._live.values() if g.graph_id not in self._holders]
            self._holders.update(self._holder_names(asked or [graph.graph_id]))
        holder = self._holders.get(graph.graph_id, "")
        return f"{graph.describe()}, held by {holder}," if holder else graph.describe()

    def _during(self) -> str:
        return f" during {self._call}" if self._call else ""

    def _report(self, code: str, message: str, graph: LiveGraph, event: RuntimeEvent) -> None:
        """A finding about ``graph`` made at ``event`` (the call under judgement appended)."""
        self._findings.append(at_event(make_finding(code, message + self._during(), graph.where), event.seq, graph))

    # --- rules --------------------------------------------------------------------------
    def check_cleared(self, owner: str | None = None, after: str = "clear_graph_opt_backend()") -> list[Finding]:
        """FDC203 for every graph (of ``owner``, or any) still alive; call right after ``after``
        (the call that should have destroyed them, named in the message).
        The findings are returned and also kept in :meth:`findings`."""
        last = self.last_event
        at = last.seq if last is not None else -1
        found = [
            at_event(
                make_finding(
                    "FDC203", f"{self.about(graph)} is still alive after {after} (checked after event #{at})", graph.where
                ),
                last.seq if last is not None else None,
                graph,
            )
            for graph in self.surviving_graphs(owner)
        ]
        self._findings.extend(found)
        return found

    def _on_event(self, event: RuntimeEvent) -> None:
        self._events.append(event)
        kind = event.kind
        if kind is EventKind.GRAPH_CAPTURED:
            self._live[event.subject_id] = LiveGraph(
                event.subject_id, event.subject, event.owner, event.buffers, event.groups, event.seq
            )
        elif kind is EventKind.GRAPH_DESTROYED:
            self._live.pop(event.subject_id, None)
        elif kind is EventKind.GRAPH_REPLAYED:
            self._check_replay(event)
        elif kind is EventKind.PARAM_RELEASED:
            self._param_names[event.subject_id] = event.subject
            self._check_release(event)
        elif kind is EventKind.PARAM_RESTORED:
            self._param_names[event.subject_id] = event.subject
        elif kind is EventKind.GROUP_CREATED:
            self._group_names[event.subject_id] = event.subject
        elif kind is EventKind.GROUP_SHUTDOWN:
            self._group_names[event.subject_id] = event.subject
            self._check_shutdown(event)
        elif kind is EventKind.MARK and event.subject == CLEAR_END_MARK:
            self._check_clear_mark(event)

    def _param_name(self, obj_id: int, fallback: str = "") -> str:
        return self._param_names.get(obj_id) or fallback or f"<tensor id {obj_id:#x}>"

    def _check_release(self, event: RuntimeEvent) -> None:
        name = self._param_name(event.subject_id)
        for graph in list(self._live.values()):
            if any(ref.obj_id == event.subject_id for ref in graph.buffers):
                key = (graph.graph_id, graph.captured_at)
                breach = self._breaches.get(key)
                if breach is None:
                    breach = self._breaches[key] = _ReleaseBreach(graph, event, [], self.about(graph), self._during())
                    self._findings.append(breach)
                breach.names.append(name)

    def _check_shutdown(self, event: RuntimeEvent) -> None:
        for graph in list(self._live.values()):
            if event.subject_id in graph.groups:
                what = f"group {event.subject!r} whose collectives it captured was shut down"
                self._report("FDC202", f"{self.about(graph)} was alive when {what} ({format_event(event)})", graph, event)

    def surviving_graphs(self, owner: str | None = None) -> list[LiveGraph]:
        """Live graphs of ``owner`` that survive a garbage collection.

        An unreachable graph is being destroyed (its finalizer emits GRAPH_DESTROYED, re-entering
        ``_on_event`` during the collection). A full collection costs ~0.1 s with torch loaded, so
        it runs only when a graph would otherwise be reported: the right order pays nothing.
        """
        if self.live_graphs(owner):
            gc.collect()
        return self.live_graphs(owner)

    def _check_clear_mark(self, event: RuntimeEvent) -> None:
        for graph in self.surviving_graphs(event.owner or None):
            self._report("FDC203", f"{self.about(graph)} is still alive at {format_event(event)}", graph, event)

    def _check_replay(self, event: RuntimeEvent) -> None:
        graph = self._live.get(event.subject_id)
        if graph is None or (graph.graph_id, graph.captured_at) in self._stale_reported:
            return  # captured before recording began (nothing to compare), or already reported
        if event.buffers == graph.buffers:
            return  # the usual replay, paid on the decode path: the same refs, compared by identity first
        now = {ref.obj_id: ref.address for ref in event.buffers}
        problems = []
        for ref in graph.buffers:
            current = now.get(ref.obj_id, ref.address)
            name = self._param_name(ref.obj_id, ref.name)
            if current == 0 and ref.address != 0:
                problems.append(f"{name!r} released")
            elif current != ref.address:
                problems.append(f"{name!r} replaced ({ref.address:#x} -> {current:#x})")
        if problems:
            self._stale_reported.add((graph.graph_id, graph.captured_at))
            changed = ", ".join(problems)
            self._report(
                "FDC204",
                f"{self.about(graph)} was replayed after captured buffers changed: {changed} ({format_event(event)})",
                graph,
                event,
            )


@dataclass(frozen=True)
class Survivor:
    """A graph alive after a call that had to destroy it, with who holds it, so the finding names
    the call at fault: a runner that never calls the draft's clear must not read as a broken clear.

    ``role`` is "main" or "draft" when that model object alone holds the graph, else "runner";
    ``holder`` says which object holds it ("the draft model AcmeMTP", "the runner Engine");
    ``own_clear`` is the holding model's clear ("AcmeMTP.clear_graph_opt_backend()"), "" when no
    model alone holds it; ``destroyer`` is the model clear that destroyed it when the kit called it
    afterwards, "" when none did; ``seen_at`` the last event before the kit called those clears
    (what a finding about it is marked at: the call that left it).
    """

    graph: LiveGraph
    role: str
    holder: str
    own_clear: str
    destroyer: str
    seen_at: int | None = None

    @property
    def runner_at_fault(self) -> bool:
        """The runner's call left it: a model's clear destroys it, or no model alone holds it."""
        return bool(self.destroyer) or not self.own_clear

    def finding(self, code: str, after: str, runner: str, context: str = "") -> Finding:
        """``code`` for this graph alive after ``after`` (e.g. ``"Engine.clear_parameters()"``) of the
        runner class ``runner``; ``context`` says when (a flag switched off, a weight cycle)."""
        what = f"{self.graph.describe()}, held by {self.holder}, is still alive after {after}{context}"
        if self.destroyer:
            why = f"{self.destroyer} destroys it when called, so {after} did not call it"
        elif self.own_clear:
            why = f"{self.own_clear} does not destroy it either"
        else:
            why = "no model's clear_graph_opt_backend() destroys it"
        return at_event(make_finding(code, f"{what}; {why}", self.graph.where, runner=runner), self.seen_at, self.graph)
