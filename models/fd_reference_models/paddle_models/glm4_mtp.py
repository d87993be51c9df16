"""Tiny Paddle GLM4 MTP draft (``Glm4MTPForCausalLM``), sharing embedding and lm_head with the main model.

The draft predicts the token after next from the main model's last hidden state and the next
token's embedding: ``eh_proj([enorm(embed(ids)), hnorm(hidden)])`` -> one MoE decoder layer ->
shared head norm. It owns its own graph backend (owner "draft") with its own capture sizes, so
the engine must clear it separately -- the teardown the kit's C3 rule is about. Because the
embedding and lm_head are the SAME parameter objects as the main model's, releasing the main
weights also invalidates the draft's graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import paddle
from paddle import nn

from fd_conformance.runtime.base import Runtime
from fd_reference_models.graph_opt import GraphOptConfig, init_graph_opt, support_graph_optimization
from fd_reference_models.paddle_models.glm4_moe import Glm4MoeForCausalLM, MoeConfig, MoeDecoderLayer
from fd_reference_models.paddle_models.layers import CommGroupMixin, RMSNorm, new_param


@support_graph_optimization
class Glm4MTPModel(CommGroupMixin, nn.Layer):
    """The inner (decorated) draft model."""

    def __init__(self, config: MoeConfig, runtime: Runtime, graph_config: GraphOptConfig, embed_tokens: nn.Embedding) -> None:
        super().__init__()
        init_graph_opt(self, runtime, graph_config, "draft")
        text = config.text
        self.__dict__["shared_embed"] = embed_tokens  # the main model's layer, not re-registered
        self.enorm = RMSNorm(text.hidden_size, text.rms_eps)
        self.hnorm = RMSNorm(text.hidden_size, text.rms_eps)
        self.eh_proj = new_param(self, [2 * text.hidden_size, text.hidden_size])
        self.layer = MoeDecoderLayer(config)
        self.shared_head_norm = RMSNorm(text.hidden_size, text.rms_eps)
        self.set_comm_group(None)

    def named_parameters(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Own parameters plus the shared embedding: a graph captures both, so the graph-opt
        backend must list both (releasing the main embedding makes draft graphs stale)."""
        yield from super().named_parameters(*args, **kwargs)
        yield "shared_embed.weight", self.__dict__["shared_embed"].weight

    def new_static_inputs(self, size: int) -> dict[str, Any]:
        hidden = int(self.hnorm.weight.shape[0])
        return {
            "input_ids": paddle.zeros([size], dtype="int64"),
            "previous_hidden": paddle.zeros([size, hidden], dtype="float32"),
        }

    def forward(self, input_ids: paddle.Tensor, previous_hidden: paddle.Tensor) -> paddle.Tensor:
        embeds = self.enorm(self.__dict__["shared_embed"](input_ids))
        x = paddle.concat([embeds, self.hnorm(previous_hidden)], axis=-1) @ self.eh_proj
        x = self.layer(x)
        for group in self.graph_groups():
            group.all_reduce(x)  # the draft's graphs hold the TP collective too
        return self.shared_head_norm(x)


class Glm4MTPForCausalLM(nn.Layer):
    """Engine-facing draft wrapper (undecorated); logits through the main model's lm_head."""

    def __init__(self, config: MoeConfig, main: Glm4MoeForCausalLM, graph_config: GraphOptConfig) -> None:
        super().__init__()
        runtime: Runtime = main.model.runtime
        self.model = Glm4MTPModel(config, runtime, graph_config, main.model.embed_tokens)
        self.__dict__["main"] = main  # shares lm_head; not a sublayer (its weights belong to main)

    def own_parameters(self) -> list[tuple[str, Any]]:
        """Draft-only weights (the weight manager loads shared ones through the main model)."""
        return list(nn.Layer.named_parameters(self.model, prefix="model"))

    def clear_graph_opt_backend(self) -> None:
        self.model.clear_graph_opt_backend()

    @property
    def graph_opt_config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    def forward(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        hidden = self.model(input_ids=inputs["input_ids"], previous_hidden=inputs["previous_hidden"])
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def eager_forward(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        hidden = self.model.eager_forward(input_ids=inputs["input_ids"], previous_hidden=inputs["previous_hidden"])
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def dummy_inputs(self, num_tokens: int) -> dict[str, Any]:
        return self.model.new_static_inputs(num_tokens)  # type: ignore[no-any-return]

    def compute_logits(self, hidden: paddle.Tensor) -> paddle.Tensor:
        return hidden @ self.__dict__["main"].lm_head
