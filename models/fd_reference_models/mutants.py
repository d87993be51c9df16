"""Known-bad variants of the reference models: each reproduces one FastDeploy defect in ONE place.

Every mutant is a small subclass of a good class; its docstring names the defect and the finding
codes the suites must report (the case in :mod:`fd_reference_models.cases` carries them as
``expected_findings``). These are the PyTorch model mutants (the model-level defects themselves are
framework-free mixins in :mod:`fd_reference_models.model_defects`, shared with the Paddle mutants in
:mod:`fd_reference_models.paddle_models.mutants`); the runtime-neutral runner mutants are in
:mod:`fd_reference_models.runner_mutants`.
"""

from __future__ import annotations

from fd_conformance.runtime.base import CLEAR_BEGIN_MARK, CLEAR_END_MARK
from fd_reference_models.model_defects import BakedTokenIds, ForgetfulClear, LeakyClear
from fd_reference_models.torch_models.glm4_moe import Glm4MoeCausalLMBody, Glm4MoeForCausalLM, Glm4MoeModel
from fd_reference_models.torch_models.qwen3_vl import Qwen3VLForConditionalGenerationBody

# --- protocol ---------------------------------------------------------------------------------


class Qwen3VLWithoutClear(Qwen3VLForConditionalGenerationBody):
    """FDC001: Qwen3-VL's wrapper before the fix had no clear method under either spelling,
    so the engine could not destroy its graphs through the common interface."""


class Glm4MoeLegacySpelling(Glm4MoeCausalLMBody):
    """FDC002 (warning only): FastDeploy's siblings spell it ``clear_grpah_opt_backend``.
    Must still conform: the kit's alias makes callers of either spelling reach this method."""

    def clear_grpah_opt_backend(self) -> None:
        self.model.clear_graph_opt_backend()


class Glm4MoeSplitSpellings(Glm4MoeCausalLMBody):
    """FDC003: a half-done rename kept both spellings with bodies of their own. The new name clears
    the graphs; the old one, which callers on older branches still use, was left clearing nothing,
    so whoever calls it skips the clearing the other does."""

    def clear_graph_opt_backend(self) -> None:
        self.model.clear_graph_opt_backend()

    def clear_grpah_opt_backend(self) -> None:
        self.model.graph_opt_config.use_cudagraph = self.model.graph_opt_config.use_cudagraph  # defect: no clear


# Runner mutants (framework-free) live in fd_reference_models.runner_mutants.


# --- model-level (backend) ------------------------------------------------------------------------


class LeakyClearGlm4MoeModel(LeakyClear, Glm4MoeModel):
    __doc__ = LeakyClear.__doc__


class ForgetfulClearGlm4MoeModel(ForgetfulClear, Glm4MoeModel):
    __doc__ = ForgetfulClear.__doc__


class BakedTokenIdsGlm4MoeModel(BakedTokenIds, Glm4MoeModel):
    __doc__ = BakedTokenIds.__doc__


class ClearRaisesBeforeCaptureGlm4MoeModel(Glm4MoeModel):
    """FDC303: FastDeploy's clear reads the backend attribute that exists only once graphs were set
    up, so clearing before capture (or with graphs off) raises AttributeError."""

    def clear_graph_opt_backend(self) -> None:
        self.runtime.events.mark(CLEAR_BEGIN_MARK, owner=self.graph_owner)
        self.graph_opt_backend.clear()  # defect: the attribute exists only after the first graph-on forward
        self.runtime.events.mark(CLEAR_END_MARK, owner=self.graph_owner)


class FlagGatedClearGlm4MoeModel(Glm4MoeModel):
    """FDC203: clear does nothing while the graph flag is off (``if not use_cudagraph: return``), so
    the graphs captured before the engine switched the flag off are stranded, alive and pinning
    their pools and weights."""

    def clear_graph_opt_backend(self) -> None:
        if not self.graph_opt_config.use_cudagraph:
            return  # defect: the flag says what to capture next, not what exists
        super().clear_graph_opt_backend()


def _glm4_wrapper_with(inner: type, name: str) -> type:
    """The good GLM4-MoE wrapper with one inner-model class swapped in."""
    doc = inner.__doc__
    return type(name, (Glm4MoeForCausalLM,), {"inner_cls": inner, "__doc__": doc, "__module__": __name__})


LeakyClearGlm4Moe = _glm4_wrapper_with(LeakyClearGlm4MoeModel, "LeakyClearGlm4Moe")
ForgetfulClearGlm4Moe = _glm4_wrapper_with(ForgetfulClearGlm4MoeModel, "ForgetfulClearGlm4Moe")
BakedTokenIdsGlm4Moe = _glm4_wrapper_with(BakedTokenIdsGlm4MoeModel, "BakedTokenIdsGlm4Moe")
FlagGatedClearGlm4Moe = _glm4_wrapper_with(FlagGatedClearGlm4MoeModel, "FlagGatedClearGlm4Moe")
ClearRaisesBeforeCaptureGlm4Moe = _glm4_wrapper_with(ClearRaisesBeforeCaptureGlm4MoeModel, "ClearRaisesBeforeCaptureGlm4Moe")
