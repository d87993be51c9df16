"""Helpers shared by the suite modules: output comparison, clearing, memory resolution, recorder.

Kept private (underscore) so pytest never collects it and the suites stay one clause per module.
The capture-size judgement (FDC306) lives in :mod:`._sizes`; its names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import gc
import traceback
import types
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from fd_conformance.findings import EventRef, Finding, Location, make_finding
from fd_conformance.runtime.base import OBSERVED_GRAPH_TYPES, EventBus, Graph, Group, MemoryStats, Runtime
from fd_conformance.runtime.referents import function_state
from fd_conformance.suite._sizes import SIZE_FIELDS as SIZE_FIELDS
from fd_conformance.suite._sizes import capture_size_findings as capture_size_findings
from fd_conformance.suite._sizes import declared_sizes as declared_sizes
from fd_conformance.suite._sizes import step_sizes as step_sizes
from fd_conformance.verdict import CheckVerdict

if TYPE_CHECKING:
    from fd_conformance.lifecycle import Survivor

# The resolution is the smallest leak reported: a delta of at least this many bytes is a leak.
# On a GPU, memory is read from the caching allocator after synchronize + gc + empty_cache(); the
# noise floor of that figure on every bundled model is 0 B over 20 capture/clear cycles
# (bench/leak_resolution.py), so 4 KiB leaves headroom for allocator rounding (512 B blocks)
# while still seeing one forgotten output buffer of a tiny model.
GPU_MEMORY_RESOLUTION = 4 << 10
# Host emulation counts the exact bytes of live static outputs: any byte left over is a leak.
HOST_MEMORY_RESOLUTION = 1


def memory_resolution(runtime: Runtime) -> int:
    """Smallest leak (bytes) the memory checks report on ``runtime``."""
    return GPU_MEMORY_RESOLUTION if runtime.graphs_are_real else HOST_MEMORY_RESOLUTION


def settled_memory(runtime: Runtime) -> MemoryStats:
    """Allocator figures once pending work, garbage and the allocator cache are accounted for."""
    runtime.synchronize()
    gc.collect()
    runtime.empty_cache()
    return runtime.memory_stats()


def settled_allocated(runtime: Runtime) -> int:
    return settled_memory(runtime).allocated


def grows(held: list[int], resolution: int) -> bool:
    """A leak: total growth of at least the resolution, or growth in EVERY cycle (at least two in
    a row). A tiny model can leak less than the GPU resolution per cycle, but a correct one
    allocates the same bytes each cycle after empty_cache(), so steady growth is the signature."""
    if len(held) < 2:
        return False
    deltas = [b - a for a, b in zip(held, held[1:], strict=False)]
    return held[-1] - held[0] >= resolution or (len(deltas) >= 2 and all(d > 0 for d in deltas))


def models_of(subject: Any) -> list[tuple[str, Any]]:
    """("main", wrapper) and, when the case has one, ("draft", draft)."""
    models = [("main", subject.wrapper)]
    if subject.draft is not None:
        models.append(("draft", subject.draft))
    return models


# Objects the ownership walk never enters: they are shared by every model (the runtime and its
# event bus, groups, modules), so everything would be "reachable" through them. Code and classes
# are entered only where they hold state of their own (_referents).
_NOT_OWNERS = (Runtime, EventBus, Group, types.ModuleType)
#: Objects one walk visits at most: a tiny model has a few thousand; this bounds a pathological one.
OWNERSHIP_WALK_LIMIT = 500_000


def _referents(obj: Any) -> list[Any]:
    """What ``obj`` holds, for the ownership walk. Code is entered only where it holds state of
    its own: a function's closure cells, defaults and attributes (a wrapper may keep its graphs in
    a closure: make_graphed_callables does), a bound method's object, a class defined inside a
    function (a per-call class such as make_graphed_callables' ``Graphed``). Never a function's
    globals or a module-level class: everything is reachable through those."""
    if isinstance(obj, types.FunctionType):
        return function_state(obj)
    if isinstance(obj, (types.MethodType, types.BuiltinMethodType)):
        return [obj.__self__]
    if isinstance(obj, type):
        return list(vars(obj).values()) if "<locals>" in obj.__qualname__ else []
    return gc.get_referents(obj)


def _graphs_reachable(root: Any, avoid: Any) -> set[int]:
    """Ids of the graphs reachable from ``root`` through its attributes and containers, without
    passing through ``avoid`` (the other model) or the objects every model shares."""
    # Native mode looks for the framework's graph objects only: a kit graph made meanwhile is a
    # framework graph in a kit wrapper (runtime.new_graph under an observer), walked through.
    graph_types = tuple(OBSERVED_GRAPH_TYPES) or (Graph,)
    found: set[int] = set()
    seen = {id(root)}
    stack = [root]
    while stack and len(seen) < OWNERSHIP_WALK_LIMIT:
        obj = stack.pop()
        for ref in _referents(obj):
            if ref is None or id(ref) in seen or ref is avoid or isinstance(ref, _NOT_OWNERS):
                continue
            seen.add(id(ref))
            if isinstance(ref, graph_types):
                found.add(id(ref))  # a graph is owned, not walked through
            else:
                stack.append(ref)
    return found


def graphs_by_model(subject: Any) -> dict[str, list[Graph]]:
    """The subject's graphs attributed to the model OBJECT that holds them: "main" (reachable from
    the wrapper), "draft" (from the draft), or "unattributed" (held by neither alone -- by the
    runner, or by both). Owner labels are free text ("mtp", "spec", "eagle"...) and never decide."""
    graphs = list(subject.graphs())
    if subject.draft is None:
        return {"main": graphs, "draft": [], "unattributed": []}
    main = _graphs_reachable(subject.wrapper, avoid=subject.draft)
    draft = _graphs_reachable(subject.draft, avoid=subject.wrapper)
    out: dict[str, list[Graph]] = {"main": [], "draft": [], "unattributed": []}
    for graph in graphs:
        key = graph.identity  # a native stand-in answers for the framework graph the walk finds
        role = "main" if key in main and key not in draft else "draft" if key in draft and key not in main else "unattributed"
        out[role].append(graph)
    return out


def require_clear_methods(subject: Any) -> None:
    """Skip a lifecycle check when a wrapper has no working clear method (none at all, only
    forwarding shims to a name nothing defines, or one that binds to something not callable or
    needing arguments): the protocol check reports that (FDC001, FDC006, FDC005), and every later
    step would only fail as a consequence of it."""
    import pytest

    from fd_conformance.protocol import check_protocol, resolve_clear_method

    for role, model in models_of(subject):
        if resolve_clear_method(model) is None:
            codes = sorted({f.code for f in check_protocol(model) if f.is_error}) or ["FDC001"]
            pytest.skip(
                f"{role} wrapper {type(model).__qualname__} has no working clear method; the protocol check reports it "
                f"({', '.join(codes)})"
            )


def graphs_on(subject: Any) -> None:
    """Graphs on for main and draft: C1/C2/C4 judge captured graphs, flag combinations are C3's."""
    subject.runner.use_cudagraph = True
    subject.runner.draft_model_use_cudagraph = subject.draft is not None


def clear_models(subject: Any) -> None:
    """What an engine does to drop graphs: the clear method of the wrapper and of the draft, under
    whichever spelling the model has (require_clear_methods ran first: both resolve)."""
    from fd_conformance.protocol import resolve_clear_method

    for _, model in models_of(subject):
        method = resolve_clear_method(model)
        assert method is not None, f"{type(model).__qualname__}: require_clear_methods() must run first"
        kit_call(subject, clear_call_name(model), method)


def kit_call(subject: Any, call: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, the check's own call ``call`` (``"Engine.clear_parameters()"``) on the model, between
    two lifecycle marks: a failing check's picture shows what the kit called, and a finding judged
    after the call (a graph alive, memory held) flags the call's end, not whatever came before it."""
    events = subject.runtime.events
    events.mark(f"kit calls {call}")
    try:
        result = fn()
    except BaseException:
        events.mark(f"{call} raised")
        raise
    events.mark(f"{call} returned")
    return result


def graph_refs(subject: Any) -> list[weakref.ref[Graph]]:
    """Weak references: holding the graphs strongly would keep alive what the model dropped."""
    return [weakref.ref(g) for g in subject.graphs()]


def alive_graphs(refs: Iterable[weakref.ref[Graph]]) -> list[Graph]:
    gc.collect()  # a graph dropped without reset() is destroyed when collected
    return [g for g in (r() for r in refs) if g is not None and g.alive]


def add_alive_graph_findings(verdict: CheckVerdict, alive: Sequence[Graph], after: str, subject: Any) -> None:
    """FDC203 for graphs alive at a point where none may be (``after`` names the call that should
    have destroyed them), each named with the object holding it, unless the recorder said so already."""
    if "FDC203" in verdict.error_codes or not alive:
        return
    held_by = holder_names(subject)([graph.identity for graph in alive])
    for graph in alive:
        found = make_finding(
            "FDC203",
            f"graph {graph.label!r} ({graph.owner}), held by {held_by[graph.identity]}, is still alive after {after}",
            Location(obj=f"{graph.owner}:{graph.label}"),
        )
        verdict.add(dataclasses.replace(found, event=EventRef(graph=graph.label)))  # the verdict stamps the event


def clear_call_name(model: Any) -> str:
    """``"AcmeMTP.clear_graph_opt_backend()"``: the clear an engine reaches on ``model``, as the
    findings name it (the spelling the model defines; the canonical one when it has none)."""
    from fd_conformance.protocol import CANONICAL, resolve_clear_method

    method = resolve_clear_method(model)
    name = getattr(method, "__name__", "") if method is not None else ""
    return f"{type(model).__qualname__}.{name if isinstance(name, str) and name.startswith('clear_') else CANONICAL}()"


def graph_holders(subject: Any, graph_ids: Iterable[int]) -> dict[int, tuple[str, str, str]]:
    """graph id -> (role, holder, own clear) by which object holds it (see graphs_by_model): a
    model alone, both models, the runner, or none of them (a global the kit cannot name)."""
    draft = subject.draft
    main_ids = _graphs_reachable(subject.wrapper, avoid=draft)
    draft_ids = _graphs_reachable(draft, avoid=subject.wrapper) if draft is not None else set()
    runner_ids: set[int] | None = None  # walked only when a graph is held by neither model
    runner = f"the runner {type(subject.runner).__qualname__}"
    out: dict[int, tuple[str, str, str]] = {}
    for key in graph_ids:
        if key in main_ids and key not in draft_ids:
            out[key] = ("main", f"the main model {type(subject.wrapper).__qualname__}", clear_call_name(subject.wrapper))
        elif key in draft_ids and key not in main_ids:
            out[key] = ("draft", f"the draft model {type(draft).__qualname__}", clear_call_name(draft))
        elif key in main_ids:
            out[key] = ("runner", f"both models ({type(subject.wrapper).__qualname__} and {type(draft).__qualname__})", "")
        else:
            if runner_ids is None:
                runner_ids = _graphs_reachable(subject.runner, avoid=None)
            out[key] = ("runner", runner if key in runner_ids else f"no object the kit can reach from {runner}", "")
    return out


def holder_names(subject: Any) -> Callable[[Sequence[int]], dict[int, str]]:
    """graph ids -> who holds each, as a finding names it ("the draft model AcmeMTP (its clear:
    AcmeMTP.clear_graph_opt_backend())"): the lifecycle recorder's ``judging(call, holder_names)``."""

    def names(graph_ids: Sequence[int]) -> dict[int, str]:
        return {
            key: f"{holder} (its clear: {own_clear})" if own_clear else holder
            for key, (_, holder, own_clear) in graph_holders(subject, graph_ids).items()
        }

    return names


def models_named(subject: Any) -> str:
    """``main wrapper Glm4MoeForCausalLM and draft wrapper Glm4MTPForCausalLM``: the models a finding
    about a whole step (its outputs, its memory) names when it cannot tell them apart."""
    return " and ".join(role_name(role, subject) for role, _ in models_of(subject))


def survivors(recorder: Any, subject: Any) -> list[Survivor]:
    """Graphs the recorder sees alive now, each with its holder and whether its model's own clear
    destroys it -- learnt by calling each model's clear (main, then draft) and looking again. Why:
    a graph that the model's clear destroys was left by the RUNNER, and the finding must say so.
    Call it only after the judged call returned: it clears the models."""
    from fd_conformance.lifecycle import Survivor
    from fd_conformance.protocol import resolve_clear_method

    live = recorder.surviving_graphs()
    if not live:
        return []
    seen_at = recorder.last_event.seq  # before the clears below: a finding marks the call that left the graph
    holders = graph_holders(subject, [g.graph_id for g in live])
    destroyer: dict[int, tuple[str, Any]] = {}  # graph id -> (role, model) whose clear destroyed it
    for role, model in models_of(subject):
        method = resolve_clear_method(model)
        if method is None:
            continue  # no clear at all is the protocol check's FDC001
        try:
            kit_call(subject, clear_call_name(model), method)
        except Exception:  # noqa: BLE001 - a clear that raises is C2's FDC303; it destroyed nothing here
            continue
        still = {g.graph_id for g in recorder.surviving_graphs()}
        for graph in live:
            if graph.graph_id not in still:
                destroyer.setdefault(graph.graph_id, (role, model))
    found = []
    for graph in live:
        role, holder, own_clear = holders[graph.graph_id]
        by_role, by_model = destroyer.get(graph.graph_id, ("", None))
        if by_model is not None and role == "runner":
            # A graph the runner banks FOR a model (that model's clear destroys it) is that model's.
            role, holder = by_role, f"{holder} for the {by_role} model {type(by_model).__qualname__}"
        destroyed_by = clear_call_name(by_model) if by_model is not None else ""
        found.append(Survivor(graph, role, holder, own_clear, destroyed_by, seen_at))
    return found


#: The codes of the teardown-order rules the recorder derives during a runner's clear_parameters().
TEARDOWN_CODES = frozenset({"FDC201", "FDC202", "FDC203"})


def teardown_findings(recorder: Any, subject: Any, since: int = 0, label: str = "") -> list[Finding]:
    """The teardown-order findings of the runner's clear_parameters() that just returned: FDC201/
    FDC202/FDC203 the recorder derived from its finding number ``since`` on, then FDC203 for every
    graph alive now, blamed on ``Runner.clear_parameters()`` when the model's own clear destroys it
    (see :func:`survivors`). ``label`` ("weight cycle 2") prefixes every message."""
    found = [f for f in recorder_findings(recorder)[since:] if f.code in TEARDOWN_CODES]
    reported = {f.location for f in found if f.code == "FDC203"}  # a clear's own end mark said it already
    runner = type(subject.runner).__qualname__
    found += [
        left.finding("FDC203", f"{runner}.clear_parameters()", runner)
        for left in survivors(recorder, subject)
        if left.graph.where not in reported
    ]
    return [dataclasses.replace(f, message=f"{label}: {f.message}") for f in found] if label else found


def compare_outputs(
    runtime: Runtime,
    got: Mapping[str, Any],
    want: Mapping[str, Any],
    tolerances: Mapping[str, float],
    code: str,
    what: str,
) -> list[Finding]:
    """Findings (``code``) for every output that differs beyond the case's tolerances."""
    import numpy as np

    findings: list[Finding] = []
    rtol, atol = float(tolerances.get("rtol", 1e-4)), float(tolerances.get("atol", 1e-4))
    for name in want:
        if name not in got:
            findings.append(make_finding(code, f"{what}: output {name!r} missing", Location(obj=name)))
            continue
        a = np.asarray(runtime.to_numpy(got[name]), dtype=np.float64)
        b = np.asarray(runtime.to_numpy(want[name]), dtype=np.float64)
        if a.shape != b.shape:
            findings.append(
                make_finding(
                    code,
                    f"{what}: output {name!r} shape {a.shape} != eager {b.shape}",
                    Location(obj=name),
                )
            )
            continue
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False):
            worst = float(np.max(np.abs(a - b))) if a.size else 0.0
            findings.append(
                make_finding(
                    code,
                    f"{what}: output {name!r} differs from eager (max |diff| {worst:.3g} > atol {atol:g} + rtol {rtol:g})",
                    Location(obj=name),
                )
            )
    return findings


def recorded(runtime: Runtime) -> Any:
    """The lifecycle recorder over ``runtime`` (a context manager)."""
    from fd_conformance.lifecycle import LifecycleRecorder

    return LifecycleRecorder(runtime)


def recorder_findings(recorder: Any) -> list[Finding]:
    """Findings the recorder's rules derived from the events it saw."""
    found = recorder.findings
    return list(found() if callable(found) else found)


def exception_finding(code: str, err: BaseException, during: str, **fields: object) -> Finding:
    """``code`` for ``err`` raised ``during`` a step; ``fields`` fill the code's hint."""
    first = (str(err).strip().splitlines() or [""])[0]
    return make_finding(code, f"{during} raised {type(err).__name__}: {first}", Location(obj=during), **fields)


def guarded(verdict: CheckVerdict, code: str, during: str, fn: Callable[[], Any], **fields: object) -> bool:
    """Run ``fn``; an exception becomes a ``code`` finding. Returns whether it succeeded."""
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - any exception here IS the contract violation
        verdict.add(exception_finding(code, err, during, **fields))
        return False
    return True


def raising_model(err: BaseException, subject: Any) -> tuple[str, Any] | None:
    """(role, model) whose own clear ``err`` came out of, read from its traceback (the outermost
    such frame: the clear the runner called), or None: the fix goes to that model, not the runner."""
    from fd_conformance.spelling import SPELLINGS

    for frame, _ in traceback.walk_tb(err.__traceback__):
        if frame.f_code.co_name in SPELLINGS:
            for role, model in models_of(subject):
                if frame.f_locals.get("self") is model:
                    return role, model
    return None


def call_or_conclude(verdict: CheckVerdict, code: str, subject: Any, during: str, fn: Callable[[], Any]) -> None:
    """Run ``fn`` (a runner's clear_parameters()); an exception becomes a ``code`` finding naming the
    model clear that raised it, and fails the check: the cell then carries a code, not a bare
    exception, and what the interrupted call left behind would only restate it."""
    try:
        kit_call(subject, during, fn)
    except Exception as err:  # noqa: BLE001 - any exception here IS the contract violation
        raised = raising_model(err, subject)
        if raised is None:
            verdict.add(exception_finding(code, err, during, call=during))
        else:
            call = clear_call_name(raised[1])
            verdict.add(exception_finding(code, err, f"{raised[0]} wrapper {call}, called by {during},", call=call))
        verdict.conclude()


# --------------------------------------------------------------------------- graph memory (FDC302)
def role_name(role: str, subject: Any) -> str:
    """``main wrapper Glm4MoeForCausalLM`` / ``draft wrapper ...`` / ``runner X`` (for graphs held
    by neither wrapper alone): what a memory or clear finding blames."""
    if role == "unattributed":
        return f"runner {type(subject.runner).__qualname__} (graphs held by neither wrapper alone)"
    model = subject.wrapper if role == "main" else subject.draft
    return f"{role} wrapper {type(model).__qualname__}"


def graph_memory_refs(subject: Any) -> list[tuple[str, str, weakref.ref[Any]]]:
    """(role, graph label, weak reference) for every buffer the subject's graphs allocated, taken
    before a clear so that what survives it can be named. Only graphs that can say which memory is
    theirs (host emulation's ``graph_memory``) contribute; on a device the list is empty."""
    refs: list[tuple[str, str, weakref.ref[Any]]] = []
    for role, graphs in graphs_by_model(subject).items():
        for graph in graphs:
            for tensor in getattr(graph, "graph_memory", ()):
                refs.append((role, graph.label, weakref.ref(tensor)))
    return refs


def memory_holders(refs: Sequence[tuple[str, str, weakref.ref[Any]]]) -> dict[str, list[str]]:
    """Role -> labels of the graphs whose buffers are still alive (one label per kept buffer)."""
    gc.collect()
    kept: dict[str, list[str]] = {}
    for role, label, ref in refs:
        if ref() is not None:
            kept.setdefault(role, []).append(label)
    return kept


def memory_leak_finding(subject: Any, amount: str, kept: Mapping[str, Sequence[str]], figures: str) -> Finding:
    """FDC302 naming the wrapper (main/draft, class) whose graphs' buffers survive the clear; on a
    device, whose allocator cannot tell owners apart, the wrappers that were cleared."""
    if kept:
        whose = "; ".join(
            f"{role_name(role, subject)} keeps {len(labels)} output buffer(s) of graph(s) "
            f"{', '.join(repr(label) for label in sorted(set(labels)))} alive"
            for role, labels in kept.items()
        )
        blamed = [role_name(role, subject) for role in kept]
    else:
        cleared = models_named(subject)
        blamed = [cleared]
        whose = f"after clearing {cleared} (the allocator cannot tell which one holds it)"
    return make_finding(
        "FDC302",
        f"{amount} still held after clear: {whose} ({figures})",
        Location(obj=" and ".join(blamed)),
        blamed=" and ".join(blamed),
    )
