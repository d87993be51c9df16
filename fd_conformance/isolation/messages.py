"""The parent <-> worker protocol: named messages carrying keyword fields.

A message travels through the pipe as ``(name, {field: value})`` and is handled by name (the
shape of pytest-xdist's ``sendevent(name, **kwargs)``), so adding a field never shifts another
and a handler reads ``fields["nodeid"]`` rather than position 1 of a tuple. :data:`FIELDS` is the
one table both sides agree on: :func:`message` refuses a name or field it does not list, so a
typo fails at the sender instead of as a hang at the receiver. Stdlib only: the worker's channel
imports it before any check runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, Protocol

# parent -> worker
COLLECT = "collect"  # pytest mode, worker spawned before the parent knew the files
CALL = "call"  # call mode: run an importable callable
ITEM = "item"  # pytest mode: run one collected item
PROBE = "probe"  # what an idle worker holds (answered with PROBED)
STOP = "stop"  # polite shutdown
# worker -> parent
CONFIGURED = "configured"  # pytest mode, worker asked for it: what its plugins found at configure
READY = "ready"  # handshake, once the worker can take requests
EVENT = "event"  # a lifecycle mark, streamed as it happens
REPORT = "report"  # pytest mode: one serialised TestReport
DONE = "done"  # the request's end; its fields are the RunResult payload
PROBED = "probed"  # the answer to PROBE

# name -> (required fields, optional fields)
FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    COLLECT: (frozenset({"paths"}), frozenset({"basetemp"})),  # basetemp: for a worker prestarted at configure
    CALL: (frozenset({"target", "args", "kwargs"}), frozenset()),
    ITEM: (frozenset({"nodeid", "next_nodeid"}), frozenset()),
    PROBE: (frozenset(), frozenset()),
    STOP: (frozenset(), frozenset()),
    CONFIGURED: (frozenset({"facts"}), frozenset()),  # e.g. the session's cases as records (plugin.collection)
    READY: (frozenset({"pid", "main_thread_ident", "collected"}), frozenset()),
    EVENT: (frozenset({"text"}), frozenset()),
    REPORT: (frozenset({"data"}), frozenset()),
    DONE: (frozenset({"outcome"}), frozenset({"details", "cause", "retire", "value"})),
    PROBED: (frozenset({"pid", "frameworks", "cuda_initialized"}), frozenset()),
}

ALL_FILES = "<all>"  # a COLLECT ``paths`` entry: every file the parent's arguments reach is isolated
WORKER_ENV = "FD_CONFORMANCE_ISOLATION_WORKER"  # "1" in workers: their plugin must not isolate again


def in_isolation_worker() -> bool:
    return os.environ.get(WORKER_ENV) == "1"


class WorkerProtocolError(RuntimeError):
    """A message the table does not allow: a bug in the kit, never the checked code's fault."""


class Message(NamedTuple):
    name: str
    fields: dict[str, Any]


class Sender(Protocol):
    def send(self, obj: Any) -> None: ...


class Receiver(Protocol):
    def recv(self) -> Any: ...


def message(name: str, **fields: Any) -> Message:
    """A checked message: ``name`` is in :data:`FIELDS` and ``fields`` are exactly its fields."""
    if name not in FIELDS:
        raise WorkerProtocolError(f"unknown worker message {name!r}")
    required, optional = FIELDS[name]
    missing, unknown = required - fields.keys(), fields.keys() - required - optional
    if missing or unknown:
        raise WorkerProtocolError(f"worker message {name!r}: missing {sorted(missing)}, unknown {sorted(unknown)}")
    return Message(name, fields)


def send(conn: Sender, name: str, **fields: Any) -> None:
    conn.send(tuple(message(name, **fields)))


def receive(conn: Receiver) -> Message:
    """The next message, checked like a sent one (the peer may be an older or broken process)."""
    raw = conn.recv()
    if not (isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[0], str) and isinstance(raw[1], dict)):
        raise WorkerProtocolError(f"not a worker message: {raw!r:.200}")
    return message(raw[0], **raw[1])


def dispatch(received: Message, handlers: Mapping[str, Callable[..., object]]) -> object:
    """Call the handler named by the message with its fields as keywords."""
    handler = handlers.get(received.name)
    if handler is None:
        raise WorkerProtocolError(f"unexpected worker message {received.name!r} (expected one of {sorted(handlers)})")
    return handler(**received.fields)
