"""Tiny Paddle Qwen3-VL (``Qwen3VLForConditionalGeneration``): vision tower + merger + text decoder
with deepstack injection and a persistent input-embedding buffer.

The vision tower runs eagerly (as in FastDeploy, only the text decoder is graph-captured); its
merged patches replace the image-token embeddings, and features taken from the vision blocks
("deepstack") are added to the hidden states at the visual positions after the first decoder
layers. The captured inner model takes ``inputs_embeds`` and ``deepstack`` (zeros at text
positions) as token-first inputs, which the graph-opt backend copies into persistent buffers
before every replay -- the input-embedding buffer a replayed graph reads.
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
    CommGroupMixin,
    DenseDecoderLayer,
    RMSNorm,
    SwiGLU,
    TextConfig,
    new_param,
)


@dataclass(frozen=True)
class VisionConfig:
    patch_dim: int = 12  # 3 channels x 2 x 2 pixels per patch
    hidden_size: int = 16
    intermediate_size: int = 24
    num_blocks: int = 2
    merge: int = 2  # patches merged into one visual token (spatial merge, flattened)
    deepstack_blocks: tuple[int, ...] = (0, 1)  # vision blocks whose features are injected


@dataclass(frozen=True)
class Qwen3VLConfig:
    text: TextConfig = field(default_factory=TextConfig)
    vision: VisionConfig = field(default_factory=VisionConfig)
    image_token_id: int = 1


class PatchMerger(nn.Layer):
    """Concatenate ``merge`` neighbouring patches, norm, project to the text width."""

    def __init__(self, vision: VisionConfig, text_hidden: int) -> None:
        super().__init__()
        self.merge = vision.merge
        self.norm = RMSNorm(vision.hidden_size * vision.merge, 1e-6)
        self.proj = new_param(self, [vision.hidden_size * vision.merge, text_hidden])

    def forward(self, patches: paddle.Tensor) -> paddle.Tensor:
        merged = patches.reshape([-1, patches.shape[-1] * self.merge])
        return self.norm(merged) @ self.proj


class VisionBlock(nn.Layer):
    def __init__(self, vision: VisionConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(vision.hidden_size, 1e-6)
        self.mlp = SwiGLU(vision.hidden_size, vision.intermediate_size)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x + self.mlp(self.norm(x))


class VisionTower(nn.Layer):
    """Patch embedding -> blocks -> merger, plus one deepstack merger per tapped block."""

    def __init__(self, config: Qwen3VLConfig) -> None:
        super().__init__()
        vision = config.vision
        self.patch_embed = new_param(self, [vision.patch_dim, vision.hidden_size])
        self.blocks = nn.LayerList([VisionBlock(vision) for _ in range(vision.num_blocks)])
        self.merger = PatchMerger(vision, config.text.hidden_size)
        self.deepstack_blocks = vision.deepstack_blocks
        self.deepstack_mergers = nn.LayerList([PatchMerger(vision, config.text.hidden_size) for _ in vision.deepstack_blocks])

    def forward(self, pixel_patches: paddle.Tensor) -> tuple[paddle.Tensor, list[paddle.Tensor]]:
        x = pixel_patches @ self.patch_embed
        deepstack = []
        for index, block in enumerate(self.blocks):
            x = block(x)
            if index in self.deepstack_blocks:
                merger = self.deepstack_mergers[self.deepstack_blocks.index(index)]
                deepstack.append(merger(x))
        return self.merger(x), deepstack


@support_graph_optimization
class Qwen3VLTextModel(CommGroupMixin, nn.Layer):
    """The inner (decorated) text decoder: embeddings in, final hidden states out."""

    def __init__(self, config: Qwen3VLConfig, runtime: Runtime, graph_config: GraphOptConfig) -> None:
        super().__init__()
        init_graph_opt(self, runtime, graph_config, "main")
        text = config.text
        self.num_deepstack = len(config.vision.deepstack_blocks)
        self.hidden_size = text.hidden_size
        self.layers = nn.LayerList([DenseDecoderLayer(text) for _ in range(text.num_layers)])
        self.norm = RMSNorm(text.hidden_size, text.rms_eps)
        self.set_comm_group(None)

    def new_static_inputs(self, size: int) -> dict[str, Any]:
        return {
            "inputs_embeds": paddle.zeros([size, self.hidden_size], dtype="float32"),
            "deepstack": paddle.zeros([size, self.num_deepstack, self.hidden_size], dtype="float32"),
        }

    def forward(self, inputs_embeds: paddle.Tensor, deepstack: paddle.Tensor) -> paddle.Tensor:
        x = inputs_embeds
        for index, layer in enumerate(self.layers):
            x = layer(x)
            for group in self.graph_groups():
                group.all_reduce(x)
            if index < self.num_deepstack:
                x = x + deepstack[:, index]  # zeros at text positions: injection at visual tokens only
        return self.norm(x)


class Qwen3VLForConditionalGeneration(nn.Layer):
    """Engine-facing wrapper (undecorated). Embedding and vision run eagerly, the decoder through
    the graph-opt backend. FastDeploy's wrapper once lacked the clear method (the kit's mutant)."""

    def __init__(self, config: Qwen3VLConfig, runtime: Runtime, graph_config: GraphOptConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.text.vocab_size, config.text.hidden_size)
        self.visual = VisionTower(config)
        self.model = Qwen3VLTextModel(config, runtime, graph_config)
        self.lm_head = new_param(self, [config.text.hidden_size, config.text.vocab_size])

    def clear_graph_opt_backend(self) -> None:
        self.model.clear_graph_opt_backend()

    def embed(self, input_ids: paddle.Tensor, pixel_patches: paddle.Tensor | None) -> tuple[paddle.Tensor, paddle.Tensor]:
        """Text embeddings with image tokens replaced by merged patches, and the deepstack
        tensor ``[tokens, num_deepstack, hidden]`` (zeros where there is no image)."""
        embeds = self.embed_tokens(input_ids)
        tokens, hidden = embeds.shape
        deepstack = paddle.zeros([tokens, self.model.num_deepstack, hidden], dtype=embeds.dtype)
        if pixel_patches is None or pixel_patches.shape[0] == 0:
            return embeds, deepstack
        visual, stack = self.visual(pixel_patches)
        positions = paddle.nonzero(input_ids == self.config.image_token_id).flatten()  # eager: fine
        if int(positions.shape[0]) != int(visual.shape[0]):
            raise ValueError(f"{int(positions.shape[0])} image tokens but {int(visual.shape[0])} visual embeddings")
        embeds = paddle.scatter(embeds, positions, visual)
        deepstack = paddle.scatter(deepstack, positions, paddle.stack(stack, axis=1))
        return embeds, deepstack

    @property
    def graph_opt_config(self) -> GraphOptConfig:
        return self.model.graph_opt_config  # type: ignore[no-any-return]

    def forward(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """``input_ids`` [T] and optional ``pixel_patches`` [P, patch_dim]; the decoder replays."""
        embeds, deepstack = self.embed(inputs["input_ids"], inputs.get("pixel_patches"))
        hidden = self.model(inputs_embeds=embeds, deepstack=deepstack)
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def eager_forward(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        embeds, deepstack = self.embed(inputs["input_ids"], inputs.get("pixel_patches"))
        hidden = self.model.eager_forward(inputs_embeds=embeds, deepstack=deepstack)
        return {"logits": self.compute_logits(hidden), "hidden_states": hidden}

    def dummy_inputs(self, num_tokens: int) -> dict[str, Any]:
        """Text-only tokens (capture needs shapes, not images: deepstack is a zero input)."""
        return {"input_ids": paddle.full([num_tokens], 2, dtype="int64")}

    def compute_logits(self, hidden: paddle.Tensor) -> paddle.Tensor:
        return hidden @ self.lm_head
