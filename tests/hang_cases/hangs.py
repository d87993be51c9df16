"""Real hangs, one per class the watchdog must survive. No sleep stands in for a hang:
each of these blocks forever for the reason its name gives.

Why these four: they are the ways a check gets stuck that defeat in-process timeouts
differently -- a Python loop (signals work, threads work), a C wait with the GIL released
(a signal interrupts it only on the main thread), a C call that HOLDS the GIL (nothing
in-process can run: no timer thread, no Python signal handler), and a thread deadlock
(the main thread waits on a lock; leftover non-daemon threads also block interpreter exit).
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

from fd_conformance.isolation import mark


def python_loop() -> None:
    mark("hang: python loop")
    n = 0
    while True:  # pure bytecode, never yields to C
        n += 1


def c_wait_gil_released() -> None:
    mark("hang: blocking read on a pipe nobody writes")
    read_end, _write_end = os.pipe()  # we keep the write end open, so read() never sees EOF
    os.read(read_end, 1)  # C read(2), GIL released while blocked


def c_call_holding_gil() -> None:
    """Lock a normal pthread mutex twice through ctypes.PyDLL: PyDLL keeps the GIL during the
    call and a NORMAL mutex self-deadlocks; futex waits resume after signal handlers, so no
    signal breaks it either. This is the case no in-process timeout can handle."""
    mark("hang: pthread_mutex_lock twice with the GIL held")
    libc = ctypes.PyDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed == PTHREAD_MUTEX_INITIALIZER (normal kind) on glibc
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)  # never returns


def thread_deadlock() -> None:
    mark("hang: two threads, two locks, opposite order")
    first, second = threading.Lock(), threading.Lock()
    both_hold_one = threading.Barrier(2)

    def take(a: threading.Lock, b: threading.Lock) -> None:
        with a:
            both_hold_one.wait()  # guarantees the deadlock instead of hoping for it
            with b:
                pass

    workers = [threading.Thread(target=take, args=(first, second)), threading.Thread(target=take, args=(second, first))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


HANGS = {
    "python_loop": python_loop,
    "c_wait_gil_released": c_wait_gil_released,
    "c_call_holding_gil": c_call_holding_gil,
    "thread_deadlock": thread_deadlock,
}


# --- crashes -----------------------------------------------------------------------------


def segfault() -> None:
    mark("crash: read address 0")
    ctypes.string_at(0)  # real SIGSEGV


def exit_without_result() -> None:
    mark("crash: os._exit(3)")
    os._exit(3)


def memory_error() -> None:
    mark("crash: allocate more than the address space")
    bytearray(1 << 62)  # real MemoryError from the allocator, nothing allocated


def passes(x: int = 1) -> int:
    return x + 1


def sleeps(seconds: float) -> float:
    """A slow but healthy check (a first model import, say)."""
    time.sleep(seconds)
    return seconds


def fails() -> None:
    raise AssertionError("plain failure, not a crash")


def hang_after_runtime_events() -> None:
    """Lifecycle events from a real EventBus reach the parent before the hang."""
    from fd_conformance.isolation import stream_events
    from fd_conformance.runtime.base import EventBus, EventKind

    bus = EventBus()
    stream_events(bus)
    bus.emit(EventKind.GRAPH_CAPTURED, "decode-bs8", 1, owner="draft")
    bus.emit(EventKind.GROUP_SHUTDOWN, "tp", 2)
    wait_silently()


def wait_silently() -> None:
    """Blocks forever on an event nobody sets, with no mark and no core burnt while the watchdog
    waits out its timeout: for callers that test what precedes the hang (its events, its process),
    not how a class of hang is killed (the four above)."""
    threading.Event().wait()


def hang_after_writing_pid(path: str) -> None:
    """Tells the test which process to watch, then hangs (used to prove orphan cleanup)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(str(os.getpid()))
    wait_silently()


def _hang_after_runtime_marks(build: str) -> None:
    """A real torch CPU runtime emits lifecycle marks, then the check hangs. ``build`` picks how
    the runtime is made: ``get_runtime`` (streams to the parent) or the adapter's ``create``
    directly (the known-bad variant: nothing streams, so the report cannot name the event)."""
    if build == "get_runtime":
        from fd_conformance.runtime import get_runtime

        runtime = get_runtime("torch", "cpu")
    else:
        from fd_conformance.runtime import torch as torch_adapter

        runtime = torch_adapter.create("cpu")
    runtime.events.mark("draft: clear graphs", owner="draft")
    runtime.events.mark("release parameters", owner="main")
    wait_silently()


def hang_after_get_runtime_events() -> None:
    _hang_after_runtime_marks("get_runtime")


def hang_after_unstreamed_runtime_events() -> None:
    _hang_after_runtime_marks("create")


def use_the_torch_runtime() -> None:
    """Imports torch and the kit's torch adapter (what a runtime's first build pays)."""
    import fd_conformance.runtime.torch  # noqa: F401


def use_torch(cuda: bool = False) -> bool:
    """Imports torch (and with ``cuda`` creates a CUDA context); returns torch.cuda.is_initialized()."""
    import torch

    if cuda:
        torch.ones(1, device="cuda").add_(1)
    return bool(torch.cuda.is_initialized())


def sends_a_malformed_message() -> None:
    """A worker gone wrong (or of another kit version): it sends what the protocol table does not
    allow, then waits. The parent must report this check as a crash, not die with the session."""
    from fd_conformance.isolation.worker import channel

    assert channel._channel is not None
    channel._channel.conn.send(("no-such-message", {}))
    time.sleep(60)
