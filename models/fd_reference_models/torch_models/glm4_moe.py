"""GLM4-MoE for the conformance kit: transformers' real GLM4-MoE layers under a FastDeploy-shaped wrapper.

``Glm4MoeModel`` (inner, graph-optimised) reuses the embedding, decoder layers (dense first layer,
then MoE with a shared expert and top-k routing), norm and rotary embedding of
``transformers.Glm4MoeModel``. It runs its own decoder loop because transformers' model forward
builds masks and caches in ways a CUDA graph cannot capture. Capture safety:

* experts run transformers' ``batched_mm`` implementation (gather + bmm, static shapes); the default
  eager experts loop over ``nonzero()`` hits (host sync, data-dependent shapes). Where a transformers
  release lacks ``batched_mm`` we fall back to :func:`dense_experts_forward` (every expert on every
  token, non-selected weights zero) -- same result, no data-dependent shapes;
* rope comes from the static ``positions`` buffer, the causal mask from tensor ops;
* each decoder layer's MLP/MoE output goes through the comm group's ``all_reduce`` (row-parallel).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from fd_conformance.errors import UsageError
from fd_conformance.protocol import graph_opt_model
from fd_conformance.runtime.base import Runtime
from fd_reference_models.graph_opt import GraphOptConfig, init_graph_opt, support_graph_optimization
from fd_reference_models.torch_models.common import (
    CommGroupMixin,
    causal_mask,
    install_tp_reduce,
    load_weights_in_place,
    seeded_weights,
)

CAPTURABLE_EXPERTS = "batched_mm"


def tiny_glm4_moe_config(dtype: torch.dtype = torch.float32) -> Any:
    """1 dense + 1 MoE layer, 4 routed experts, top-2, one shared expert: CPU forward in milliseconds."""
    from transformers import Glm4MoeConfig

    config = Glm4MoeConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        moe_intermediate_size=16,
        num_experts_per_tok=2,
        n_routed_experts=4,
        n_shared_experts=1,
        n_group=1,
        topk_group=1,
        first_k_dense_replace=1,
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        pad_token_id=0,
    )
    config._attn_implementation = "eager"  # plain matmul + additive mask: capturable everywhere
    config.dtype = dtype
    return config


def dense_experts_forward(
    self: nn.Module, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
) -> torch.Tensor:
    """Capturable fallback: run every expert, weight by a dense [T, E] routing matrix."""
    weights = torch.zeros(
        hidden_states.shape[0], self.num_experts, dtype=top_k_weights.dtype, device=hidden_states.device
    ).scatter(1, top_k_index, top_k_weights)
    gate_up = torch.einsum("th,eoh->teo", hidden_states, self.gate_up_proj)
    gate, up = gate_up.chunk(2, dim=-1)
    expert_out = torch.einsum("tei,ehi->teh", self.act_fn(gate) * up, self.down_proj)
    return (expert_out * weights[..., None].to(expert_out.dtype)).sum(dim=1).to(hidden_states.dtype)


def make_experts_capturable(config: Any, hf_model: nn.Module) -> str:
    """Select a capture-safe experts implementation; returns which one (tests assert on it)."""
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

        available = CAPTURABLE_EXPERTS in ALL_EXPERTS_FUNCTIONS
    except ImportError:  # older transformers: no experts interface at all
        available = False
    if available:
        config._experts_implementation = CAPTURABLE_EXPERTS
        return CAPTURABLE_EXPERTS
    patched = 0
    for module in hf_model.modules():
        if type(module).__name__ == "Glm4MoeExperts":
            module.forward = dense_experts_forward.__get__(module)  # type: ignore[method-assign]
            patched += 1
    if patched == 0:
        # Nothing to patch means the routing is still the data-dependent per-expert loop, which
        # cannot be captured: failing here beats a capture error (or a silent eager run) later.
        import transformers

        raise UsageError(
            f"transformers {transformers.__version__} has neither the {CAPTURABLE_EXPERTS!r} experts "
            "implementation nor Glm4MoeExperts modules to make GLM4-MoE capture-safe",
            "install transformers>=5 (pip install 'transformers>=5')",
        )
    return "dense"


@support_graph_optimization
class Glm4MoeModel(CommGroupMixin, nn.Module):
    """Inner GLM4-MoE decoder (FastDeploy: decorated with ``@support_graph_optimization``)."""

    def __init__(self, config: Any, runtime: Runtime, graph_opt_config: GraphOptConfig, owner: str = "main") -> None:
        super().__init__()
        from transformers import Glm4MoeModel as HFGlm4MoeModel

        init_graph_opt(self, runtime, graph_opt_config, owner)
        hf = HFGlm4MoeModel(config)
        self.experts_implementation = make_experts_capturable(config, hf)
        self.embed_tokens = hf.embed_tokens
        self.layers = hf.layers
        self.norm = hf.norm
        self.rotary_emb = hf.rotary_emb
        # Kept unregistered (plain __dict__): the reference forward for tests; shares our parameters.
        self.__dict__["hf_reference"] = hf
        install_tp_reduce(self, [layer.mlp for layer in self.layers])

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """[T] token ids + [T] positions -> [T, hidden] final hidden states."""
        hidden = self.embed_tokens(input_ids)[None]
        position_embeddings = self.rotary_emb(hidden, positions[None])
        mask = causal_mask(input_ids.shape[0], hidden)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings)
        return self.norm(hidden)[0]  # type: ignore[no-any-return]

    def new_static_inputs(self, size: int) -> dict[str, torch.Tensor]:
        device = self.embed_tokens.weight.device
        return {
            "input_ids": torch.zeros(size, dtype=torch.long, device=device),
            "positions": torch.arange(size, dtype=torch.long, device=device),
        }


class Glm4MoeCausalLMBody(nn.Module):
    """The engine-facing wrapper minus its clear method (variants add one spelling or the other)."""

    inner_cls: type = Glm4MoeModel

    def __init__(self, config: Any, runtime: Runtime, graph_opt_config: GraphOptConfig, seed: int = 0) -> None:
        super().__init__()
        self.config = config
        self.runtime = runtime
        self.model = self.inner_cls(config, runtime, graph_opt_config, owner="main")
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        load_weights_in_place(self, seeded_weights(self.named_parameters(), seed))

    @property
    def graph_opt_config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)  # type: ignore[no-any-return]

    def forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = self.model(input_ids=inputs["input_ids"], positions=inputs["positions"])
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def eager_forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = self.model.eager_forward(input_ids=inputs["input_ids"], positions=inputs["positions"])
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def dummy_inputs(self, num_tokens: int) -> dict[str, torch.Tensor]:
        return self.model.new_static_inputs(num_tokens)  # type: ignore[no-any-return]


@graph_opt_model
class Glm4MoeForCausalLM(Glm4MoeCausalLMBody):
    """Engine-facing wrapper (not graph-decorated): inner model + lm_head."""

    def clear_graph_opt_backend(self) -> None:
        """Destroy the inner model's graphs (FastDeploy spells it ``clear_grpah_opt_backend``)."""
        self.model.clear_graph_opt_backend()
