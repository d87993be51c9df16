"""Subjects (fd_conformance.cases.Subject) for the PyTorch reference wrappers, and their factories.

A factory builds wrapper (+ draft), a :class:`ReferenceModelRunner` and the input builder on a
runtime; mutants reuse the factories by swapping one class (``wrapper_cls``/``draft_cls``/``runner_cls``).
Nothing is captured at construction: the suites call ``runner.capture_model()`` themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fd_conformance.errors import UsageError
from fd_conformance.runtime.base import Graph, Runtime
from fd_reference_models.graph_opt import GraphOptConfig
from fd_reference_models.runner import ReferenceModelRunner
from fd_reference_models.torch_models.common import seeded_weights
from fd_reference_models.torch_models.glm4_moe import Glm4MoeForCausalLM, tiny_glm4_moe_config
from fd_reference_models.torch_models.glm4_mtp import Glm4MTPForCausalLM
from fd_reference_models.torch_models.qwen3_vl import (
    Qwen3VLForConditionalGeneration,
    make_qwen3_vl_inputs,
    tiny_qwen3_vl_config,
)

MAIN_CAPTURE_SIZES = (4, 2, 1)
DRAFT_CAPTURE_SIZES = (2, 1)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def resolve_dtype(dtype: str) -> torch.dtype:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise UsageError(f"unknown dtype {dtype!r} for the reference models", f"use one of {', '.join(DTYPES)}") from None


def _device(runtime: Runtime) -> torch.device:
    if runtime.name != "torch":
        raise UsageError(f"PyTorch reference model built on the {runtime.name!r} runtime", "pass get_runtime('torch', ...)")
    return torch.device("cuda") if runtime.device == "cuda" else torch.device("cpu")


def place_modules(runtime: Runtime, dtype: str, *modules: torch.nn.Module | None) -> None:
    """Move freshly built wrappers to the runtime's device in the requested dtype, before any
    capture (graphs bake in addresses); ``None`` stands for an absent draft."""
    device, torch_dtype = _device(runtime), resolve_dtype(dtype)
    for module in modules:
        if module is not None:
            module.to(device=device, dtype=torch_dtype)


@dataclass
class TorchSubject:
    """One built model under test: main wrapper, optional draft, runner, seeded inputs."""

    runtime: Runtime
    wrapper: Any
    draft: Any | None
    runner: ReferenceModelRunner
    kind: str  # "glm4_moe" | "qwen3_vl": how make_inputs builds a step

    @property
    def device(self) -> torch.device:
        return _device(self.runtime)

    def make_inputs(self, num_tokens: int, seed: int = 0) -> dict[str, torch.Tensor]:
        """Seeded step inputs; positions start past 0 (a later decode step than warm-up used)."""
        if num_tokens <= 0:
            raise UsageError(f"make_inputs(num_tokens={num_tokens})", "ask for at least one token")
        if self.kind == "qwen3_vl":
            return make_qwen3_vl_inputs(self.wrapper.config, num_tokens, seed, self.device)
        generator = torch.Generator().manual_seed(seed)
        vocab = self.wrapper.config.vocab_size
        start = 5 + (seed * 7) % 50
        ids = torch.randint(1, vocab, (num_tokens,), generator=generator)
        return {"input_ids": ids.to(self.device), "positions": (torch.arange(num_tokens) + start).to(self.device)}

    def _run(self, inputs: Mapping[str, torch.Tensor], eager: bool) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            main = (self.wrapper.eager_forward if eager else self.wrapper.forward)(inputs)
            out = {"logits": main["logits"]}
            if self.draft is not None:
                draft_inputs = {
                    "input_ids": inputs["input_ids"],
                    "positions": inputs["positions"],
                    "previous_hidden": main["hidden_states"],
                }
                draft = (self.draft.eager_forward if eager else self.draft.forward)(draft_inputs)
                out["draft_logits"] = draft["logits"]
        return out

    def forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Through the models' graph backends: replays a captured graph when one fits the size."""
        return self._run(inputs, eager=False)

    def eager_forward(self, inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Same weights, no graphs: the reference for replay."""
        return self._run(inputs, eager=True)

    def new_weights(self, seed: int) -> dict[str, torch.Tensor]:
        """Fresh seeded weights for every runner parameter (draft-only ones prefixed ``draft.``)."""
        return seeded_weights(self.runner.named_parameters(), seed + 1000)

    def graphs(self) -> Sequence[Graph]:
        return self.runner.graphs()


def glm4_moe_subject(
    runtime: Runtime,
    *,
    use_cudagraph: bool = True,
    capture_sizes: tuple[int, ...] = MAIN_CAPTURE_SIZES,
    dtype: str = "float32",
    seed: int = 0,
    wrapper_cls: type = Glm4MoeForCausalLM,
    runner_cls: type = ReferenceModelRunner,
) -> TorchSubject:
    """GLM4-MoE main model alone."""
    config = tiny_glm4_moe_config(resolve_dtype(dtype))
    wrapper = wrapper_cls(config, runtime, GraphOptConfig(use_cudagraph, capture_sizes), seed=seed)
    return _main_only_subject(runtime, "glm4_moe", wrapper, dtype, runner_cls)


def glm4_moe_mtp_subject(
    runtime: Runtime,
    *,
    use_cudagraph: bool = True,
    draft_model_use_cudagraph: bool = True,
    capture_sizes: tuple[int, ...] = MAIN_CAPTURE_SIZES,
    draft_capture_sizes: tuple[int, ...] = DRAFT_CAPTURE_SIZES,
    dtype: str = "float32",
    seed: int = 0,
    wrapper_cls: type = Glm4MoeForCausalLM,
    draft_cls: type = Glm4MTPForCausalLM,
    runner_cls: type = ReferenceModelRunner,
) -> TorchSubject:
    """GLM4-MoE main model + GLM4 MTP draft sharing its embedding and lm_head."""
    config = tiny_glm4_moe_config(resolve_dtype(dtype))
    wrapper = wrapper_cls(config, runtime, GraphOptConfig(use_cudagraph, capture_sizes), seed=seed)
    draft = draft_cls(wrapper, GraphOptConfig(draft_model_use_cudagraph, draft_capture_sizes), seed=seed + 1)
    place_modules(runtime, dtype, wrapper, draft)
    return TorchSubject(runtime, wrapper, draft, runner_cls(runtime, wrapper, draft), "glm4_moe")


def qwen3_vl_subject(
    runtime: Runtime,
    *,
    use_cudagraph: bool = True,
    capture_sizes: tuple[int, ...] = MAIN_CAPTURE_SIZES,
    dtype: str = "float32",
    seed: int = 0,
    wrapper_cls: type = Qwen3VLForConditionalGeneration,
    runner_cls: type = ReferenceModelRunner,
) -> TorchSubject:
    """Qwen3-VL: eager vision tower, graph-optimised text decoder with deepstack."""
    config = tiny_qwen3_vl_config(resolve_dtype(dtype))
    wrapper = wrapper_cls(config, runtime, GraphOptConfig(use_cudagraph, capture_sizes), seed=seed)
    return _main_only_subject(runtime, "qwen3_vl", wrapper, dtype, runner_cls)


def _main_only_subject(runtime: Runtime, kind: str, wrapper: Any, dtype: str, runner_cls: type) -> TorchSubject:
    """A subject with no draft: place the wrapper, give it a runner."""
    place_modules(runtime, dtype, wrapper)
    return TorchSubject(runtime, wrapper, None, runner_cls(runtime, wrapper), kind)
