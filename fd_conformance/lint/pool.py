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
from collections.abc import Iterator, Sequence
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
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context)
    try:
        return [scan for part in pool.map(_scan_batch, batches, [config] * len(batches)) for scan in part]
    except BaseException:  # Ctrl-C (or a worker's error): kill the workers mid-parse, never wait for them
        for process in set(multiprocessing.active_children()) - others:  # also one forked but not yet registered
            process.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _large(file: str) -> bool:
    try:
        return os.stat(file).st_size >= CHILD_PARSE_BYTES
    except OSError:
        return False  # reading it fails the same way, in whichever process, as FDC100
