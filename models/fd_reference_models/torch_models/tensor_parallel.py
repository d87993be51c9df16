"""Tensor-parallel (Megatron-style) variants of the GLM4-MoE reference model and its MTP draft.

Each rank builds the SAME seeded full model as TP=1, then keeps its shard of every parallel
weight, so TP=N output must equal TP=1 output (up to float summation order):

* column-parallel (output features split): attention ``q/k/v_proj`` by heads, MLP and shared-expert
  ``gate_proj``/``up_proj``, the routed experts' ``gate_up_proj`` (gate and up halves split alike);
* row-parallel (input features split, partial sums): ``o_proj``, ``down_proj``, experts' ``down_proj``.
  Each row-parallel output -- the attention ``o_proj`` and the whole MLP/MoE block (routed +
  shared experts summed first, one reduce) -- goes through the comm group's ``all_reduce`` in a
  forward hook, so the collective runs INSIDE every captured graph (NCCL on GPU, gloo on CPU);
* replicated: embedding, norms, MoE router, the draft's ``eh_proj``, ``lm_head``.

The runner announces its capture order (:meth:`TensorParallelRunner.capture_plan`) so the kit can
check it across ranks before any collective is captured (:mod:`fd_conformance.distributed.capture_plan`).
:class:`AscendingCaptureRunner` is the known-bad variant for that check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from fd_conformance.errors import UsageError
from fd_conformance.runtime.base import Runtime
from fd_reference_models.graph_opt import GraphOptConfig
from fd_reference_models.runner import ReferenceModelRunner
from fd_reference_models.torch_models.common import install_tp_reduce, seeded_weights
from fd_reference_models.torch_models.glm4_moe import Glm4MoeForCausalLM, tiny_glm4_moe_config
from fd_reference_models.torch_models.glm4_mtp import Glm4MTPForCausalLM
from fd_reference_models.torch_models.subject import (
    DRAFT_CAPTURE_SIZES,
    MAIN_CAPTURE_SIZES,
    TorchSubject,
    place_modules,
    resolve_dtype,
)

# Parameter-name suffix -> how it is split. Checked in order; the first match wins.
COLUMN, ROW, GATE_UP, REPLICATED = "column", "row", "gate_up", "replicated"
SHARDING_RULES: tuple[tuple[str, str], ...] = (
    ("self_attn.q_proj.weight", COLUMN),
    ("self_attn.q_proj.bias", COLUMN),
    ("self_attn.k_proj.weight", COLUMN),
    ("self_attn.k_proj.bias", COLUMN),
    ("self_attn.v_proj.weight", COLUMN),
    ("self_attn.v_proj.bias", COLUMN),
    ("self_attn.o_proj.weight", ROW),
    ("experts.gate_up_proj", GATE_UP),
    ("experts.down_proj", ROW),
    ("gate_proj.weight", COLUMN),
    ("up_proj.weight", COLUMN),
    ("down_proj.weight", ROW),
)


def sharding_of(name: str) -> str:
    """How parameter ``name`` is split across TP ranks (REPLICATED when no rule matches)."""
    for suffix, kind in SHARDING_RULES:
        if name.endswith(suffix):
            return kind
    return REPLICATED


def shard(value: torch.Tensor, kind: str, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous slice of a full weight (a copy with its own storage)."""
    if kind == REPLICATED:
        return value.clone()
    if kind == GATE_UP:
        # [E, 2I, H]: the first I rows are the gate, the next I the up projection; split each.
        gate, up = value.chunk(2, dim=-2)
        return torch.cat([shard(gate, COLUMN, rank, world_size), shard(up, COLUMN, rank, world_size)], dim=-2)
    # Column: the output-feature dim (-2 for both [out, in] linears and [E, out, in] experts).
    dim = -1 if kind == ROW else (0 if value.dim() == 1 else -2)
    if value.shape[dim] % world_size:
        raise UsageError(
            f"cannot split a {kind}-parallel weight of shape {tuple(value.shape)} over {world_size} ranks",
            "use a TP size that divides heads, KV heads and intermediate sizes",
        )
    return value.chunk(world_size, dim=dim)[rank].clone()


def check_divisible(config: Any, world_size: int) -> None:
    """Heads and KV heads must split evenly, or a rank would hold half a head."""
    for what in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "moe_intermediate_size"):
        value = int(getattr(config, what))
        if value % world_size:
            raise UsageError(f"{what}={value} does not divide by TP size {world_size}", "pick a TP size dividing it")


def shard_module_in_place(
    module: nn.Module, rank: int, world_size: int, skip: set[int] | None = None
) -> dict[str, tuple[int, ...]]:
    """Replace every parallel parameter's data by this rank's shard (construction time: no events).

    Returns the FULL shapes by name, so full-size weight sets can be built and sharded later.
    ``skip``: ids of parameters owned (and sharded) by another module, e.g. the draft's shared embedding.
    """
    full_shapes: dict[str, tuple[int, ...]] = {}
    with torch.no_grad():
        for name, param in module.named_parameters():
            if skip is not None and id(param) in skip:
                continue
            full_shapes[name] = tuple(param.shape)
            kind = sharding_of(name)
            if kind != REPLICATED:
                param.data = shard(param.data, kind, rank, world_size)
    return full_shapes


def install_attention_reduce(inner: nn.Module, layers: list[nn.Module]) -> None:
    """The row-parallel attention output: all-reduce ``o_proj``'s partial sums in place."""
    install_tp_reduce(inner, [layer.self_attn.o_proj for layer in layers])


class TensorParallelGlm4MoeForCausalLM(Glm4MoeForCausalLM):
    """GLM4-MoE main wrapper holding rank ``tp_rank``'s shard of the seeded full model."""

    def __init__(
        self, config: Any, runtime: Runtime, graph_opt_config: GraphOptConfig, seed: int = 0, *, tp_rank: int, tp_size: int
    ) -> None:
        check_divisible(config, tp_size)
        super().__init__(config, runtime, graph_opt_config, seed=seed)  # the full TP=1 weights first
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.full_shapes = shard_module_in_place(self, tp_rank, tp_size)
        install_attention_reduce(self.model, list(self.model.layers))


class TensorParallelGlm4MTPForCausalLM(Glm4MTPForCausalLM):
    """GLM4 MTP draft holding its shard; embedding and lm_head stay the main model's (replicated)."""

    def __init__(self, main: TensorParallelGlm4MoeForCausalLM, graph_opt_config: GraphOptConfig, seed: int = 1) -> None:
        # The full draft is seeded from full-shape modules: build it on the unsharded layout, then split.
        super().__init__(main, graph_opt_config, seed=seed)
        self.tp_rank, self.tp_size = main.tp_rank, main.tp_size
        shared = {id(p) for p in main.parameters()}
        self.full_shapes = shard_module_in_place(self, main.tp_rank, main.tp_size, skip=shared)
        install_attention_reduce(self.model, [self.model.mtp_block])


class TensorParallelRunner(ReferenceModelRunner):
    """The reference runner plus an announced capture plan it follows exactly."""

    def capture_plan(self) -> tuple[tuple[str, int], ...]:
        """(owner, size) in capture order: main then draft, each largest first (GraphOptConfig sorts)."""
        plan: list[tuple[str, int]] = []
        if self.use_cudagraph:
            plan += [("main", size) for size in self.main.graph_opt_config.capture_sizes]
        if self.draft is not None and self.draft_model_use_cudagraph:
            plan += [("draft", size) for size in self.draft.graph_opt_config.capture_sizes]
        return tuple(plan)

    def capture_model(self) -> None:
        wrappers = {"main": self.main, "draft": self.draft}
        for owner, size in self.capture_plan():
            wrapper = wrappers[owner]
            for _ in range(wrapper.graph_opt_config.warmup_runs + 1):  # warm-ups, then the capturing call
                wrapper.forward(wrapper.dummy_inputs(size))


class AscendingCaptureRunner(TensorParallelRunner):
    """MUTANT (FDC601 across ranks, FDC602 on its own rank): captures smallest size first, e.g. a
    rank that sorted its capture sizes itself instead of taking the shared descending config."""

    def capture_plan(self) -> tuple[tuple[str, int], ...]:
        plan = super().capture_plan()
        return tuple(sorted(plan, key=lambda item: (item[0] != "main", item[1])))


class TensorParallelGroupShutdownFirstRunner(TensorParallelRunner):
    """MUTANT (FDC202 on every rank): shuts the TP group down while graphs that captured its
    all-reduces are alive -- on NCCL the destroy then waits on those graphs (the MTP hang)."""

    def clear_parameters(self) -> None:
        self._shutdown_group()  # the defect: before the graphs are cleared
        self._clear_graphs()  # noqa: FDC101 -- intended mutant (checked at runtime by FDC202)
        self._release_weights()


class TensorParallelSubject(TorchSubject):
    """A TP rank's subject: weight sets are the full seeded set, sharded like the model."""

    tp_rank: int = 0
    tp_size: int = 1
    seeds: tuple[int, int] = (0, 1)  # (main, draft) seeds the full model was built with

    def new_weights(self, seed: int) -> dict[str, torch.Tensor]:
        full_shapes = dict(self.wrapper.full_shapes)
        if self.draft is not None:
            full_shapes.update({f"draft.{name}": shape for name, shape in self.draft.full_shapes.items()})
        dtype = self.wrapper.lm_head.weight.dtype
        templates = [
            (name, torch.empty(full_shapes[name], dtype=dtype, device="meta")) for name, _ in self.runner.named_parameters()
        ]
        full = seeded_weights(templates, seed + 1000)
        return {name: shard(value, sharding_of(name), self.tp_rank, self.tp_size) for name, value in full.items()}

    def reference_outputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """TP=1 eager outputs for the same seeds, built here on this rank with no group attached."""
        config = self.wrapper.config
        main = Glm4MoeForCausalLM(config, self.runtime, GraphOptConfig(False, MAIN_CAPTURE_SIZES), seed=self.seeds[0])
        models: list[nn.Module] = [main]
        draft = None
        if self.draft is not None:
            draft = Glm4MTPForCausalLM(main, GraphOptConfig(False, DRAFT_CAPTURE_SIZES), seed=self.seeds[1])
            models.append(draft)
        for module in models:
            module.to(device=self.device, dtype=self.wrapper.lm_head.weight.dtype)
        reference = TorchSubject(self.runtime, main, draft, _NoGroupRunner(self.runtime, main, draft), "glm4_moe")
        return reference.eager_forward(inputs)


class _NoGroupRunner(ReferenceModelRunner):
    """A runner that attaches no comm group: the TP=1 reference must not all-reduce across ranks."""

    def _start_group(self) -> None:
        self.group = None


def tp_glm4_moe_mtp_subject(
    runtime: Runtime,
    *,
    tp_rank: int,
    tp_size: int,
    use_cudagraph: bool = True,
    draft_model_use_cudagraph: bool = True,
    capture_sizes: tuple[int, ...] = MAIN_CAPTURE_SIZES,
    draft_capture_sizes: tuple[int, ...] = DRAFT_CAPTURE_SIZES,
    dtype: str = "float32",
    seed: int = 0,
    runner_cls: type[TensorParallelRunner] = TensorParallelRunner,
    with_draft: bool = True,
) -> TensorParallelSubject:
    """GLM4-MoE (+ MTP draft) at TP=``tp_size`` on rank ``tp_rank`` of a world the runtime joined.

    Every rank must call this in the same order: the runner creates the TP group collectively.
    """
    if not 0 <= tp_rank < tp_size:
        raise UsageError(f"tp_rank={tp_rank} outside TP size {tp_size}", "pass the process's rank in the world")
    config = tiny_glm4_moe_config(resolve_dtype(dtype))
    wrapper = TensorParallelGlm4MoeForCausalLM(
        config, runtime, GraphOptConfig(use_cudagraph, capture_sizes), seed=seed, tp_rank=tp_rank, tp_size=tp_size
    )
    draft = (
        TensorParallelGlm4MTPForCausalLM(wrapper, GraphOptConfig(draft_model_use_cudagraph, draft_capture_sizes), seed=seed + 1)
        if with_draft
        else None
    )
    place_modules(runtime, dtype, wrapper, draft)
    subject = TensorParallelSubject(runtime, wrapper, draft, runner_cls(runtime, wrapper, draft), "glm4_moe")
    subject.tp_rank, subject.tp_size, subject.seeds = tp_rank, tp_size, (seed, seed + 1)
    return subject
