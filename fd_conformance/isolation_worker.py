"""The isolation worker: the spawned process that runs checks while its parent holds the clock.

Everything here runs in the CHILD. It arms the two things a parent needs to diagnose a hang
from outside: ``faulthandler`` on SIGUSR1 (a C-level handler that dumps every thread's Python
stack without taking the GIL, so it works even while a C call holds it) and, on Linux, a
``PR_SET_PTRACER`` opt-in so ``py-spy`` may attach under Yama's ptrace restrictions. It streams
lifecycle marks to the parent as they happen, so the last one survives the hang.

Two serving modes share one channel protocol:
  * ``call``: run an importable callable ``"module:qualname"`` with picklable arguments;
  * ``pytest``: host a pytest session that collected the isolated items once, then runs the
    items the parent names, one at a time, streaming their reports (xdist's model, reduced).
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import re
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection  # annotations only: the parent's plugin imports this module
    from fd_conformance.runtime.base import EventBus, RuntimeEvent

WORKER_ENV = "FD_CONFORMANCE_ISOLATION_WORKER"  # set in workers: the plugin must not isolate again
STACK_SIGNAL = signal.SIGUSR1

# Errors after which the process (and its CUDA context) cannot be trusted for the next check.
_STICKY_CUDA = re.compile(
    r"illegal memory access|illegal address|cudaErrorIllegalAddress|device-side assert|"
    r"unspecified launch failure|CUDA error: misaligned address|an illegal instruction",
    re.IGNORECASE,
)
_OOM = re.compile(r"out of memory|CUDA_ERROR_OUT_OF_MEMORY|ResourceExhaustedError|MemoryError", re.IGNORECASE)


class Channel:
    """The child's end of the pipe. Locked: marks may come from any thread of the check."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._lock = threading.Lock()

    def send(self, *message: Any) -> None:
        with self._lock:
            self.conn.send(message)

    def recv(self) -> tuple[Any, ...]:
        return self.conn.recv()  # type: ignore[no-any-return]


_channel: Channel | None = None
_stack_file: IO[str] | None = None  # kept open for the process lifetime: the C handler writes to it


def in_worker() -> bool:
    return _channel is not None


def mark(text: str) -> None:
    """Stream a lifecycle mark to the parent (no-op outside an isolation worker).

    Call it at points a hang report should name, e.g. ``mark("draft: clear graphs")``."""
    if _channel is not None:
        try:
            _channel.send("event", str(text))
        except (OSError, ValueError):  # parent gone: nothing left to report to
            pass


def describe_event(event: RuntimeEvent) -> str:
    owner = f" [{event.owner}]" if event.owner else ""
    return f"{event.kind.value} {event.subject}{owner} #{event.seq}"


def stream_events(bus: EventBus) -> Callable[[], None]:
    """Forward a runtime's lifecycle events to the parent; returns the unsubscribe function.

    Outside a worker nothing is subscribed, so runtimes may call this unconditionally."""
    if _channel is None:
        return lambda: None
    return bus.subscribe(lambda event: mark(describe_event(event)))


def classify_error(text: str) -> str | None:
    """A crash cause for an exception text that poisons the process, else None (plain failure)."""
    if _STICKY_CUDA.search(text):
        return "CUDA sticky error: " + _first_match_line(text, _STICKY_CUDA)
    if _OOM.search(text):
        return "out of memory: " + _first_match_line(text, _OOM)
    return None


def _first_match_line(text: str, pattern: re.Pattern[str]) -> str:
    """Prefer pytest's ``E   ...`` error lines and the exception line over quoted source."""
    lines = [line.strip() for line in text.splitlines() if pattern.search(line)]
    for line in lines:
        if line.startswith("E ") or not line.startswith((">", "File ")):
            return line.removeprefix("E").strip()[:200]
    return lines[0][:200] if lines else ""


def _allow_ptrace_by_anyone() -> None:
    """Under Yama ptrace_scope=1 only ancestors may attach; py-spy is our sibling. Opt in."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_ptracer, pr_set_ptracer_any = 0x59616D61, ctypes.c_ulong(-1)
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_ptracer, pr_set_ptracer_any, 0, 0, 0)
    except (OSError, AttributeError):  # no Yama / no prctl: attaching is already allowed or impossible
        pass


def _die_with_parent() -> None:
    """A worker orphaned by a killed controller would hang forever holding a GPU: ask the
    kernel to SIGKILL us when the parent dies (Linux; elsewhere the pipe EOF ends idle workers)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _arm(conn: Connection, stack_path: str, log_path: str) -> Channel:
    global _channel, _stack_file
    # Our stdout/stderr go to a per-worker log: the parent quotes its tail in crash reports
    # (pytest's own faulthandler writes a segfault's Python stack there).
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    _stack_file = open(stack_path, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)
    faulthandler.enable(file=sys.stderr, all_threads=True)  # segfault stacks into the log
    _allow_ptrace_by_anyone()
    _die_with_parent()
    os.environ[WORKER_ENV] = "1"
    _channel = Channel(conn)
    return _channel


def resolve(target: str) -> Callable[..., Any]:
    """``"package.module:Outer.func"`` -> the callable."""
    module_name, _, qualname = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{target} is not callable")
    return obj  # type: ignore[no-any-return]


def _run_call(target: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        value = resolve(target)(*args, **kwargs)
    except BaseException as err:  # noqa: BLE001 - everything is reported; the worker lives on
        text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
        cause = "out of memory: MemoryError" if isinstance(err, MemoryError) else classify_error(text)
        if cause is not None:
            return {"outcome": "crash", "details": text, "cause": cause, "retire": True}
        return {"outcome": "failed", "details": text}
    try:
        import pickle

        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - an unpicklable return value is shown, not lost
        value = repr(value)
    return {"outcome": "passed", "value": value}


def probe() -> dict[str, Any]:
    """What an idle worker holds: which frameworks it imported and whether any of them created a
    CUDA context. Read without importing anything, so probing cannot change the answer."""
    frameworks = sorted(name for name in ("torch", "paddle") if name in sys.modules)
    cuda = False
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            cuda = bool(torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001 - a half-imported torch has not initialised CUDA
            cuda = False
    return {"pid": os.getpid(), "frameworks": frameworks, "cuda_initialized": cuda}


def _serve_calls(channel: Channel) -> None:
    while True:
        message = channel.recv()
        if message[0] == "stop":
            return
        if message[0] == "probe":
            channel.send("probe", probe())
            continue
        if message[0] != "call":
            channel.send("done", {"outcome": "failed", "details": f"call worker got {message[0]!r}"})
            continue
        _, target, args, kwargs = message
        mark(f"call {target}")
        result = _run_call(target, args, kwargs)
        channel.send("done", result)
        if result.get("retire"):
            os._exit(0)  # a poisoned process must not run the next check


def main(conn: Connection, stack_path: str, log_path: str, mode: str, setup: dict[str, Any]) -> None:
    """Spawn target. ``setup`` for pytest mode: {"option_dict": ..., "args": [...]}."""
    channel = _arm(conn, stack_path, log_path)
    if mode == "call":
        channel.send("ready", os.getpid(), threading.main_thread().ident, [])
        _serve_calls(channel)
    elif mode == "pytest":
        _serve_pytest(channel, setup)
    else:
        raise ValueError(f"unknown worker mode {mode!r}")
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: leftover non-daemon threads of a check must not hang exit


def _serve_pytest(channel: Channel, setup: dict[str, Any]) -> None:
    from fd_conformance.isolation_worker_pytest import serve_pytest  # pytest only when needed

    serve_pytest(channel, setup)
