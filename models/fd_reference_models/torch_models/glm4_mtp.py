"""GLM4 MTP draft (FastDeploy's ``Glm4MTPForCausalLM``): a one-layer speculative proposer.

Shape of FastDeploy's draft: ``enorm`` on the token embedding, ``hnorm`` on the main model's last
hidden states, ``eh_proj`` over their concatenation, ONE GLM4-MoE decoder layer (transformers'
``Glm4MoeDecoderLayer``, MoE since its index is past ``first_k_dense_replace``), a final norm. The
embedding and lm_head are the MAIN model's modules (shared, not copied), and the draft has its own
graph backend and capture sizes -- so its graphs capture main-model weights too, which is why they
must be destroyed before the runner releases any weight.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from fd_conformance.protocol import graph_opt_model
from fd_conformance.runtime.base import Runtime
from fd_reference_models.graph_opt import GraphOptConfig, init_graph_opt, support_graph_optimization
from fd_reference_models.torch_models.common import (
    CommGroupMixin,
    causal_mask,
    install_tp_reduce,
    seeded_weights,
)
from fd_reference_models.torch_models.glm4_moe import Glm4MoeCausalLMBody, make_experts_capturable


@support_graph_optimization
class Glm4MTPModel(CommGroupMixin, nn.Module):
    """Inner draft model (graph-optimised, owner "draft")."""

    def __init__(self, config: Any, embed_tokens: nn.Embedding, runtime: Runtime, graph_opt_config: GraphOptConfig) -> None:
        super().__init__()
        from transformers.models.glm4_moe.modeling_glm4_moe import (
            Glm4MoeDecoderLayer,
            Glm4MoeRMSNorm,
            Glm4MoeRotaryEmbedding,
        )

        init_graph_opt(self, runtime, graph_opt_config, owner="draft")
        hidden = config.hidden_size
        self.embed_tokens = embed_tokens  # the main model's module: shared storage
        self.enorm = Glm4MoeRMSNorm(hidden, eps=config.rms_norm_eps)
        self.hnorm = Glm4MoeRMSNorm(hidden, eps=config.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * hidden, hidden, bias=False)
        # FastDeploy numbers the MTP layer after the main layers (weights "model.layers.{N}").
        self.mtp_block = Glm4MoeDecoderLayer(config, layer_idx=config.num_hidden_layers)
        self.norm = Glm4MoeRMSNorm(hidden, eps=config.rms_norm_eps)
        self.rotary_emb = Glm4MoeRotaryEmbedding(config)
        self.experts_implementation = make_experts_capturable(config, self)
        install_tp_reduce(self, [self.mtp_block.mlp])

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, previous_hidden: torch.Tensor) -> torch.Tensor:
        """[T] ids, [T] positions, [T, hidden] main-model hidden states -> [T, hidden]."""
        embeds = self.enorm(self.embed_tokens(input_ids))
        hidden = self.eh_proj(torch.cat([embeds, self.hnorm(previous_hidden)], dim=-1))[None]
        position_embeddings = self.rotary_emb(hidden, positions[None])
        hidden = self.mtp_block(
            hidden, attention_mask=causal_mask(input_ids.shape[0], hidden), position_embeddings=position_embeddings
        )
        return self.norm(hidden)[0]  # type: ignore[no-any-return]

    def new_static_inputs(self, size: int) -> dict[str, torch.Tensor]:
        weight = self.eh_proj.weight
        return {
            "input_ids": torch.zeros(size, dtype=torch.long, device=weight.device),
            "positions": torch.arange(size, dtype=torch.long, device=weight.device),
            "previous_hidden": torch.zeros(size, weight.shape[0], dtype=weight.dtype, device=weight.device),
        }


@graph_opt_model
class Glm4MTPForCausalLM(nn.Module):
    """Engine-facing draft wrapper; ``lm_head`` and the embedding belong to ``main``."""

    inner_cls: type = Glm4MTPModel

    def __init__(self, main: Glm4MoeCausalLMBody, graph_opt_config: GraphOptConfig, seed: int = 1) -> None:
        super().__init__()
        self.config = main.config
        self.runtime = main.runtime
        self.model = self.inner_cls(main.config, main.model.embed_tokens, main.runtime, graph_opt_config)
        self.lm_head = main.lm_head  # shared with the main model
        shared = {id(p) for p in main.parameters()}
        own = [(n, p) for n, p in self.named_parameters() if id(p) not in shared]
        weights = seeded_weights(own, seed)
        with torch.no_grad():
            for name, param in own:
                param.copy_(weights[name])

    @property
    def graph_opt_config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    def forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = self.model(**inputs)
        return {"logits": self.lm_head(hidden), "hidden_states": hidden}

    def eager_forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = self.model.eager_forward(**inputs)
        return {"logits": self.lm_head(hidden), "hidden_states": hidden}

    def dummy_inputs(self, num_tokens: int) -> dict[str, torch.Tensor]:
        return self.model.new_static_inputs(num_tokens)  # type: ignore[no-any-return]

    def clear_graph_opt_backend(self) -> None:
        """Destroy the draft's graphs (the Ernie MTP draft in FastDeploy still lacks this)."""
        self.model.clear_graph_opt_backend()
