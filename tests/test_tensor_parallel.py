"""TP=2 conformance over a real two-process world: gloo + host-emulated graphs here, NCCL + CUDA
graphs in the ``gpu``-marked tests (one process per GPU; they need 2 GPUs and skip with that reason).

Spawning two torch ranks costs seconds, so one module-scoped world serves every CPU test and each
rank function below does a whole scenario per call. The ``rank_*`` functions run INSIDE the ranks
(the parent imports them by name through ``sys.path``, as the isolation tests do).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # ranks import this module by name

from fd_conformance.devices import visible_gpu_count
from fd_conformance.distributed.capture_plan import (
    capture_in_agreed_order,
    captured_order,
    check_capture_plans,
    encode_plan,
    exchange_capture_plans,
)
from fd_conformance.distributed.world import DistributedWorld, RankContext, WorldOutcome
from fd_conformance.errors import UsageError
from fd_conformance.findings import RULES

HERE = "test_tensor_parallel"
CALL_TIMEOUT_S = 240.0  # first call pays torch + transformers import in both ranks on shared CPUs
HANG_TIMEOUT_S = 6.0  # the hang scenario runs on warm ranks with their subjects built: one forward
SIZES = (4, 3, 1)  # 3 pads to capture size 4: padding rows must not change the real rows

needs_two_gpus = pytest.mark.skipif(
    visible_gpu_count() < 2,
    reason=f"needs 2 GPUs (one process per GPU, NCCL); {visible_gpu_count()} visible -- run on an nvidia-h200-x2 host",
)


# --- rank side: runs inside each spawned rank ------------------------------------------------------


def _codes(findings: list[Any]) -> list[str]:
    return [f.code for f in findings]


def _graph_labels(events: Any) -> list[str]:
    from fd_conformance.runtime.base import EventKind

    return [e.subject for e in events if e.kind is EventKind.GRAPH_CAPTURED]


def rank_equivalence(ctx: RankContext) -> dict[str, Any]:
    """TP=2 replay vs TP=1 eager; capture order agreed and followed; the fixed teardown is clean."""
    from fd_conformance.lifecycle import LifecycleRecorder
    from fd_reference_models.torch_models.tensor_parallel import tp_glm4_moe_mtp_subject

    rt = ctx.runtime()
    subject = tp_glm4_moe_mtp_subject(rt, tp_rank=ctx.rank, tp_size=ctx.world_size)
    out: dict[str, Any] = {"graph_mode": rt.graph_mode, "plan": subject.runner.capture_plan()}
    with LifecycleRecorder(rt) as recorder:
        out["plan_findings"] = _codes(capture_in_agreed_order(subject.runner, ctx.store, ctx.rank, ctx.world_size))
        out["captured"] = captured_order(_graph_labels(recorder.events))
        out["outputs"] = {}
        for n in SIZES:
            inputs = subject.make_inputs(n, seed=n)
            replayed = subject.forward(inputs)
            reference = subject.reference_outputs(inputs)  # TP=1, same seeds, no group
            out["outputs"][n] = {
                key: (rt.to_numpy(replayed[key]), rt.to_numpy(reference[key])) for key in ("logits", "draft_logits")
            }
        # Negative control: the same shards WITHOUT the all-reduce are partial sums, not the model.
        for wrapper in (subject.wrapper, subject.draft):
            wrapper.model.set_comm_group(None)
        out["unreduced_logits"] = rt.to_numpy(subject.eager_forward(subject.make_inputs(4, seed=4))["logits"])
        for wrapper in (subject.wrapper, subject.draft):
            wrapper.model.set_comm_group(subject.runner.group)
        subject.runner.clear_parameters()  # the fixed order: graphs, then weights, then the group
        out["teardown_findings"] = _codes(recorder.findings())
        out["graphs_alive_after"] = sum(g.alive for g in subject.graphs())
    return out


def rank_capture_order(ctx: RankContext, mutant_rank: int) -> dict[str, Any]:
    """Rank ``mutant_rank`` plans ascending; every rank must report it and nobody captures."""
    from fd_conformance.lifecycle import LifecycleRecorder
    from fd_reference_models.torch_models.tensor_parallel import (
        AscendingCaptureRunner,
        TensorParallelRunner,
        tp_glm4_moe_mtp_subject,
    )

    rt = ctx.runtime()
    runner_cls = AscendingCaptureRunner if ctx.rank == mutant_rank else TensorParallelRunner
    subject = tp_glm4_moe_mtp_subject(rt, tp_rank=ctx.rank, tp_size=ctx.world_size, runner_cls=runner_cls)
    with LifecycleRecorder(rt) as recorder:
        findings = capture_in_agreed_order(subject.runner, ctx.store, ctx.rank, ctx.world_size)
    return {
        "codes": _codes(findings),
        "messages": [f.format() for f in findings],
        "graphs_captured": len(_graph_labels(recorder.events)),
    }


def rank_absent_peer(ctx: RankContext, absent_rank: int, slow_s: float = 0.0) -> dict[str, Any]:
    """Rank ``absent_rank`` returns without publishing a plan (after ``slow_s`` of other work); the
    others must not wait forever, and must not call it absent while it is merely slow."""
    if ctx.rank == absent_rank:
        time.sleep(slow_s)
        return {"codes": [], "absent": True}
    started = time.monotonic()
    plans, findings = exchange_capture_plans(ctx.store, ctx.rank, ctx.world_size, (("main", 4), ("main", 1)))
    return {"codes": _codes(findings), "messages": [f.message for f in findings], "seconds": time.monotonic() - started}


def rank_teardown(ctx: RankContext, mutant: bool) -> dict[str, Any]:
    """Capture at TP=2, then the runner's clear_parameters; findings streamed as they happen, so a
    real NCCL destroy that then hangs still leaves them in the hang report's events."""
    from fd_conformance.isolation import mark
    from fd_conformance.lifecycle import LifecycleRecorder
    from fd_reference_models.torch_models.tensor_parallel import (
        TensorParallelGroupShutdownFirstRunner,
        TensorParallelRunner,
        tp_glm4_moe_mtp_subject,
    )

    rt = ctx.runtime()
    runner_cls = TensorParallelGroupShutdownFirstRunner if mutant else TensorParallelRunner
    subject = tp_glm4_moe_mtp_subject(rt, tp_rank=ctx.rank, tp_size=ctx.world_size, runner_cls=runner_cls)
    with LifecycleRecorder(rt) as recorder:
        streamed: list[int] = [0]

        def stream_findings(_event: Any) -> None:
            found = recorder.findings()
            for finding in found[streamed[0] :]:
                mark(f"finding {finding.format()}")
            streamed[0] = len(found)

        rt.events.subscribe(stream_findings)  # after the recorder's listener: sees its verdict
        plan_findings = capture_in_agreed_order(subject.runner, ctx.store, ctx.rank, ctx.world_size)
        subject.runner.clear_parameters()
    return {
        "plan_findings": _codes(plan_findings),
        "codes": _codes(recorder.findings()),
        "messages": [f.format() for f in recorder.findings()],
    }


_BUILT: dict[str, Any] = {}  # per rank process: the subject rank_build_subject made, for the next call


def rank_build_subject(ctx: RankContext) -> str:
    """Build the TP subject on every rank (its group creation is collective) and keep it for the
    next call, so the hang scenario's own deadline times no model build: on a loaded host a build
    slower than that deadline made the skipping rank a second 'hang'."""
    from fd_reference_models.torch_models.tensor_parallel import tp_glm4_moe_mtp_subject

    rt = ctx.runtime()
    _BUILT["subject"], _BUILT["runtime"] = (
        tp_glm4_moe_mtp_subject(rt, tp_rank=ctx.rank, tp_size=ctx.world_size, with_draft=False),
        rt,
    )
    return "built"


def rank_skips_collective(ctx: RankContext, skipping_rank: int) -> str:
    """Rank ``skipping_rank`` skips the forward; its peer waits forever in the first TP all-reduce."""
    subject, rt = _BUILT.pop("subject"), _BUILT.pop("runtime")
    if ctx.rank == skipping_rank:
        return "skipped the forward"
    subject.eager_forward(subject.make_inputs(2))  # gloo: blocks in the attention o_proj all-reduce
    rt.synchronize()  # NCCL enqueues asynchronously: the wait for the absent peer happens here
    return "unreachable: the peer never joins"


def rank_all_reduce(ctx: RankContext) -> float:
    """A plain collective over a fresh group: the world works."""
    import torch

    rt = ctx.runtime()
    group = rt.new_group("ping")
    value = torch.full((2,), float(ctx.rank + 1), device=rt.torch_device)
    group.all_reduce(value)
    rt.shutdown_group(group)
    return float(value[0])


def rank_number(ctx: RankContext) -> int:
    """No collective: a rank that answers without its peers."""
    return ctx.rank


# --- parent side: CPU (gloo, host-emulated graphs) -------------------------------------------------


@pytest.fixture(scope="module")
def cpu_world() -> Iterator[DistributedWorld]:
    with DistributedWorld(2, device="cpu") as world:
        yield world


def _passed(outcome: WorldOutcome) -> list[Any]:
    assert outcome.passed, outcome.describe()
    return outcome.values


def test_world_rejects_bad_input() -> None:
    with pytest.raises(UsageError, match="backend 'nccl' needs device 'cuda'"):
        DistributedWorld(2, device="cpu", backend="nccl")
    with pytest.raises(UsageError, match="unknown process-group backend"):
        DistributedWorld(2, backend="mpi-ish")
    with pytest.raises(UsageError, match="world_size=0"):
        DistributedWorld(0)
    world = DistributedWorld(2)
    with pytest.raises(UsageError, match="has no ':'"):
        world.run("no_colon", timeout=1)
    with pytest.raises(UsageError, match="must be positive"):
        world.run(f"{HERE}:rank_all_reduce", timeout=0)
    assert world.workers == []  # bad input is refused before any process is spawned


def test_tp2_outputs_equal_tp1_and_order_agreed(cpu_world: DistributedWorld) -> None:
    import numpy as np

    values = _passed(cpu_world.run(f"{HERE}:rank_equivalence", timeout=CALL_TIMEOUT_S))
    descending = (("main", 4), ("main", 2), ("main", 1), ("draft", 2), ("draft", 1))
    for rank, value in enumerate(values):
        assert value["graph_mode"] == "host-emulated"
        assert value["plan"] == descending and value["plan_findings"] == []
        assert value["captured"] == descending, f"rank {rank} captured in another order than it announced"
        for n, outputs in value["outputs"].items():
            for key, (tp2, tp1) in outputs.items():
                assert tp2.shape[0] == n
                np.testing.assert_allclose(tp2, tp1, rtol=1e-5, atol=1e-5, err_msg=f"rank {rank} {key} n={n}")
        assert value["teardown_findings"] == [] and value["graphs_alive_after"] == 0
    # Both ranks hold the same reduced result; without the reduce each rank holds only its partial sum.
    for n in SIZES:
        np.testing.assert_array_equal(values[0]["outputs"][n]["logits"][0], values[1]["outputs"][n]["logits"][0])
    reference = values[0]["outputs"][4]["logits"][1]
    for value in values:
        assert not np.allclose(value["unreduced_logits"], reference, atol=1e-3)


def test_mismatched_capture_order_is_a_finding_on_every_rank(cpu_world: DistributedWorld) -> None:
    values = _passed(cpu_world.run(f"{HERE}:rank_capture_order", 1, timeout=CALL_TIMEOUT_S))
    for value in values:
        # One mismatch; rank 1's main AND draft plans are each ascending.
        assert sorted(value["codes"]) == ["FDC601", "FDC602", "FDC602"], value["messages"]
        assert value["graphs_captured"] == 0  # nobody entered a capture: no deadlock to wait out
        # (no FDC603 among the codes: both plans were there, so nobody waited for an absent peer)
        assert any("rank 1 plans capture order [main:1, main:2, main:4" in m for m in value["messages"])


def test_watcher_failure_is_that_ranks_crash_and_keeps_the_others(
    cpu_world: DistributedWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unexpected exception in one rank's watcher thread (not WorkerStartError) used to leave
    that rank without a result and lose every rank's outcome to an assert."""
    from fd_conformance.isolation.process import WorkerProcess

    original = WorkerProcess.run

    def run(self: WorkerProcess, message: Any, timeout: float) -> Any:
        result = original(self, message, timeout)  # both ranks really run (the world rendezvous)
        if message.fields["args"][1] == 1:  # then rank 1's watcher fails reading the answer
            raise OSError("pipe to the worker broke")
        return result

    monkeypatch.setattr(WorkerProcess, "run", run)
    outcome = cpu_world.run(f"{HERE}:rank_number", timeout=CALL_TIMEOUT_S)
    assert [r.outcome for r in outcome.ranks] == ["passed", "crash"], outcome.describe()
    assert outcome.ranks[0].value == 0  # rank 0 kept its real result
    assert "watcher failed: OSError: pipe to the worker broke" in outcome.ranks[1].run.cause


def test_absent_rank_is_a_bounded_finding(cpu_world: DistributedWorld) -> None:
    values = _passed(cpu_world.run(f"{HERE}:rank_absent_peer", 1, timeout=CALL_TIMEOUT_S))
    assert values[1]["absent"] is True
    assert values[0]["codes"] == ["FDC603"] and "rank 1 of 2" in values[0]["messages"][0]
    assert "ended without publishing" in values[0]["messages"][0]


def rank_slow_peer(ctx: RankContext, slow_rank: int, slow_s: float) -> dict[str, Any]:
    """Rank ``slow_rank`` publishes its plan only after ``slow_s`` (a busy host, a long model build)."""
    if ctx.rank == slow_rank:
        time.sleep(slow_s)
    plans, findings = exchange_capture_plans(ctx.store, ctx.rank, ctx.world_size, (("main", 4), ("main", 1)))
    return {"codes": _codes(findings), "ranks": sorted(plans)}


def test_a_slow_rank_is_waited_for_not_called_absent(cpu_world: DistributedWorld) -> None:
    """No deadline inside the verdict: a peer that publishes after longer than the old 30 s plan
    timeout would have taken (scaled down: the bound was a parameter) is no FDC603; only a peer
    that ENDED without a plan is. The world's watchdog bounds a peer that never ends."""
    values = _passed(cpu_world.run(f"{HERE}:rank_slow_peer", 1, 3.0, timeout=CALL_TIMEOUT_S))
    assert [v["codes"] for v in values] == [[], []] and values[0]["ranks"] == [0, 1]
    late = _passed(cpu_world.run(f"{HERE}:rank_absent_peer", 1, 3.0, timeout=CALL_TIMEOUT_S))
    assert late[0]["codes"] == ["FDC603"] and late[0]["seconds"] >= 3.0  # waited until rank 1 ended


def test_group_shutdown_under_live_graph_caught_on_every_rank(cpu_world: DistributedWorld) -> None:
    outcome = cpu_world.run(f"{HERE}:rank_teardown", True, timeout=CALL_TIMEOUT_S)
    for value in _passed(outcome):
        assert value["plan_findings"] == []
        assert value["codes"] and set(value["codes"]) == {"FDC202"}, value["messages"]
        assert any("group 'tp'" in m and "main:4" in m for m in value["messages"])
    for rank in outcome.ranks:  # streamed as it happened: a real hang report would carry it too
        assert any("FDC202" in event for event in rank.run.events)


def test_hung_rank_reported_with_rank_and_frame_and_session_goes_on(cpu_world: DistributedWorld) -> None:
    _passed(cpu_world.run(f"{HERE}:rank_all_reduce", timeout=CALL_TIMEOUT_S))  # ranks warm: imports paid
    _passed(cpu_world.run(f"{HERE}:rank_build_subject", timeout=CALL_TIMEOUT_S))  # built outside the hang's deadline
    incarnation = cpu_world.incarnations
    outcome = cpu_world.run(f"{HERE}:rank_skips_collective", 1, timeout=HANG_TIMEOUT_S)
    (hung,) = outcome.by_outcome("hang")
    assert hung.rank == 0 and outcome.ranks[1].outcome == "passed"
    finding = hung.finding
    assert finding is not None and finding.code == "FDC501"
    assert "[rank 0/2]" in finding.message
    assert "common.py" in hung.run.stuck_frame and "__call__" in hung.run.stuck_frame  # TP all-reduce hook
    assert "all_reduce" in hung.run.python_stacks
    # The session goes on: a fresh world replaces both ranks and its collectives work.
    values = _passed(cpu_world.run(f"{HERE}:rank_all_reduce", timeout=CALL_TIMEOUT_S))
    assert values == [3.0, 3.0] and cpu_world.incarnations == incarnation + 1


# --- pure checks: no processes -------------------------------------------------------------------


def test_plan_check_accepts_agreeing_descending_plans() -> None:
    plan = (("main", 4), ("main", 1), ("draft", 2), ("draft", 1))
    assert check_capture_plans({0: plan, 1: plan}) == []


def test_plan_check_reports_each_defect_once() -> None:
    good = (("main", 4), ("main", 1))
    ascending = (("main", 1), ("main", 4))
    fewer = (("main", 4),)
    found = check_capture_plans({0: good, 1: ascending, 2: fewer})
    assert sorted(f.code for f in found) == ["FDC601", "FDC601", "FDC602"]
    assert all(RULES[f.code].where == "tp" for f in found)


class _DictStore:
    """In-process store for the exchange's own logic (the real one is exercised by the world tests)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        return self.data.get(key)

    def has(self, key: str) -> bool:
        return key in self.data


def test_exchange_without_peers_reports_each_absent_rank() -> None:
    store = _DictStore()
    store.set("fd-conformance/rank-ended/1", b"1")
    store.set("fd-conformance/rank-ended/2", b"1")
    plans, found = exchange_capture_plans(store, 0, 3, (("main", 2),))
    assert plans == {0: (("main", 2),)} and [f.code for f in found] == ["FDC603", "FDC603"]


class _LateStore(_DictStore):
    """A peer's plan arrives only after ``late`` waits ran out (each wait a store timeout)."""

    def __init__(self, late: int) -> None:
        super().__init__()
        self.late = late

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        if key.endswith("/1") and self.late:
            self.late -= 1
            if not self.late:
                self.data[key] = encode_plan((("main", 2),))
            return None
        return super().wait_get(key, timeout)


def test_a_plan_later_than_any_store_timeout_is_no_finding() -> None:
    """However many store waits time out before the peer's plan lands, no FDC603 while the peer
    has not ended (the old exchange gave FDC603 once its 30 s deadline passed)."""
    plans, found = exchange_capture_plans(_LateStore(late=50), 0, 2, (("main", 2),))
    assert found == [] and plans == {0: (("main", 2),), 1: (("main", 2),)}


# --- GPU: NCCL, real CUDA graphs, one process per GPU (skipped here) ----------------------------------


@pytest.fixture(scope="module")
def gpu_world() -> Iterator[DistributedWorld]:
    with DistributedWorld(2, device="cuda") as world:
        yield world


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_tp2_outputs_equal_tp1_with_nccl_in_cuda_graphs(gpu_world: DistributedWorld) -> None:
    import numpy as np

    values = _passed(gpu_world.run(f"{HERE}:rank_equivalence", timeout=CALL_TIMEOUT_S))
    for rank, value in enumerate(values):
        assert value["graph_mode"] == "cuda-graph" and value["plan_findings"] == []
        assert value["captured"] == value["plan"]
        for n, outputs in value["outputs"].items():
            for key, (tp2, tp1) in outputs.items():
                np.testing.assert_allclose(tp2, tp1, rtol=1e-4, atol=1e-4, err_msg=f"rank {rank} {key} n={n}")
        assert value["teardown_findings"] == [] and value["graphs_alive_after"] == 0


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_mismatched_capture_order_is_a_finding(gpu_world: DistributedWorld) -> None:
    for value in _passed(gpu_world.run(f"{HERE}:rank_capture_order", 1, timeout=CALL_TIMEOUT_S)):
        assert sorted(value["codes"]) == ["FDC601", "FDC602", "FDC602"] and value["graphs_captured"] == 0


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_group_shutdown_under_live_graph_caught_or_hang_reported(gpu_world: DistributedWorld) -> None:
    """With NCCL the destroy may really wait on the live graphs: then the watchdog must name the
    rank and frame, and the FDC202 finding must already be in that rank's streamed events."""
    outcome = gpu_world.run(f"{HERE}:rank_teardown", True, timeout=60)
    for rank in outcome.ranks:
        if rank.outcome == "passed":
            assert set(rank.value["codes"]) == {"FDC202"}, rank.value["messages"]
        else:
            assert rank.outcome == "hang", rank.details
            assert rank.finding is not None and f"[rank {rank.rank}/2]" in rank.finding.message
            assert any("FDC202" in event for event in rank.run.events), rank.run.events
    assert _passed(gpu_world.run(f"{HERE}:rank_all_reduce", timeout=CALL_TIMEOUT_S)) == [3.0, 3.0]


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_fixed_teardown_clean_on_every_rank(gpu_world: DistributedWorld) -> None:
    for value in _passed(gpu_world.run(f"{HERE}:rank_teardown", False, timeout=CALL_TIMEOUT_S)):
        assert value["codes"] == [] and value["plan_findings"] == []


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_hung_rank_reported_and_session_goes_on(gpu_world: DistributedWorld) -> None:
    _passed(gpu_world.run(f"{HERE}:rank_all_reduce", timeout=CALL_TIMEOUT_S))
    _passed(gpu_world.run(f"{HERE}:rank_build_subject", timeout=CALL_TIMEOUT_S))
    outcome = gpu_world.run(f"{HERE}:rank_skips_collective", 1, timeout=20)
    (hung,) = outcome.by_outcome("hang")
    assert hung.rank == 0 and hung.finding is not None and "[rank 0/2]" in hung.finding.message
    assert _passed(gpu_world.run(f"{HERE}:rank_all_reduce", timeout=CALL_TIMEOUT_S)) == [3.0, 3.0]


@pytest.mark.gpu
@needs_two_gpus
def test_gpu_two_xdist_workers_get_one_gpu_each(tmp_path: Path) -> None:
    """The plugin's controller hands each xdist worker its own GPU (fd_conformance.plugin.gpus)."""
    (tmp_path / "test_which_gpu.py").write_text(
        textwrap.dedent(
            """
            import os, time, pytest
            from pathlib import Path

            @pytest.mark.gpu
            @pytest.mark.parametrize("i", range(4))
            def test_record(i):
                import torch
                torch.cuda.init()
                out = Path(os.environ["FDC_GPU_RECORD_DIR"]) / f"gpu-{os.environ['PYTEST_XDIST_WORKER']}"
                out.write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "unset") + f" {torch.cuda.device_count()}")
                time.sleep(0.5)
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", str(tmp_path / "test_which_gpu.py")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "FDC_GPU_RECORD_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = {p.name: p.read_text().split() for p in tmp_path.glob("gpu-gw*")}
    assert len(seen) == 2, seen
    assert {v[1] for v in seen.values()} == {"1"}  # each worker sees exactly one device
    assert len({v[0] for v in seen.values()}) == 2  # and they are different GPUs


# --- sharding, in process (a one-rank world: no peer needed to check shapes and weight sets) ---------


def test_tp_weight_sets_are_the_full_set_sharded() -> None:
    """A weight cycle at TP must load each rank's shard of the SAME full set TP=1 loads."""
    import torch

    from fd_conformance.runtime import get_runtime
    from fd_reference_models.torch_models.subject import glm4_moe_mtp_subject
    from fd_reference_models.torch_models.tensor_parallel import shard, sharding_of, tp_glm4_moe_mtp_subject

    rt = get_runtime("torch", "cpu")
    full = glm4_moe_mtp_subject(rt, use_cudagraph=False).new_weights(7)
    tp = tp_glm4_moe_mtp_subject(rt, tp_rank=1, tp_size=2, use_cudagraph=False)
    mine = tp.new_weights(7)
    params = dict(tp.runner.named_parameters())
    assert set(mine) == set(full) == set(params)
    split = 0
    for name, value in mine.items():
        assert tuple(value.shape) == tuple(params[name].shape), name
        torch.testing.assert_close(value, shard(full[name], sharding_of(name), 1, 2))
        split += value.numel() < full[name].numel()
    assert split >= 20  # attention, MLP and expert projections of main and draft are all split
    tp.runner.clear_parameters()  # its one-rank group goes down with it


def test_indivisible_tp_size_is_a_usage_error() -> None:
    from fd_reference_models.torch_models.glm4_moe import tiny_glm4_moe_config
    from fd_reference_models.torch_models.tensor_parallel import check_divisible

    check_divisible(tiny_glm4_moe_config(), 2)
    with pytest.raises(UsageError, match="num_key_value_heads=2 does not divide by TP size 4"):
        check_divisible(tiny_glm4_moe_config(), 4)
