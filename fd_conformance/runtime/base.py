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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


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


@dataclass(frozen=True)
class MemoryStats:
    """Device allocator figures in bytes (host emulation reports the bytes it holds)."""

    allocated: int
    reserved: int


class StaleGraphError(RuntimeError):
    """A graph was replayed after a buffer it captured was released or moved.

    Only the host emulation raises this; on a real GPU the same replay silently reads
    freed or foreign memory (garbage outputs or an illegal-address fault).
    """


class Group(abc.ABC):
    """A communication group (gloo on CPU, NCCL on GPU)."""

    name: str

    @abc.abstractmethod
    def all_reduce(self, tensor: Any) -> None:
        """In-place sum across the group; capturable inside a graph on NCCL."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...


class Graph(abc.ABC):
    """One captured graph: capture once on static buffers, replay many times, then destroy."""

    label: str
    owner: str

    @abc.abstractmethod
    def capture(
        self,
        fn: Callable[[], Any],
        *,
        buffers: Iterable[Any] = (),
        groups: Sequence[Group] = (),
    ) -> Any:
        """Capture ``fn()``; returns its (static) outputs. ``buffers`` are the tensors the
        graph depends on (parameters, static inputs); ``groups`` whose collectives it runs."""

    @abc.abstractmethod
    def replay(self) -> None: ...

    @abc.abstractmethod
    def reset(self) -> None:
        """Destroy the graph and return its memory; idempotent."""

    @property
    @abc.abstractmethod
    def alive(self) -> bool: ...


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


class Runtime(abc.ABC):
    """A framework (paddle, torch) on a device (cuda, or cpu with host-emulated graphs)."""

    name: str  # "torch" | "paddle"
    device: str  # "cuda" | "cpu"
    events: EventBus

    # --- framework / device -------------------------------------------------------
    @property
    @abc.abstractmethod
    def version(self) -> str: ...

    @property
    def graphs_are_real(self) -> bool:
        """False when graphs are host-emulated: such results never stand in for a GPU's."""
        return self.device == "cuda"

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

    # --- tensors ------------------------------------------------------------------
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

    # --- weights, the way RL weight managers do it ----------------------------------
    @abc.abstractmethod
    def release_parameter(self, param: Any, name: str = "") -> None:
        """Free the parameter's storage in place (the Python object stays)."""

    @abc.abstractmethod
    def restore_parameter(self, param: Any, value: Any, name: str = "") -> None:
        """Point the parameter at NEW storage holding ``value`` (the address changes)."""

    # --- communication ------------------------------------------------------------
    @abc.abstractmethod
    def new_group(self, name: str = "tp") -> Group: ...

    @abc.abstractmethod
    def shutdown_group(self, group: Group) -> None: ...
