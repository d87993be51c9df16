"""Subjects (the suites' view of a built model) for the Paddle reference models, and their factories.

Each factory builds seeded weights, the wrapper(s) and the shared :class:`ReferenceModelRunner`,
so Paddle cases run through exactly the runner the PyTorch cases use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import paddle

from fd_conformance.runtime.base import Graph, Runtime
from fd_reference_models.graph_opt import GraphOptConfig
from fd_reference_models.paddle_models.glm4_moe import Glm4MoeForCausalLM, MoeConfig
from fd_reference_models.paddle_models.glm4_mtp import Glm4MTPForCausalLM
from fd_reference_models.paddle_models.layers import load_weights, seeded_weights
from fd_reference_models.paddle_models.qwen3_vl import Qwen3VLConfig, Qwen3VLForConditionalGeneration
from fd_reference_models.runner import DRAFT_PREFIX, ReferenceModelRunner

MAIN_CAPTURE_SIZES = (8, 4, 2, 1)
DRAFT_CAPTURE_SIZES = (4, 2, 1)  # its own sizes: the draft decodes fewer tokens per step


@dataclass
class PaddleSubject:
    """One built Paddle model: wrapper, optional MTP draft, runner, seeded inputs."""

    runtime: Runtime
    wrapper: Any
    draft: Any | None
    runner: ReferenceModelRunner
    multimodal: bool = False

    def make_inputs(self, num_tokens: int, seed: int = 0) -> dict[str, Any]:
        rng = np.random.default_rng(seed)
        ids = rng.integers(2, 64, size=num_tokens).astype("int64")
        inputs: dict[str, Any] = {}
        if self.multimodal and num_tokens >= 4:
            ids[1:3] = self.wrapper.config.image_token_id  # one image: 4 patches -> 2 tokens
            inputs["pixel_patches"] = paddle.to_tensor(rng.standard_normal((4, 12)).astype("float32"))
        inputs["input_ids"] = paddle.to_tensor(ids)
        return inputs

    def _step(self, inputs: Mapping[str, Any], eager: bool) -> dict[str, Any]:
        run = self.wrapper.eager_forward if eager else self.wrapper.forward
        out = dict(run(inputs))
        if self.draft is not None:
            draft_inputs = {"input_ids": inputs["input_ids"], "previous_hidden": out["hidden_states"]}
            draft_run = self.draft.eager_forward if eager else self.draft.forward
            out["draft_logits"] = draft_run(draft_inputs)["logits"]
        return out

    def forward(self, inputs: Any) -> Mapping[str, Any]:
        return self._step(inputs, eager=False)

    def eager_forward(self, inputs: Any) -> Mapping[str, Any]:
        return self._step(inputs, eager=True)

    def new_weights(self, seed: int) -> Mapping[str, Any]:
        return seeded_weights(self.runner.named_parameters(), seed)

    def graphs(self) -> Sequence[Graph]:
        return self.runner.graphs()


def _finish(
    runtime: Runtime,
    wrapper: Any,
    draft: Any | None,
    multimodal: bool = False,
    runner_cls: type[ReferenceModelRunner] = ReferenceModelRunner,
) -> PaddleSubject:
    runner = runner_cls(runtime, wrapper, draft)
    named = runner.named_parameters()
    load_weights(named, seeded_weights(named, seed=0))
    return PaddleSubject(runtime, wrapper, draft, runner, multimodal)


def glm4_moe_subject(
    runtime: Runtime,
    *,
    runner_cls: type[ReferenceModelRunner] = ReferenceModelRunner,
    wrapper_cls: type[Glm4MoeForCausalLM] = Glm4MoeForCausalLM,
) -> PaddleSubject:
    """GLM4-MoE with its MTP draft (the speculative-decoding setup of the MTP hang); ``runner_cls``
    swaps in a runner mutant from :mod:`fd_reference_models.runner_mutants`, ``wrapper_cls`` a
    model mutant from :mod:`fd_reference_models.paddle_models.mutants`."""
    config = MoeConfig()
    main = wrapper_cls(config, runtime, GraphOptConfig(capture_sizes=MAIN_CAPTURE_SIZES))
    draft = Glm4MTPForCausalLM(config, main, GraphOptConfig(capture_sizes=DRAFT_CAPTURE_SIZES))
    return _finish(runtime, main, draft, runner_cls=runner_cls)


def qwen3_vl_subject(runtime: Runtime) -> PaddleSubject:
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(), runtime, GraphOptConfig(capture_sizes=MAIN_CAPTURE_SIZES))
    return _finish(runtime, model, None, multimodal=True)


__all__ = ["DRAFT_PREFIX", "PaddleSubject", "glm4_moe_subject", "qwen3_vl_subject"]
