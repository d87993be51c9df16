"""Parsing files in worker processes: when it pays, and how it stays safe, ordered and interruptible.

Why processes: ``ast.parse`` holds the GIL, so threads would not help a FastDeploy-sized tree;
below :data:`MIN_PARALLEL_FILES` files a pool costs more (start-up, pickling) than it saves. And
``ast.parse`` never checks for signals: Ctrl-C during a long parse in this process waits for the
parse to end, while a worker is killed at once, so a large file is parsed in one even when a
single process would do (:data:`CHILD_PARSE_BYTES`).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fd_conformance.lint.config import LintConfig
from fd_conformance.lint.facts import FileScan
from fd_conformance.lint.files import display_path, iter_python_files
from fd_conformance.lint.scan import read_and_scan

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

#: Below this many files a process pool costs more (start-up, pickling) than it saves.
MIN_PARALLEL_FILES = 400

#: A file this large (bytes) is parsed in a worker process even in a serial run: its parse would
#: keep this process deaf to Ctrl-C for a second or more per MiB, a worker is killed at once. Below
#: it, the fork costs more than the wait it saves (a model file is 10-100 KiB).
CHILD_PARSE_BYTES = 256 * 1024


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing allocates millions of AST nodes that die with their file; the cyclic collector
    re-traversing the growing result lists meanwhile costs ~10-15% and frees nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _scan_batch(batch: Sequence[tuple[str, str]], config: LintConfig) -> list[FileScan]:
    """One worker's share (top level so a spawned/forkserver worker can unpickle it)."""
    with _gc_paused():
        return [read_and_scan(Path(file), shown, config) for file, shown in batch]


def default_jobs() -> int:
    """CPUs this process may run on (affinity-aware: a CI container often gets fewer than the host)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _fork_context() -> BaseContext | None:
    """A fork context when forking is safe here, else None (then the scan runs serially).

    Only fork: spawn and forkserver re-run the caller's ``__main__`` in each worker, which breaks
    (or re-executes) any script that calls the linter without an ``if __name__ == "__main__"``
    guard. Fork is unsafe only with other threads alive (one may hold a lock the child needs).
    """
    import multiprocessing  # lazily, for speed: a pre-commit run on a few files never needs it
    import threading

    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return None
    return multiprocessing.get_context("fork")


def scan_paths(paths: Sequence[str | Path], config: LintConfig, root: Path | None = None, jobs: int = 1) -> list[FileScan]:
    """Parse every file once; the per-file scans feed both the rules and ``--fix``.

    ``jobs`` > 1 parses in that many worker processes when there are at least
    :data:`MIN_PARALLEL_FILES` files (ast.parse holds the GIL, so threads would not help);
    results keep the serial order, so the report is identical. A run with a file of
    :data:`CHILD_PARSE_BYTES` or more parses in at least one worker, so Ctrl-C ends it at once.
    """
    root = (root or Path.cwd()).resolve()
    work = [(str(file), display_path(file, root)) for file in iter_python_files([Path(p) for p in paths], config, root)]
    jobs = min(jobs, len(work) // (MIN_PARALLEL_FILES // 2) or 1)
    parallel = jobs > 1 and len(work) >= MIN_PARALLEL_FILES
    context = _fork_context() if parallel or any(_large(file) for file, _ in work) else None
    if context is None:
        return _scan_batch(work, config)
    jobs = jobs if parallel else 1
    # Several batches per worker even out files of uneven size; contiguous slices keep the order.
    size = -(-len(work) // (jobs * 4))
    batches = [work[i : i + size] for i in range(0, len(work), size)]
    import multiprocessing  # lazily, for speed: only large runs get here
    from concurrent.futures import ProcessPoolExecutor

    others = set(multiprocessing.active_children())  # a library caller's own children are not ours to kill
    other_pids = _child_pids()
    pools: list[ProcessPoolExecutor] = []

    def kill_workers() -> None:
        # The pool's own table, this process's multiprocessing children, and (Linux) every child
        # forked since the pool was made: a worker the signal caught between its fork and its
        # registration is in none of the first two (seen in CI: lint waited on it forever).
        ours = set(multiprocessing.active_children()) - others
        ours |= {process for pool in pools for process in getattr(pool, "_processes", {}).values()}
        pids = {process.pid for process in ours if process.pid is not None} | (_child_pids() - other_pids)
        for pid in pids:
            with contextlib.suppress(OSError):  # gone already
                os.kill(pid, signal.SIGKILL)

    with _interrupt_kills(kill_workers) as interrupted:  # before the pool: no worker exists unguarded
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context)
        pools.append(pool)
        try:
            scans = [scan for part in pool.map(_scan_batch, batches, [config] * len(batches)) for scan in part]
        except BaseException:  # a worker's error, or the pool broken by the Ctrl-C that killed it
            kill_workers()
            pool.shutdown(wait=False, cancel_futures=True)
            if interrupted:
                raise KeyboardInterrupt from None
            raise
    pool.shutdown(wait=True)
    if interrupted:  # the signal came after the last parse: still an interrupted run
        raise KeyboardInterrupt
    return scans


@contextlib.contextmanager
def _interrupt_kills(kill: Callable[[], None]) -> Iterator[list[int]]:
    """While the pool runs, Ctrl-C kills the workers (the pool then fails in this thread, where
    the caller turns it into KeyboardInterrupt) instead of raising wherever the main thread is: a
    KeyboardInterrupt raised inside concurrent.futures' own bookkeeping was lost, or cancelled a
    future twice, and lint waited forever on a worker (seen in CI). Yields the signals received."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received  # only the main thread may set handlers (a library caller's thread)
        return

    def on_interrupt(signum: int, _frame: object) -> None:
        received.append(signum)
        kill()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, previous)


def _child_pids() -> set[int]:
    """This process's child processes, from /proc (Linux); empty elsewhere."""
    me, found = os.getpid(), set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue  # gone meanwhile
            if len(fields) > 1 and fields[1] == str(me):
                found.add(int(entry))
    return found


def _large(file: str) -> bool:
    try:
        return os.stat(file).st_size >= CHILD_PARSE_BYTES
    except OSError:
        return False  # reading it fails the same way, in whichever process, as FDC100
