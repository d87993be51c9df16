"""The PyTorch runtime adapter: real tensors, real gloo groups on CPU; real CUDA graphs and NCCL
in the ``gpu``-marked tests (run on a CUDA host with ``pytest -m gpu``)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # the whole file needs torch: skip it cleanly without

import torch.distributed as dist  # noqa: E402
from _helpers import torch_cpu_runtime  # noqa: E402

from fd_conformance.errors import UsageError  # noqa: E402
from fd_conformance.runtime import get_runtime  # noqa: E402
from fd_conformance.runtime.base import EventKind, RuntimeEvent, allocate_avoiding  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime, create  # noqa: E402

MIB = 1 << 20


@pytest.fixture
def rt() -> TorchRuntime:
    return torch_cpu_runtime()


def test_cpu_runtime_describes_itself(rt: TorchRuntime) -> None:
    assert (rt.name, rt.device, rt.version) == ("torch", "cpu", torch.__version__)
    assert rt.device_count() == 1 and "host-emulated" in rt.device_name()
    assert rt.graphs_are_real is False and rt.graph_mode == "host-emulated"
    rt.synchronize()
    rt.empty_cache()
    assert rt.memory_stats().allocated == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_cuda_without_a_gpu_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="sees no CUDA device; fix: "):
        create("cuda")


def test_unknown_device_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        create("tpu")
    with pytest.raises(UsageError, match="unknown device"):
        get_runtime("torch", "tpu")


def test_tensor_helpers(rt: TorchRuntime) -> None:
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    copy = rt.clone(t)
    assert rt.address(copy) != rt.address(t)
    assert rt.to_numpy(t).tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    rt.copy_into(copy, torch.ones(2, 3))
    assert rt.to_numpy(copy).sum() == 6.0
    p = torch.nn.Parameter(torch.ones(2))
    rt.copy_into(p, torch.zeros(2))  # in-place into a leaf that requires grad: allowed under no_grad
    assert p.sum().item() == 0.0


def test_release_frees_storage_in_place(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    lin = torch.nn.Linear(4, 4)
    weight = lin.weight
    address = rt.address(weight)
    rt.release_parameter(weight, "weight")
    assert lin.weight is weight  # identity kept: modules still point at it
    assert rt.is_released(weight) and rt.address(weight) == 0
    assert weight.untyped_storage().nbytes() == 0 and weight.shape == (4, 4)
    rt.release_parameter(weight, "weight")  # twice: no-op, no second event
    [event] = events
    assert (event.kind, event.subject, event.subject_id) == (EventKind.PARAM_RELEASED, "weight", id(weight))
    assert event.buffers[0].address == address and event.buffers[0].obj_id == id(weight)


def test_restore_puts_value_at_a_new_address_every_cycle(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    lin = torch.nn.Linear(16, 16)
    weight = lin.weight
    for cycle in range(20):
        before = rt.address(weight)
        rt.release_parameter(weight, "w")
        value = torch.full((16, 16), float(cycle))
        rt.restore_parameter(weight, value, "w")
        assert lin.weight is weight and isinstance(weight, torch.nn.Parameter)
        assert rt.address(weight) not in (0, before), f"cycle {cycle}: restore reused the old address"
        torch.testing.assert_close(weight.detach(), value)
        assert rt.address(weight) != rt.address(value)  # a copy, not the caller's tensor
    restored = [e for e in events if e.kind is EventKind.PARAM_RESTORED]
    assert len(restored) == 20 and restored[-1].buffers[0].address == rt.address(weight)


def test_restore_with_wrong_shape_is_a_usage_error(rt: TorchRuntime) -> None:
    weight = torch.nn.Parameter(torch.ones(4, 4))
    rt.release_parameter(weight, "w")
    with pytest.raises(UsageError, match=r"value shape \(3, 4\) != parameter shape \(4, 4\)"):
        rt.restore_parameter(weight, torch.ones(3, 4), "w")


class _SameStorageRuntime(TorchRuntime):
    """Mutant: 'restores' into the parameter's own storage (address unchanged). A weight
    manager doing this would hide stale graphs, so the shared restore must refuse it."""

    def _new_storage(self, value: Any, like: Any, placement: Any, name: str) -> Any:
        return like


def test_restore_refuses_an_unchanged_address() -> None:
    mutant = _SameStorageRuntime("cpu")
    weight = torch.nn.Parameter(torch.ones(4, 4))
    with pytest.raises(RuntimeError, match="address did not change"):
        mutant.restore_parameter(weight, torch.zeros(4, 4), "w")
    good = torch_cpu_runtime()
    good.restore_parameter(weight, torch.zeros(4, 4), "w")  # the real adapter moves it
    assert weight.sum().item() == 0.0


def test_allocate_avoiding_retries_only_on_the_avoided_address() -> None:
    """The allocator handing the freed block straight back is simulated by its address order;
    the first (unlucky) buffer must still be alive when the second is made."""
    made: list[bytearray] = []
    addresses = iter([0x1000, 0x2000])
    address_of: dict[int, int] = {}

    def make() -> bytearray:
        buf = bytearray(1)
        made.append(buf)  # held here: the retry must not be able to get the same block
        address_of[id(buf)] = next(addresses)
        return buf

    fresh = allocate_avoiding(make, lambda b: address_of[id(b)], avoid=0x1000)
    assert address_of[id(fresh)] == 0x2000 and len(made) == 2
    made.clear()
    addresses = iter([0x3000])
    assert address_of[id(allocate_avoiding(make, lambda b: address_of[id(b)], avoid=0x1000))] == 0x3000
    assert len(made) == 1  # no retry when the first buffer is already elsewhere


def test_unlucky_block_is_poisoned_before_it_is_dropped() -> None:
    """The block handed back at the old address already holds the NEW weights; a stale graph
    reading it would be right by accident (seen on the H200) unless it is poisoned first."""
    import torch

    rt = torch_cpu_runtime()
    blocks = [torch.full((4,), 2.0), torch.full((4,), 2.0)]
    handed = iter(blocks)
    fresh = allocate_avoiding(lambda: next(handed), lambda t: t.data_ptr(), blocks[0].data_ptr(), rt._poison)
    assert fresh is blocks[1] and torch.equal(fresh, torch.full((4,), 2.0))
    assert torch.isnan(blocks[0]).all(), "the unlucky block kept the new values: a stale graph would read them"


def test_group_create_shutdown_recreate(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    owns_world = not dist.is_initialized()  # another test may have left a world group behind
    tp, ep = rt.new_group("tp"), rt.new_group("ep")
    t = torch.ones(3)
    tp.all_reduce(t)
    ep.all_reduce(t)
    torch.testing.assert_close(t, torch.ones(3))  # one rank: sum == value
    rt.shutdown_group(tp)
    assert not tp.alive and ep.alive and dist.is_initialized()
    with pytest.raises(RuntimeError, match="shut down"):
        tp.all_reduce(t)
    rt.shutdown_group(ep)
    rt.shutdown_group(ep)  # twice: no-op
    assert dist.is_initialized() is not owns_world  # last group gone: a world we made is torn down
    again = rt.new_group("tp")  # update_parameters restarts groups
    again.all_reduce(t)
    rt.shutdown_group(again)
    kinds = [(e.kind, e.subject) for e in events]
    assert kinds == [
        (EventKind.GROUP_CREATED, "tp"),
        (EventKind.GROUP_CREATED, "ep"),
        (EventKind.GROUP_SHUTDOWN, "tp"),
        (EventKind.GROUP_SHUTDOWN, "ep"),
        (EventKind.GROUP_CREATED, "tp"),
        (EventKind.GROUP_SHUTDOWN, "tp"),
    ]


def test_mark_event(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    rt.events.mark("clear_graph_opt_backend:begin", owner="draft")
    rt.events.emit(EventKind.MARK, "clear_graph_opt_backend:end")
    assert [(e.kind, e.subject, e.owner) for e in events] == [
        (EventKind.MARK, "clear_graph_opt_backend:begin", "draft"),
        (EventKind.MARK, "clear_graph_opt_backend:end", ""),
    ]
    assert events[0].seq < events[1].seq


# --- GPU: real CUDA graphs (run on a CUDA host) -----------------------------------------------


def _cuda_mlp() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
    return mlp, torch.randn(8, 64, device="cuda")


def _warm_up(fn: object, steps: int = 3) -> None:
    # Side-stream warm-up, as torch's CUDA-graph docs prescribe: lazy cuBLAS init happens here.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(steps):
            fn()  # type: ignore[operator]
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()


@pytest.mark.gpu
def test_gpu_cuda_graph_replay_equals_eager() -> None:
    rt = create("cuda")
    assert rt.graphs_are_real and rt.graph_mode == "cuda-graph"
    mlp, x = _cuda_mlp()
    _warm_up(lambda: mlp(x))
    graph = rt.new_graph("decode-8")
    out = graph.capture(lambda: mlp(x), buffers=dict(mlp.named_parameters()))
    for seed in range(3):
        torch.manual_seed(seed)
        x.copy_(torch.randn(8, 64, device="cuda"))
        graph.replay()
        rt.synchronize()
        with torch.no_grad():
            torch.testing.assert_close(out, mlp(x), rtol=1e-4, atol=1e-4)
    graph.reset()


@pytest.mark.gpu
def test_gpu_reset_returns_graph_memory_to_post_warm_up_baseline() -> None:
    rt = create("cuda")
    mlp, x = _cuda_mlp()
    _warm_up(lambda: mlp(x))
    gc.collect()
    rt.empty_cache()  # drops the eager cuBLAS workspace too, so the baseline is workspace-free
    baseline = rt.memory_stats()
    graphs, outputs = [], []
    for size in (8, 4, 2):  # several graphs, descending, as an engine captures them
        xs = x[:size]
        graph = rt.new_graph(f"decode-{size}")
        outputs.append(graph.capture(lambda xs=xs: mlp(xs)))
        graphs.append(graph)
    captured = rt.memory_stats()
    for graph in graphs:
        graph.reset()
    del graphs, outputs
    gc.collect()
    rt.empty_cache()
    after = rt.memory_stats()
    print(
        f"\nallocated: baseline={baseline.allocated} captured={captured.allocated} after={after.allocated} "
        f"(delta {after.allocated - baseline.allocated} B); reserved: baseline={baseline.reserved} "
        f"captured={captured.reserved} after={after.reserved}"
    )
    assert captured.allocated > baseline.allocated  # the graphs did hold memory
    assert abs(after.allocated - baseline.allocated) <= 1 * MIB


@pytest.mark.gpu
def test_gpu_nccl_all_reduce_captured_in_a_graph_replays() -> None:
    rt = create("cuda")
    group = rt.new_group("tp")
    try:
        x = torch.ones(1024, device="cuda")

        def step() -> torch.Tensor:
            y = x * 2
            group.all_reduce(y)
            return y

        _warm_up(step)
        graph = rt.new_graph("allreduce")
        out = graph.capture(step, groups=[group])
        x.fill_(5.0)
        graph.replay()
        rt.synchronize()
        torch.testing.assert_close(out, torch.full((1024,), 10.0, device="cuda"))  # one rank: sum == value
        graph.reset()  # before shutdown: NCCL destroy waits on graphs that captured the communicator
    finally:
        rt.shutdown_group(group)
    again = rt.new_group("tp")
    rt.shutdown_group(again)


@pytest.fixture
def world_left_as_found() -> Iterator[None]:
    """release_groups keeps the world for the next check: a test that made one takes it down,
    so the tests after it start without one, as they expect."""
    existed = dist.is_initialized()
    yield
    if not existed and dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.usefixtures("world_left_as_found")
def test_release_groups_tears_down_what_the_model_left_alive(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    """A check's leftover groups are destroyed in the framework's registry, quietly: on a GPU each
    is a NCCL communicator holding device memory, and a worker runs hundreds of checks."""
    tp, ep = rt.new_group("tp"), rt.new_group("ep")
    rt.shutdown_group(tp)  # the model shut one down itself
    rt.release_groups()
    registry = dist.distributed_c10d._world.pg_map if dist.is_initialized() else {}
    assert not ep.alive and ep.handle not in registry and tp.handle not in registry
    assert dist.is_initialized()  # the world stays for the next check's runtime to join
    assert [e.kind for e in events].count(EventKind.GROUP_SHUTDOWN) == 1  # the model's own only
    rt.release_groups()  # nothing left: a no-op
    again = rt.new_group("tp")  # the kept world takes new groups
    again.all_reduce(torch.ones(2))
    rt.shutdown_group(again)


@pytest.mark.usefixtures("world_left_as_found")
def test_a_checks_teardown_tears_down_the_groups_its_model_left_alive() -> None:
    """The plugin's teardown (release_subject) is where release_groups runs for every check: a
    reference model built and released leaves none of its groups registered."""
    from fd_conformance.plugin.fixtures import release_subject
    from fd_reference_models.cases import all_cases

    case = next(case for case in all_cases() if case.name == "torch-glm4-moe")
    rt = get_runtime(case.runtime, "cpu")
    subject = case.factory(rt)
    groups = [group for group in rt._groups if group.alive]
    assert groups  # the model made its groups and left them to the engine's teardown
    release_subject(subject, rt)
    registry = dist.distributed_c10d._world.pg_map if dist.is_initialized() else {}
    assert not any(group.alive or group.handle in registry for group in groups)


@pytest.mark.usefixtures("world_left_as_found")
def test_release_groups_waits_for_a_live_graph(rt: TorchRuntime) -> None:
    """A group is not destroyed under a live graph (NCCL's destroy waits on graphs that captured
    its communicator: teardown would hang); once the graph is reset it is."""
    group = rt.new_group("tp")
    graph = rt.new_graph("step")
    x = torch.ones(4)

    def step() -> torch.Tensor:
        y = x * 2
        group.all_reduce(y)
        return y

    graph.capture(step, buffers=[x], groups=[group])
    rt.release_groups()
    assert group.alive and group.handle in dist.distributed_c10d._world.pg_map
    graph.reset()
    rt.release_groups()
    assert not group.alive


def test_group_shutdown_event_precedes_the_destroy_call(rt: TorchRuntime) -> None:
    """GROUP_SHUTDOWN is emitted while the process group still exists: if destroy hangs (NCCL
    waiting on graphs that captured it), the record already shows the shutdown."""
    group = rt.new_group("tp")
    seen: list[tuple[bool, bool]] = []

    def at_shutdown(event: RuntimeEvent) -> None:
        if event.kind is EventKind.GROUP_SHUTDOWN:
            registered = group.handle in dist.distributed_c10d._world.pg_map  # the real registry
            seen.append((registered, group.alive))

    unsubscribe = rt.events.subscribe(at_shutdown)
    try:
        rt.shutdown_group(group)
    finally:
        unsubscribe()
    assert seen == [(True, True)]
    assert group.handle not in dist.distributed_c10d._world.pg_map and not group.alive


def test_shutdown_group_rejects_a_foreign_group(rt: TorchRuntime) -> None:
    from fd_conformance.runtime.base import Group

    class Foreign(Group):
        name = "foreign"

        def _all_reduce(self, tensor: Any) -> None:
            raise AssertionError("never called")

    with pytest.raises(UsageError, match="not a TorchGroup"):
        rt.shutdown_group(Foreign())


def test_store_file_is_removed_with_the_world_it_served() -> None:
    """get_runtime() builds a runtime per call: a world's FileStore file goes when the world does.
    In a fresh interpreter: a world an earlier test of this process left (on CPU the world outlives
    a check) would make this runtime join it, with no store of its own to check."""
    script = textwrap.dedent(
        """
        import os
        from fd_conformance.runtime import get_runtime
        from fd_conformance.runtime.torch import _KIT_WORLD
        rt = get_runtime("torch", "cpu"); group = rt.new_group("tp")
        store = _KIT_WORLD["store"]
        assert os.path.isfile(store), store
        rt.shutdown_group(group)  # last group: the runtime destroys the world it made
        assert not os.path.exists(store) and not _KIT_WORLD, store
        print("store removed")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "store removed" in proc.stdout, proc.stderr[-2000:]


def test_a_kept_world_of_another_backend_is_ended_not_joined() -> None:
    """A worker that ran a cuda check keeps its NCCL world; a cpu check after it must make its own
    gloo world, not join that one (and the other way round). torch's "fake" backend stands in for
    NCCL on a CPU host. In a fresh interpreter: the tests before may have left a world."""
    script = textwrap.dedent(
        """
        import torch, torch.distributed as dist
        import torch.testing._internal.distributed.fake_pg  # registers the "fake" backend
        from fd_conformance.runtime import get_runtime
        other = get_runtime("torch", "cpu"); other._backend = lambda: "fake"
        other.new_group("tp"); other.release_groups()
        assert dist.get_backend() == "fake"  # kept for the worker's later checks
        rt = get_runtime("torch", "cpu"); group = rt.new_group("tp")
        assert dist.get_backend() == "gloo", dist.get_backend()
        t = torch.ones(2); group.all_reduce(t); assert t.tolist() == [1.0, 1.0]
        print("ended, not joined")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "ended, not joined" in proc.stdout, proc.stderr[-2000:]


def test_a_dropped_runtime_keeps_the_store_its_live_world_uses() -> None:
    """The world outlives a runtime dropped without shutting its groups down; the next runtime's
    new_group rendezvous through that world's store, so deleting it with the runtime deadlocks."""
    script = textwrap.dedent(
        """
        import gc, torch
        from fd_conformance.runtime import get_runtime
        a = get_runtime("torch", "cpu"); a.new_group("tp")
        del a; gc.collect()
        b = get_runtime("torch", "cpu"); t = torch.ones(2); b.new_group("tp").all_reduce(t)
        print("rendezvous ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert "rendezvous ok" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.gpu
def test_gpu_groups_restart_as_splits_of_a_kept_world_that_a_native_engine_never_finds() -> None:
    """On a GPU the world a runtime makes connects eagerly and outlives its groups and the runtime
    (each NCCL communicator's destroy waits ~0.5 s; a split sharing the world's resources does
    not), later runtimes join it, and observing a native engine ends it: that engine makes its own
    world, as it would alone. In a fresh interpreter: the tests before may have left a world."""
    script = textwrap.dedent(
        """
        import os, torch, torch.distributed as dist
        from fd_conformance.runtime import get_runtime
        rt = get_runtime("torch", "cuda"); group = rt.new_group("tp"); world = dist.group.WORLD
        assert os.environ["NCCL_COMM_SPLIT_SHARE_RESOURCES"] == "1"
        rt.shutdown_group(group)  # the model's own shutdown, as in every RL cycle
        assert dist.is_initialized() and dist.group.WORLD is world, "the world ended with its group"
        again = rt.new_group("tp"); t = torch.ones(4, device="cuda"); again.all_reduce(t)
        assert t.tolist() == [1.0] * 4
        rt.release_groups()  # a check's teardown
        later = get_runtime("torch", "cuda"); joined = later.new_group("tp")
        assert dist.group.WORLD is world, "a later check's runtime made a world of its own"
        later.shutdown_group(joined)
        get_runtime("torch", "cuda").observe_native_graphs()
        assert not dist.is_initialized(), "a native engine would find the kit's world"
        print("kept, joined, ended")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "kept, joined, ended" in proc.stdout, proc.stderr[-2000:]


@pytest.mark.gpu
def test_gpu_live_graph_of_one_runtime_keeps_workspaces_for_another() -> None:
    """cuBLAS workspaces are process-wide: a second runtime's empty_cache must not free the one a
    live graph of the first runtime replays against."""
    from fd_conformance.runtime.torch import live_cuda_graphs

    first, second = create("cuda"), create("cuda")
    a = torch.randn(64, 64, device="cuda")
    for _ in range(2):
        a @ a  # warm-up: lazy cuBLAS init outside the capture
    graph = first.new_graph("mm")
    out = graph.capture(lambda: a @ a, buffers={"a": a})
    assert live_cuda_graphs() >= 1
    second.empty_cache()  # before the fix: this runtime saw no graph of its own and cleared them
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a @ a)
    graph.reset()
    assert live_cuda_graphs() == 0


def test_refused_restore_leaves_the_parameter_restorable(rt: TorchRuntime) -> None:
    """A wrong-shaped weight is refused before allocation and the retry with the right one works."""
    weight = torch.nn.Parameter(torch.ones(4, 4))
    rt.release_parameter(weight, "w")
    with pytest.raises(UsageError, match="load a weight set built for this model config"):
        rt.restore_parameter(weight, torch.zeros(3, 4), "w")
    assert rt.is_released(weight)
    rt.restore_parameter(weight, torch.full((4, 4), 2.0), "w")
    torch.testing.assert_close(weight.detach(), torch.full((4, 4), 2.0))
