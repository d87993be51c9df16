"""The lifecycle events an adapter emits from its real calls, and the bus that carries them.

Apart from the :class:`~fd_conformance.runtime.base.Runtime` interface because everything reads
events without driving a runtime: the lifecycle recorder, the isolation worker streaming them to
its parent, the FastDeploy bridges emitting them for recorded stand-ins.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable
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


CLEAR_BEGIN_MARK = "clear_graph_opt_backend:begin"
CLEAR_END_MARK = "clear_graph_opt_backend:end"  # at this mark no graph of the mark's owner may be alive
