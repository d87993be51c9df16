"""The host emulation of CUDA-graph semantics, exercised through the real torch CPU runtime."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")  # the whole file needs torch: skip it cleanly without

from _helpers import torch_cpu_runtime  # noqa: E402

from fd_conformance.runtime.base import EventKind, RuntimeEvent, StaleGraphError  # noqa: E402
from fd_conformance.runtime.host_graph import HostGraph, HostMemoryLedger, copy_tree_into, tensor_leaves  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime  # noqa: E402


@pytest.fixture
def rt() -> TorchRuntime:
    return torch_cpu_runtime()


def _mlp() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_capture_returns_static_outputs_and_replay_writes_into_them(rt: TorchRuntime) -> None:
    mlp = _mlp()
    x = torch.randn(3, 8)
    graph = rt.new_graph("decode-3")
    assert isinstance(graph, HostGraph) and not rt.graphs_are_real
    out = graph.capture(lambda: {"logits": mlp(x), "pair": (mlp(x) * 2, None)}, buffers=dict(mlp.named_parameters()))
    logits, doubled = out["logits"], out["pair"][0]
    x.copy_(torch.randn(3, 8))  # new input in the static buffer, as a runner does before replay
    graph.replay()
    assert out["logits"] is logits and out["pair"][0] is doubled  # the same tensors, refreshed
    torch.testing.assert_close(logits, mlp(x))
    torch.testing.assert_close(doubled, mlp(x) * 2)


def test_replay_after_in_place_weight_update_is_not_stale(rt: TorchRuntime) -> None:
    mlp = _mlp()
    x = torch.randn(2, 8)
    graph = rt.new_graph("g")
    out = graph.capture(lambda: mlp(x), buffers=dict(mlp.named_parameters()))
    with torch.no_grad():
        mlp[0].weight.mul_(2.0)  # same storage, same address: a real graph sees the new values
    graph.replay()
    torch.testing.assert_close(out, mlp(x))


def test_replay_after_release_raises_stale(rt: TorchRuntime) -> None:
    mlp = _mlp()
    x = torch.randn(2, 8)
    graph = rt.new_graph("g", owner="draft")
    graph.capture(lambda: mlp(x), buffers=dict(mlp.named_parameters()))
    rt.release_parameter(mlp[2].bias, "2.bias")
    with pytest.raises(StaleGraphError, match=r"'g' \(draft\).*2\.bias was released"):
        graph.replay()


def test_replay_after_restore_to_new_address_raises_stale(rt: TorchRuntime) -> None:
    mlp = _mlp()
    x = torch.randn(2, 8)
    graph = rt.new_graph("g")
    graph.capture(lambda: mlp(x), buffers=dict(mlp.named_parameters()))
    weight = mlp[0].weight
    before = rt.address(weight)
    rt.release_parameter(weight, "0.weight")
    rt.restore_parameter(weight, torch.ones(16, 8), "0.weight")
    assert rt.address(weight) not in (0, before)
    with pytest.raises(StaleGraphError, match=r"0\.weight moved from"):
        graph.replay()
    # Recapturing on the new buffers is the fix: replay works again.
    graph.reset()
    out = graph.capture(lambda: mlp(x), buffers=dict(mlp.named_parameters()))
    graph.replay()
    torch.testing.assert_close(out, mlp(x))


def test_replay_after_group_shutdown_raises_stale(rt: TorchRuntime) -> None:
    group = rt.new_group("tp")
    x = torch.ones(4)
    graph = rt.new_graph("allreduce")

    def step() -> torch.Tensor:
        y = x * 3
        group.all_reduce(y)
        return y

    out = graph.capture(step, groups=[group])
    graph.replay()
    torch.testing.assert_close(out, torch.full((4,), 3.0))  # one rank: the sum is the value
    rt.shutdown_group(group)
    with pytest.raises(StaleGraphError, match="group 'tp' was shut down"):
        graph.replay()


def test_ledger_sees_output_kept_after_reset_as_leak(rt: TorchRuntime) -> None:
    x = torch.randn(64, 32)  # 8 KiB of float32 output per graph
    leaky, clean = rt.new_graph("leaky"), rt.new_graph("clean")
    assert rt.memory_stats().allocated == 0
    kept = leaky.capture(lambda: x * 2)
    clean.capture(lambda: x + 1)  # returned value dropped: only the graph holds it
    assert rt.memory_stats().allocated == 2 * 64 * 32 * 4
    leaky.reset()
    clean.reset()
    # The clean graph's output died with its reset; the leaky model still holds its buffer.
    assert rt.memory_stats().allocated == 64 * 32 * 4
    assert rt.host.ledger.live_count() == 1
    del kept
    gc.collect()
    assert rt.memory_stats() == rt.memory_stats().__class__(0, 0, graphs=0)


def test_ledger_counts_one_tensor_once() -> None:
    ledger = HostMemoryLedger(lambda t: t.numel() * t.element_size())
    t = torch.zeros(10)
    ledger.track(t)
    ledger.track(t)
    assert ledger.allocated() == 40


def test_reset_is_idempotent_and_replay_after_reset_is_an_error(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    graph = rt.new_graph("g")
    graph.reset()  # before capture: no-op, no event
    graph.capture(lambda: torch.ones(2))
    with pytest.raises(RuntimeError, match="already captured"):
        graph.capture(lambda: torch.ones(2))
    graph.reset()
    graph.reset()
    assert not graph.alive
    with pytest.raises(RuntimeError, match="not captured"):
        graph.replay()
    assert [e.kind for e in events] == [EventKind.GRAPH_CAPTURED, EventKind.GRAPH_DESTROYED]


def test_capture_event_carries_buffers_and_groups(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    group = rt.new_group("ep")
    try:
        w = torch.nn.Parameter(torch.randn(3))
        graph = rt.new_graph("g", owner="draft")
        graph.capture(lambda: w * 1, buffers={"w": w}, groups=[group])
        graph.replay()
        captured = [e for e in events if e.kind is EventKind.GRAPH_CAPTURED][0]
        assert captured.owner == "draft" and captured.subject == "g" and captured.subject_id == id(graph)
        assert [(b.obj_id, b.address, b.name) for b in captured.buffers] == [(id(w), w.data_ptr(), "w")]
        assert captured.groups == (id(group),)
        replayed = [e for e in events if e.kind is EventKind.GRAPH_REPLAYED][0]
        assert replayed.buffers == captured.buffers
    finally:
        rt.shutdown_group(group)


def test_graph_dropped_without_reset_reports_destroyed(rt: TorchRuntime, events: list[RuntimeEvent]) -> None:
    graph = rt.new_graph("dropped", owner="draft")
    graph.capture(lambda: torch.ones(2))
    graph_id = id(graph)
    del graph
    gc.collect()
    destroyed = [e for e in events if e.kind is EventKind.GRAPH_DESTROYED]
    assert [(e.subject, e.subject_id, e.owner) for e in destroyed] == [("dropped", graph_id, "draft")]


def test_replay_structure_mismatch_is_reported(rt: TorchRuntime) -> None:
    ops = rt.host.ops
    with pytest.raises(RuntimeError, match="keys"):
        copy_tree_into({"a": torch.zeros(1)}, {"b": torch.zeros(1)}, ops)
    with pytest.raises(RuntimeError, match=r"outputs\[1\]"):
        copy_tree_into((torch.zeros(1), torch.zeros(1)), (torch.zeros(1), 3), ops)
    assert len(tensor_leaves({"a": [torch.zeros(1), (None, torch.zeros(2))]}, ops.is_tensor)) == 2


def test_ledger_tracks_restored_weights_and_clones_by_category(rt: TorchRuntime) -> None:
    """Weights the runtime restores and tensors it clones are host-tracked, apart from graph memory:
    the weight-cycle check sees them (allocated), the clear check does not (graphs)."""
    from fd_conformance.runtime.base import MemoryCategory, MemoryStats

    ledger = rt.host.ledger
    param = torch.nn.Parameter(torch.zeros(32, 8))  # 1 KiB of float32
    assert rt.memory_stats() == MemoryStats(0, 0, graphs=0)  # built outside the runtime: not its allocation
    rt.release_parameter(param, "w")
    rt.restore_parameter(param, torch.ones(32, 8), "w")
    assert ledger.allocated(MemoryCategory.WEIGHTS) == 1024
    rt.release_parameter(param, "w")
    assert ledger.allocated(MemoryCategory.WEIGHTS) == 0  # sizes are read now: a released weight holds nothing
    rt.restore_parameter(param, torch.ones(32, 8), "w")
    assert ledger.allocated(MemoryCategory.WEIGHTS) == 1024  # restored again: still one allocation
    copy = rt.clone(param)
    assert ledger.allocated(MemoryCategory.BUFFERS) == 1024
    assert rt.memory_stats() == MemoryStats(2048, 2048, graphs=0)
    kept = rt.new_graph("g").capture(lambda: param * 2)  # noqa: F821 - runs at capture, before the del below
    assert rt.memory_stats() == MemoryStats(3072, 3072, graphs=1024)
    del copy, kept, param
    gc.collect()
    assert rt.memory_stats() == MemoryStats(0, 0, graphs=0)  # weakly tracked: the ledger kept nothing alive


def test_kept_weight_copies_grow_host_memory_per_cycle(rt: TorchRuntime) -> None:
    """FDC305's signal on CPU: a runner keeping a clone of its weights each cycle grows; one that
    does not keep them holds steady (restored weights replace the released ones)."""
    from fd_conformance.suite._support import grows

    def cycles(keep: bool) -> list[int]:
        params = [torch.nn.Parameter(torch.zeros(16, 16)) for _ in range(3)]
        rollback: list[object] = []
        held = []
        for seed in range(3):
            copies = [rt.clone(p) for p in params]
            if keep:
                rollback.append(copies)
            del copies
            for index, param in enumerate(params):
                rt.release_parameter(param, f"p{index}")
                rt.restore_parameter(param, torch.full((16, 16), float(seed)), f"p{index}")
            gc.collect()
            held.append(rt.memory_stats().allocated)
        return held

    steady, growing = cycles(keep=False), cycles(keep=True)
    assert steady == [3 * 1024] * 3 and not grows(steady, 1)
    assert growing == [6 * 1024, 9 * 1024, 12 * 1024] and grows(growing, 1)
