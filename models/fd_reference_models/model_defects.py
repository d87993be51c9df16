"""The model-level defects as framework-free mixins, so the PyTorch mutants
(:mod:`fd_reference_models.mutants`) and the Paddle ones
(:mod:`fd_reference_models.paddle_models.mutants`) carry the very same defect.

Each mixin goes first in the bases of a decorated inner model (``@support_graph_optimization``)
and overrides one method; everything it touches (``runtime``, the graph-opt backend's entries,
``eager_forward``) is the kit's, never a framework's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fd_conformance.runtime.base import CLEAR_BEGIN_MARK, CLEAR_END_MARK
from fd_reference_models.graph_opt import graph_opt_backend


class _MarkedClear:
    """Clear as the good decorator does it (marks around, backend looked up), with the backend's
    part left to the defect: :meth:`_clear_backend`."""

    runtime: Any
    graph_owner: str

    def clear_graph_opt_backend(self) -> None:
        self.runtime.events.mark(CLEAR_BEGIN_MARK, owner=self.graph_owner)
        backend = graph_opt_backend(self)
        if backend is not None:
            self._clear_backend(backend)
        self.runtime.events.mark(CLEAR_END_MARK, owner=self.graph_owner)

    def _clear_backend(self, backend: Any) -> None:
        raise NotImplementedError


class LeakyClear(_MarkedClear):
    """FDC302: clear resets the graphs but keeps their output buffers alive (graph pool pinned)."""

    def _clear_backend(self, backend: Any) -> None:
        # defect: a reference to every output buffer survives the clear
        self.__dict__["_kept_outputs"] = [e.output_buffer for e in backend.entries.values() if e.output_buffer is not None]
        backend.clear()


class ForgetfulClear(_MarkedClear):
    """FDC203 (+ FDC201, FDC202 as consequences): clear skips the smallest capture size, whose graph
    stays alive through the weight release and the group shutdown."""

    def _clear_backend(self, backend: Any) -> None:
        smallest = min(backend.entries)
        for size, entry in list(backend.entries.items()):
            if size == smallest:
                continue  # defect: off-by-one over the capture sizes
            if entry.graph is not None:
                entry.graph.reset()
            entry.graph, entry.output_buffer, entry.static_inputs, entry.warmups_done = None, None, None, 0
        self.runtime.empty_cache()


class BakedTokenIds:
    """FDC301 (+ FDC304): capture-unsafe forward -- the token ids are snapshotted when the graph is
    built (a host-side copy taken at capture), so every replay runs the capture-time tokens instead
    of the live input buffer. (Positions would not show it: rope is translation invariant.)"""

    runtime: Any

    def make_graph_fn(self, static_inputs: dict[str, Any]) -> Callable[[], Any]:
        frozen = self.runtime.clone(static_inputs["input_ids"])  # defect: a capture-time value
        # Kept alive on purpose: a CUDA graph does not own the tensors it reads, and a freed copy
        # would be a use-after-free (garbage ids, a device-side assert) rather than this defect.
        self.__dict__.setdefault("_baked_inputs", []).append(frozen)
        live = {name: value for name, value in static_inputs.items() if name != "input_ids"}
        return lambda: type(self).eager_forward(self, input_ids=frozen, **live)  # type: ignore[attr-defined]
