"""A failing check's lifecycle trace: the steps of the cycle it failed in, for its picture.

While a check runs, :class:`TraceLog` keeps every event its runtime emits. When the check ends with
error findings, :func:`check_trace` cuts the events down to what a reader needs: the cycle holding
the first flagged event (from the capture of the graphs alive at it to the next capture), runs of
one kind on one lane collapsed into one step ("release 124 params (embed.weight, ...)"), at most
:data:`STEPS_LIMIT` steps. Each step is flagged with the codes of the findings about its event
(:attr:`fd_conformance.findings.Finding.event`). Lanes are what a reader thinks in: the engine, one
per graph (its label: owner and capture size), one per weight group (the parameters a model's graphs
captured), one per communication group. No object id or address appears: the same run gives the
same trace, so documentation and snapshots built from it are stable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fd_conformance.findings import Finding
from fd_conformance.runtime.events import EventKind, RuntimeEvent

#: The most steps one trace keeps; the rest is counted in gap steps ("12 steps not shown").
STEPS_LIMIT = 30
#: Steps kept from the start of the cycle (its captures) before anything is cut.
LEAD_STEPS = 8
#: Steps kept after each flagged step when the cycle is cut (before the first, all the limit allows).
CONTEXT_AFTER = 2
#: Parameter names a release or restore step spells out; the rest are counted.
NAMES_SHOWN = 2
ENGINE = "engine"  # the lane of the runner and the kit: marks, and the sender of every call

STEP_KIND = {
    EventKind.GRAPH_CAPTURED: "capture",
    EventKind.GRAPH_REPLAYED: "replay",
    EventKind.GRAPH_DESTROYED: "destroy",
    EventKind.PARAM_RELEASED: "release",
    EventKind.PARAM_RESTORED: "restore",
    EventKind.GROUP_CREATED: "create",
    EventKind.GROUP_SHUTDOWN: "shutdown",
    EventKind.MARK: "mark",
}
GAP = "gap"  # a step standing for steps the limit cut


@dataclass
class TraceLog:
    """Every event of one check's runtime, in order (a listener on its bus)."""

    events: list[RuntimeEvent] = field(default_factory=list)

    def __call__(self, event: RuntimeEvent) -> None:
        self.events.append(event)

    @property
    def last_seq(self) -> int | None:
        return self.events[-1].seq if self.events else None


def graph_lane(label: str, owner: str = "") -> str:
    """``graph main:4``: a graph's lane, by its label (owner and capture size), never its object."""
    named = label if not owner or label.startswith(owner) else f"{owner}:{label}"
    return f"graph {named}"


class _Lanes:
    """Which lane each event belongs to. A parameter's lane is the weights of the owner whose graph
    captured it first (one lane per model, not per parameter); one never captured: "weights"."""

    def __init__(self, events: Sequence[RuntimeEvent]) -> None:
        self.param_owner: dict[int, str] = {}
        self.graph_of_label: dict[str, str] = {}
        for event in events:
            if event.kind is EventKind.GRAPH_CAPTURED:
                self.graph_of_label.setdefault(event.subject, graph_lane(event.subject, event.owner))
                for ref in event.buffers:
                    self.param_owner.setdefault(ref.obj_id, event.owner)

    def of(self, event: RuntimeEvent) -> str:
        kind = event.kind
        if kind in (EventKind.GRAPH_CAPTURED, EventKind.GRAPH_REPLAYED, EventKind.GRAPH_DESTROYED):
            return graph_lane(event.subject, event.owner)
        if kind in (EventKind.PARAM_RELEASED, EventKind.PARAM_RESTORED):
            owner = self.param_owner.get(event.subject_id)
            return f"{owner} weights" if owner else "weights"
        if kind in (EventKind.GROUP_CREATED, EventKind.GROUP_SHUTDOWN):
            return f"group {event.subject}"
        return ENGINE

    def of_graph(self, label: str) -> str:
        return self.graph_of_label.get(label) or graph_lane(label)


@dataclass
class _Step:
    kind: str
    lane: str
    events: list[RuntimeEvent]
    codes: list[str] = field(default_factory=list)
    about: list[str] = field(default_factory=list)  # graph lanes the step's findings name

    def key(self) -> tuple[str, str, str]:
        mark = self.events[0].subject if self.kind == "mark" else ""
        return self.kind, self.lane, mark

    def to_dict(self) -> dict[str, Any]:
        step: dict[str, Any] = {"kind": self.kind, "lane": self.lane, "text": _text(self), "count": len(self.events)}
        step["flag"] = ", ".join(self.codes)
        step["about"] = list(self.about)
        return step


def _text(step: _Step) -> str:
    count = len(step.events)
    times = f" x{count}" if count > 1 else ""
    if step.kind in ("release", "restore"):
        names = list(dict.fromkeys(e.subject for e in step.events if e.subject))
        shown = ", ".join(names[:NAMES_SHOWN]) + (", ..." if len(names) > NAMES_SHOWN else "")
        noun = "param" if count == 1 else "params"
        return f"{step.kind} {count} {noun}" + (f" ({shown})" if shown else "")
    if step.kind == "mark":
        owner = step.events[0].owner
        return f"{owner + ' ' if owner else ''}{step.events[0].subject}{times}"
    if step.kind == "shutdown":
        return f"shut down{times}"
    return f"{step.kind}{times}"


def _anchor(events: Sequence[RuntimeEvent], flagged: Mapping[int, list[Finding]]) -> int | None:
    """Index of the first event an error finding is about (a warning's when no error has one)."""
    errors = [i for i, e in enumerate(events) if any(f.is_error for f in flagged.get(e.seq, []))]
    if errors:
        return errors[0]
    any_flag = [i for i, e in enumerate(events) if e.seq in flagged]
    return any_flag[0] if any_flag else None


def _cycle(events: Sequence[RuntimeEvent], anchor: int | None) -> tuple[int, int]:
    """[start, end) of the cycle holding ``anchor``: from the capture run that captured the graphs
    alive at it to the next capture after it; with no anchor (a passing check), its first cycle,
    from its first event."""
    captures = [i for i, e in enumerate(events) if e.kind is EventKind.GRAPH_CAPTURED]
    if anchor is None:
        start = 0
        pivot = next((i for i in range(len(events)) if events[i].kind is EventKind.GRAPH_DESTROYED), len(events))
    else:
        alive: dict[int, int] = {}
        for i in range(anchor + 1):
            event = events[i]
            if event.kind is EventKind.GRAPH_CAPTURED:
                alive[event.subject_id] = i
            elif event.kind is EventKind.GRAPH_DESTROYED and i < anchor:
                alive.pop(event.subject_id, None)
        before = [i for i in captures if i <= anchor]
        start = min(alive.values()) if alive else (before[-1] if before else 0)
        pivot = anchor
    while start > 0 and events[start - 1].kind in (EventKind.GRAPH_CAPTURED, EventKind.GRAPH_REPLAYED):
        start -= 1  # the whole capture run (a capture may warm up by replaying): every graph of the cycle begins
    while start > 0 and events[start - 1].kind is EventKind.MARK:
        start -= 1  # and the call that captured them, when it says so (a runner's or the kit's mark)
    after = pivot + 1
    while after < len(events) and events[after].kind is EventKind.GRAPH_CAPTURED:
        after += 1  # captures right after the pivot belong to its own run
    end = next((i for i in captures if i >= after), len(events))
    return start, end


def _steps(events: Iterable[RuntimeEvent], lanes: _Lanes, flagged: Mapping[int, list[Finding]]) -> list[_Step]:
    """Events as steps: a run of one kind on one lane (one mark text) is one step, its flags merged."""
    steps: list[_Step] = []
    for event in events:
        step = _Step(STEP_KIND[event.kind], lanes.of(event), [event])
        if steps and steps[-1].key() == step.key():
            step = steps[-1]
            step.events.append(event)
        else:
            steps.append(step)
        for finding in flagged.get(event.seq, []):
            if finding.code not in step.codes:
                step.codes.append(finding.code)
            graph = finding.event.graph if finding.event is not None else ""
            if graph and lanes.of_graph(graph) not in step.about:
                step.about.append(lanes.of_graph(graph))
    return steps


def _alive_counts(steps: Iterable[_Step]) -> dict[str, int]:
    """Net captures minus destroys per graph lane over ``steps``: how a gap moves the lifelines."""
    shift: dict[str, int] = {}
    for step in steps:
        delta = len(step.events) if step.kind == "capture" else -len(step.events) if step.kind == "destroy" else 0
        if delta:
            shift[step.lane] = shift.get(step.lane, 0) + delta
    return {lane: n for lane, n in shift.items() if n}


def _kept(steps: Sequence[_Step]) -> list[int]:
    """Indices of the steps a trace keeps: all within the limit; else the lead (the cycle's
    captures), each flagged step and the few after it, then what led to the first flagged step,
    then what follows, until the limit. Without a flag (a passing check), the first steps."""
    if len(steps) <= STEPS_LIMIT:
        return list(range(len(steps)))
    flags = [index for index, step in enumerate(steps) if step.codes]
    if not flags:
        return list(range(STEPS_LIMIT))
    keep: list[int] = []
    wanted = [*range(LEAD_STEPS)]
    for index in flags:
        wanted += range(index, min(len(steps), index + CONTEXT_AFTER + 1))
    wanted += range(flags[0] - 1, -1, -1)  # back from the first flag: how the cycle got there
    wanted += range(flags[0], len(steps))
    for index in wanted:
        if len(keep) == STEPS_LIMIT:
            break
        if index not in keep:
            keep.append(index)
    return sorted(keep)


def _laid_out(steps: Sequence[_Step]) -> list[dict[str, Any]]:
    """The kept steps as dicts, a gap step (what it hides, how it moves the lifelines) between runs."""
    kept = _kept(steps)
    out: list[dict[str, Any]] = []
    previous = -1
    for index in [*kept, len(steps)]:
        hidden = steps[previous + 1 : index]
        if hidden:
            flags = list(dict.fromkeys(c for s in hidden for c in s.codes))
            text = f"{len(hidden)} steps not shown" + (f" (flagged {', '.join(flags)})" if flags else "")
            out.append(
                {
                    "kind": GAP,
                    "lane": ENGINE,
                    "text": text,
                    "count": len(hidden),
                    "flag": "",
                    "about": [],
                    "shift": _alive_counts(hidden),
                }
            )
        if index < len(steps):
            out.append(steps[index].to_dict())
        previous = index
    return out


def check_trace(events: Sequence[RuntimeEvent], findings: Iterable[Finding], always: bool = False) -> dict[str, Any] | None:
    """The trace of a check that saw ``events`` and made ``findings``; None when it has no error
    finding (unless ``always``: the documentation's good twins) or saw no graph captured.

    ``{"lanes": [...], "alive": {lane: n}, "steps": [...], "earlier": n, "later": n, "later_flags": [...]}``:
    ``alive`` the graphs alive when the trace begins; ``earlier``/``later`` how many events lie
    before and after the cycle shown; each step ``{kind, lane, text, count, flag, about}``, ``flag``
    the codes of the findings about its events ("" for none), ``about`` the graph lanes they name.
    """
    findings = list(findings)
    if not (always or any(f.is_error for f in findings)):
        return None
    if not any(e.kind is EventKind.GRAPH_CAPTURED for e in events):
        return None  # no graph, no lifecycle to draw: a protocol or config check
    flagged: dict[int, list[Finding]] = {}
    for finding in findings:
        if finding.event is not None and finding.event.seq is not None:
            flagged.setdefault(finding.event.seq, []).append(finding)
    lanes = _Lanes(events)
    start, end = _cycle(events, _anchor(events, flagged))
    alive = {lane: n for lane, n in _alive_counts(_steps(events[:start], lanes, {})).items() if n > 0}
    cycle = _steps(events[start:end], lanes, flagged)
    steps = _laid_out(cycle)
    later = _steps(events[end:], lanes, flagged)
    # Lanes in the order the cycle first touches them (hidden steps included), the engine first;
    # only those the picture draws on.
    drawn = {ENGINE, *alive, *(s["lane"] for s in steps), *(a for s in steps for a in s["about"])}
    drawn |= {lane for s in steps for lane in s.get("shift", {})}
    order = [ENGINE, *alive, *(s.lane for s in cycle), *(a for s in cycle for a in s.about)]
    return {
        "lanes": [lane for lane in dict.fromkeys(order) if lane in drawn],
        "alive": alive,
        "steps": steps,
        "earlier": start,
        "later": len(events) - end,
        "later_flags": list(dict.fromkeys(c for s in later for c in s.codes)),
    }
