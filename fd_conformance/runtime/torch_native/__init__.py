"""Native mode for torch: the model's own ``torch.cuda.CUDAGraph``s, turned into the kit's events.

A model written without the kit captures with ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` /
``torch.cuda.make_graphed_callables`` (``torch.compile``'s cudagraph trees use the same class) and
swaps weights its own way (``param.data = new``, ``untyped_storage().resize_(0)``,
``load_state_dict``, ``del``, ``.to("meta")``). It never calls the runtime, so while a
:class:`TorchGraphObserver` is installed the events the lifecycle rules read are derived:

* graph events, from the graph class's own methods and from graphs dying (:mod:`.observer`,
  :mod:`.deaths`: when a death is reported, so a verdict never depends on the collector);
* what a graph captured: the parameters and registered buffers of the modules called on the
  capturing thread between ``capture_begin`` and ``capture_end``, each as a slot whose storage is
  compared at every observation point: released, restored (:mod:`.storage`); ``load_state_dict``
  into the same storage changes nothing a graph reads, and emits nothing;
* collectives: the process groups of the ``torch.distributed`` collectives called while a capture
  is open are the groups the graph captured; ending one shuts it down (FDC202 when a graph that
  captured it is still alive; :mod:`fd_conformance.runtime.torch_collectives`).

What it cannot see: a release and restore that both happen between two observation points (the
address it compares may even be the same one); tensors a capture reads that are not parameters or
buffers of a module called through ``module(...)`` while capturing (functional code over raw
tensors, a top-level ``model.forward(...)`` call's own direct parameters; ``torch.compile``'s
graphs are seen, but compiled code calls no module, so not what they captured); collectives
outside ``torch.distributed``'s functions; which of a release and the drop of a graph held by a
reference cycle came first, with no observation point between them (:mod:`.deaths`).
"""

from fd_conformance.runtime.torch_native.observer import (
    TORCH_CUDA_GRAPH,
    TorchGraphObserver,
    live_native_graphs,
    observing,
)
from fd_conformance.runtime.torch_native.records import NativeGraph
from fd_conformance.runtime.torch_native.storage import storage_address

__all__ = ["TORCH_CUDA_GRAPH", "NativeGraph", "TorchGraphObserver", "live_native_graphs", "observing", "storage_address"]
