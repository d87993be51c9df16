"""Known-bad variants of the reference models: each reproduces one FastDeploy defect in ONE place.

Every mutant is a small subclass of a good class; its docstring names the defect and the finding
codes the suites must report (the case in :mod:`fd_reference_models.cases` carries them as
``expected_findings``). Runner mutants are runtime-neutral; model mutants are PyTorch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fd_conformance.runtime.base import CLEAR_BEGIN_MARK, CLEAR_END_MARK
from fd_reference_models.graph_opt import graph_opt_backend
from fd_reference_models.runner import ReferenceModelRunner, clear_graphs_of
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


# --- runner order (lifecycle) ---------------------------------------------------------------------


class DraftClearedAfterReleaseRunner(ReferenceModelRunner):
    """FDC201: the MTP hang -- draft graphs destroyed AFTER the weights they captured were released."""

    def clear_parameters(self) -> None:
        if self.use_cudagraph:
            clear_graphs_of(self.main)
        self._release_weights()
        if self.draft is not None and self.draft_model_use_cudagraph:
            clear_graphs_of(self.draft)  # defect: after release
        self._shutdown_group()


class DraftGuardedByMainFlagRunner(ReferenceModelRunner):
    """FDC201 + FDC202: the reviewer's follow-up -- draft clearing nested under the MAIN flag, so with
    use_cudagraph=False and draft_model_use_cudagraph=True the draft's graphs survive the weight
    release and the group shutdown (build it with exactly those flags)."""

    def _clear_graphs(self) -> None:
        if self.use_cudagraph:  # defect: the draft's own flag is never consulted
            if self.draft is not None:
                clear_graphs_of(self.draft)
            clear_graphs_of(self.main)


class GroupShutdownFirstRunner(ReferenceModelRunner):
    """FDC202: the comm group shut down while graphs that captured its collectives are alive
    (on NCCL the destroy waits on those graphs: the hang; gloo on CPU just records the order)."""

    def clear_parameters(self) -> None:
        self._shutdown_group()  # defect: before the graphs are cleared
        self._clear_graphs()
        self._release_weights()


class UpdateWithoutRecaptureRunner(ReferenceModelRunner):
    """FDC204 + FDC304: weights shared into new buffers once more AFTER capture_model(), and no
    recapture -- the graphs keep replaying the previous buffers (StaleGraphError on host graphs,
    freed memory on a GPU)."""

    def update_parameters(self, weights: Mapping[str, Any]) -> None:
        super().update_parameters(weights)
        self._load_weights(weights)  # defect: graphs captured the buffers this replaces


class RetainOldWeightsRunner(ReferenceModelRunner):
    """FDC305: each release keeps a 'rollback' copy of every weight that is never dropped, so device
    memory grows by one model per weight cycle (a GPU's allocator shows it; so does the host ledger,
    which tracks every tensor ``runtime.clone()`` makes)."""

    def _release_weights(self) -> None:
        kept: list[Any] = self.__dict__.setdefault("_rollback", [])
        kept.append([self.runtime.clone(param) for _, param in self.named_parameters()])  # defect
        super()._release_weights()


# --- model-level (backend) ------------------------------------------------------------------------


class LeakyClearGlm4MoeModel(Glm4MoeModel):
    """FDC302: clear resets the graphs but keeps their output buffers alive (graph pool pinned)."""

    def clear_graph_opt_backend(self) -> None:
        self.runtime.events.mark(CLEAR_BEGIN_MARK, owner=self.graph_owner)
        backend = graph_opt_backend(self)
        if backend is not None:
            # defect: a reference to every output buffer survives the clear
            self.__dict__["_kept_outputs"] = [e.output_buffer for e in backend.entries.values() if e.output_buffer is not None]
            backend.clear()
        self.runtime.events.mark(CLEAR_END_MARK, owner=self.graph_owner)


class ForgetfulClearGlm4MoeModel(Glm4MoeModel):
    """FDC203 (+ FDC201, FDC202 as consequences): clear skips the smallest capture size, whose graph
    stays alive through the weight release and the group shutdown."""

    def clear_graph_opt_backend(self) -> None:
        self.runtime.events.mark(CLEAR_BEGIN_MARK, owner=self.graph_owner)
        backend = graph_opt_backend(self)
        if backend is not None:
            smallest = min(backend.entries)
            for size, entry in list(backend.entries.items()):
                if size == smallest:
                    continue  # defect: off-by-one over the capture sizes
                if entry.graph is not None:
                    entry.graph.reset()
                entry.graph, entry.output_buffer, entry.static_inputs, entry.warmups_done = None, None, None, 0
            self.runtime.empty_cache()
        self.runtime.events.mark(CLEAR_END_MARK, owner=self.graph_owner)


class BakedTokenIdsGlm4MoeModel(Glm4MoeModel):
    """FDC301 (+ FDC304): capture-unsafe forward -- the token ids are snapshotted when the graph is
    built (a host-side copy taken at capture), so every replay runs the capture-time tokens instead
    of the live input buffer. (Positions would not show it: rope is translation invariant.)"""

    def make_graph_fn(self, static_inputs: dict[str, Any]) -> Callable[[], Any]:
        frozen = self.runtime.clone(static_inputs["input_ids"])  # defect: a capture-time value
        # Kept alive on purpose: a CUDA graph does not own the tensors it reads, and a freed copy
        # would be a use-after-free (garbage ids, a device-side assert) rather than this defect.
        self.__dict__.setdefault("_baked_inputs", []).append(frozen)
        return lambda: type(self).eager_forward(self, input_ids=frozen, positions=static_inputs["positions"])


class ClearRaisesBeforeCaptureGlm4MoeModel(Glm4MoeModel):
    """FDC303: FastDeploy's clear reads the backend attribute that exists only once graphs were set
    up, so clearing before capture (or with graphs off) raises AttributeError."""

    def clear_graph_opt_backend(self) -> None:
        self.runtime.events.mark(CLEAR_BEGIN_MARK, owner=self.graph_owner)
        self.graph_opt_backend.clear()  # defect: the attribute exists only after the first graph-on forward
        self.runtime.events.mark(CLEAR_END_MARK, owner=self.graph_owner)


def _glm4_wrapper_with(inner: type, name: str) -> type:
    """The good GLM4-MoE wrapper with one inner-model class swapped in."""
    doc = inner.__doc__
    return type(name, (Glm4MoeForCausalLM,), {"inner_cls": inner, "__doc__": doc, "__module__": __name__})


LeakyClearGlm4Moe = _glm4_wrapper_with(LeakyClearGlm4MoeModel, "LeakyClearGlm4Moe")
ForgetfulClearGlm4Moe = _glm4_wrapper_with(ForgetfulClearGlm4MoeModel, "ForgetfulClearGlm4Moe")
BakedTokenIdsGlm4Moe = _glm4_wrapper_with(BakedTokenIdsGlm4MoeModel, "BakedTokenIdsGlm4Moe")
ClearRaisesBeforeCaptureGlm4Moe = _glm4_wrapper_with(ClearRaisesBeforeCaptureGlm4MoeModel, "ClearRaisesBeforeCaptureGlm4Moe")
