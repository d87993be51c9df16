"""Tiny Paddle building blocks shared by the reference models (our own code, no paddleformers).

Every layer keeps its weights as plain ``[in, out]`` parameters and computes with ``x @ W`` so
the tests' independent NumPy reference can repeat the math from the state dict alone. Shapes
are token-first (``[num_tokens, hidden]``), as FastDeploy's ``ids_remove_padding`` layout:
padding rows appended at the end never change real rows because attention is causal and the
MLP/MoE are per token. Nothing here branches on data, so every forward is capturable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle
from paddle import nn

from fd_conformance.engine.comm_group import CommGroupMixin as CommGroupMixin  # re-exported: the models import it from here

NEG_INF = -1e9  # additive causal mask; finite so a fully-masked row cannot produce NaN


@dataclass(frozen=True)
class TextConfig:
    """A decoder small enough that a CPU forward takes milliseconds."""

    vocab_size: int = 64
    hidden_size: int = 32
    num_heads: int = 2
    intermediate_size: int = 48
    num_layers: int = 2
    rms_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def new_param(layer: nn.Layer, shape: list[int]) -> Any:
    """A float32 parameter; values come from :func:`seeded_weights`, never from Paddle's RNG."""
    return layer.create_parameter(shape, dtype="float32", default_initializer=nn.initializer.Constant(0.0))


def seeded_weights(named: Iterable[tuple[str, Any]], seed: int) -> dict[str, np.ndarray]:
    """Deterministic weights by name: norms near 1, matrices small (keeps logits well scaled)."""
    rng = np.random.default_rng(seed)
    weights: dict[str, np.ndarray] = {}
    for name, param in sorted(named, key=lambda item: item[0]):
        shape = [int(d) for d in param.shape]
        if name.endswith("norm.weight") or name.rsplit(".", 1)[-1] in ("enorm", "hnorm"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            value = 0.2 * rng.standard_normal(shape)
        weights[name] = value.astype("float32")
    return weights


def load_weights(named: Iterable[tuple[str, Any]], weights: dict[str, np.ndarray]) -> None:
    """In-place initial load (``set_value`` keeps addresses; the RL cycle uses the runtime instead)."""
    for name, param in named:
        param.set_value(weights[name])


class RMSNorm(nn.Layer):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = new_param(self, [hidden])

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        variance = (x * x).mean(axis=-1, keepdim=True)
        return x * paddle.rsqrt(variance + self.eps) * self.weight


class SwiGLU(nn.Layer):
    """gate/up/down MLP (dense layers, shared experts, vision blocks)."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate = new_param(self, [hidden, intermediate])
        self.up = new_param(self, [hidden, intermediate])
        self.down = new_param(self, [intermediate, hidden])

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return (nn.functional.silu(x @ self.gate) * (x @ self.up)) @ self.down


class CausalSelfAttention(nn.Layer):
    """Multi-head causal attention over one token-first sequence (no rotary: positions do not
    matter to the graph lifecycle, and leaving them out keeps the reference short)."""

    def __init__(self, config: TextConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        hidden = config.hidden_size
        self.q = new_param(self, [hidden, hidden])
        self.k = new_param(self, [hidden, hidden])
        self.v = new_param(self, [hidden, hidden])
        self.o = new_param(self, [hidden, hidden])

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        tokens = x.shape[0]

        def heads(t: paddle.Tensor) -> paddle.Tensor:
            return t.reshape([tokens, self.num_heads, self.head_dim]).transpose([1, 0, 2])

        q, k, v = heads(x @ self.q), heads(x @ self.k), heads(x @ self.v)
        scores = paddle.matmul(q, k, transpose_y=True) / float(np.sqrt(self.head_dim))
        mask = paddle.triu(paddle.full([tokens, tokens], NEG_INF, dtype=x.dtype), diagonal=1)
        probs = nn.functional.softmax(scores + mask, axis=-1)
        context = paddle.matmul(probs, v).transpose([1, 0, 2]).reshape([tokens, -1])
        return context @ self.o


class DenseDecoderLayer(nn.Layer):
    """Pre-norm attention + SwiGLU MLP."""

    def __init__(self, config: TextConfig) -> None:
        super().__init__()
        self.input_norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.attn = CausalSelfAttention(config)
        self.post_norm = RMSNorm(config.hidden_size, config.rms_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = x + self.attn(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))
