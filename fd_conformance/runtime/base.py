"""The runtime adapter interface: the only place the kit meets a deep-learning framework.

Everything above ``fd_conformance/runtime/`` talks to a :class:`Runtime`; the Paddle and
PyTorch adapters implement it, and neither framework is imported until an adapter is built.
The adapter *emits* :class:`RuntimeEvent`s from its real calls (graph captured/replayed/
destroyed, parameter released/restored, group shut down) so the lifecycle recorder can check
teardown order against what actually happened, not against a mock.
"""

from __future__ import annotations

import abc
import enum
import itertools
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from fd_conformance.errors import UsageError

HOST_EMULATED = "host-emulated"  # the label of results obtained without real graphs
#: What get_runtime() and every adapter's create() accept ("auto": CUDA when the framework sees a GPU).
RUNTIME_DEVICES = ("auto", "cuda", "cpu")


class EventKind(str, enum.Enum):
    GRAPH_CAPTURED = "graph_captured"
    GRAPH_REPLAYED = "graph_replayed"
    GRAPH_DESTROYED = "graph_destroyed"
    PARAM_RELEASED = "param_released"
    PARAM_RESTORED = "param_restored"
    GROUP_CREATED = "group_created"
    GROUP_SHUTDOWN = "group_shutdown"
    MARK = "mark"  # a named point emitted by a model or runner (e.g. "clear_graph_opt_backend:end")


@dataclass(frozen=True)
class BufferRef:
    """A tensor as a graph saw it: which object, at which device address."""

    obj_id: int  # id() of the tensor/parameter object; stable across release/restore
    address: int  # data pointer at the time of the event; changes when restored into new storage
    name: str = ""


@dataclass(frozen=True)
class RuntimeEvent:
    kind: EventKind
    seq: int
    subject: str  # human name: graph label, parameter name, group name, mark text
    subject_id: int  # id() of the graph/parameter/group object (0 for marks)
    owner: str = ""  # "main", "draft", ... as given by whoever created the graph
    buffers: tuple[BufferRef, ...] = ()  # GRAPH_CAPTURED: what the graph depends on; PARAM_*: the param
    groups: tuple[int, ...] = ()  # GRAPH_CAPTURED: id() of groups whose collectives were captured


EventListener = Callable[[RuntimeEvent], None]


class MemoryCategory(str, enum.Enum):
    """What a host-tracked allocation is for. A device allocator cannot tell its bytes apart; the
    host ledger can, so the clear check judges graph memory alone while the weight-cycle check
    sees everything (a retained weight copy is growth, not a clear leak)."""

    GRAPH_OUTPUTS = "graph_outputs"  # static outputs of captured graphs: what clear must give back
    WEIGHTS = "weights"  # parameter storage the runtime allocated on restore
    BUFFERS = "buffers"  # tensors the runtime cloned (static buffers, copies a model keeps)


@dataclass(frozen=True)
class MemoryStats:
    """Device allocator figures in bytes (host emulation reports the bytes it holds)."""

    allocated: int
    reserved: int
    # Bytes attributable to graphs (their live static outputs), where the runtime can attribute
    # them: host emulation only. None on a device, whose allocator pools everything together.
    graphs: int | None = None


class AllocationLedger(Protocol):
    """Where a host-emulating runtime records the tensors it allocates (weakly: it keeps nothing alive)."""

    def track(self, tensor: Any, category: MemoryCategory) -> None: ...


class StaleGraphError(RuntimeError):
    """A graph was replayed after a buffer it captured was released or moved, or after a
    group whose collectives it captured was shut down.

    Only the host emulation raises this; on a real GPU the same replay silently reads
    freed or foreign memory (garbage outputs or an illegal-address fault) or hangs.
    """


class Group(abc.ABC):
    """A communication group (gloo on CPU, NCCL on GPU).

    The alive flag and the refusal to communicate after shutdown live here once, so a test that
    uses a shut-down group fails the same way on every framework; adapters implement
    ``_all_reduce`` and set ``_alive = False`` when they shut the group down.
    """

    name: str
    _alive: bool = True

    def all_reduce(self, tensor: Any) -> None:
        """In-place sum across the group; capturable inside a graph on NCCL."""
        if not self._alive:
            raise RuntimeError(f"all_reduce on group {self.name!r} after it was shut down; create a new one")
        self._all_reduce(tensor)

    @abc.abstractmethod
    def _all_reduce(self, tensor: Any) -> None:
        """The framework's collective on a live group."""

    @property
    def alive(self) -> bool:
        return self._alive


class Graph(abc.ABC):
    """One captured graph: capture once on static buffers, replay many times, then destroy."""

    label: str
    owner: str

    @abc.abstractmethod
    def capture(
        self,
        fn: Callable[[], Any],
        *,
        buffers: Iterable[Any] | Mapping[str, Any] = (),
        groups: Sequence[Group] = (),
    ) -> Any:
        """Capture ``fn()``; returns its (static) outputs. ``buffers`` are the tensors the
        graph depends on (parameters, static inputs), optionally as name -> tensor;
        ``groups`` whose collectives it runs."""

    @abc.abstractmethod
    def replay(self) -> None: ...

    @abc.abstractmethod
    def reset(self) -> None:
        """Destroy the graph and return its memory; idempotent."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...

    @property
    def identity(self) -> int:
        """id() of the object that IS the graph: the one its events name and the ownership walk
        finds (a native mode stand-in answers for the framework's graph object)."""
        return id(self)


@dataclass
class EventBus:
    """Listeners registered by the lifecycle recorder; adapters call :meth:`emit`."""

    listeners: list[EventListener] = field(default_factory=list)
    _seq: Iterable[int] = field(default_factory=itertools.count)

    def subscribe(self, listener: EventListener) -> Callable[[], None]:
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def emit(self, kind: EventKind, subject: str, subject_id: int = 0, **fields: Any) -> RuntimeEvent:
        event = RuntimeEvent(kind, next(self._seq), subject, subject_id, **fields)  # type: ignore[call-overload]
        for listener in list(self.listeners):
            listener(event)
        return event

    def mark(self, text: str, owner: str = "") -> RuntimeEvent:
        """A named point in the model's own code (e.g. ``"clear_graph_opt_backend:end"``); the
        recorder's mark-based rules key on these texts, so models emit them around clear."""
        return self.emit(EventKind.MARK, text, 0, owner=owner)


# Called with each new runtime's event bus (by get_runtime and the TP rank context). The layers
# above subscribe here -- the isolation worker streams every event to its parent -- so this
# layer imports nothing above it.
RUNTIME_HOOKS: list[Callable[[EventBus], object]] = []


def announce_runtime(bus: EventBus) -> None:
    """Hand a new runtime's bus to every subscriber in :data:`RUNTIME_HOOKS`."""
    for hook in RUNTIME_HOOKS:
        hook(bus)


# Framework graph classes a GraphObserver is watching now: the ownership walk (suite/_support)
# counts their instances as graphs, as it counts the kit's own Graph objects.
OBSERVED_GRAPH_TYPES: list[type] = []


class GraphObserver(abc.ABC):
    """Native mode: the runtime OBSERVES the graphs a model makes with its framework's own API.

    A model written without the kit (``torch.cuda.CUDAGraph`` directly, weights swapped with
    ``param.data = new``) never calls ``new_graph`` or ``release_parameter``; while an observer is
    installed, the adapter derives the same :class:`RuntimeEvent`s from the framework's graph
    calls and from the storage of the parameters those graphs captured, so the lifecycle rules
    and the suites read them unchanged. Installed for one check (a context manager).
    """

    @property
    @abc.abstractmethod
    def graph_types(self) -> tuple[type, ...]:
        """The framework graph classes observed (their instances are graphs to the ownership walk)."""

    @abc.abstractmethod
    def graphs(self) -> list[Graph]:
        """A :class:`Graph` stand-in for every framework graph captured while observing, in capture
        order, alive or not (``reset()`` on one resets the framework's graph)."""

    @abc.abstractmethod
    def set_roots(self, roots: Sequence[tuple[str, Any]]) -> None:
        """The models under test as (role, model): they name captured parameters and graph owners."""

    @abc.abstractmethod
    def observe(self, point: str) -> None:
        """An observation point (a lifecycle call's entry or exit): emit every storage change seen
        since the last one, then a MARK named ``point``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop observing and restore the framework's classes; idempotent."""

    def __enter__(self) -> GraphObserver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


CLEAR_BEGIN_MARK = "clear_graph_opt_backend:begin"
CLEAR_END_MARK = "clear_graph_opt_backend:end"  # at this mark no graph of the mark's owner may be alive


@dataclass(frozen=True)
class ReleasedParam:
    """What a release remembers: once cleared, a tensor no longer knows its old address (nor, in
    Paddle, its place), and restore needs both to land the new weight elsewhere on that device."""

    address: int
    placement: Any  # the framework's device handle (torch.device, paddle Place)


StorageT = TypeVar("StorageT")


def allocate_avoiding(
    make: Callable[[], StorageT],
    address_of: Callable[[StorageT], int],
    avoid: int | None,
    poison: Callable[[StorageT], None] = lambda _: None,
) -> StorageT:
    """``make()`` a new buffer whose address is not ``avoid``.

    Real reloads land at new addresses (that is what makes stale graphs wrong); an allocator may
    hand the just-freed block straight back, which would hide a stale graph by luck. The unlucky
    block is kept alive while a second one is made, so the move is deterministic, and poisoned
    before it is dropped: it already holds the NEW values, and a stale graph still reading that
    address would otherwise compute the right answer by accident (seen on the H200).
    """
    fresh = make()
    if avoid is not None and address_of(fresh) == avoid:
        unlucky = fresh
        fresh = make()
        poison(unlucky)
        del unlucky
    return fresh


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


BufferSpec = Iterable[Any] | Mapping[str, Any]  # tensors, or name -> tensor for readable findings


def named_buffers(buffers: BufferSpec) -> tuple[tuple[str, Any], ...]:
    """Normalise ``capture(buffers=...)``: a mapping keeps its names, a plain iterable gets none."""
    if isinstance(buffers, Mapping):
        return tuple((str(name), tensor) for name, tensor in buffers.items())
    return tuple(("", tensor) for tensor in buffers)


def _emit_collected(events: EventBus, label: str, owner: str, graph_id: int) -> None:
    """Finalizer body: kept free of any reference to the graph so the graph can be collected."""
    events.emit(EventKind.GRAPH_DESTROYED, label, graph_id, owner=owner)


class RecordedGraph(Graph):
    """A :class:`Graph` whose capture/replay/reset emit lifecycle events; adapters subclass it.

    The event logic lives here once so the CUDA graphs of both frameworks and the host emulation
    report identically. Subclasses implement ``_capture``/``_replay``/``_reset`` only. A graph that
    is garbage-collected without ``reset()`` still reports GRAPH_DESTROYED, because dropping the
    last reference to a framework graph destroys it (FastDeploy clears by dropping entries).
    """

    def __init__(self, runtime: Runtime, label: str, owner: str = "main") -> None:
        self.runtime = runtime
        self.label = label
        self.owner = owner
        self._alive = False
        self._buffers: tuple[tuple[str, Any], ...] = ()
        self._groups: tuple[Group, ...] = ()
        self._finalizer: weakref.finalize[..., RecordedGraph] | None = None
        # Captured while a native observer watched the framework's class: the observer reports
        # this graph (the same events, derived from the framework), so it stays silent itself.
        self._observed = False

    # --- framework-specific parts ---------------------------------------------------
    @abc.abstractmethod
    def _capture(self, fn: Callable[[], Any]) -> Any:
        """Capture ``fn`` and return its static outputs."""

    @abc.abstractmethod
    def _replay(self) -> None: ...

    @abc.abstractmethod
    def _reset(self) -> None:
        """Destroy the framework graph and drop every reference to its outputs and pool."""

    # --- the Graph interface ----------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def captured_buffers(self) -> tuple[tuple[str, Any], ...]:
        """(name, tensor) pairs given at capture; empty once destroyed."""
        return self._buffers

    @property
    def captured_groups(self) -> tuple[Group, ...]:
        return self._groups

    def current_refs(self) -> tuple[BufferRef, ...]:
        """The captured buffers at their addresses *now* (0 when released)."""
        return tuple(self.runtime.buffer_ref(tensor, name) for name, tensor in self._buffers)

    def capture(
        self,
        fn: Callable[[], Any],
        *,
        buffers: BufferSpec = (),
        groups: Sequence[Group] = (),
    ) -> Any:
        """Capture through the adapter's ``_capture`` and record what the graph baked in.

        The buffer addresses and groups are recorded HERE, once for every adapter, because the
        lifecycle checks (stale weights, group shut down under a live graph) compare against
        exactly what was true at capture time.
        """
        if self._alive:
            raise RuntimeError(f"graph {self.label!r} ({self.owner}) is already captured; reset() it first")
        self._buffers = named_buffers(buffers)
        self._groups = tuple(groups)
        refs = self.current_refs()  # addresses at capture: what the graph baked in
        try:
            outputs = self._capture(fn)
        except BaseException:
            self._buffers, self._groups = (), ()
            raise
        self._alive = True
        self.runtime._live_graphs.add(self)
        self._observed = self.runtime.observes_natively()
        if self._observed:
            return outputs
        self._finalizer = weakref.finalize(self, _emit_collected, self.runtime.events, self.label, self.owner, id(self))
        self._finalizer.atexit = False  # at interpreter exit nobody is listening; stay quiet
        self.runtime.events.emit(
            EventKind.GRAPH_CAPTURED,
            self.label,
            id(self),
            owner=self.owner,
            buffers=refs,
            groups=tuple(id(group) for group in self._groups),
        )
        return outputs

    def replay(self) -> None:
        if not self._alive:
            raise RuntimeError(f"graph {self.label!r} ({self.owner}) is not captured; capture() before replay()")
        # Emitted before replaying with the buffers' CURRENT addresses, so the recorder can judge a
        # replay on a GPU, where replaying a stale graph does not raise.
        if not self._observed:
            self.runtime.events.emit(
                EventKind.GRAPH_REPLAYED, self.label, id(self), owner=self.owner, buffers=self.current_refs()
            )
        self._replay()

    def reset(self) -> None:
        if not self._alive:
            return  # idempotent: clearing twice must be a safe no-op
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._reset()
        self._alive = False
        self.runtime._live_graphs.discard(self)
        self._buffers, self._groups = (), ()
        if not self._observed:
            self.runtime.events.emit(EventKind.GRAPH_DESTROYED, self.label, id(self), owner=self.owner)
