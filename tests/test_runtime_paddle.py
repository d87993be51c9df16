"""The Paddle adapter on real Paddle: weight release/restore, groups, events, allocator flag.

CPU tests use the CPU build of paddle (gloo group, host-emulated graphs); ``gpu`` tests are
written against the real CUDA API and need paddlepaddle-gpu on a CUDA host.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddle")

from fd_conformance.errors import EXIT_USAGE, UsageError
from fd_conformance.runtime import get_runtime
from fd_conformance.runtime.base import EventKind, RuntimeEvent
from fd_conformance.runtime.paddle import (
    ASYNC_ALLOCATOR_FLAG,
    PaddleGroup,
    PaddleRuntime,
    create,
)


@pytest.fixture(scope="module")
def rt() -> PaddleRuntime:
    runtime = create("cpu")
    assert isinstance(runtime, PaddleRuntime)
    return runtime


def _param(shape: list[int], seed: int = 0) -> Any:
    import paddle

    param = paddle.create_parameter(shape, "float32")
    param.set_value(np.random.default_rng(seed).standard_normal(shape).astype("float32"))
    return param


def test_get_runtime_builds_paddle_on_cpu(rt: PaddleRuntime) -> None:
    runtime = get_runtime("paddle", "cpu")
    assert runtime.name == "paddle" and runtime.device == "cpu"
    assert not runtime.graphs_are_real
    assert runtime.version.startswith(("3.", "0.0"))


def test_cuda_on_cpu_build_is_a_usage_error() -> None:
    import paddle

    if paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU for paddle")
    with pytest.raises(UsageError, match="sees no GPU; fix: install paddlepaddle-gpu"):
        create("cuda")
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        create("tpu")


def test_release_then_restore_moves_the_parameter_to_a_new_address(rt: PaddleRuntime, events: list[RuntimeEvent]) -> None:
    param = _param([8, 16])
    old = rt.address(param)
    assert old != 0 and not rt.is_released(param)

    rt.release_parameter(param, "w")
    assert rt.is_released(param) and rt.address(param) == 0

    value = np.full([8, 16], 3.0, dtype="float32")
    rt.restore_parameter(param, value, "w")
    assert not rt.is_released(param)
    assert rt.address(param) not in (0, old)
    np.testing.assert_array_equal(rt.to_numpy(param), value)

    kinds = [(e.kind, e.subject, e.subject_id) for e in events]
    assert kinds == [(EventKind.PARAM_RELEASED, "w", id(param)), (EventKind.PARAM_RESTORED, "w", id(param))]
    released, restored = events
    assert released.buffers[0].address == old and restored.buffers[0].address == rt.address(param)
    assert released.seq < restored.seq


def test_release_twice_is_a_no_op(rt: PaddleRuntime, events: list[RuntimeEvent]) -> None:
    """The shared release protocol: a second release must not overwrite the remembered address
    with 0 (restore would then no longer avoid the old block) nor emit a second event."""
    param = _param([4, 4])
    old = rt.address(param)
    rt.release_parameter(param, "w")
    rt.release_parameter(param, "w")
    assert [(e.kind, e.buffers[0].address) for e in events] == [(EventKind.PARAM_RELEASED, old)]
    rt.restore_parameter(param, np.zeros([4, 4], "float32"), "w")
    assert rt.address(param) not in (0, old)


def test_restore_from_a_paddle_tensor_never_aliases_the_source(rt: PaddleRuntime) -> None:
    import paddle

    param = _param([4, 4])
    source = paddle.ones([4, 4])
    rt.release_parameter(param, "w")
    rt.restore_parameter(param, source, "w")
    assert rt.address(param) != rt.address(source)
    source.fill_(7.0)  # the caller keeps using its tensor: the weight must not change with it
    np.testing.assert_array_equal(rt.to_numpy(param), np.ones([4, 4], "float32"))


def test_restore_rejects_a_shape_mismatch(rt: PaddleRuntime) -> None:
    """A wrong weight set is the user's input: UsageError (one line, fix named), not ValueError,
    and raised before anything is allocated, so the parameter stays released."""
    param = _param([4, 4])
    rt.release_parameter(param, "w")
    before = rt.memory_stats()
    for wrong in (np.zeros([2, 2], "float32"), [[0.0, 0.0], [0.0, 0.0]]):
        with pytest.raises(UsageError, match=r"restore of parameter w: value shape \(2, 2\) != parameter shape \(4, 4\)") as err:
            rt.restore_parameter(param, wrong, "w")
        assert err.value.exit_code == EXIT_USAGE and "load a weight set built for this model config" in str(err.value)
    assert rt.is_released(param) and rt.memory_stats() == before


class _SameBufferRuntime(PaddleRuntime):
    """Mutant: 'restores' by re-sharing the parameter's own buffer (address unchanged).
    A weight manager doing this would hide stale graphs, so the adapter must refuse."""

    def _new_storage(self, value: Any, like: Any, placement: Any, name: str) -> Any:
        return like


def test_restore_refuses_an_unchanged_address() -> None:
    mutant = _SameBufferRuntime("cpu")
    param = _param([4, 4])
    with pytest.raises(RuntimeError, match="address did not change"):
        mutant.restore_parameter(param, np.zeros([4, 4], "float32"), "w")


def test_clone_and_copy_into_keep_static_buffers_in_place(rt: PaddleRuntime) -> None:
    import paddle

    src = paddle.arange(6, dtype="float32").reshape([2, 3])
    static = rt.clone(src)
    assert rt.address(static) != rt.address(src)
    address = rt.address(static)
    rt.copy_into(static, src * 2)
    assert rt.address(static) == address  # graph replay reads this exact address
    np.testing.assert_array_equal(rt.to_numpy(static), np.arange(6, dtype="float32").reshape(2, 3) * 2)


def test_one_rank_gloo_group_lifecycle(rt: PaddleRuntime, events: list[RuntimeEvent]) -> None:
    import paddle
    import paddle.distributed.collective as collective

    group = rt.new_group("tp")
    assert isinstance(group, PaddleGroup) and group.backend == "gloo" and group.alive
    assert collective._get_group_map_by_name()[group.dist_name] is group.dist_group  # real paddle group
    tensor = paddle.full([3], 2.0)
    group.all_reduce(tensor)  # one rank: the sum is the tensor itself, but it goes through gloo
    np.testing.assert_array_equal(tensor.numpy(), np.full([3], 2.0, "float32"))

    rt.shutdown_group(group)
    assert not group.alive
    assert group.dist_name not in collective._get_group_map_by_name()
    with pytest.raises(RuntimeError, match="after it was shut down"):
        group.all_reduce(tensor)
    rt.shutdown_group(group)  # idempotent: no second event

    assert [(e.kind, e.subject_id) for e in events] == [
        (EventKind.GROUP_CREATED, id(group)),
        (EventKind.GROUP_SHUTDOWN, id(group)),
    ]


def test_release_groups_tears_down_what_the_model_left_alive(rt: PaddleRuntime, events: list[RuntimeEvent]) -> None:
    """After a check, a group the model left alive is deregistered from Paddle, with no event."""
    import paddle.distributed.collective as collective

    group = rt.new_group("tp")
    assert isinstance(group, PaddleGroup)
    rt.release_groups()
    assert not group.alive and group.dist_name not in collective._get_group_map_by_name()
    assert [e.kind for e in events] == [EventKind.GROUP_CREATED]


def test_group_shutdown_event_precedes_the_destroy_call(rt: PaddleRuntime) -> None:
    """As in torch: GROUP_SHUTDOWN is emitted while Paddle still has the group registered, so the
    record shows the shutdown even when NCCL's destroy (waiting on captured graphs) never returns."""
    import paddle.distributed.collective as collective

    group = rt.new_group("tp")
    assert isinstance(group, PaddleGroup)
    seen: list[bool] = []

    def at_shutdown(event: RuntimeEvent) -> None:
        if event.kind is EventKind.GROUP_SHUTDOWN:
            seen.append(group.dist_name in collective._get_group_map_by_name())

    unsubscribe = rt.events.subscribe(at_shutdown)
    try:
        rt.shutdown_group(group)
    finally:
        unsubscribe()
    assert seen == [True]
    assert group.dist_name not in collective._get_group_map_by_name() and not group.alive


def test_shutdown_group_rejects_a_foreign_group(rt: PaddleRuntime) -> None:
    from fd_conformance.runtime.base import Group

    class Foreign(Group):
        name = "foreign"

        def _all_reduce(self, tensor: Any) -> None:
            raise AssertionError("never called")

    with pytest.raises(UsageError, match="not a PaddleGroup"):
        rt.shutdown_group(Foreign())


def test_two_groups_are_independent(rt: PaddleRuntime) -> None:
    tp, ep = rt.new_group("tp"), rt.new_group("ep")
    rt.shutdown_group(tp)
    assert not tp.alive and ep.alive
    rt.shutdown_group(ep)


def _run_python(code: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    env = {k: v for k, v in os.environ.items() if k != ASYNC_ALLOCATOR_FLAG}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120)


def test_async_allocator_flag_is_set_before_paddle_is_imported() -> None:
    result = _run_python(
        f"""
        import os, sys
        from fd_conformance.runtime.paddle import ensure_async_allocator_flag
        assert "paddle" not in sys.modules
        assert ensure_async_allocator_flag() is True
        import paddle
        print(paddle.get_flags(["{ASYNC_ALLOCATOR_FLAG}"])["{ASYNC_ALLOCATOR_FLAG}"])
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "True"


def test_async_allocator_flag_explicit_false_warns() -> None:
    result = _run_python(
        """
        import warnings
        from fd_conformance.runtime.paddle import AsyncAllocatorFlagWarning, ensure_async_allocator_flag
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert ensure_async_allocator_flag() is False
        assert any(issubclass(w.category, AsyncAllocatorFlagWarning) for w in caught), caught
        print(caught[0].message)
        """,
        {ASYNC_ALLOCATOR_FLAG: "false"},
    )
    assert result.returncode == 0, result.stderr
    assert "FDC302 can be a false positive" in result.stdout


# --- GPU: real paddle.device.cuda.graphs.CUDAGraph and NCCL. Needs paddlepaddle-gpu. ---------------


@pytest.fixture(scope="module")
def cuda_rt() -> PaddleRuntime:
    import paddle

    if not (paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0):
        pytest.skip("paddle here is not a CUDA build with a visible GPU (install paddlepaddle-gpu)")
    return create("cuda")


@pytest.mark.gpu
def test_cuda_graph_replay_reads_static_input_and_reset_returns_memory(cuda_rt: PaddleRuntime) -> None:
    import paddle

    events: list[RuntimeEvent] = []
    cuda_rt.events.subscribe(events.append)
    weight = _param([64, 64]).cuda()
    static_in = paddle.zeros([8, 64])
    cuda_rt.empty_cache()
    before = cuda_rt.memory_stats().reserved
    graph = cuda_rt.new_graph("size8")
    out = graph.capture(lambda: paddle.matmul(static_in, weight), buffers={"w": weight, "x": static_in})
    new_in = paddle.randn([8, 64])
    cuda_rt.copy_into(static_in, new_in)
    graph.replay()
    cuda_rt.synchronize()
    np.testing.assert_allclose(out.numpy(), paddle.matmul(new_in, weight).numpy(), rtol=1e-4, atol=1e-4)
    del out
    graph.reset()
    cuda_rt.empty_cache()
    assert not graph.alive
    assert cuda_rt.memory_stats().reserved - before <= 1 << 20
    assert [e.kind for e in events] == [EventKind.GRAPH_CAPTURED, EventKind.GRAPH_REPLAYED, EventKind.GRAPH_DESTROYED]


@pytest.mark.gpu
def test_cuda_release_restore_and_nccl_group(cuda_rt: PaddleRuntime) -> None:
    import paddle

    param = _param([128, 128]).cuda()
    old = cuda_rt.address(param)
    cuda_rt.release_parameter(param, "w")
    cuda_rt.restore_parameter(param, np.ones([128, 128], "float32"), "w")
    assert cuda_rt.address(param) not in (0, old)

    group = cuda_rt.new_group("tp")
    assert isinstance(group, PaddleGroup) and group.backend == "nccl"
    tensor = paddle.ones([4])
    group.all_reduce(tensor)
    cuda_rt.shutdown_group(group)
    assert not group.alive


# --- host-emulated graphs on CPU (the shared host_graph double, driven by paddle tensors) ----------


def test_host_graph_replays_static_inputs_and_goes_stale_after_the_weight_cycle(
    rt: PaddleRuntime, events: list[RuntimeEvent]
) -> None:
    import paddle

    from fd_conformance.runtime.base import StaleGraphError

    weight = _param([4, 4], seed=1)
    static_in = paddle.zeros([2, 4])
    graph = rt.new_graph("size2")
    out = graph.capture(lambda: paddle.matmul(static_in, weight), buffers={"w": weight, "x": static_in})
    new_in = paddle.randn([2, 4])
    rt.copy_into(static_in, new_in)
    graph.replay()
    np.testing.assert_allclose(out.numpy(), (new_in @ weight).numpy(), rtol=1e-6)
    assert rt.memory_stats().allocated == 2 * 4 * 4  # the static output is what the ledger holds

    rt.release_parameter(weight, "w")
    rt.restore_parameter(weight, np.eye(4, dtype="float32"), "w")
    with pytest.raises(StaleGraphError, match="moved from"):
        graph.replay()
    graph.reset()
    graph.reset()  # idempotent
    del out
    # Graph memory is gone; the weight the runtime restored into new storage is host-tracked too.
    assert (rt.memory_stats().graphs, rt.memory_stats().allocated) == (0, 4 * 4 * 4)
    assert [e.kind for e in events] == [
        EventKind.GRAPH_CAPTURED,
        EventKind.GRAPH_REPLAYED,
        EventKind.PARAM_RELEASED,
        EventKind.PARAM_RESTORED,
        EventKind.GRAPH_REPLAYED,
        EventKind.GRAPH_DESTROYED,
    ]
    captured = events[0]
    assert {ref.name for ref in captured.buffers} == {"w", "x"}
    rt.release_parameter(weight, "w")
    assert rt.memory_stats().allocated == 0  # a released weight holds no bytes


def test_host_graph_is_stale_after_its_group_shuts_down(rt: PaddleRuntime) -> None:
    import paddle

    from fd_conformance.runtime.base import StaleGraphError

    group = rt.new_group("tp")
    x = paddle.ones([3])

    def step() -> Any:
        y = x * 2
        group.all_reduce(y)
        return y

    graph = rt.new_graph("ar")
    graph.capture(step, groups=[group])
    graph.replay()
    rt.shutdown_group(group)
    with pytest.raises(StaleGraphError, match="group 'tp' was shut down"):
        graph.replay()
    graph.reset()
