"""One GPU per pytest-xdist worker, handed out by the controller.

Mapping ``PYTEST_XDIST_WORKER`` (gwN) modulo the GPU count is wrong once xdist replaces a
crashed worker: the replacement gets a fresh id (gw<N+k>) and can land on a GPU a live worker
still uses while the crashed worker's GPU sits idle. So the controller keeps the ledger: it
claims the least-used GPU when a node is configured, releases it when the node goes down, and
passes the physical id to the worker in ``workerinput``. The worker pins
``CUDA_VISIBLE_DEVICES`` in ``pytest_configure``, before any framework can initialise CUDA.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field

WORKERINPUT_KEY = "fd_conformance_gpu"  # physical device id string, as CUDA_VISIBLE_DEVICES spells it


def physical_gpu_ids(count: int, visible: str | None) -> list[str]:
    """The controller's devices, spelled as CUDA_VISIBLE_DEVICES would (ids or UUIDs)."""
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return ids[:count] if count else []
    return [str(i) for i in range(count)]


@dataclass
class GpuLedger:
    """Which live worker holds which GPU; the least-used GPU goes to the next worker."""

    gpus: Sequence[str]
    holders: dict[str, str] = field(default_factory=dict)  # worker id -> gpu id

    def claim(self, worker_id: str) -> str | None:
        """The GPU for a new (or replacement) worker; None when there is no GPU at all."""
        if not self.gpus:
            return None
        if worker_id in self.holders:
            return self.holders[worker_id]
        load = {gpu: 0 for gpu in self.gpus}
        for gpu in self.holders.values():
            load[gpu] += 1
        # min() keeps list order on ties, so GPUs fill up in order: gw0->0, gw1->1, ...
        chosen = min(self.gpus, key=lambda gpu: load[gpu])
        self.holders[worker_id] = chosen
        return chosen

    def release(self, worker_id: str) -> None:
        """A worker went down (finished or crashed): its GPU is free for its replacement."""
        self.holders.pop(worker_id, None)


def pin_worker_gpu(workerinput: dict[str, object] | None, environ: MutableMapping[str, str] = os.environ) -> str | None:
    """On a worker: restrict CUDA to the GPU the controller assigned; returns it."""
    if not workerinput:
        return None
    gpu = workerinput.get(WORKERINPUT_KEY)
    if not isinstance(gpu, str):
        return None
    environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu
