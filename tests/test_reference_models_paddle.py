"""Tiny Paddle reference models: eager forward vs an independent NumPy computation, capture/replay
through the shared graph-opt backend (host-emulated graphs on CPU) for every capture size, and the
RL weight cycle (clear -> release -> restore at new addresses -> recapture) with new weights."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("paddle")

from fd_conformance.runtime.base import EventKind, RuntimeEvent, StaleGraphError
from fd_conformance.runtime.paddle import PaddleRuntime, create
from fd_reference_models.graph_opt import GraphOptConfig

MAIN_SIZES = (8, 4, 2, 1)
DRAFT_SIZES = (4, 2, 1)
TOL = {"rtol": 1e-4, "atol": 1e-4}


@pytest.fixture(scope="module")
def rt() -> PaddleRuntime:
    return create("cpu")


def test_paddle_cases_build_their_subjects_with_the_declared_sizes(rt: PaddleRuntime) -> None:
    from fd_reference_models.cases import PADDLE_DRAFT_SIZES, PADDLE_SIZES, paddle_cases
    from fd_reference_models.paddle_models import subjects

    assert PADDLE_SIZES == subjects.MAIN_CAPTURE_SIZES
    assert PADDLE_DRAFT_SIZES == subjects.DRAFT_CAPTURE_SIZES
    for case in paddle_cases():
        subject = case.factory(rt)
        assert tuple(subject.wrapper.graph_opt_config.capture_sizes) == case.capture_sizes, case.name
        if subject.runner.group is not None:
            rt.shutdown_group(subject.runner.group)


# --- independent NumPy reference (from the state dict only) ------------------------------------


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def _rms(x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _mlp(x: np.ndarray, sd: dict[str, np.ndarray], p: str) -> np.ndarray:
    return (_silu(x @ sd[p + "gate"]) * (x @ sd[p + "up"])) @ sd[p + "down"]


def _attn(x: np.ndarray, sd: dict[str, np.ndarray], p: str, heads: int = 2) -> np.ndarray:
    t, h = x.shape
    d = h // heads
    q, k, v = ((x @ sd[p + n]).reshape(t, heads, d).transpose(1, 0, 2) for n in "qkv")
    s = q @ k.transpose(0, 2, 1) / np.sqrt(d) + np.triu(np.full((t, t), -1e9), 1)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return (s @ v).transpose(1, 0, 2).reshape(t, h) @ sd[p + "o"]


def _moe(x: np.ndarray, sd: dict[str, np.ndarray], p: str, top_k: int = 2, scale: float = 1.5) -> np.ndarray:
    scores = 1.0 / (1.0 + np.exp(-(x @ sd[p + "router"])))
    chosen = np.argsort(-(scores + sd[p + "score_bias"]), axis=-1)[:, :top_k]
    out = _mlp(x, sd, p + "shared_expert.")
    for t in range(x.shape[0]):  # per token, per chosen expert: the sparse way, unlike the model
        w = scores[t, chosen[t]]
        w = w / w.sum() * scale
        for e, we in zip(chosen[t], w, strict=True):
            h = _silu(x[t] @ sd[p + "experts_gate"][e]) * (x[t] @ sd[p + "experts_up"][e])
            out[t] += we * (h @ sd[p + "experts_down"][e])
    return out


def _layer(x: np.ndarray, sd: dict[str, np.ndarray], p: str, moe: bool) -> np.ndarray:
    x = x + _attn(_rms(x, sd[p + "input_norm.weight"]), sd, p + "attn.")
    mlp = _moe if moe else _mlp
    return x + mlp(_rms(x, sd[p + "post_norm.weight"]), sd, p + "mlp.")


def _state(layer: Any) -> dict[str, np.ndarray]:
    return {name: param.numpy() for name, param in layer.named_parameters()}


def glm4_reference(sd: dict[str, np.ndarray], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = sd["model.embed_tokens.weight"][ids]
    x = _layer(x, sd, "model.layers.0.", moe=False)
    x = _layer(x, sd, "model.layers.1.", moe=True)
    hidden = _rms(x, sd["model.norm.weight"])
    return hidden, hidden @ sd["lm_head"]


def mtp_reference(sd: dict[str, np.ndarray], main: dict[str, np.ndarray], ids: np.ndarray, prev: np.ndarray) -> np.ndarray:
    e = _rms(main["model.embed_tokens.weight"][ids], sd["model.enorm.weight"])
    x = np.concatenate([e, _rms(prev, sd["model.hnorm.weight"])], -1) @ sd["model.eh_proj"]
    x = _rms(_layer(x, sd, "model.layer.", moe=True), sd["model.shared_head_norm.weight"])
    return x @ main["lm_head"]


def qwen3_vl_reference(sd: dict[str, np.ndarray], ids: np.ndarray, patches: np.ndarray) -> np.ndarray:
    def merge(v: np.ndarray, p: str) -> np.ndarray:
        m = v.reshape(-1, v.shape[-1] * 2)
        return _rms(m, sd[p + "norm.weight"]) @ sd[p + "proj"]

    v = patches @ sd["visual.patch_embed"]
    stack = []
    for b in range(2):
        v = v + _mlp(_rms(v, sd[f"visual.blocks.{b}.norm.weight"]), sd, f"visual.blocks.{b}.mlp.")
        stack.append(merge(v, f"visual.deepstack_mergers.{b}."))
    visual = merge(v, "visual.merger.")
    x = sd["embed_tokens.weight"][ids].copy()
    pos = np.nonzero(ids == 1)[0]
    x[pos] = visual
    for i in range(2):
        x = _layer(x, sd, f"model.layers.{i}.", moe=False)
        x[pos] += stack[i]
    return _rms(x, sd["model.norm.weight"]) @ sd["lm_head"]


# --- builders ----------------------------------------------------------------------------------


def _glm(rt: PaddleRuntime, use_graphs: bool = True) -> tuple[Any, Any]:
    from fd_reference_models.paddle_models.glm4_moe import Glm4MoeForCausalLM, MoeConfig
    from fd_reference_models.paddle_models.glm4_mtp import Glm4MTPForCausalLM
    from fd_reference_models.paddle_models.layers import load_weights, seeded_weights

    config = MoeConfig()
    main = Glm4MoeForCausalLM(config, rt, GraphOptConfig(use_cudagraph=use_graphs, capture_sizes=MAIN_SIZES))
    load_weights(main.named_parameters(), seeded_weights(main.named_parameters(), 0))
    draft = Glm4MTPForCausalLM(config, main, GraphOptConfig(use_cudagraph=use_graphs, capture_sizes=DRAFT_SIZES))
    load_weights(draft.own_parameters(), seeded_weights(draft.own_parameters(), 1))
    return main, draft


def _qwen(rt: PaddleRuntime) -> Any:
    from fd_reference_models.paddle_models.layers import load_weights, seeded_weights
    from fd_reference_models.paddle_models.qwen3_vl import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(), rt, GraphOptConfig(capture_sizes=MAIN_SIZES))
    load_weights(model.named_parameters(), seeded_weights(model.named_parameters(), 0))
    return model


def _ids(n: int, seed: int = 0) -> Any:
    import paddle

    return paddle.to_tensor(np.random.default_rng(seed).integers(2, 64, size=n).astype("int64"))


def _vl_inputs(n: int, seed: int = 0) -> tuple[Any, Any]:
    """Two visual tokens (4 patches) at positions 1-2 when there is room, else text only."""
    import paddle

    ids = np.random.default_rng(seed).integers(2, 64, size=n).astype("int64")
    if n < 4:
        return paddle.to_tensor(ids), None
    ids[1:3] = 1
    patches = np.random.default_rng(seed + 100).standard_normal((4, 12)).astype("float32")
    return paddle.to_tensor(ids), paddle.to_tensor(patches)


# --- eager forward == independent computation ------------------------------------------------


def test_glm4_moe_and_mtp_eager_match_numpy(rt: PaddleRuntime) -> None:
    main, draft = _glm(rt, use_graphs=False)
    ids = _ids(6)
    hidden = main({"input_ids": ids})["hidden_states"]
    ref_hidden, ref_logits = glm4_reference(_state(main), ids.numpy())
    np.testing.assert_allclose(main.compute_logits(hidden).numpy(), ref_logits, **TOL)
    draft_logits = draft({"input_ids": ids, "previous_hidden": hidden})["logits"].numpy()
    draft_state = {name: param.numpy() for name, param in draft.own_parameters()}
    np.testing.assert_allclose(draft_logits, mtp_reference(draft_state, _state(main), ids.numpy(), ref_hidden), **TOL)


def test_moe_routing_is_sparse_top_k(rt: PaddleRuntime) -> None:
    main, _ = _glm(rt, use_graphs=False)
    weights = main.model.layers[1].mlp.routing_weights(main.model.embed_tokens(_ids(5))).numpy()
    assert ((weights > 0).sum(-1) == 2).all()  # exactly top-2 of 4 experts per token
    np.testing.assert_allclose(weights.sum(-1), 1.5, rtol=1e-5)  # renormalised, routed_scaling_factor


def test_qwen3_vl_eager_matches_numpy_with_deepstack(rt: PaddleRuntime) -> None:
    model = _qwen(rt)
    ids, patches = _vl_inputs(6)
    embeds, deepstack = model.embed(ids, patches)
    logits = model.compute_logits(model.model.eager_forward(inputs_embeds=embeds, deepstack=deepstack)).numpy()
    np.testing.assert_allclose(logits, qwen3_vl_reference(_state(model), ids.numpy(), patches.numpy()), **TOL)
    assert np.abs(deepstack.numpy()[[0, 3, 4, 5]]).max() == 0 and np.abs(deepstack.numpy()[1:3]).min() > 0


# --- capture/replay through the backend == eager, every size -----------------------------------


def _drive(step: Any, times: int = 4) -> Any:
    """warm-up (2) + capture + replay: the 4th call is the first pure replay."""
    out = None
    for _ in range(times):
        out = step()
    return out


@pytest.mark.parametrize("num_tokens", [1, 2, 3, 4, 7, 8])
def test_glm4_replay_equals_eager_for_every_capture_size(rt: PaddleRuntime, num_tokens: int) -> None:
    main, draft = _glm(rt)
    events: list[RuntimeEvent] = []
    unsubscribe = rt.events.subscribe(events.append)
    try:
        ids = _ids(num_tokens, seed=num_tokens)
        hidden = _drive(lambda: main({"input_ids": ids}))["hidden_states"]
        eager = main.model.eager_forward(input_ids=ids)
        np.testing.assert_allclose(hidden.numpy(), eager.numpy(), **TOL)
        if num_tokens <= max(DRAFT_SIZES):
            draft_hidden = _drive(lambda: draft({"input_ids": ids, "previous_hidden": eager}))["hidden_states"]
            np.testing.assert_allclose(
                draft_hidden.numpy(), draft.model.eager_forward(input_ids=ids, previous_hidden=eager).numpy(), **TOL
            )
    finally:
        unsubscribe()
    replays = [e for e in events if e.kind is EventKind.GRAPH_REPLAYED]
    assert replays and all(e.owner in ("main", "draft") for e in replays)
    padded = GraphOptConfig(capture_sizes=MAIN_SIZES).padded_size(num_tokens)
    assert [g.label for g in main.model.graphs()] == [f"main:{padded}"]


@pytest.mark.parametrize("num_tokens", [4, 6, 8])
def test_qwen3_vl_replay_equals_eager(rt: PaddleRuntime, num_tokens: int) -> None:
    model = _qwen(rt)
    ids, patches = _vl_inputs(num_tokens, seed=num_tokens)
    out = _drive(lambda: model({"input_ids": ids, "pixel_patches": patches}))["hidden_states"]
    assert model.model.graphs() and model.model.graphs()[0].alive
    # A different image on the next replay: the persistent embedding buffer must carry it.
    patches2 = patches * -1.0
    replayed = model({"input_ids": ids, "pixel_patches": patches2})["hidden_states"]
    embeds, deepstack = model.embed(ids, patches2)
    eager = model.model.eager_forward(inputs_embeds=embeds, deepstack=deepstack)
    np.testing.assert_allclose(replayed.numpy(), eager.numpy(), **TOL)
    assert np.abs(replayed.numpy() - out.numpy()).max() > 1e-3  # it really changed


# --- the RL weight cycle with new weights --------------------------------------------------------


def test_weight_cycle_with_new_weights_recaptures_and_matches_eager(rt: PaddleRuntime) -> None:
    import gc

    from fd_reference_models.paddle_models.layers import seeded_weights

    gc.collect()  # earlier tests' models (Layer <-> backend cycles) still hold static outputs
    baseline = rt.memory_stats().graphs  # graph memory only: restored weights are tracked too
    main, draft = _glm(rt)
    group = rt.new_group("tp")
    main.model.set_comm_group(group)
    ids = _ids(4)
    _drive(lambda: main({"input_ids": ids}))
    _drive(lambda: draft({"input_ids": ids, "previous_hidden": main.model.eager_forward(input_ids=ids)}))
    stale_graph = main.model.graphs()[0]
    params = list(main.named_parameters()) + draft.own_parameters()
    old_addresses = {name: rt.address(p) for name, p in params}

    for cycle in range(2):
        # clear_parameters: every graph (draft and main) destroyed BEFORE weights and group go.
        draft.clear_graph_opt_backend()
        main.clear_graph_opt_backend()
        assert not main.model.graphs() and not draft.model.graphs()
        for name, param in params:
            rt.release_parameter(param, name)
        rt.shutdown_group(group)
        # update_parameters: group back, new weights at NEW addresses, capture again.
        group = rt.new_group("tp")
        main.model.set_comm_group(group)
        new = seeded_weights(params, seed=10 + cycle)
        for name, param in params:
            rt.restore_parameter(param, new[name], name)
            assert rt.address(param) != old_addresses[name]
        hidden = _drive(lambda: main({"input_ids": ids}))["hidden_states"]
        ref_hidden, _ = glm4_reference(_state(main), ids.numpy())
        np.testing.assert_allclose(hidden.numpy(), ref_hidden, **TOL)
        np.testing.assert_allclose(main.model.eager_forward(input_ids=ids).numpy(), ref_hidden, **TOL)
        draft_hidden = _drive(lambda: draft({"input_ids": ids, "previous_hidden": hidden}))["hidden_states"]  # noqa: B023 - called now
        np.testing.assert_allclose(
            draft_hidden.numpy(), draft.model.eager_forward(input_ids=ids, previous_hidden=hidden).numpy(), **TOL
        )
        old_addresses = {name: rt.address(p) for name, p in params}
    assert rt.memory_stats().graphs > baseline  # live output buffers of the current graphs
    draft.clear_graph_opt_backend()
    main.clear_graph_opt_backend()
    assert rt.memory_stats().graphs == baseline  # clear dropped every output buffer
    assert not stale_graph.alive
    rt.shutdown_group(group)


def test_update_without_recapture_replays_a_stale_graph(rt: PaddleRuntime) -> None:
    """Known-bad cycle (no clear before reload): the host emulation must refuse the replay."""
    main, _ = _glm(rt)
    ids = _ids(2)
    _drive(lambda: main({"input_ids": ids}))
    embed = main.model.embed_tokens.weight
    rt.release_parameter(embed, "model.embed_tokens.weight")
    rt.restore_parameter(embed, np.zeros(embed.shape, "float32"), "model.embed_tokens.weight")
    with pytest.raises(StaleGraphError, match="embed_tokens"):
        main({"input_ids": ids})


def test_draft_graphs_capture_the_shared_embedding(rt: PaddleRuntime) -> None:
    """Releasing the MAIN embedding must invalidate the DRAFT's graphs (shared weight)."""
    main, draft = _glm(rt)
    ids = _ids(2)
    hidden = main.model.eager_forward(input_ids=ids)
    _drive(lambda: draft({"input_ids": ids, "previous_hidden": hidden}))
    assert dict(draft.model.named_parameters())["shared_embed.weight"] is main.model.embed_tokens.weight
    rt.release_parameter(main.model.embed_tokens.weight, "model.embed_tokens.weight")
    with pytest.raises(StaleGraphError, match="shared_embed.weight"):
        draft({"input_ids": ids, "previous_hidden": hidden})


# --- through the shared runner and the Subject contract -------------------------------------------


@pytest.mark.parametrize("factory_name", ["glm4_moe_subject", "qwen3_vl_subject"])
def test_subject_full_weight_cycle_through_the_runner(rt: PaddleRuntime, factory_name: str) -> None:
    from fd_conformance.cases import Subject
    from fd_reference_models.paddle_models import subjects

    subject = getattr(subjects, factory_name)(rt)
    assert isinstance(subject, Subject)
    subject.runner.capture_model()
    sizes = set(MAIN_SIZES) | (set(DRAFT_SIZES) if subject.draft is not None else set())
    assert len(subject.graphs()) == len(MAIN_SIZES) + (len(DRAFT_SIZES) if subject.draft is not None else 0)
    assert {int(g.label.split(":")[1]) for g in subject.graphs()} == sizes
    for n in (1, 3, 4):
        inputs = subject.make_inputs(n, seed=n)
        got, want = subject.forward(inputs), subject.eager_forward(inputs)
        for key in want:
            np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), **TOL)
    before = {name: rt.address(p) for name, p in subject.runner.named_parameters()}
    subject.runner.clear_parameters()
    assert not subject.graphs() and all(rt.is_released(p) for _, p in subject.runner.named_parameters())
    subject.runner.update_parameters(subject.new_weights(seed=7))
    after = {name: rt.address(p) for name, p in subject.runner.named_parameters()}
    assert all(after[name] != before[name] for name in before)
    inputs = subject.make_inputs(4, seed=1)
    got, want = subject.forward(inputs), subject.eager_forward(inputs)
    for key in want:
        np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), **TOL)


@pytest.mark.gpu
def test_subject_real_cuda_graphs_replay_equals_eager() -> None:
    """Needs paddlepaddle-gpu: real CUDAGraph capture of every size, replay == eager, weight cycle."""
    import paddle

    if not (paddle.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0):
        pytest.skip("paddle here is not a CUDA build with a visible GPU (install paddlepaddle-gpu)")
    from fd_reference_models.paddle_models.subjects import glm4_moe_subject

    cuda_rt = create("cuda")
    subject = glm4_moe_subject(cuda_rt)
    subject.runner.capture_model()
    assert all(g.alive for g in subject.graphs())
    for cycle in range(2):
        inputs = subject.make_inputs(4, seed=cycle)
        got, want = subject.forward(inputs), subject.eager_forward(inputs)
        for key in want:
            np.testing.assert_allclose(got[key].numpy(), want[key].numpy(), **TOL)
        subject.runner.clear_parameters()
        subject.runner.update_parameters(subject.new_weights(seed=cycle + 1))
