"""Known-bad RUNNERS: each reproduces one FastDeploy teardown/weight-cycle defect in ONE place.

Framework-free (they only reorder calls on the runtime-neutral :class:`ReferenceModelRunner`), so
they load on a paddle-only host and drive the Paddle reference models as well as the PyTorch ones.
Each docstring names the defect and the codes the suites must report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fd_reference_models.runner import ReferenceModelRunner, clear_graphs_of

# --- runner order (lifecycle) ---------------------------------------------------------------------


class DraftClearedAfterReleaseRunner(ReferenceModelRunner):
    """FDC201: the MTP hang -- draft graphs destroyed AFTER the weights they captured were released."""

    def clear_parameters(self) -> None:
        clear_graphs_of(self.main)  # unconditionally, as the good runner: the ORDER is this mutant's one defect
        self._release_weights()
        if self.draft is not None:
            clear_graphs_of(self.draft)  # defect: after release
        self._shutdown_group()


class DraftGuardedByMainFlagRunner(ReferenceModelRunner):
    """FDC201 + FDC202: the reviewer's follow-up -- draft clearing nested under the MAIN flag, so with
    use_cudagraph=False and draft_model_use_cudagraph=True the draft's graphs survive the weight
    release and the group shutdown (build it with exactly those flags). Keyed on the flag read at
    clear time, it also strands every graph when use_cudagraph is switched off after capture (FDC205)."""

    def _clear_graphs(self) -> None:
        if self.use_cudagraph:  # defect: the draft's own flag is never consulted
            if self.draft is not None:
                clear_graphs_of(self.draft)
            clear_graphs_of(self.main)


class ClearsByCurrentFlagsRunner(ReferenceModelRunner):
    """FDC205 (FDC206 where the case declares run-time flag switches): FastDeploy's runner shape --
    each model's graphs are cleared only while its flag is on NOW, so the graphs captured before a
    flag was switched off outlive clear_parameters()."""

    def _clear_graphs(self) -> None:
        if self.draft is not None and self.draft_model_use_cudagraph:  # defect: the flag now, not the graphs
            clear_graphs_of(self.draft)
        if self.use_cudagraph:
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


class ForgetsDraftRunner(ReferenceModelRunner):
    """FDC306: a runner that never hears of the draft (the README tutorial's broken variant), so it
    never turns the draft's graphs on or captures them: build it with draft_model_use_cudagraph=False
    (the flag only this runner could have set). Every draft step runs eagerly, and each check that
    needs a draft graph after capture_model() finds none. (With the draft's graphs on instead, its
    lazily captured graphs would also outlive clear_parameters(): FDC201/FDC203, from the cycle
    where its warm-ups end -- a verdict that would depend on --fd-cycles.)"""

    def __init__(self, runtime: Any, main: Any, draft: Any | None = None) -> None:
        super().__init__(runtime, main)  # defect: the draft is dropped
