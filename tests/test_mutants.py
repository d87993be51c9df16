"""Every mutant misbehaves exactly as its FastDeploy defect says; the good models do not."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fd_conformance.findings import RULES  # noqa: E402
from fd_conformance.protocol import check_protocol  # noqa: E402
from fd_conformance.runtime import get_runtime  # noqa: E402
from fd_conformance.runtime.base import EventKind, StaleGraphError  # noqa: E402
from fd_reference_models import cases as C  # noqa: E402


@pytest.fixture(scope="module")
def cpu() -> object:
    return get_runtime("torch", "cpu")


class Recorder:
    def __init__(self, runtime: object) -> None:
        self.events: list = []
        self.unsub = runtime.events.subscribe(self.events.append)

    def alive_at(self, kind: EventKind) -> set[str]:
        """Graph labels alive at the first event of ``kind``."""
        alive: dict[int, str] = {}
        for e in self.events:
            if e.kind is EventKind.GRAPH_CAPTURED:
                alive[e.subject_id] = e.subject
            elif e.kind is EventKind.GRAPH_DESTROYED:
                alive.pop(e.subject_id, None)
            elif e.kind is kind:
                return set(alive.values())
        return set()


def _cleanup(s: object) -> None:
    for g in s.graphs():
        g.reset()
    if s.runner.group is not None and s.runner.group.alive:
        s.runtime.shutdown_group(s.runner.group)


def test_every_case_names_registered_codes() -> None:
    for case in C.all_cases():
        assert case.expected_findings <= set(RULES), case.name


def test_qwen3_vl_without_clear(cpu: object) -> None:
    s = C.mutant_qwen3_vl_without_clear(cpu)
    assert [f.code for f in check_protocol(s.wrapper) if f.is_error] == ["FDC001"]
    assert not [f for f in check_protocol(C.torch_qwen3_vl(cpu).wrapper) if f.is_error]
    s.runner.capture_model()
    with pytest.raises(AttributeError):
        s.runner.clear_parameters()
    _cleanup(s)


def test_legacy_spelling_conforms_with_warning(cpu: object) -> None:
    s = C.mutant_glm4_moe_legacy_spelling(cpu)
    codes = {f.code: f for f in check_protocol(s.wrapper)}
    assert "FDC002" in codes and not any(f.is_error for f in codes.values())
    s.runner.capture_model()
    s.runner.clear_parameters()  # reaches the legacy method: graphs gone before release
    assert s.graphs() == []


def test_draft_cleared_after_release(cpu: object) -> None:
    s = C.mutant_draft_cleared_after_release(cpu)
    rec = Recorder(cpu)
    s.runner.capture_model()
    s.runner.clear_parameters()
    assert rec.alive_at(EventKind.PARAM_RELEASED) == {"draft:2", "draft:1"}  # FDC201
    assert rec.alive_at(EventKind.GROUP_SHUTDOWN) == set()
    good = C.torch_glm4_moe_mtp(cpu)
    rec = Recorder(cpu)
    good.runner.capture_model()
    good.runner.clear_parameters()
    assert rec.alive_at(EventKind.PARAM_RELEASED) == set()


def test_draft_guarded_by_main_flag(cpu: object) -> None:
    s = C.mutant_draft_guarded_by_main_flag(cpu)
    assert (s.runner.use_cudagraph, s.runner.draft_model_use_cudagraph) == (False, True)
    rec = Recorder(cpu)
    s.runner.capture_model()
    s.runner.clear_parameters()
    assert rec.alive_at(EventKind.PARAM_RELEASED) == {"draft:2", "draft:1"}
    assert rec.alive_at(EventKind.GROUP_SHUTDOWN) == {"draft:2", "draft:1"}
    assert all(g.alive for g in s.graphs()) and len(s.graphs()) == 2
    _cleanup(s)


def test_group_shutdown_first(cpu: object) -> None:
    s = C.mutant_group_shutdown_first(cpu)
    rec = Recorder(cpu)
    s.runner.capture_model()
    s.runner.clear_parameters()
    assert len(rec.alive_at(EventKind.GROUP_SHUTDOWN)) == 5  # FDC202
    assert rec.alive_at(EventKind.PARAM_RELEASED) == set()


def test_update_without_recapture_is_stale(cpu: object) -> None:
    s = C.mutant_update_without_recapture(cpu)
    s.runner.capture_model()
    s.runner.clear_parameters()
    s.runner.update_parameters(s.new_weights(1))
    with pytest.raises(StaleGraphError, match="moved"):
        s.forward(s.make_inputs(2))
    _cleanup(s)


def _held_after_cycles(subject: object, cycles: int) -> list[int]:
    """Host-ledger bytes after each weight cycle, settled as the weight-cycle check settles them."""
    from fd_conformance.suite._support import settled_allocated

    subject.runner.capture_model()
    held = []
    for cycle in range(cycles):
        subject.runner.clear_parameters()
        subject.runner.update_parameters(subject.new_weights(cycle))
        held.append(settled_allocated(subject.runtime))
    return held


def test_retain_old_weights_keeps_a_copy_per_cycle(cpu: object) -> None:
    s = C.mutant_retain_old_weights(cpu)
    held = _held_after_cycles(s, 3)
    kept = s.runner.__dict__["_rollback"]
    assert len(kept) == 3 and all(not cpu.is_released(t) for t in kept[0])
    # FDC305 on CPU: the host ledger tracks runtime.clone(), so each kept copy is one model more.
    model_bytes = sum(t.numel() * t.element_size() for t in kept[0])
    assert [b - a for a, b in zip(held, held[1:], strict=False)] == [model_bytes, model_bytes]
    s.runner.clear_parameters()


def test_good_runner_holds_steady_across_weight_cycles(cpu: object) -> None:
    """The negative of the above: restored weights are tracked, yet a correct runner does not grow."""
    good = C.torch_glm4_moe_mtp(cpu)
    held = _held_after_cycles(good, 3)
    assert held[0] > 0 and len(set(held)) == 1, held
    good.runner.clear_parameters()


def test_leaky_clear_keeps_output_memory(cpu: object) -> None:
    s = C.mutant_leaky_clear(cpu)
    s.runner.capture_model()
    s.wrapper.clear_graph_opt_backend()
    assert s.graphs() == [] and cpu.memory_stats().graphs > 0  # FDC302
    s.runner.clear_parameters()
    good = C.torch_glm4_moe(cpu)
    good.runner.capture_model()
    good.wrapper.clear_graph_opt_backend()
    del s
    gc.collect()
    assert cpu.memory_stats().graphs == 0
    good.runner.clear_parameters()


def test_forgetful_clear_leaves_a_graph(cpu: object) -> None:
    s = C.mutant_forgetful_clear(cpu)
    rec = Recorder(cpu)
    s.runner.capture_model()
    s.wrapper.clear_graph_opt_backend()
    assert [g.label for g in s.graphs() if g.alive] == ["main:1"]  # FDC203
    s.runner.clear_parameters()
    assert rec.alive_at(EventKind.PARAM_RELEASED) == {"main:1"}
    _cleanup(s)


def test_baked_token_ids_replay_differs(cpu: object) -> None:
    s = C.mutant_baked_token_ids(cpu)
    s.runner.capture_model()
    x = s.make_inputs(4, seed=1)
    got, want = s.forward(x), s.eager_forward(x)
    assert not torch.allclose(got["logits"], want["logits"], atol=1e-4)  # FDC301
    s.wrapper.clear_graph_opt_backend()
    del got
    gc.collect()
    # Its baked copies outlive clear and the host ledger sees them, but they are buffers, not
    # graph memory: the clear check (which reads ``graphs``) must not call them FDC302.
    baked = s.wrapper.model.__dict__["_baked_inputs"]
    assert cpu.memory_stats().graphs == 0
    assert cpu.memory_stats().allocated == sum(t.numel() * t.element_size() for t in baked) > 0
    s.runner.clear_parameters()


def test_clear_raises_before_capture(cpu: object) -> None:
    s = C.mutant_clear_raises_before_capture(cpu)
    with pytest.raises(AttributeError, match="graph_opt_backend"):
        s.wrapper.clear_graph_opt_backend()  # FDC303
    s.runner.capture_model()
    s.wrapper.clear_graph_opt_backend()  # fine once a backend exists
    s.runner.clear_parameters()


@pytest.mark.gpu
def test_gpu_stale_mutant_gives_wrong_outputs() -> None:
    cuda = get_runtime("torch", "cuda")
    s = C.mutant_update_without_recapture(cuda)
    s.runner.capture_model()
    s.runner.clear_parameters()
    s.runner.update_parameters(s.new_weights(1))
    x = s.make_inputs(4, seed=2)
    got, want = s.forward(x), s.eager_forward(x)
    assert not torch.allclose(got["logits"], want["logits"], atol=1e-3)
    _cleanup(s)


# --- Paddle model-level mutants: the same defects (fd_reference_models.model_defects) on Paddle ----
@pytest.fixture(scope="module")
def paddle_cpu() -> object:
    pytest.importorskip("paddle")
    return get_runtime("paddle", "cpu")


def test_paddle_model_mutants_are_registered_with_the_torch_mutants_codes() -> None:
    pytest.importorskip("paddle")
    by_name = {c.name: c for c in C.all_cases()}
    for defect in ("leaky-clear", "forgetful-clear", "baked-token-ids"):
        paddle_case, torch_case = by_name[f"paddle-mutant-{defect}"], by_name[f"mutant-{defect}"]
        assert paddle_case.runtime == "paddle" and paddle_case.expected_findings == torch_case.expected_findings


def test_paddle_leaky_clear_keeps_output_memory(paddle_cpu: object) -> None:
    s = C.paddle_mutant_leaky_clear(paddle_cpu)
    s.runner.capture_model()
    s.wrapper.clear_graph_opt_backend()
    assert [g for g in s.wrapper.model.graphs() if g.alive] == [] and paddle_cpu.memory_stats().graphs > 0  # FDC302
    s.runner.clear_parameters()
    del s
    gc.collect()
    good = C.paddle_glm4_moe_mtp(paddle_cpu)
    good.runner.capture_model()
    good.runner.clear_parameters()
    assert paddle_cpu.memory_stats().graphs == 0


def test_paddle_forgetful_clear_leaves_a_graph(paddle_cpu: object) -> None:
    s = C.paddle_mutant_forgetful_clear(paddle_cpu)
    rec = Recorder(paddle_cpu)
    s.runner.capture_model()
    s.wrapper.clear_graph_opt_backend()
    assert [g.label for g in s.wrapper.model.graphs() if g.alive] == ["main:1"]  # FDC203
    s.runner.clear_parameters()
    assert rec.alive_at(EventKind.PARAM_RELEASED) == {"main:1"}  # FDC201
    assert rec.alive_at(EventKind.GROUP_SHUTDOWN) == {"main:1"}  # FDC202
    rec.unsub()
    _cleanup(s)


def test_paddle_baked_token_ids_replay_differs(paddle_cpu: object) -> None:
    import numpy as np

    s = C.paddle_mutant_baked_token_ids(paddle_cpu)
    s.runner.capture_model()
    x = s.make_inputs(4, seed=1)
    got, want = s.forward(x), s.eager_forward(x)
    assert not np.allclose(got["logits"].numpy(), want["logits"].numpy(), atol=1e-4)  # FDC301
    good = C.paddle_glm4_moe_mtp(paddle_cpu)
    good.runner.capture_model()
    ok, ref = good.forward(x), good.eager_forward(x)
    assert np.allclose(ok["logits"].numpy(), ref["logits"].numpy(), atol=1e-4)
    s.runner.clear_parameters()
    good.runner.clear_parameters()
