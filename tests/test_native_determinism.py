"""Native mode's verdicts depend only on what the program did (issue 36, items 3-5): never on when
the garbage collector ran, never on what another thread ran during a capture, and never on an
earlier observer that failed to install or to close.

Through the graph-class double, as tests/test_native_graphs.py does (its fixtures are reused).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest

torch = pytest.importorskip("torch")

import native_double  # noqa: E402  (tests/ is on sys.path)
from test_native_graphs import Net, Sharded, capture, codes, double, observer, rt, world  # noqa: E402

from fd_conformance.lifecycle import LifecycleRecorder  # noqa: E402
from fd_conformance.runtime import torch_collectives  # noqa: E402
from fd_conformance.runtime.base import OBSERVED_GRAPH_TYPES, EventKind, RuntimeEvent  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime  # noqa: E402
from fd_conformance.runtime.torch_native import TorchGraphObserver  # noqa: E402

FIXTURES = (double, rt, observer, world)  # test_native_graphs' fixtures, served to this module's tests too


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic collection during the test: each collection is the one the test places."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def in_a_cycle(graph: Any) -> list[Any]:
    """Hold ``graph`` only through a reference cycle (as make_graphed_callables' closures do)."""
    holder: list[Any] = [graph]
    holder.append(holder)
    return holder


# --- item 3: graph death and weight release, whatever the collector does ---------------------------

# Teardowns of a graph held only by a reference cycle, with no observation point between the steps.
STEPS = {
    "drop, release, release": ("drop", "release first", "release second"),
    "release, drop, release": ("release first", "drop", "release second"),
    "release, release, drop": ("release first", "release second", "drop"),
}


def cycle_teardown(rt: TorchRuntime, observer: TorchGraphObserver, steps: tuple[str, ...], collect_after: str) -> list[str]:
    net = Net()
    observer.set_roots([("main", net)])
    with LifecycleRecorder(rt) as recorder:
        graph, _ = capture(net, torch.randn(2, 4))
        holder = [in_a_cycle(graph)]
        del graph
        act: dict[str, Callable[[], object]] = {
            "drop": holder.clear,
            "release first": lambda: net.first.weight.untyped_storage().resize_(0),
            "release second": lambda: net.second.weight.untyped_storage().resize_(0),
        }
        for step in steps:
            act[step]()
            if step == collect_after:
                gc.collect()  # the model's own, or an automatic one: its timing must not matter
        observer.observe("clear_parameters:end")
    assert not any(proxy.alive for proxy in observer.graphs())
    return codes(recorder)


@pytest.mark.parametrize("steps", list(STEPS.values()), ids=list(STEPS))
@pytest.mark.parametrize("collector", ["off", "on"])
def test_a_cycle_held_graph_and_a_release_read_the_same_whenever_the_collector_runs(
    rt: TorchRuntime, observer: TorchGraphObserver, steps: tuple[str, ...], collector: str
) -> None:
    """A graph the program can no longer reach is dead by the first observation point after it
    became unreachable: every release observed there reads after its death, whether the collector
    ran before that point (automatically or by the model's hand), ran inside it, or never ran."""
    was = gc.isenabled()
    (gc.enable if collector == "on" else gc.disable)()
    try:
        verdicts = {where: cycle_teardown(rt, observer, steps, where) for where in ("nowhere", *steps)}
    finally:
        (gc.enable if was else gc.disable)()
    assert verdicts == dict.fromkeys(verdicts, []), verdicts


def test_a_refcount_drop_is_an_observation_point_whenever_the_collector_runs(
    rt: TorchRuntime, observer: TorchGraphObserver, collector_off: None
) -> None:
    """A graph dropped by its last reference dies at that statement: a release before it is FDC201,
    one after it is clean, with or without a collection anywhere around."""
    for collect in (False, True):
        for release_first, expected in ((True, ["FDC201"]), (False, [])):
            net = Net()
            with LifecycleRecorder(rt) as recorder:
                cache = [capture(net, torch.randn(2, 4))]
                gc.collect()  # the capture's own frames linger in a cycle: then the cache holds the only reference
                if release_first:
                    net.first.weight.untyped_storage().resize_(0)
                if collect:
                    gc.collect()
                cache.clear()
                if collect:
                    gc.collect()
                net.second.weight.untyped_storage().resize_(0)
                observer.observe("clear_parameters:end")
            assert codes(recorder) == expected, (collect, release_first)


def test_a_group_shut_down_after_its_cycle_held_graph_was_dropped_reads_the_same_whenever_the_collector_runs(
    world: Any, rt: TorchRuntime, observer: TorchGraphObserver, collector_off: None
) -> None:
    for collect in (False, True):
        tp = world.new_group([0])
        layer = Sharded(tp)  # kept alive: a collected module would read as its weights released
        with LifecycleRecorder(rt) as recorder:
            graph, _ = capture(layer, torch.randn(2, 4))
            holder = [in_a_cycle(graph)]
            del graph
            holder.clear()
            if collect:
                gc.collect()
            world.destroy_process_group(tp)
        assert codes(recorder) == [], collect


@pytest.mark.parametrize("act", ["drop the graph", "replay another graph"])
def test_an_observation_point_reached_from_a_listener_mid_scan_does_not_rescan(
    rt: TorchRuntime, observer: TorchGraphObserver, events: list[RuntimeEvent], act: str
) -> None:
    """A listener reacting to the first release reaches another observation point inside the scan
    -- a finalizer (it drops the last reference to the graph) or a graph call (it replays another
    graph). No scan runs inside the scan: each release is reported once, and the death after the
    releases the scan had already seen."""
    net, other = Net(), Net()
    observer.set_roots([("main", net), ("draft", other)])
    cache = [capture(net, torch.randn(2, 4))]
    replayed, _ = capture(other, torch.randn(2, 4))
    gc.collect()  # the captures' own frames linger in a cycle: then the cache holds the only reference

    def react(event: RuntimeEvent) -> None:
        if event.kind is EventKind.PARAM_RELEASED and cache:
            cache.clear() if act == "drop the graph" else replayed.replay()

    unsubscribe = rt.events.subscribe(react)
    try:
        net.first.weight.untyped_storage().resize_(0)
        net.second.weight.untyped_storage().resize_(0)
        observer.observe("released")
    finally:
        unsubscribe()
    released = [e.subject for e in events if e.kind is EventKind.PARAM_RELEASED]
    assert released == ["first.weight", "second.weight"]
    if act == "drop the graph":
        seen = [e.kind for e in events if e.kind in (EventKind.PARAM_RELEASED, EventKind.GRAPH_DESTROYED)]
        assert seen == [EventKind.PARAM_RELEASED, EventKind.PARAM_RELEASED, EventKind.GRAPH_DESTROYED]


# --- item 4: a capture owns only what ran on its own thread -------------------------------------------


def test_a_module_run_on_another_thread_during_a_capture_is_not_captured(rt: TorchRuntime, observer: TorchGraphObserver) -> None:
    served, elsewhere = Net(), Net()
    observer.set_roots([("main", served), ("draft", elsewhere)])
    with LifecycleRecorder(rt) as recorder:
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad():
            graph.capture_begin()
            other = threading.Thread(target=elsewhere, args=(torch.randn(5, 4),))
            other.start()
            other.join()
            served(torch.randn(2, 4))
            graph.capture_end()
        for layer in (elsewhere.first, elsewhere.second):
            layer.weight.untyped_storage().resize_(0)  # the other thread's weights: no graph read them
        observer.observe("released")
        (captured,) = [e for e in recorder.events if e.kind is EventKind.GRAPH_CAPTURED]
        graph.reset()
    assert {ref.name for ref in captured.buffers} == {"first.weight", "first.bias", "second.weight", "second.bias", "gain"}
    assert captured.subject.startswith("Net@2#") and captured.owner == "main"
    assert codes(recorder) == []


def test_a_collective_run_on_another_thread_during_a_capture_is_not_captured(
    world: Any, rt: TorchRuntime, observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    tp = world.new_group([0])
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad():
        graph.capture_begin()
        other = threading.Thread(target=Sharded(tp), args=(torch.randn(2, 4),))
        other.start()
        other.join()
        Net()(torch.randn(2, 4))
        graph.capture_end()
    (captured,) = [e for e in events if e.kind is EventKind.GRAPH_CAPTURED]
    assert captured.groups == ()
    graph.reset()
    world.destroy_process_group(tp)


# --- item 5: an observer that fails to install or to close leaves nothing behind ----------------------


class Refusing(type):
    """A graph class that refuses to have one attribute set or deleted (as some extension types do)."""

    refused: ClassVar[str] = ""

    def __setattr__(cls, name: str, value: Any) -> None:
        if name == Refusing.refused:
            raise TypeError(f"cannot set {name!r}")
        super().__setattr__(name, value)

    def __delattr__(cls, name: str) -> None:
        if name == Refusing.refused:
            raise TypeError(f"cannot delete {name!r}")
        super().__delattr__(name)


class BrittleGraph(native_double.TapeGraph, metaclass=Refusing):
    def capture_begin(self, *args: Any, **kwargs: Any) -> None:
        super().capture_begin(*args, **kwargs)

    def capture_end(self) -> None:
        super().capture_end()

    def replay(self) -> None:
        super().replay()

    def reset(self) -> None:
        super().reset()


HOOKED = ("capture_begin", "capture_end", "replay", "reset")


@pytest.fixture
def untouched(rt: TorchRuntime) -> Iterator[Callable[[], None]]:
    """Asserts that torch is as it was before the test: the graph class, ``nn.Module.__call__``,
    torch.distributed's functions and ProcessGroup's teardowns, the registration hooks, and no
    observer registered (a new one installs and reports each capture once)."""
    import torch.distributed as dist

    module_hooks = torch.nn.modules.module
    methods = {name: vars(BrittleGraph)[name] for name in HOOKED}
    call = torch.nn.Module.__call__
    functions = {name: getattr(dist, name) for name in ("all_reduce", "destroy_process_group")} if dist.is_available() else {}
    teardowns = {name: vars(dist.ProcessGroup)[name] for name in ("shutdown", "abort")} if dist.is_available() else {}
    hooks = (len(module_hooks._global_parameter_registration_hooks), len(module_hooks._global_buffer_registration_hooks))

    def check() -> None:
        assert {name: vars(BrittleGraph)[name] for name in HOOKED} == methods
        assert torch.nn.Module.__call__ is call
        assert {name: getattr(dist, name) for name in functions} == functions
        assert {name: vars(dist.ProcessGroup)[name] for name in teardowns} == teardowns
        assert (
            len(module_hooks._global_parameter_registration_hooks),
            len(module_hooks._global_buffer_registration_hooks),
        ) == hooks
        assert BrittleGraph not in OBSERVED_GRAPH_TYPES
        seen: list[RuntimeEvent] = []
        unsubscribe = rt.events.subscribe(seen.append)
        try:
            with TorchGraphObserver(rt, BrittleGraph):
                graph, net = BrittleGraph(), Net()
                with torch.no_grad(), native_double.graph(graph):  # type: ignore[arg-type]
                    net(torch.randn(2, 4))
                graph.reset()
        finally:
            unsubscribe()
        assert [e.kind for e in seen] == [EventKind.GRAPH_CAPTURED, EventKind.GRAPH_DESTROYED]

    try:
        yield check
    finally:
        Refusing.refused = ""


def fail(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("this install step fails")


@pytest.mark.parametrize(
    "breaks",
    [
        pytest.param(lambda mp: setattr(Refusing, "refused", "reset"), id="graph-class-4th-method"),
        pytest.param(lambda mp: mp.setattr(torch_collectives.CollectiveHooks, "_teardown", fail), id="process-group-teardowns"),
        pytest.param(
            lambda mp: mp.setattr(torch.nn.modules.module, "register_module_buffer_registration_hook", fail),
            id="registration-hooks",
        ),
    ],
)
def test_an_install_failing_partway_leaves_nothing_patched(
    rt: TorchRuntime, untouched: Callable[[], None], monkeypatch: pytest.MonkeyPatch, breaks: Callable[[pytest.MonkeyPatch], None]
) -> None:
    with monkeypatch.context() as mp:
        breaks(mp)
        with pytest.raises((RuntimeError, TypeError)):
            TorchGraphObserver(rt, BrittleGraph)
        Refusing.refused = ""
    untouched()


def test_an_undo_raising_on_close_still_undoes_the_rest_and_unregisters(rt: TorchRuntime, untouched: Callable[[], None]) -> None:
    replay = vars(BrittleGraph)["replay"]
    observer = TorchGraphObserver(rt, BrittleGraph)
    Refusing.refused = "replay"  # putting the class's own replay back fails
    with pytest.raises(TypeError, match="cannot set 'replay'"):
        observer.close()
    Refusing.refused = ""
    assert vars(BrittleGraph)["replay"] is not replay  # still the wrapper: the one undo that failed
    BrittleGraph.replay = replay  # type: ignore[method-assign]
    untouched()
    observer.close()  # idempotent: nothing runs twice
