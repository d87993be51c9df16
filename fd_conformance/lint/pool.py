"""Parsing many files in worker processes: when it pays, and how it stays safe and ordered.

Why processes: ``ast.parse`` holds the GIL, so threads would not help a FastDeploy-sized tree;
below :data:`MIN_PARALLEL_FILES` files a pool costs more (start-up, pickling) than it saves.
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
    results keep the serial order, so the report is identical.
    """
    root = (root or Path.cwd()).resolve()
    work = [(str(file), display_path(file, root)) for file in iter_python_files([Path(p) for p in paths], config, root)]
    jobs = min(jobs, len(work) // (MIN_PARALLEL_FILES // 2) or 1)
    context = _fork_context() if jobs > 1 and len(work) >= MIN_PARALLEL_FILES else None
    if context is None:
        return _scan_batch(work, config)
    # Several batches per worker even out files of uneven size; contiguous slices keep the order.
    size = -(-len(work) // (jobs * 4))
    batches = [work[i : i + size] for i in range(0, len(work), size)]
    from concurrent.futures import ProcessPoolExecutor  # lazily, for speed: only large trees get here

    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return [scan for part in pool.map(_scan_batch, batches, [config] * len(batches)) for scan in part]
