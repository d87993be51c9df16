"""How many pytest-xdist workers ``fd-conformance run -n N`` starts: no more than this host holds.

Each xdist worker imports the frameworks and drives an isolation worker of its own (plus a warm
spare), so a worker costs about :data:`WORKER_HOST_BYTES` of host memory and keeps a core busy.
``-n 999`` on a two-core host would start hundreds of processes until the kernel's out-of-memory
killer ends pytest with SIGKILL. An explicit N is therefore capped by the cores this process may
run on and by the memory available now, and the run says so in one line on stderr; ``-n auto`` is
sized by xdist (or, on a GPU host, by the plugin) and is left alone.
"""

from __future__ import annotations

import os
import sys

from fd_conformance.lint.pool import default_jobs

# Measured: pytest with torch and paddle imported holds ~0.5 GiB; an xdist worker, its isolation
# worker and their spare are three such processes.
WORKER_HOST_BYTES = 3 * 512 * 1024**2


def available_memory() -> int | None:
    """Bytes of memory available for new processes now (Linux MemAvailable), None when unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def worker_cap(cores: int, memory: int | None) -> int:
    """The most workers ``cores`` and ``memory`` bytes hold (at least one)."""
    by_memory = cores if memory is None else memory // WORKER_HOST_BYTES
    return max(1, min(cores, by_memory))


def capped_workers(requested: str | None, cores: int | None = None, memory: int | None = None) -> str | None:
    """``-n`` as given, or capped to what the host holds, with a one-line note on stderr."""
    if requested is None or not requested.isdigit() or int(requested) <= 1:
        return requested  # default, auto, 0 (serial) or 1
    cores = default_jobs() if cores is None else cores  # the CPUs this process may run on
    memory = available_memory() if memory is None else memory
    cap = worker_cap(cores, memory)
    if int(requested) <= cap:
        return requested
    held = f", {memory / 1024**3:.1f} GiB available at ~{WORKER_HOST_BYTES / 1024**3:.1f} GiB a worker" if memory else ""
    print(f"fd-conformance run: note: -n {requested} capped to {cap} (this host: {cores} cores{held})", file=sys.stderr)
    return str(cap)
