"""The worker's end of the pipe, and what a worker arms before it runs anything.

Everything here runs in the CHILD. It arms the two things a parent needs to diagnose a hang
from outside: ``faulthandler`` on SIGUSR1 (a C-level handler that dumps every thread's Python
stack without taking the GIL, so it works even while a C call holds it) and, on Linux, a
``PR_SET_PTRACER`` opt-in so ``py-spy`` may attach under Yama's ptrace restrictions. It streams
lifecycle marks to the parent as they happen, so the last one survives the hang. Stdlib only:
``fd_conformance.isolation`` re-exports :func:`mark` for checked code.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from fd_conformance.frameworks import FRAMEWORKS
from fd_conformance.isolation.messages import EVENT, PROBED, READY, WORKER_ENV, Message, receive, send
from fd_conformance.tempdirs import use_as_temp_root

if TYPE_CHECKING:
    from multiprocessing.connection import Connection  # annotations only: the parent's plugin imports this module

    from fd_conformance.runtime.base import EventBus, RuntimeEvent

STACK_SIGNAL = signal.SIGUSR1


class Channel:
    """The child's end of the pipe. Locked: marks may come from any thread of the check."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()

    def send(self, name: str, **fields: Any) -> None:
        with self._lock:
            send(self.conn, name, **fields)

    def recv(self) -> Message:
        return receive(self.conn)

    def ready(self, collected: list[str]) -> None:
        self.send(READY, pid=os.getpid(), main_thread_ident=threading.main_thread().ident, collected=collected)

    def answer_probe(self) -> None:
        self.send(PROBED, **probe())


_channel: Channel | None = None
_stack_file: IO[str] | None = None  # kept open for the process lifetime: the C handler writes to it


def in_worker() -> bool:
    return _channel is not None


def mark(text: str) -> None:
    """Stream a lifecycle mark to the parent (no-op outside an isolation worker).

    Call it at points a hang report should name, e.g. ``mark("draft: clear graphs")``."""
    if _channel is not None:
        try:
            _channel.send(EVENT, text=str(text))
        except (OSError, ValueError):  # parent gone: nothing left to report to
            pass


def describe_event(event: RuntimeEvent) -> str:
    owner = f" [{event.owner}]" if event.owner else ""
    return f"{event.kind.value} {event.subject}{owner} #{event.seq}"


def stream_events(bus: EventBus) -> Callable[[], None]:
    """Forward a runtime's lifecycle events to the parent; returns the unsubscribe function.

    Outside a worker nothing is subscribed, so it may be called unconditionally."""
    if _channel is None:
        return lambda: None
    return bus.subscribe(lambda event: mark(describe_event(event)))


def probe() -> dict[str, Any]:
    """What an idle worker holds: which frameworks it imported and whether any of them created a
    CUDA context. Read without importing anything, so probing cannot change the answer."""
    frameworks = sorted(name for name in FRAMEWORKS if name in sys.modules)
    cuda = False
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            cuda = bool(torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001 - a half-imported torch has not initialised CUDA
            cuda = False
    return {"pid": os.getpid(), "frameworks": frameworks, "cuda_initialized": cuda}


def _prctl(option: int, arg: int) -> None:
    """Linux ``prctl(option, arg)``; elsewhere, or without libc's prctl, nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_ulong(arg), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _allow_ptrace_by_anyone() -> None:
    """Under Yama ptrace_scope=1 only ancestors may attach; py-spy is our sibling. Opt in."""
    pr_set_ptracer, pr_set_ptracer_any = 0x59616D61, -1
    _prctl(pr_set_ptracer, pr_set_ptracer_any)


def _die_with_parent() -> None:
    """A worker orphaned by a killed controller would hang forever holding a GPU: ask the
    kernel to SIGKILL us when the parent dies (Linux; elsewhere the pipe EOF ends idle workers)."""
    pr_set_pdeathsig = 1
    _prctl(pr_set_pdeathsig, int(signal.SIGKILL))


def arm(conn: Connection, stack_path: str, log_path: str, temp_root: str = "") -> Channel:
    """Make this process a worker: its temp root, its log, stack dumps on signal, the ptrace opt-in,
    the channel."""
    global _channel, _stack_file
    if temp_root:
        # First: every temp path made from here on (a torch FileStore, a model's files) lies in a
        # folder the parent removes, since a killed worker, or one leaving by os._exit, cleans nothing.
        use_as_temp_root(temp_root)
    # Our stdout/stderr go to a per-worker log: the parent quotes its tail in crash reports
    # (pytest's own faulthandler writes a segfault's Python stack there).
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    _stack_file = open(stack_path, "w", encoding="utf-8")  # lives as long as the process: the C handler writes to it
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)  # segfault stacks into the log
    _allow_ptrace_by_anyone()
    _die_with_parent()
    os.environ[WORKER_ENV] = "1"
    _channel = Channel(conn)
    return _channel
