"""Host emulation of CUDA-graph semantics: a test double for the kit's own CPU CI.

There are no CUDA graphs without a GPU, yet the kit's ordering and interface checks must still
run in CPU CI. :class:`HostGraph` reproduces the *contract* of a captured graph, not its speed:

* capture runs ``fn`` once; what it returns becomes the graph's static outputs;
* replay re-runs ``fn`` and copies the results INTO those static outputs (callers keep reading
  the same tensors, exactly as with a real graph);
* replay first raises :class:`StaleGraphError` when a captured buffer was released or now lives
  at another address, or a captured group was shut down -- on a GPU that replay would read freed
  memory (garbage, illegal address) or hang in a dead communicator.

Memory emulation (:class:`HostMemoryLedger`) counts the bytes of live tensors the host runtime
itself allocated, weakly tracked (the ledger keeps nothing alive) and by category: static outputs
of host graphs, parameter storage made by ``restore_parameter``, and ``clone()`` results (static
buffers, copies a model keeps). Sizes are read when asked, so a released weight counts 0. A static
output is graph memory only when the capture allocated it: one whose memory existed before the
capture began (a persistent logits arena the graph writes into, a static input returned as is) is
the engine's, as on a GPU, where it lives outside the graph's private pool. A model
that resets its graphs but keeps their output buffers shows up as graph memory held after clear;
a runner that keeps a copy of the weights every cycle shows up as growth. It does not see
intermediate tensors, tensors a model makes with framework calls of its own, or views taken from
a tracked tensor (a view keeps the storage but is a different tensor object). It never stands in
for a GPU measurement: ``Runtime.graphs_are_real`` is False and reports say "host-emulated".

Framework-neutral: the Paddle and PyTorch adapters hand in their tensor operations
(:class:`HostTensorOps`).
"""

from __future__ import annotations

import gc
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fd_conformance.runtime.base import (
    HOST_EMULATED,
    MemoryCategory,
    MemoryStats,
    RecordedGraph,
    Runtime,
    StaleGraphError,
)
from fd_conformance.runtime.referents import function_state

__all__ = [
    "HOST_EMULATED",
    "HostEmulation",
    "HostGraph",
    "HostMemoryLedger",
    "HostTensorOps",
    "copy_tree_into",
    "tensor_leaves",
    "tensors_reachable",
]


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


@dataclass(frozen=True)
class HostTensorOps:
    """The framework operations the host graph needs, supplied by each adapter."""

    is_tensor: Callable[[Any], bool]
    nbytes: Callable[[Any], int]  # bytes a tensor holds NOW: 0 once its storage is released
    copy_into: Callable[[Any, Any], None]
    # How to run the captured callable (torch: under no_grad, as a real capture would).
    run: Callable[[Callable[[], Any]], Any] = _call


@dataclass
class HostMemoryLedger:
    """Bytes held by live tensors the host runtime allocated, per category (see the module docstring)."""

    nbytes: Callable[[Any], int]  # read at query time: a released weight holds 0 bytes
    _live: dict[int, tuple[weakref.ref[Any], MemoryCategory]] = field(default_factory=dict)

    def track(self, tensor: Any, category: MemoryCategory = MemoryCategory.GRAPH_OUTPUTS) -> None:
        key = id(tensor)
        if key in self._live and self._live[key][0]() is tensor:
            return  # one tensor returned by two graphs, or a weight restored again, is one allocation

        def forget(_ref: weakref.ref[Any], key: int = key) -> None:
            entry = self._live.get(key)
            if entry is not None and entry[0] is _ref:
                del self._live[key]

        self._live[key] = (weakref.ref(tensor, forget), category)

    def _tensors(self, category: MemoryCategory | None) -> list[Any]:
        live = ((ref(), kind) for ref, kind in list(self._live.values()))
        return [tensor for tensor, kind in live if tensor is not None and category in (None, kind)]

    def allocated(self, category: MemoryCategory | None = None) -> int:
        """Bytes held now, in ``category`` or in all of them."""
        return sum(self.nbytes(tensor) for tensor in self._tensors(category))

    def live_count(self, category: MemoryCategory | None = None) -> int:
        return len(self._tensors(category))


def tensor_leaves(tree: Any, is_tensor: Callable[[Any], bool]) -> list[Any]:
    """Tensors inside nested tuples/lists/dicts, in a stable order."""
    if is_tensor(tree):
        return [tree]
    if isinstance(tree, Mapping):
        return [leaf for key in tree for leaf in tensor_leaves(tree[key], is_tensor)]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in tensor_leaves(item, is_tensor)]
    return []


# What the walk for pre-existing memory never enters: shared by everything (the runtime, modules)
# or code and classes, through which the whole process would be reachable.
_NOT_WALKED = (Runtime, type, types.ModuleType, types.CodeType, types.BuiltinFunctionType)
#: Objects one walk visits at most: a tiny model has a few thousand; this bounds a pathological one.
PRE_CAPTURE_WALK_LIMIT = 200_000


def _held_by(obj: Any, root: Any) -> Iterable[Any]:
    """What ``obj`` holds, for the walk. A function contributes its closure, defaults and
    attributes; its module globals only for the captured callable itself (a global arena it
    writes into), never for every function met on the way (everything is reachable from those).
    Of those globals, not the module's own dunders: under pytest ``__loader__`` is its rewriting
    hook, through which the config, the session and every collected item were walked (21,000
    objects a capture instead of 1,000)."""
    if isinstance(obj, types.FunctionType):
        held = function_state(obj)
        if any(obj is start for start in (root, getattr(root, "__func__", None))):
            held.extend(value for name, value in obj.__globals__.items() if not _is_dunder(name))
        return held
    return gc.get_referents(obj)


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def tensors_reachable(root: Any, is_tensor: Callable[[Any], bool], limit: int = PRE_CAPTURE_WALK_LIMIT) -> list[Any]:
    """Tensors reachable from ``root`` (a callable about to be captured) through its closure,
    bound object, globals and their attributes and containers: all the memory it could write into
    without allocating. Tensors are collected, not entered."""
    found: list[Any] = []
    seen = {id(root)}
    stack = [root]
    while stack and len(seen) < limit:
        obj = stack.pop()
        for ref in _held_by(obj, root):
            if ref is None or id(ref) in seen or isinstance(ref, _NOT_WALKED):
                continue
            seen.add(id(ref))
            if is_tensor(ref):
                found.append(ref)
            else:
                stack.append(ref)
    return found


def copy_tree_into(static: Any, fresh: Any, ops: HostTensorOps, where: str = "outputs") -> None:
    """Copy ``fresh`` into ``static`` leaf by leaf; structures must match as a graph's would."""
    if ops.is_tensor(static):
        if not ops.is_tensor(fresh):
            raise RuntimeError(f"replay produced {type(fresh).__name__} at {where}, capture produced a tensor")
        ops.copy_into(static, fresh)
    elif isinstance(static, Mapping):
        if not isinstance(fresh, Mapping) or set(fresh) != set(static):
            raise RuntimeError(f"replay output keys at {where} differ from the captured ones")
        for key in static:
            copy_tree_into(static[key], fresh[key], ops, f"{where}[{key!r}]")
    elif isinstance(static, (tuple, list)):
        if not isinstance(fresh, (tuple, list)) or len(fresh) != len(static):
            raise RuntimeError(f"replay output structure at {where} differs from the captured one")
        for index, (old, new) in enumerate(zip(static, fresh, strict=True)):  # lengths checked above
            copy_tree_into(old, new, ops, f"{where}[{index}]")
    # Non-tensor leaves (None, ints, shapes) are baked into a real graph too: nothing to copy.


class HostGraph(RecordedGraph):
    """CUDA-graph semantics on the host (a test double; see the module docstring)."""

    def __init__(self, runtime: Runtime, label: str, owner: str, ops: HostTensorOps, ledger: HostMemoryLedger) -> None:
        super().__init__(runtime, label, owner)
        self._ops = ops
        self._ledger = ledger
        self._fn: Callable[[], Any] | None = None
        self._outputs: Any = None
        self._captured_addresses: tuple[int, ...] = ()
        self._graph_memory: list[Any] = []

    @property
    def graph_memory(self) -> list[Any]:
        """The static outputs the capture allocated (what the ledger counts as this graph's
        memory); empty once reset. Outputs in memory that existed before the capture are not here."""
        return list(self._graph_memory)

    def _capture(self, fn: Callable[[], Any]) -> Any:
        # Addresses as baked into the graph; replay compares against them.
        self._captured_addresses = tuple(self.runtime.address(tensor) for _, tensor in self.captured_buffers)
        # Memory that exists before the capture begins, held (strongly, until the outputs are
        # judged) so that no address in it can be reused by an allocation inside the capture.
        existing = tensors_reachable(fn, self._ops.is_tensor) + [tensor for _, tensor in self.captured_buffers]
        outputs = self._ops.run(fn)
        spans = self._spans(existing)
        self._graph_memory = []
        for leaf in tensor_leaves(outputs, self._ops.is_tensor):
            if self._inside(leaf, spans):
                continue  # the graph writes into the engine's memory (an arena): not graph memory
            self._ledger.track(leaf, MemoryCategory.GRAPH_OUTPUTS)
            self._graph_memory.append(leaf)
        self._fn, self._outputs = fn, outputs
        return outputs

    def _spans(self, tensors: list[Any]) -> list[tuple[int, int]]:
        """[start, end) address ranges of live, non-empty tensors."""
        spans = []
        for tensor in tensors:
            start, size = self.runtime.address(tensor), self._ops.nbytes(tensor)
            if start and size:
                spans.append((start, start + size))
        return spans

    def _inside(self, leaf: Any, spans: list[tuple[int, int]]) -> bool:
        """True when ``leaf``'s memory overlaps memory that existed before the capture (a view of
        an arena, or the arena itself): an allocation made inside cannot overlap a live one."""
        start, size = self.runtime.address(leaf), self._ops.nbytes(leaf)
        return bool(start and size) and any(start < end and lo < start + size for lo, end in spans)

    def check_not_stale(self) -> None:
        """Raise StaleGraphError where a GPU replay would read freed/foreign memory or hang."""
        for (name, tensor), captured in zip(self.captured_buffers, self._captured_addresses, strict=True):  # recorded together
            shown = name or f"tensor@{captured:#x}"
            if self.runtime.is_released(tensor):
                raise StaleGraphError(f"graph {self.label!r} ({self.owner}) replayed after captured buffer {shown} was released")
            now = self.runtime.address(tensor)
            if now != captured:
                raise StaleGraphError(
                    f"graph {self.label!r} ({self.owner}) replayed after captured buffer {shown} moved "
                    f"from {captured:#x} to {now:#x}; recapture after reloading weights"
                )
        for group in self.captured_groups:
            if not group.alive:
                raise StaleGraphError(
                    f"graph {self.label!r} ({self.owner}) replayed after its group {group.name!r} was shut down"
                )

    def _replay(self) -> None:
        self.check_not_stale()
        assert self._fn is not None  # alive implies captured
        copy_tree_into(self._outputs, self._ops.run(self._fn), self._ops)

    def _reset(self) -> None:
        # Dropping our references is the whole "free": outputs the model still holds stay alive
        # and stay counted by the ledger -- that is the leak the emulation exists to show.
        self._fn, self._outputs, self._captured_addresses, self._graph_memory = None, None, (), []


class HostEmulation:
    """A runtime's CPU stand-in for the device: its host graphs and the ledger they share.

    Each adapter builds one from its tensor operations, so the CPU path of ``new_graph`` and
    ``memory_stats`` is the same code for every framework.
    """

    def __init__(self, ops: HostTensorOps) -> None:
        self.ops = ops
        self.ledger = HostMemoryLedger(ops.nbytes)

    def new_graph(self, runtime: Runtime, label: str, owner: str) -> HostGraph:
        return HostGraph(runtime, label, owner, self.ops, self.ledger)

    def memory_stats(self) -> MemoryStats:
        """Every tracked live byte as allocated == reserved; ``graphs`` is the static graph outputs'
        share, which the clear check judges (restored weights and clones are not graph memory)."""
        held = self.ledger.allocated()
        return MemoryStats(held, held, graphs=self.ledger.allocated(MemoryCategory.GRAPH_OUTPUTS))
