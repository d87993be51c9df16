"""GPUs for pytest-xdist workers, handed out by the controller; how many workers ``-n auto`` starts.

Mapping ``PYTEST_XDIST_WORKER`` (gwN) modulo the GPU count is wrong once xdist replaces a
crashed worker: the replacement gets a fresh id (gw<N+k>) and can land on a GPU a live worker
still uses while the crashed worker's GPU sits idle. So the controller keeps the ledger: it
claims the least-used GPU when a node is configured, releases it when the node goes down, and
passes the physical id to the worker in ``workerinput``. The worker pins
``CUDA_VISIBLE_DEVICES`` in ``pytest_configure``, before any framework can initialise CUDA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass, field

WORKERINPUT_KEY = "fd_conformance_gpu"  # physical device id string, as CUDA_VISIBLE_DEVICES spells it
# What one worker may take of a GPU: its CUDA context (~0.5 GiB), its isolation worker's context
# and the tiny conformance models with their graph pools. Measured peak: 1.7 GiB per worker
# process (H100, -n 4, every bundled case; it was 10-26 GiB while each check's NCCL groups were
# left alive). The budget only stops `-n auto` from packing more workers than a GPU can hold.
WORKER_GPU_BYTES = 4 << 30
# Workers per GPU beyond this stop paying off: they queue on one device's streams (measured on
# one H200 by bench/suite_time.py --workers).
MAX_WORKERS_PER_GPU = 8
NVIDIA_SMI_TIMEOUT_S = 10.0


def free_gpu_bytes(gpus: Sequence[str]) -> list[int] | None:
    """Free memory of each of ``gpus`` from nvidia-smi (importing a framework here would create a
    CUDA context in the xdist controller); None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None or not gpus:
        return None
    try:
        out = subprocess.run(
            [exe, f"--id={','.join(gpus)}", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True,
        ).stdout  # fmt: skip
        return [int(line.strip()) << 20 for line in out.splitlines() if line.strip()]  # MiB -> bytes
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def auto_worker_count(cores: int, free_bytes: Sequence[int]) -> int:
    """``-n auto`` on a GPU host: several workers share each GPU while the models are tiny --
    as many as its free memory holds at WORKER_GPU_BYTES each, at most MAX_WORKERS_PER_GPU, and
    never more than half the cores (each worker drives an isolation worker process of its own)."""
    per_gpu = [max(1, min(MAX_WORKERS_PER_GPU, free // WORKER_GPU_BYTES)) for free in free_bytes]
    return max(1, min(sum(per_gpu), max(1, cores // 2)))


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
