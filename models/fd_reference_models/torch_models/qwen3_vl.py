"""Qwen3-VL for the conformance kit: transformers' real vision tower, merger and text decoder.

As in FastDeploy, vision runs EAGERLY before the graph: the wrapper embeds tokens, scatters the
merged image features into the image-placeholder rows and the deepstack features into a dense
per-token buffer, then the graph-optimised text decoder runs on persistent buffers
(``inputs_embeds``, ``positions``, ``deepstack``). Capture safety: transformers' deepstack step
indexes with a boolean mask (data-dependent shape); here the visual rows are scattered outside the
graph into a dense ``[T, D, hidden]`` buffer that is zero on text rows, so inside the graph it is a
plain add -- numerically the same. Positions are a static ``[T, 3]`` (t, h, w) buffer; the wrapper
fills it with a text-style ramp on all three axes (m-rope index computation is eager and
data-dependent, and not what the graph-lifecycle contract is about).
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
    load_weights_in_place,
    seeded_weights,
)

IMAGE_TOKEN_ID = 5
IMAGE_GRID_THW = (1, 2, 2)  # one image: 4 patches, merged 2x2 -> ONE image token


def tiny_qwen3_vl_config(dtype: torch.dtype = torch.float32) -> Any:
    """2 text layers, 2 vision blocks, one deepstack level: CPU forward in milliseconds."""
    from transformers import Qwen3VLConfig

    config = Qwen3VLConfig(
        text_config={
            "vocab_size": 96,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "max_position_embeddings": 512,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
        },
        vision_config={
            "depth": 2,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "patch_size": 4,
            "temporal_patch_size": 2,
            "spatial_merge_size": 2,
            "in_channels": 3,
            "out_hidden_size": 32,
            "num_position_embeddings": 16,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=IMAGE_TOKEN_ID,
    )
    config._attn_implementation = "eager"
    for sub in (config.text_config, config.vision_config):
        sub._attn_implementation = "eager"
    config.dtype = dtype
    return config


def pixel_patch_dim(config: Any) -> int:
    vision = config.vision_config
    return int(vision.in_channels * vision.temporal_patch_size * vision.patch_size**2)


def vision_features(
    visual: nn.Module, pixel_values: torch.Tensor, grid_thw: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(merged image embeddings, deepstack features) across transformers 5.x return conventions."""
    out = visual(pixel_values, grid_thw=grid_thw)
    if isinstance(out, tuple):  # older releases: (merged, deepstack list)
        return out[0], list(out[1])
    return out.pooler_output, list(out.deepstack_features)


@support_graph_optimization
class Qwen3VLTextModel(CommGroupMixin, nn.Module):
    """Inner text decoder with deepstack injection (graph-optimised)."""

    def __init__(self, hf_text: nn.Module, runtime: Runtime, graph_opt_config: GraphOptConfig) -> None:
        super().__init__()
        init_graph_opt(self, runtime, graph_opt_config, owner="main")
        self.embed_tokens = hf_text.embed_tokens
        self.layers = hf_text.layers
        self.norm = hf_text.norm
        self.rotary_emb = hf_text.rotary_emb
        install_tp_reduce(self, [layer.mlp for layer in self.layers])

    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, deepstack: torch.Tensor) -> torch.Tensor:
        """[T, hidden] embeddings, [T, 3] positions, [T, D, hidden] deepstack -> [T, hidden]."""
        hidden = inputs_embeds[None]
        position_embeddings = self.rotary_emb(hidden, positions.t()[:, None, :])
        mask = causal_mask(inputs_embeds.shape[0], hidden)
        for index, layer in enumerate(self.layers):
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings)
            if index < deepstack.shape[1]:
                hidden = hidden + deepstack[:, index][None]  # zero on text rows
        return self.norm(hidden)[0]  # type: ignore[no-any-return]

    def new_static_inputs(self, size: int) -> dict[str, torch.Tensor]:
        weight = self.embed_tokens.weight
        depth = self.__dict__["deepstack_depth"]
        return {
            "inputs_embeds": torch.zeros(size, weight.shape[1], dtype=weight.dtype, device=weight.device),
            "positions": torch.arange(size, device=weight.device)[:, None].expand(size, 3).contiguous(),
            "deepstack": torch.zeros(size, depth, weight.shape[1], dtype=weight.dtype, device=weight.device),
        }


class Qwen3VLForConditionalGenerationBody(nn.Module):
    """Everything of the engine-facing wrapper except the clear method (FastDeploy before its fix)."""

    inner_cls: type = Qwen3VLTextModel

    def __init__(self, config: Any, runtime: Runtime, graph_opt_config: GraphOptConfig, seed: int = 0) -> None:
        super().__init__()
        from transformers import Qwen3VLModel

        self.config = config
        self.runtime = runtime
        hf = Qwen3VLModel(config)
        self.visual = hf.visual
        self.model = self.inner_cls(hf.language_model, runtime, graph_opt_config)
        self.model.__dict__["deepstack_depth"] = len(config.vision_config.deepstack_visual_indexes)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self.__dict__["hf_reference"] = hf  # unregistered: shares our parameters
        load_weights_in_place(self, seeded_weights(self.named_parameters(), seed))

    @property
    def graph_opt_config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    def prepare_inputs(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Eager part: embeddings with image features scattered in, dense deepstack, positions."""
        input_ids = inputs["input_ids"]
        embeds = self.model.embed_tokens(input_ids)
        depth = self.model.__dict__["deepstack_depth"]
        deepstack = embeds.new_zeros(input_ids.shape[0], depth, embeds.shape[-1])
        pixel_values = inputs.get("pixel_values")
        if pixel_values is not None:
            image_embeds, deepstack_features = vision_features(self.visual, pixel_values, inputs["image_grid_thw"])
            rows = input_ids == self.config.image_token_id
            embeds = embeds.masked_scatter(rows[:, None], image_embeds.to(embeds.dtype))
            for level, feature in enumerate(deepstack_features):
                deepstack[:, level] = deepstack[:, level].masked_scatter(rows[:, None], feature.to(embeds.dtype))
        return {"inputs_embeds": embeds, "positions": inputs["positions"], "deepstack": deepstack}

    def forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = self.model(**self.prepare_inputs(inputs))
        return {"logits": self.lm_head(hidden), "hidden_states": hidden}

    def eager_forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        hidden = self.model.eager_forward(**self.prepare_inputs(inputs))
        return {"logits": self.lm_head(hidden), "hidden_states": hidden}

    def dummy_inputs(self, num_tokens: int) -> dict[str, torch.Tensor]:
        device = self.lm_head.weight.device
        return {
            "input_ids": torch.zeros(num_tokens, dtype=torch.long, device=device),
            "positions": torch.arange(num_tokens, device=device)[:, None].expand(num_tokens, 3).contiguous(),
        }


@graph_opt_model
class Qwen3VLForConditionalGeneration(Qwen3VLForConditionalGenerationBody):
    """Engine-facing wrapper: eager vision + graph-optimised text decoder + lm_head."""

    def clear_graph_opt_backend(self) -> None:
        """The delegation FastDeploy's Qwen3-VL wrapper lacked until a later fix."""
        self.model.clear_graph_opt_backend()


def make_qwen3_vl_inputs(config: Any, num_tokens: int, seed: int, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Seeded step inputs; with 2+ tokens, row 0 is an image placeholder fed by one tiny image."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(IMAGE_TOKEN_ID + 1, config.text_config.vocab_size, (num_tokens,), generator=generator)
    start = 5 + (seed * 7) % 50  # a decode step at a later position: not what warm-up captured
    inputs = {"input_ids": ids, "positions": (torch.arange(num_tokens) + start)[:, None].expand(num_tokens, 3).contiguous()}
    if num_tokens >= 2:
        ids[0] = IMAGE_TOKEN_ID
        t, h, w = IMAGE_GRID_THW
        inputs["pixel_values"] = torch.randn(t * h * w, pixel_patch_dim(config), generator=generator)
        inputs["image_grid_thw"] = torch.tensor([IMAGE_GRID_THW])
    return {k: v.to(device) for k, v in inputs.items()}
