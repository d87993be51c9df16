"""The runtime adapter interface: the only place the kit meets a deep-learning framework.

Everything above ``fd_conformance/runtime/`` talks to a :class:`Runtime`; the Paddle and
PyTorch adapters implement it, and neither framework is imported until an adapter is built.
The adapter *emits* :class:`RuntimeEvent`s from its real calls (graph captured/replayed/
destroyed, parameter released/restored, group shut down) so the lifecycle recorder can check
teardown order against what actually happened, not against a mock.

This module is the :class:`Runtime` itself; what it is made of has a module each, re-exported
here (the import path models, adapters and docs use): :mod:`.events` (the events and their bus),
:mod:`.graph` (a graph, the stale-graph error), :mod:`.group` (a communication group),
:mod:`.observer` (native mode's graph observer), :mod:`.memory` (allocator figures, the host
ledger, a reload's new address) and :mod:`.recorded_graph` (the event-emitting graph adapters
build on).
"""

from __future__ import annotations

import abc
import weakref
from typing import Any

from fd_conformance.errors import UsageError
from fd_conformance.runtime.events import (
    CLEAR_BEGIN_MARK,
    CLEAR_END_MARK,
    RUNTIME_HOOKS,
    BufferRef,
    EventBus,
    EventKind,
    EventListener,
    RuntimeEvent,
    announce_runtime,
)
from fd_conformance.runtime.graph import Graph, StaleGraphError
from fd_conformance.runtime.group import Group
from fd_conformance.runtime.memory import (
    AllocationLedger,
    MemoryCategory,
    MemoryStats,
    ReleasedParam,
    StorageT,
    allocate_avoiding,
)
from fd_conformance.runtime.observer import OBSERVED_GRAPH_TYPES, GraphObserver
from fd_conformance.runtime.recorded_graph import BufferSpec, RecordedGraph, named_buffers

__all__ = [
    "CLEAR_BEGIN_MARK",
    "CLEAR_END_MARK",
    "HOST_EMULATED",
    "OBSERVED_GRAPH_TYPES",
    "RUNTIME_DEVICES",
    "RUNTIME_HOOKS",
    "AllocationLedger",
    "BufferRef",
    "BufferSpec",
    "EventBus",
    "EventKind",
    "EventListener",
    "Graph",
    "GraphObserver",
    "Group",
    "MemoryCategory",
    "MemoryStats",
    "RecordedGraph",
    "ReleasedParam",
    "Runtime",
    "RuntimeEvent",
    "StaleGraphError",
    "StorageT",
    "allocate_avoiding",
    "announce_runtime",
    "named_buffers",
]

HOST_EMULATED = "host-emulated"  # the label of results obtained without real graphs
#: What get_runtime() and every adapter's create() accept ("auto": CUDA when the framework sees a GPU).
RUNTIME_DEVICES = ("auto", "cuda", "cpu")


class Runtime(abc.ABC):
    """A framework (paddle, torch) on a device (cuda, or cpu with host-emulated graphs)."""

    name: str  # "torch" | "paddle"
    device: str  # "cuda" | "cpu"
    events: EventBus

    def __init__(self, device: str) -> None:
        self.device = device
        self.events = EventBus()
        self._released: dict[int, ReleasedParam] = {}  # id(param) -> where it was when released
        # Host emulation's ledger (None on a device, whose allocator counts every byte by itself):
        # the runtime's own allocations (restored weights, clones) are recorded here so that a
        # weight copy kept across cycles is visible as growth on CPU too.
        self._ledger: AllocationLedger | None = None
        self._groups: list[Group] = []  # made by new_group(), not yet destroyed
        self._live_graphs: weakref.WeakSet[RecordedGraph] = weakref.WeakSet()  # captured, not yet reset

    # --- framework / device -------------------------------------------------------
    @property
    @abc.abstractmethod
    def version(self) -> str: ...

    @property
    def graphs_are_real(self) -> bool:
        """False when graphs are host-emulated: such results never stand in for a GPU's."""
        return self.device == "cuda"

    @property
    def graph_mode(self) -> str:
        """What reports print next to every graph result: "cuda-graph" or "host-emulated"."""
        return "cuda-graph" if self.graphs_are_real else HOST_EMULATED

    @abc.abstractmethod
    def device_count(self) -> int: ...

    @abc.abstractmethod
    def device_name(self) -> str: ...

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def memory_stats(self) -> MemoryStats: ...

    @abc.abstractmethod
    def empty_cache(self) -> None: ...

    def _account(self, tensor: StorageT, category: MemoryCategory) -> StorageT:
        """Record an allocation the runtime made with the host ledger, if any; returns ``tensor``."""
        if self._ledger is not None:
            self._ledger.track(tensor, category)
        return tensor

    # --- tensors ------------------------------------------------------------------
    def buffer_ref(self, tensor: Any, name: str = "") -> BufferRef:
        """How an event names a tensor: object identity plus its address right now."""
        return BufferRef(id(tensor), self.address(tensor), name)

    @abc.abstractmethod
    def address(self, tensor: Any) -> int:
        """Data pointer of a tensor (0 when its storage is released)."""

    @abc.abstractmethod
    def is_released(self, tensor: Any) -> bool: ...

    @abc.abstractmethod
    def to_numpy(self, tensor: Any) -> Any: ...

    @abc.abstractmethod
    def clone(self, tensor: Any) -> Any:
        """A new tensor with its own storage (used for persistent graph input/output buffers)."""

    @abc.abstractmethod
    def copy_into(self, dst: Any, src: Any) -> None:
        """In-place copy (graph replay reads static buffers, so inputs are copied into them)."""

    # --- graphs -------------------------------------------------------------------
    @abc.abstractmethod
    def new_graph(self, label: str, owner: str = "main") -> Graph: ...

    # --- native mode: observe the framework's own graphs -------------------------------
    def native_graphs_unavailable(self) -> str | None:
        """Why native mode cannot run here (a skip reason), or None when it can."""
        return f"native graph mode is torch-only for now: no {self.name} GPU build was reachable to prove it on"

    def observes_natively(self) -> bool:
        """A native observer of this runtime is installed now: the framework's graph class reports
        every graph, the kit's own included, so the kit's graphs must not report themselves too."""
        return False

    def observe_native_graphs(self) -> GraphObserver:
        """Start observing the framework's own graphs (see :class:`GraphObserver`)."""
        raise UsageError(
            f"native graph mode is not available for {self.name} on {self.device}: {self.native_graphs_unavailable()}",
            "hand the kit's graphs through Subject.graphs() (ModelCase graphs='kit'), or certify on torch with a GPU",
        )

    # --- weights, the way RL weight managers do it ----------------------------------
    # The protocol (remember the address, free, emit; restore elsewhere, verify, emit) is written
    # once here so both frameworks emit identical events; adapters supply the storage operations.
    def release_parameter(self, param: Any, name: str = "") -> None:
        """Free the parameter's storage in place (the Python object stays); twice is a no-op,
        as engines release defensively."""
        if self.is_released(param):
            return
        ref = self.buffer_ref(param, name)
        self._released[id(param)] = ReleasedParam(ref.address, self._placement(param))
        self._free_storage(param)
        self.events.emit(EventKind.PARAM_RELEASED, name, id(param), buffers=(ref,))

    def restore_parameter(self, param: Any, value: Any, name: str = "") -> None:
        """Point the parameter at NEW storage holding ``value`` (the address changes).

        Refuses a restore that leaves the weight at its old address: a weight manager doing
        that would hide stale graphs instead of exposing them.
        """
        # get, not pop: a refused restore (wrong shape) must leave the release record for the retry
        released = self._released.get(id(param))
        if released is None:  # restored without our release (or never released): avoid where it is now
            released = ReleasedParam(self.address(param), self._placement(param))
        fresh = allocate_avoiding(
            lambda: self._new_storage(value, param, released.placement, name), self.address, released.address, self._poison
        )
        self._install_storage(param, fresh)
        self._released.pop(id(param), None)
        address = self.address(param)
        if self.is_released(param) or (address != 0 and address == released.address):
            raise RuntimeError(f"restore {name or 'parameter'}: address did not change ({address:#x})")
        # The parameter object now owns the new storage (``fresh`` itself is dropped), so it is
        # the parameter that is tracked; its bytes read 0 again once it is released.
        self._account(param, MemoryCategory.WEIGHTS)
        self.events.emit(EventKind.PARAM_RESTORED, name, id(param), buffers=(self.buffer_ref(param, name),))

    @abc.abstractmethod
    def _placement(self, param: Any) -> Any:
        """The device handle new storage for ``param`` must be made on (read before release)."""

    @abc.abstractmethod
    def _free_storage(self, param: Any) -> None:
        """Free ``param``'s bytes in place, the way the framework's RL weight managers do."""

    @abc.abstractmethod
    def _new_storage(self, value: Any, like: Any, placement: Any, name: str) -> Any:
        """A new tensor shaped and typed like ``like`` on ``placement`` holding a COPY of ``value``
        (never ``value`` itself: the caller may keep using it); rejects a shape mismatch."""

    def _poison(self, tensor: Any) -> None:  # noqa: B027 - optional: an adapter that can poison overrides it
        """Overwrite a buffer about to be freed so stale reads of it are visibly wrong (NaN)."""

    @abc.abstractmethod
    def _install_storage(self, param: Any, fresh: Any) -> None:
        """Make the same ``param`` object use ``fresh``'s storage."""

    # --- communication ------------------------------------------------------------
    group_type: type = Group  # adapters narrow it to their own group class (a plain type: Group is abstract)

    @abc.abstractmethod
    def new_group(self, name: str = "tp") -> Group: ...

    def shutdown_group(self, group: Group) -> None:
        """Shut ``group`` down; twice is a no-op, as engines call it defensively.

        GROUP_SHUTDOWN goes out BEFORE the framework's destroy call, on every framework: NCCL's
        destroy waits on graphs that captured the communicator (the MTP hang), and the record must
        show the shutdown even when that call never returns.
        """
        if not isinstance(group, self.group_type):
            raise UsageError(
                f"shutdown_group got {type(group).__name__}, not a {self.group_type.__name__}",
                "pass a group made by this runtime's new_group()",
            )
        if not group.alive:
            return
        self.events.emit(EventKind.GROUP_SHUTDOWN, group.name, id(group))
        group._alive = False  # no collective may start on it from here on, even if destroy hangs
        if group in self._groups:
            self._groups.remove(group)
        self._destroy_group(group)

    @abc.abstractmethod
    def _destroy_group(self, group: Any) -> None:
        """The framework's calls that tear ``group`` (already marked dead) down."""

    def release_groups(self) -> None:
        """After a check: tear down the groups the model left alive, without events (the verdict
        is in). Each is a real communicator, on a GPU a NCCL one holding device memory outside the
        caching allocator, and a worker runs hundreds of checks: on an H100 the leftovers took each
        of four workers to 10-26 GiB, the card filled and later checks crashed (FDC502); torn down,
        a worker peaked at 1.7 GiB.
        Not while any graph is alive: destroying a communicator a live graph captured waits on
        that graph (the MTP hang), and teardown must not hang."""
        if any(graph.alive for graph in self._live_graphs) or self.native_graphs_alive():
            return
        for group in [group for group in self._groups if group.alive]:
            group._alive = False
            self._groups.remove(group)
            self._release_group(group)

    def _release_group(self, group: Any) -> None:
        """Tear down a group a check left alive (an adapter may keep what the next check reuses)."""
        self._destroy_group(group)

    def native_graphs_alive(self) -> bool:
        """A framework graph observed in native mode is alive now (adapters with native mode say)."""
        return False
