"""Native mode (issue 25): the runtime observes a model's own torch.cuda graphs and derives the
kit's events from them, so the lifecycle rules and the suites run unchanged.

On CPU the hook layer is fed by a test double of the graph class (``native_double.TapeGraph``,
patched in place of ``torch.cuda.CUDAGraph``) while the modules, parameters and weight swaps are
real torch. The ``gpu`` tests run Quill's plain-torch models (tests/fixtures/native_models) through
the suites on real CUDA graphs: each good model certified, each variant caught with exactly its
codes.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import native_double  # noqa: E402  (tests/ is on sys.path)
from _helpers import GPU_SESSION_WORKERS, torch_cpu_runtime  # noqa: E402

from fd_conformance.cases.native import NativeSubject, observe_calls  # noqa: E402
from fd_conformance.findings import RULES, Severity  # noqa: E402
from fd_conformance.lifecycle import LifecycleRecorder  # noqa: E402
from fd_conformance.runtime.base import OBSERVED_GRAPH_TYPES, EventKind, RuntimeEvent  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime  # noqa: E402
from fd_conformance.runtime.torch_native import TORCH_CUDA_GRAPH, TorchGraphObserver, storage_address  # noqa: E402
from fd_conformance.suite._support import graphs_by_model  # noqa: E402

NATIVE_MODELS = Path(__file__).resolve().parent / "fixtures" / "native_models"
QUILL = NATIVE_MODELS / "quill_cases.py"
sys.path.insert(0, str(NATIVE_MODELS))  # the quill package, as its cases file makes it importable

from quill.bucket_cache import BucketEngine, BucketLM, SpecHead  # noqa: E402
from quill.graphed import GraphedLM  # noqa: E402


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch) -> None:
    native_double.install(monkeypatch)


@pytest.fixture
def rt(double: None) -> Iterator[TorchRuntime]:
    runtime = torch_cpu_runtime()
    yield runtime


@pytest.fixture
def observer(rt: TorchRuntime) -> Iterator[TorchGraphObserver]:
    obs = rt.observe_native_graphs()
    assert isinstance(obs, TorchGraphObserver)
    try:
        yield obs
    finally:
        obs.close()


class Net(torch.nn.Module):
    """Two layers that run and one that does not, plus a registered buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(4, 8)
        self.second = torch.nn.Linear(8, 4)
        self.unused = torch.nn.Linear(4, 4)
        self.register_buffer("gain", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x))) * self.gain


def capture(net: torch.nn.Module, x: torch.Tensor) -> tuple[Any, torch.Tensor]:
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        out = net(x)
    return graph, out


def kinds(events: list[RuntimeEvent]) -> list[tuple[str, str]]:
    return [(e.kind.value, e.subject) for e in events if e.kind is not EventKind.MARK]


def codes(recorder: LifecycleRecorder) -> list[str]:
    return sorted(f.code for f in recorder.findings())


# --- what a graph captured ------------------------------------------------------------------------


def test_capture_names_the_parameters_and_buffers_of_the_modules_that_ran(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    capture(net, torch.randn(3, 4))
    (captured,) = [e for e in events if e.kind is EventKind.GRAPH_CAPTURED]
    assert sorted(ref.name for ref in captured.buffers) == ["first.bias", "first.weight", "gain", "second.bias", "second.weight"]
    assert all(
        ref.address == storage_address(net.get_parameter(ref.name) if "." in ref.name else net.gain) for ref in captured.buffers
    )
    assert captured.owner == "main" and captured.subject.startswith("Net@3#")  # first module, its leading dim


def test_module_calls_are_recorded_without_torch_hooks_and_call_is_put_back_on_close(rt: TorchRuntime) -> None:
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    before, original = len(hooks), torch.nn.Module.__call__
    with TorchGraphObserver(rt) as observer:
        net = Net()
        net(torch.randn(1, 4))  # eager, no capture open: recorded nowhere
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin()
        assert len(hooks) == before  # a global hook would send every module call down torch's slow path
        net(torch.randn(1, 4))
        graph.capture_end()
        (proxy,) = observer.graphs()
        assert proxy.label.startswith("Net@1#")
    assert torch.nn.Module.__call__ is original


def test_dynamo_first_imported_while_observing_gets_torch_call_back_on_close() -> None:
    """torch._dynamo reads ``nn.Module.__call__`` once, at import, as torch's own: imported under
    the observer it took the wrapper, and every later compile in the process would trace it."""
    code = """
import sys, torch
from fd_conformance.runtime import get_runtime
from fd_conformance.runtime.torch_native import TorchGraphObserver
class Graph:
    def capture_begin(self): ...
    def capture_end(self): ...
    def replay(self): ...
    def reset(self): ...
assert "torch._dynamo" not in sys.modules
torch_call = torch.nn.Module.__call__
with TorchGraphObserver(get_runtime("torch", "cpu"), Graph):
    import torch._dynamo.variables.nn_module as nn_module
    import torch._dynamo.utils as utils
    assert utils.unpatched_nn_module_call is not torch_call  # what it read: the wrapper
assert utils.unpatched_nn_module_call is torch_call and nn_module.unpatched_nn_module_call is torch_call
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


class NullGraph:
    """A graph class that captures nothing (dynamo must not see the tape double's dispatch mode)."""

    def capture_begin(self, *args: Any, **kwargs: Any) -> None: ...
    def capture_end(self) -> None: ...
    def replay(self) -> None: ...
    def reset(self) -> None: ...


def test_a_model_compiled_outside_a_capture_is_not_recompiled_inside_one(rt: TorchRuntime) -> None:
    """vLLM captures graphs around an already compiled model: dynamo inlines the wrapped
    ``nn.Module.__call__`` and must not guard on whether a capture is open."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    counter, net, x = CompileCounter(), Net(), torch.randn(2, 4)
    with TorchGraphObserver(rt, NullGraph) as observer:
        compiled = torch.compile(net, backend=counter)
        compiled(x)
        graph = NullGraph()
        graph.capture_begin()
        compiled(x)
        graph.capture_end()
        assert counter.frame_count == 1
        (proxy,) = observer.graphs()
        assert proxy.label.startswith("OptimizedModule@2#")  # the modules inside compiled code are not seen (README)
    torch._dynamo.reset()


def test_a_compiled_model_captured_by_the_engines_own_graph_holds_its_weights(rt: TorchRuntime) -> None:
    """Issue 51.3: ``torch.compile``d, then captured by the engine's own graph (vLLM's and SGLang's
    piecewise style): dynamo inlines the layers' calls, so the capture recorded no weight and freeing
    them under the live graph was certified. The capture now holds every weight of the compiled model
    (NullGraph: the tape double's dispatch mode would make dynamo run the layers eagerly)."""
    from torch._dynamo.testing import CompileCounter

    torch._dynamo.reset()
    net, x = Net(), torch.randn(2, 4)
    seen: list[RuntimeEvent] = []
    with TorchGraphObserver(rt, NullGraph) as observer:
        rt.events.subscribe(seen.append)
        observer.set_roots([("main", net)])
        compiled = torch.compile(net, backend=CompileCounter())
        compiled(x)
        graph = NullGraph()
        graph.capture_begin()
        compiled(x)
        graph.capture_end()
        (captured,) = [e for e in seen if e.kind is EventKind.GRAPH_CAPTURED]
        names = sorted(ref.name for ref in captured.buffers)
    assert {"first.weight", "second.weight", "gain"} <= set(names), names
    torch._dynamo.reset()


# --- release and restore, the ways people swap weights ------------------------------------------


def test_param_data_swap_under_a_live_graph_is_a_stale_replay(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    net, x = Net(), torch.randn(2, 4)
    observer.set_roots([("main", net)])
    with LifecycleRecorder(rt) as recorder:
        graph, out = capture(net, x)
        net.first.weight.data = torch.randn(8, 4)  # the RL swap, no clear, no recapture
        graph.replay()
    assert not torch.allclose(out, net(x))  # the double replays the old storage, as a GPU would
    assert codes(recorder) == ["FDC204"]
    restored = [e for e in recorder.events if e.kind is EventKind.PARAM_RESTORED]
    assert [e.subject for e in restored] == ["first.weight"]


def test_resize_to_zero_is_a_release_seen_at_the_next_observation_point(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    with LifecycleRecorder(rt) as recorder:
        graph, _ = capture(net, torch.randn(2, 4))
        net.second.weight.untyped_storage().resize_(0)
        assert codes(recorder) == []  # nothing observed yet
        observer.observe("runner.clear_parameters:end")
        graph.reset()
    assert codes(recorder) == ["FDC201"]
    assert "'second.weight'" in recorder.findings()[0].message


@pytest.mark.parametrize(
    "release",
    [
        pytest.param(lambda net: delattr(net.first, "weight"), id="del"),
        pytest.param(lambda net: net.to("meta"), id="meta"),
        pytest.param(lambda net: net.first.weight.untyped_storage().resize_(0), id="resize0"),
    ],
)
def test_deleted_meta_and_resized_weights_are_releases(
    observer: TorchGraphObserver, events: list[RuntimeEvent], release: Any
) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    capture(net, torch.randn(2, 4))
    release(net)
    observer.observe("after release")
    released = {e.subject for e in events if e.kind is EventKind.PARAM_RELEASED}
    assert "first.weight" in released


def test_a_weight_viewing_a_flat_buffer_is_released_with_the_buffer(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    """Engines keep weights as views of one flat buffer and free the buffer: the view's data_ptr()
    then reads its offset, not 0, and the scan's fast pass must still hand it to the slow one."""
    net = Net()
    flat = torch.zeros(64)
    net.first.weight = torch.nn.Parameter(flat[32:64].view(8, 4))  # offset 32: a nonzero data_ptr after
    observer.set_roots([("main", net)])
    capture(net, torch.randn(2, 4))
    observer.observe("captured")
    flat.untyped_storage().resize_(0)
    observer.observe("buffer freed")
    assert [e.subject for e in events if e.kind is EventKind.PARAM_RELEASED] == ["first.weight"]


def test_a_weight_set_to_none_is_a_release_and_its_return_a_restore(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    capture(net, torch.randn(2, 4))
    net.second.bias = None  # the slot holds None: the fast pass cannot read it, scans go slot by slot
    observer.observe("unset")
    net.first.weight.data = torch.randn(8, 4)  # a swap while that slot still reads None
    observer.observe("swapped")
    net.second.bias = torch.nn.Parameter(torch.zeros(4))
    observer.observe("set again")
    seen = [e.subject for e in events if e.kind in (EventKind.PARAM_RELEASED, EventKind.PARAM_RESTORED, EventKind.MARK)]
    assert seen == ["second.bias", "unset", "first.weight", "swapped", "second.bias", "set again"]  # each in its window


def test_two_open_captures_each_record_the_modules_that_ran_while_they_were_open(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    outer_net, inner_net = Net(), Net()
    observer.set_roots([("main", outer_net), ("draft", inner_net)])
    outer, inner = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.no_grad():
        outer.capture_begin()
        outer_net(torch.randn(2, 4))
        inner.capture_begin()
        inner_net(torch.randn(3, 4))
        inner.capture_end()
        outer.capture_end()
    by_label = {e.subject: {ref.name for ref in e.buffers} for e in events if e.kind is EventKind.GRAPH_CAPTURED}
    inner_label, outer_label = by_label  # inner ends first
    assert by_label[inner_label] == {
        "draft.first.weight",
        "draft.first.bias",
        "draft.second.weight",
        "draft.second.bias",
        "draft.gain",
    }
    assert by_label[outer_label] == by_label[inner_label] | {"first.weight", "first.bias", "second.weight", "second.bias", "gain"}
    assert inner_label.startswith("Net@3#") and outer_label.startswith("Net@2#")


def test_scans_after_a_capture_take_the_fast_pass(observer: TorchGraphObserver) -> None:
    """A scan that finds nothing moved keeps the pointers it read, so the next one compares them at
    C speed instead of looking slot by slot (every capture and replay pays a scan)."""
    net = Net()
    observer.set_roots([("main", net)])
    capture(net, torch.randn(2, 4))  # new slots: the columns are rebuilt at the next scan
    observer.observe("first look")
    assert observer._seen is not None


def test_a_listener_raising_mid_scan_does_not_hide_the_remaining_releases(
    observer: TorchGraphObserver, rt: TorchRuntime, events: list[RuntimeEvent]
) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    capture(net, torch.randn(2, 4))
    raised: list[str] = []

    def fail_once(event: RuntimeEvent) -> None:
        if event.kind is EventKind.PARAM_RELEASED and not raised:
            raised.append(event.subject)
            raise RuntimeError("a listener failing")

    unsubscribe = rt.events.subscribe(fail_once)
    net.first.weight.untyped_storage().resize_(0)
    net.second.weight.untyped_storage().resize_(0)
    with pytest.raises(RuntimeError):
        observer.observe("first look")
    unsubscribe()
    observer.observe("second look")
    released = {e.subject for e in events if e.kind is EventKind.PARAM_RELEASED}
    assert released == {"first.weight", "second.weight"}


def test_load_state_dict_in_place_changes_nothing_assign_is_a_restore(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    capture(net, torch.randn(2, 4))
    new = {k: torch.randn_like(v) for k, v in net.state_dict().items()}
    net.load_state_dict(new)  # copies into the same storage: what the graph reads is the new weight
    observer.observe("after in-place load")
    assert [e for e in events if e.kind in (EventKind.PARAM_RELEASED, EventKind.PARAM_RESTORED)] == []
    net.load_state_dict(new, assign=True)  # new tensor objects, new storage
    observer.observe("after assign")
    assert {e.subject for e in events if e.kind is EventKind.PARAM_RESTORED} >= {"first.weight", "second.weight", "gain"}


def test_restore_after_release_is_one_release_then_one_restore(observer: TorchGraphObserver, events: list[RuntimeEvent]) -> None:
    net = Net()
    observer.set_roots([("main", net)])
    graph, _ = capture(net, torch.randn(2, 4))
    graph.reset()
    net.first.weight.untyped_storage().resize_(0)
    observer.observe("released")
    net.first.weight.data = torch.randn(8, 4)
    observer.observe("restored")
    observer.observe("again")  # nothing moved since: nothing emitted
    swaps = [(e.kind, e.subject) for e in events if e.kind in (EventKind.PARAM_RELEASED, EventKind.PARAM_RESTORED)]
    assert swaps == [(EventKind.PARAM_RELEASED, "first.weight"), (EventKind.PARAM_RESTORED, "first.weight")]


def test_a_recapture_reads_a_weight_registered_since_the_last_capture(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    """The same modules run in every capture, so their slots are cached per capture; a weight
    registered in between must still be read (the cache is keyed on torch's registration hooks)."""
    net, x = Net(), torch.randn(2, 4)
    observer.set_roots([("main", net)])
    capture(net, x)
    net.first.register_parameter("scale", torch.nn.Parameter(torch.ones(8)))
    capture(net, x)
    first, second = ({ref.name for ref in e.buffers} for e in events if e.kind is EventKind.GRAPH_CAPTURED)
    assert second - first == {"first.scale"}


def test_a_collected_model_is_released_once_and_no_longer_scanned(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    """A model dropped after its graphs: each weight released once, then forgotten (a model rebuilt
    per weight sync must not grow every later scan)."""
    net = Net()
    observer.set_roots([("main", net)])
    graph, _ = capture(net, torch.randn(2, 4))
    graph.reset()
    observer.set_roots([])
    del net, graph
    gc.collect()
    observer.observe("dropped")
    observer.observe("again")
    released = [e.subject for e in events if e.kind is EventKind.PARAM_RELEASED]
    assert sorted(released) == ["first.bias", "first.weight", "gain", "second.bias", "second.weight"]
    assert not observer._watched  # what every later scan reads


def test_the_scan_holds_no_weight_of_a_dropped_model(observer: TorchGraphObserver, events: list[RuntimeEvent]) -> None:
    """The fast pass reads each watched module's own tables, held for speed: never past the
    module, or a dropped model's weights would stay allocated while observed."""
    net = Net()
    observer.set_roots([("main", net)])
    graph, _ = capture(net, torch.randn(2, 4))
    observer.observe("captured")  # the fast pass armed: the tables are held
    weight = weakref.ref(net.first.weight)
    graph.reset()
    observer.set_roots([])
    del net, graph
    gc.collect()
    assert weight() is None
    observer.observe("dropped")
    assert "first.weight" in [e.subject for e in events if e.kind is EventKind.PARAM_RELEASED]
    assert not observer._watched and observer._seen is not None  # forgotten, and the fast pass armed again


def test_a_model_collected_by_the_scans_own_collection_is_released(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    """A release under a live graph makes the scan collect garbage before judging; a model that
    dies in that collection (it was only in a reference cycle) has its weights reported released
    too, not forgotten unreported."""
    served, dropped = Net(), Net()
    observer.set_roots([("main", served), ("draft", dropped)])
    kept, _ = capture(served, torch.randn(2, 4))
    gone, _ = capture(dropped, torch.randn(2, 4))
    gone.reset()
    observer.observe("captured")
    gc.disable()  # the cycle below must survive until the scan's own collection
    try:
        dropped.cycle = [dropped]  # type: ignore[assignment]  (a plain attribute: a reference cycle)
        observer.set_roots([("main", served)])
        del dropped, gone
        served.first.weight.untyped_storage().resize_(0)  # a release under the live graph: the scan collects
        observer.observe("released")
    finally:
        gc.enable()
    released = {e.subject for e in events if e.kind is EventKind.PARAM_RELEASED}
    assert released == {
        "first.weight",
        "draft.first.weight",
        "draft.first.bias",
        "draft.second.weight",
        "draft.second.bias",
        "draft.gain",
    }
    assert kept is not None


# --- graph death ----------------------------------------------------------------------------------


def test_a_graph_dropped_without_reset_is_destroyed_by_its_finalizer(
    observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    net = Net()
    cache = {4: capture(net, torch.randn(4, 4))}
    (proxy,) = observer.graphs()
    cache.clear()  # the way caches clear: drop the entry, never reset()
    assert kinds(events)[-1] == ("graph_destroyed", proxy.label)
    assert not proxy.alive


def test_collected_graphs_are_forgotten(observer: TorchGraphObserver, events: list[RuntimeEvent]) -> None:
    """A check that captures a graph per size per weight cycle keeps no record of the collected
    ones; a reset graph the model still holds stays listed (it may be captured again)."""
    net, x = Net(), torch.randn(2, 4)
    kept, _ = capture(net, x)
    for _ in range(50):
        capture(net, x)  # dropped at once, never reset
    kept.reset()
    assert [proxy.identity for proxy in observer.graphs()] == [id(kept)]
    assert len(observer._records) == 1
    assert [k for k, _ in kinds(events)].count("graph_destroyed") == 51


def test_reset_destroys_once_and_a_graph_can_be_captured_again(observer: TorchGraphObserver, events: list[RuntimeEvent]) -> None:
    net, x = Net(), torch.randn(2, 4)
    graph, _ = capture(net, x)
    graph.reset()
    graph.reset()
    with torch.no_grad(), torch.cuda.graph(graph):
        net(x)
    assert [k for k, _ in kinds(events)] == ["graph_captured", "graph_destroyed", "graph_captured"]
    (proxy,) = observer.graphs()
    assert proxy.alive and proxy.identity == id(graph)


def test_release_then_drop_is_fdc201_drop_then_release_is_clean(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    for order, expected in (("release first", ["FDC201"]), ("drop first", [])):
        net = Net()
        with LifecycleRecorder(rt) as recorder:
            cache = [capture(net, torch.randn(2, 4))]
            if order == "release first":
                net.first.weight.untyped_storage().resize_(0)
            cache.clear()  # the finalizer's GRAPH_DESTROYED is an observation point too
            net.first.weight.untyped_storage().resize_(0)
            observer.observe("clear_parameters:end")
        assert codes(recorder) == expected, order


def test_a_graph_held_only_by_a_reference_cycle_is_collected_before_a_release_is_judged(
    observer: TorchGraphObserver, rt: TorchRuntime
) -> None:
    """make_graphed_callables keeps its graphs in a local class's closures (a reference cycle):
    dropped, they die at the next collection, not at once. Releasing weights after dropping them
    is the right order, not FDC201."""
    model = GraphedLM()
    with LifecycleRecorder(rt) as recorder:
        gc.disable()  # no collection may happen by chance in between
        try:
            model.build_graphs()
            model.clear_graph_opt_backend()
            model.decoder.to("meta")
            observer.observe("clear_parameters:end")
        finally:
            gc.enable()
    assert codes(recorder) == []
    assert not any(g.alive for g in observer.graphs())


# --- collectives: the groups a graph captured ---------------------------------------------------


@pytest.fixture
def world() -> Iterator[Any]:
    """A real one-rank gloo world: this process's default group, made here (and torn down after
    the test) unless an earlier test in this worker made one (the kit's runtime keeps its own)."""
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch build has no torch.distributed")
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist
    finally:
        if owned and dist.is_initialized():
            dist.destroy_process_group()


class Sharded(torch.nn.Module):
    """A row-parallel layer: its output is summed over the tensor-parallel group."""

    def __init__(self, group: Any) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        out = self.proj(x)
        dist.all_reduce(out, group=self.group)
        return out


def test_a_capture_records_the_groups_of_its_collectives(
    world: Any, observer: TorchGraphObserver, events: list[RuntimeEvent]
) -> None:
    tp = world.new_group([0])
    capture(Sharded(tp), torch.randn(2, 4))  # group given
    capture(Sharded(None), torch.randn(2, 4))  # group=None: the default group
    Sharded(tp)(torch.randn(2, 4))  # outside a capture: nothing recorded
    first, second = [e for e in events if e.kind is EventKind.GRAPH_CAPTURED]
    assert first.groups == (id(tp),)
    assert second.groups == (id(world.distributed_c10d._get_default_group()),)
    world.destroy_process_group(tp)


def test_a_group_destroyed_under_a_live_graph_is_fdc202_after_reset_it_is_clean(
    world: Any, observer: TorchGraphObserver, rt: TorchRuntime
) -> None:
    for order, expected in (("destroy first", ["FDC202"]), ("reset first", [])):
        tp = world.new_group([0])
        layer = Sharded(tp)  # kept alive: a collected module would read as its weights released
        with LifecycleRecorder(rt) as recorder:
            graph, _ = capture(layer, torch.randn(2, 4))
            if order == "reset first":
                graph.reset()
            world.destroy_process_group(tp)
            graph.reset()
        assert codes(recorder) == expected, order
        shutdown = [e for e in recorder.events if e.kind is EventKind.GROUP_SHUTDOWN]
        assert [e.subject_id for e in shutdown] == [id(tp)], order


@pytest.mark.parametrize(
    "teardowns",
    [
        ("abort",),
        ("shutdown",),
        ("_abort_process_group",),  # calls abort(), and deregisters the group
        ("abort", "destroy_process_group"),  # recovery: abort, then tidy up
        ("shutdown", "abort"),
    ],
    ids="-then-".join,
)
def test_a_communicator_ended_without_destroy_under_a_live_graph_is_one_fdc202(
    world: Any, observer: TorchGraphObserver, rt: TorchRuntime, teardowns: tuple[str, ...]
) -> None:
    """``ProcessGroup.abort()`` / ``shutdown()`` (an engine's recovery code) end the communicator a
    live graph captured as surely as ``destroy_process_group`` does: one GROUP_SHUTDOWN, whatever
    the teardown calls in turn and however many teardowns follow it."""
    tp = world.new_group([0])
    layer = Sharded(tp)
    with LifecycleRecorder(rt) as recorder:
        graph, _ = capture(layer, torch.randn(2, 4))
        for teardown in teardowns:
            if teardown in ("_abort_process_group", "destroy_process_group"):
                getattr(world.distributed_c10d, teardown)(tp)
            else:
                getattr(tp, teardown)()
        graph.reset()
    assert codes(recorder) == ["FDC202"]
    assert [e.subject_id for e in recorder.events if e.kind is EventKind.GROUP_SHUTDOWN] == [id(tp)]
    if tp in world.distributed_c10d._world.pg_map:
        world.destroy_process_group(tp)


def test_a_teardown_on_another_thread_is_its_own(world: Any, rt: TorchRuntime) -> None:
    """A recovery thread's abort, while this thread is inside a teardown of another group (as a
    thread hung in NCCL's destroy would be), is reported."""
    import threading

    tp, other = world.new_group([0]), world.new_group([0])
    entry = vars(world.ProcessGroup)["shutdown"]

    def shutdown(group: Any) -> None:  # torch's own, but while it runs another thread aborts tp
        if group is other:
            aborter = threading.Thread(target=tp.abort)
            aborter.start()
            aborter.join()
        entry.__get__(group)()

    layer = Sharded(tp)  # kept alive: a collected module would read as its weights released
    world.ProcessGroup.shutdown = shutdown  # before the observer, which wraps what it finds
    try:
        with rt.observe_native_graphs(), LifecycleRecorder(rt) as recorder:
            graph, _ = capture(layer, torch.randn(2, 4))
            world.destroy_process_group(other)  # calls shutdown(other) on this thread
            graph.reset()
    finally:
        world.ProcessGroup.shutdown = entry
    assert codes(recorder) == ["FDC202"]
    assert [e.subject_id for e in recorder.events if e.kind is EventKind.GROUP_SHUTDOWN] == [id(other), id(tp)]
    world.destroy_process_group(tp)


# Run in a fresh interpreter: destroying every group would take down the default group that other
# tests in this worker (the kit's runtime) keep.
DESTROY_ALL = """
import json, pytest, torch, torch.distributed as dist, native_double
native_double.install(pytest.MonkeyPatch())
from _helpers import torch_cpu_runtime
from fd_conformance.lifecycle import LifecycleRecorder
from fd_conformance.runtime.base import EventKind
from test_native_graphs import Sharded, capture
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
rt = torch_cpu_runtime()
with rt.observe_native_graphs():
    tp = dist.new_group([0])
    layer = Sharded(tp)
    with LifecycleRecorder(rt) as recorder:
        graph, _ = capture(layer, torch.randn(2, 4))
        dist.destroy_process_group()  # group=None: the default group and every subgroup
    shut = {e.subject_id for e in recorder.events if e.kind is EventKind.GROUP_SHUTDOWN}
    print(json.dumps({"codes": sorted(f.code for f in recorder.findings()), "tp": id(tp) in shut, "groups": len(shut)}))
    graph.reset()
"""


def test_destroying_every_group_shuts_down_each_group_a_capture_used() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", DESTROY_ALL], capture_output=True, text=True, env=env_with_tests_dir(), timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"codes": ["FDC202"], "tp": True, "groups": 2}


def test_the_collective_functions_are_put_back_on_close(world: Any, rt: TorchRuntime) -> None:
    from fd_conformance.runtime.torch_collectives import CAPTURABLE, DESTROY, GROUP_TEARDOWNS

    before = {name: getattr(world, name) for name in (*CAPTURABLE, DESTROY) if hasattr(world, name)}
    methods = {name: vars(world.ProcessGroup)[name] for name in GROUP_TEARDOWNS}
    assert set(methods) == {"shutdown", "abort"}
    with rt.observe_native_graphs():
        assert world.all_reduce is not before["all_reduce"]
        assert world.distributed_c10d.all_reduce is world.all_reduce  # one wrapper for both modules
        assert all(vars(world.ProcessGroup)[name] is not method for name, method in methods.items())
    assert {name: getattr(world, name) for name in before} == before
    assert {name: vars(world.ProcessGroup)[name] for name in GROUP_TEARDOWNS} == methods


# --- ownership: which model holds a native graph ---------------------------------------------------


class _Subject:
    def __init__(self, runtime: Any, wrapper: Any, draft: Any, runner: Any) -> None:
        self.runtime, self.wrapper, self.draft, self.runner = runtime, wrapper, draft, runner


def test_the_ownership_walk_finds_native_graphs_on_models_in_closures_and_in_graphed_callables(
    observer: TorchGraphObserver, rt: TorchRuntime
) -> None:
    lm = BucketLM()
    spec = SpecHead(lm.decoder)
    runner = BucketEngine(lm, spec)
    subject = NativeSubject(_Subject(rt, lm, spec, runner), observer)  # names the roles, as the fixture does
    ids = torch.tensor([1, 2, 3])
    hidden, _ = lm(ids)  # the main model's own cache (a dict on the wrapper)
    spec(hidden, ids)  # the drafter's cache; it shares the embedding and lm head modules
    graphed = GraphedLM()
    graphed.build_graphs()
    lm.keep = graphed._graphed  # graphs inside make_graphed_callables' closures (a local class)
    pool_graph, _ = capture(Net(), torch.randn(2, 4))
    runner.step = lambda: pool_graph.replay()  # a closure the runner holds: neither model's
    owned = graphs_by_model(subject)
    count = {role: len(graphs) for role, graphs in owned.items()}
    assert count == {"main": 1 + 3, "draft": 1, "unattributed": 1}, count
    assert {g.owner for g in owned["draft"]} == {"draft"}
    subject.close()


def test_the_walk_sees_observed_classes_only_while_observing(rt: TorchRuntime) -> None:
    obs = rt.observe_native_graphs()
    assert native_double.TapeGraph in OBSERVED_GRAPH_TYPES
    obs.close()
    obs.close()  # idempotent
    assert native_double.TapeGraph not in OBSERVED_GRAPH_TYPES
    assert (
        "replay" in vars(native_double.TapeGraph) and vars(native_double.TapeGraph)["replay"].__qualname__ == "TapeGraph.replay"
    )


def test_one_observer_at_a_time(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    from fd_conformance.errors import UsageError

    with pytest.raises(UsageError, match="already installed"):
        rt.observe_native_graphs()


# --- the subject side: lifecycle calls are observation points ---------------------------------------


def test_lifecycle_calls_are_observation_points_and_are_undone(observer: TorchGraphObserver, events: list[RuntimeEvent]) -> None:
    lm = BucketLM()
    spec = SpecHead(lm.decoder)
    engine = BucketEngine(lm, spec)
    undo = observe_calls(engine, "runner", ("clear_parameters",), observer)
    engine.capture_model()
    engine.clear_parameters()  # clears main and draft, then frees every weight
    marks = [e.subject for e in events if e.kind is EventKind.MARK]
    assert marks == ["runner.clear_parameters:begin", "runner.clear_parameters:end"]
    last_destroyed = max(e.seq for e in events if e.kind is EventKind.GRAPH_DESTROYED)
    first_release = min(e.seq for e in events if e.kind is EventKind.PARAM_RELEASED)
    assert last_destroyed < first_release  # seen at the mark, after every graph died
    undo()
    assert "clear_parameters" not in vars(engine)


def test_a_case_names_a_graph_mode_it_knows() -> None:
    from fd_conformance.cases import ModelCase
    from fd_conformance.errors import UsageError

    assert ModelCase("n", "torch", object, (1,), graphs="native").graphs == "native"
    with pytest.raises(UsageError, match="graphs='cuda' is neither 'kit' nor 'native'"):
        ModelCase("n", "torch", object, (1,), graphs="cuda")


# --- the suites over native cases --------------------------------------------------------------------


def test_native_rows_skip_on_cpu_with_the_reason(tmp_path: Path) -> None:
    """Without a GPU and without a double there is no CUDA graph to observe: the rows skip."""
    assert TorchRuntime("cpu").native_graphs_unavailable() == "native CUDA graphs need a GPU"
    assert torch.cuda.CUDAGraph is TORCH_CUDA_GRAPH
    proc = suite_session(
        tmp_path, "GOOD", "cpu", double=False, select="quill-shape-pool and (clear_releases or protocol)", isolate=False
    )
    assert "native CUDA graphs need a GPU" in proc.stdout, proc.stdout[-3000:]
    assert " passed" not in proc.stdout.splitlines()[-1], proc.stdout[-2000:]


def env_with_tests_dir() -> dict[str, str]:
    """This process's environment with tests/ on PYTHONPATH (native_double, _helpers, this module)."""
    tests = str(Path(__file__).resolve().parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (tests, os.environ.get("PYTHONPATH", ""))))}


def suite_session(
    out: Path, attr: str, device: str, double: bool, select: str = "", isolate: bool = True, spec: Path = QUILL
) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q", "-rs",
        f"--fd-model={spec}:{attr}", "--fd-cycles=3", f"--fd-report={out}", f"--fd-device={device}",
    ]  # fmt: skip
    if double:  # the double is patched in the pytest process itself
        cmd += ["-p", "native_double"]
    if double or not isolate:
        cmd += ["--fd-isolate=off"]
    if device == "cuda":
        cmd += ["-n", GPU_SESSION_WORKERS]  # workers share the one GPU (the plugin places them)
    if select:
        cmd += ["-k", select]
    env = env_with_tests_dir()
    if device == "cpu":
        env["FD_CONFORMANCE_GPU"] = "0"
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)


def expected_verdict(case: Any) -> tuple[str, list[str]]:
    """(verdict, codes) a case must get: a good one certified with none, a variant its codes,
    certified when they are all warnings (FastDeploy's fixed flags), else violations."""
    errors = any(RULES[code].severity is Severity.ERROR for code in case.expected_findings)
    return ("violations" if errors else "certified", sorted(case.expected_findings))


def assert_judged_right(out: Path, proc: subprocess.CompletedProcess[str], names: list[str]) -> None:
    """Each named good case certified, each named variant caught with exactly its codes; on a
    mismatch the message lists every wrong row and the session's own matrix."""
    path = out / "conformance.json"
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    rows = {row["name"]: row for row in json.loads(path.read_text())["cases"]}
    from fd_conformance.cases import load_spec

    wrong = []
    for case in load_spec(f"{QUILL}:CASES"):
        if case.name not in names:
            continue
        row = rows.get(case.name, {})
        want = expected_verdict(case)
        got = (row.get("verdict"), sorted(row.get("observed_findings", [])))
        if got != want:
            wrong.append(f"{case.name}: got {got}, want {want}")
    assert not wrong, "\n".join(wrong) + "\n" + proc.stdout[-8000:]


# Enough to prove the suites read native events unchanged on CPU; the gpu test runs every case.
CPU_SAMPLE = [
    "quill-graphed-callables",
    "quill-bucket-frees-before-drop",
    "quill-graphed-assign-reload",
    "quill-sharded-tp",  # a real gloo group: the all-reduce seen inside the capture
    "quill-sharded-closes-group-first",  # FDC202 from destroy_process_group alone
    "quill-sharded-aborts-group-first",  # FDC202 from ProcessGroup.abort() alone
    "quill-bucket-flag-keyed-clear",  # FDC205: the flag-switch probe builds a native sibling
    "quill-pool-registers-after-capture",  # new Parameters registered under live graphs
    "quill-pool-remembers-last-launch",  # a graph that dies by refcount kept alive by the engine
    "quill-graphed-meta-before-forget",  # weights moved to meta under graphs held in closures
]


def test_the_suites_judge_native_cases_through_the_double(tmp_path: Path) -> None:
    select = " or ".join(f"{name}-" for name in CPU_SAMPLE)
    proc = suite_session(tmp_path, "CPU_CASES", "cpu", double=True, select=select)
    assert_judged_right(tmp_path, proc, CPU_SAMPLE)


REFERENCE = NATIVE_MODELS / "reference_native_cases.py"
# The rows that failed in native mode before its fixes (the protocol behind observation points,
# the walk through kit graphs to the framework's, a stale replay), and a good model with a draft;
# the gpu twin runs every row.
REFERENCE_SAMPLE = [
    "torch-glm4-moe-mtp",
    "mutant-glm4-moe-split-spellings",
    "mutant-glm4-moe-legacy-spelling",
    "mutant-flag-gated-clear",
    "mutant-update-without-recapture",
]


def reference_verdicts(out: Path, attr: str, device: str, names: list[str] | None) -> dict[str, tuple[str, list[str]]]:
    """{row: (verdict, observed codes)} of one suite session over the reference rows ``names``
    (all of them: None), kit mode or native (``attr``)."""
    out.mkdir()
    select = " or ".join(f"{name}-{device}" for name in names) if names is not None else ""
    proc = suite_session(out, attr, device, double=device == "cpu", select=select, spec=REFERENCE)
    path = out / "conformance.json"
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    rows = json.loads(path.read_text())["cases"]
    return {row["name"]: (row["verdict"], sorted(row.get("observed_findings", []))) for row in rows}


def test_reference_models_give_the_same_verdicts_in_native_mode(tmp_path: Path) -> None:
    """The bundled models' kit graphs seen through the hooks (the kit's own events silent) give
    the verdicts kit mode gives -- each case's expected verdict, which test_suites_cpu holds kit
    mode to -- through the CPU double."""
    from fd_conformance.cases import load_spec

    native = reference_verdicts(tmp_path / "native", "CASES", "cpu", REFERENCE_SAMPLE)
    want = {case.name: expected_verdict(case) for case in load_spec(f"{REFERENCE}:CASES") if case.name in REFERENCE_SAMPLE}
    assert sorted(want) == sorted(REFERENCE_SAMPLE)
    assert native == want


@pytest.mark.gpu
def test_reference_models_native_on_real_cuda_graphs(tmp_path: Path) -> None:
    """Every torch reference row in native mode, on real CUDA graphs, gets the verdict kit mode
    gets: each case's expected one, which test_suites_cpu's gpu test holds kit mode to on the same
    device (one kit-mode session for both, not a second one here: 70 s of an H100 run)."""
    from fd_conformance.cases import load_spec

    native = reference_verdicts(tmp_path / "native", "CASES", "cuda", None)
    assert native == {case.name: expected_verdict(case) for case in load_spec(f"{REFERENCE}:CASES")}


@pytest.mark.gpu
def test_quill_models_on_real_cuda_graphs(tmp_path: Path) -> None:
    """Each plain-torch Quill model certified and each variant caught with exactly its codes, on
    real torch.cuda graphs observed through the hooks."""
    from fd_conformance.cases import load_spec

    proc = suite_session(tmp_path, "CASES", "cuda", double=False)
    names = [case.name for case in load_spec(f"{QUILL}:CASES")]
    document = json.loads((tmp_path / "conformance.json").read_text()) if (tmp_path / "conformance.json").exists() else {}
    assert all(c["graphs"] == "real" for c in document.get("cases", [])), proc.stdout[-3000:]
    assert_judged_right(tmp_path, proc, names)


@pytest.mark.gpu
def test_real_cuda_graph_events() -> None:
    """The hook layer on torch.cuda.CUDAGraph itself: capture, stale replay, release under a live
    graph, death by refcount."""
    from fd_conformance.runtime import get_runtime

    runtime = get_runtime("torch", "cuda")
    net = Net().cuda()
    with runtime.observe_native_graphs() as obs, LifecycleRecorder(runtime) as recorder:
        obs.set_roots([("main", net)])
        x = torch.randn(2, 4, device="cuda")
        net(x)  # warm-up
        graph, out = capture(net, x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, net(x))
        net.first.weight.data = torch.randn(8, 4, device="cuda")
        graph.replay()
        net.second.weight.untyped_storage().resize_(0)
        obs.observe("released")
        del graph
        gc.collect()
    assert codes(recorder) == ["FDC201", "FDC204"]
    assert [e.kind.value for e in recorder.events if e.kind is not EventKind.MARK][-1] == "graph_destroyed"


@pytest.mark.gpu
def test_a_compiled_model_under_a_real_cuda_graph_is_not_certified_blind() -> None:
    """Issue 51.3 on the device: ``torch.compile(net)`` captured with ``torch.cuda.graph``, then a
    weight released under the live graph, is FDC201 (it was certified: the capture held no weight)."""
    from fd_conformance.runtime import get_runtime

    torch._dynamo.reset()
    runtime = get_runtime("torch", "cuda")
    net = Net().cuda()
    with runtime.observe_native_graphs() as obs, LifecycleRecorder(runtime) as recorder:
        obs.set_roots([("main", net)])
        compiled = torch.compile(net, backend="eager")
        x = torch.randn(2, 4, device="cuda")
        compiled(x)  # compiled and warmed up outside the capture, as vLLM does
        graph, _ = capture(compiled, x)
        net.second.weight.untyped_storage().resize_(0)
        obs.observe("released")
        del graph
        gc.collect()
    assert "FDC201" in codes(recorder), recorder.findings()
    torch._dynamo.reset()
