"""PyTorch helpers shared by the reference wrappers: seeded weights, static masks, TP all-reduce.

Everything here is capture-safe by construction: shapes come from static buffers, nothing reads a
tensor value on the host, and the causal mask is built with tensor ops only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from fd_conformance.engine.comm_group import CommGroupMixin as CommGroupMixin  # re-exported: the models import it from here

NORM_SUFFIXES = ("norm.weight", "enorm.weight", "hnorm.weight")


def seeded_weights(named: Iterable[tuple[str, torch.Tensor]], seed: int) -> dict[str, torch.Tensor]:
    """A reproducible random weight set (name -> CPU tensor): norms near 1, the rest small.

    Names are iterated sorted so the same seed gives the same weights whatever the module order.
    """
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for name, param in sorted(named, key=lambda item: item[0]):
        noise = torch.randn(tuple(param.shape), generator=generator, dtype=torch.float32)
        if name.endswith(NORM_SUFFIXES) or name.endswith("layernorm.weight"):
            value = 1.0 + 0.1 * noise
        else:
            fan_in = param.shape[-1] if param.dim() > 1 else 1
            value = noise * (0.5 / max(fan_in, 1) ** 0.5)
        out[name] = value.to(param.dtype)
    return out


def load_weights_in_place(module: nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Initial (construction-time) load: copy into the existing storage, no runtime events."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            param.copy_(weights[name])


def causal_mask(num_tokens: int, like: torch.Tensor) -> torch.Tensor:
    """Additive causal mask [1, 1, T, T]; padding rows sit at the END so they never leak into real rows."""
    full = torch.full((num_tokens, num_tokens), torch.finfo(like.dtype).min, dtype=like.dtype, device=like.device)
    return torch.triu(full, diagonal=1)[None, None]


class TensorParallelReduce:
    """Forward hook: row-parallel-style ``all_reduce`` on an MLP/MoE output.

    On a one-rank group the sum is a numerical no-op, but it puts a collective inside every
    captured graph -- the thing that makes destroying a communicator under a live graph hang.
    """

    def __init__(self, owner: Any) -> None:
        self.owner = owner  # the inner model; its comm group changes across weight cycles

    def __call__(self, module: nn.Module, args: Any, output: torch.Tensor) -> None:
        for group in self.owner.graph_groups():
            group.all_reduce(output)


def install_tp_reduce(owner: Any, mlps: Sequence[nn.Module]) -> None:
    hook = TensorParallelReduce(owner)
    for mlp in mlps:
        mlp.register_forward_hook(hook)
