"""Tiny Paddle GLM4-MoE (``Glm4MoeForCausalLM``): dense first layer, then MoE layers.

As in FastDeploy, the engine-facing wrapper is undecorated and delegates
``clear_graph_opt_backend()`` to its inner model, which carries ``@support_graph_optimization``.
The MoE router follows GLM4-MoE (sigmoid scores, selection with a correction bias, top-k weights
renormalised and scaled) but is computed DENSELY: every expert runs on every token and
unselected experts get weight 0, so shapes never depend on routing and the step is capturable.
A one-rank tensor-parallel group all-reduces each layer's output, as row-parallel layers do,
so a captured graph really holds the group's collective.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import paddle
from paddle import nn

from fd_conformance.runtime.base import Runtime
from fd_reference_models.graph_opt import GraphOptConfig, init_graph_opt, support_graph_optimization
from fd_reference_models.paddle_models.layers import (
    CausalSelfAttention,
    CommGroupMixin,
    DenseDecoderLayer,
    RMSNorm,
    SwiGLU,
    TextConfig,
    new_param,
)


@dataclass(frozen=True)
class MoeConfig:
    text: TextConfig = field(default_factory=TextConfig)
    num_experts: int = 4
    top_k: int = 2
    moe_intermediate_size: int = 16
    first_k_dense: int = 1  # GLM4-MoE's first_k_dense_replace
    routed_scaling_factor: float = 1.5


class TopKMoE(nn.Layer):
    """Routed experts + one shared expert, top-k by masking (capturable)."""

    def __init__(self, config: MoeConfig) -> None:
        super().__init__()
        hidden, inter, experts = config.text.hidden_size, config.moe_intermediate_size, config.num_experts
        self.top_k = config.top_k
        self.scale = config.routed_scaling_factor
        self.router = new_param(self, [hidden, experts])
        self.score_bias = new_param(self, [experts])  # e_score_correction_bias: selection only
        self.experts_gate = new_param(self, [experts, hidden, inter])
        self.experts_up = new_param(self, [experts, hidden, inter])
        self.experts_down = new_param(self, [experts, inter, hidden])
        self.shared_expert = SwiGLU(hidden, inter)

    def routing_weights(self, x: paddle.Tensor) -> paddle.Tensor:
        """``[tokens, experts]`` weights, zero outside each token's top-k."""
        scores = nn.functional.sigmoid(x @ self.router)
        choice = scores + self.score_bias
        kth = paddle.topk(choice, self.top_k, axis=-1)[0][:, -1:]
        selected = (choice >= kth).astype(x.dtype)
        weights = scores * selected
        return weights / weights.sum(axis=-1, keepdim=True) * self.scale

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        weights = self.routing_weights(x)  # [T, E]
        gate = paddle.einsum("th,ehi->eti", x, self.experts_gate)
        up = paddle.einsum("th,ehi->eti", x, self.experts_up)
        expert_out = paddle.einsum("eti,eih->eth", nn.functional.silu(gate) * up, self.experts_down)
        routed = paddle.einsum("te,eth->th", weights, expert_out)
        return routed + self.shared_expert(x)


class MoeDecoderLayer(nn.Layer):
    def __init__(self, config: MoeConfig) -> None:
        super().__init__()
        text = config.text
        self.input_norm = RMSNorm(text.hidden_size, text.rms_eps)
        self.attn = CausalSelfAttention(text)
        self.post_norm = RMSNorm(text.hidden_size, text.rms_eps)
        self.mlp = TopKMoE(config)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = x + self.attn(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))


@support_graph_optimization
class Glm4MoeModel(CommGroupMixin, nn.Layer):
    """The inner (decorated) model: embeddings -> dense layer(s) -> MoE layers -> norm."""

    def __init__(self, config: MoeConfig, runtime: Runtime, graph_config: GraphOptConfig) -> None:
        super().__init__()
        init_graph_opt(self, runtime, graph_config, "main")
        self.config = config
        text = config.text
        self.embed_tokens = nn.Embedding(text.vocab_size, text.hidden_size)
        self.layers = nn.LayerList(
            [DenseDecoderLayer(text) if i < config.first_k_dense else MoeDecoderLayer(config) for i in range(text.num_layers)]
        )
        self.norm = RMSNorm(text.hidden_size, text.rms_eps)
        self.set_comm_group(None)

    def new_static_inputs(self, size: int) -> dict[str, Any]:
        return {"input_ids": paddle.zeros([size], dtype="int64")}

    def forward(self, input_ids: paddle.Tensor) -> paddle.Tensor:
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
            for group in self.graph_groups():
                group.all_reduce(x)  # row-parallel reduction: identity on one rank, but captured
        return self.norm(x)


class Glm4MoeForCausalLM(nn.Layer):
    """Engine-facing wrapper (undecorated): inner model + ``lm_head``; logits computed eagerly
    outside the graph, as FastDeploy's ``compute_logits``."""

    inner_cls: type = Glm4MoeModel  # mutants (paddle_models/mutants.py) swap in a defective inner model

    def __init__(self, config: MoeConfig, runtime: Runtime, graph_config: GraphOptConfig) -> None:
        super().__init__()
        self.model = self.inner_cls(config, runtime, graph_config)
        self.lm_head = new_param(self, [config.text.hidden_size, config.text.vocab_size])

    def clear_graph_opt_backend(self) -> None:
        """Delegate to the decorated inner model (FastDeploy spells it clear_grpah_opt_backend)."""
        self.model.clear_graph_opt_backend()

    @property
    def graph_opt_config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    def forward(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """One step through the graph-opt backend (replays when a graph fits the size)."""
        hidden = self.model(input_ids=inputs["input_ids"])
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def eager_forward(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        hidden = self.model.eager_forward(input_ids=inputs["input_ids"])
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def dummy_inputs(self, num_tokens: int) -> dict[str, Any]:
        return self.model.new_static_inputs(num_tokens)  # type: ignore[no-any-return]

    def compute_logits(self, hidden: paddle.Tensor) -> paddle.Tensor:
        return hidden @ self.lm_head
