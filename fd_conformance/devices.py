"""GPU visibility and framework versions without importing a framework (importing torch/paddle
just to skip a test or print a header costs seconds)."""

from __future__ import annotations

import glob
import os
from importlib.metadata import PackageNotFoundError, version

from fd_conformance.frameworks import SUPPORTED

FORCE_ENV = "FD_CONFORMANCE_GPU"  # "0" forces no-GPU, "1" forces GPU (e.g. in exotic containers)


def visible_gpu_count() -> int:
    """NVIDIA devices this process may use: /dev/nvidiaN nodes, filtered by CUDA_VISIBLE_DEVICES."""
    forced = os.environ.get(FORCE_ENV)
    if forced is not None:
        return 1 if forced.strip() not in ("", "0") else 0
    nodes = [n for n in glob.glob("/dev/nvidia[0-9]*") if n[len("/dev/nvidia") :].isdigit()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return len(nodes)
    ids = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return min(len(ids), len(nodes))


def no_gpu_reason() -> str | None:
    """Why gpu tests must skip here, or None when a GPU is visible."""
    if visible_gpu_count() > 0:
        return None
    if os.environ.get(FORCE_ENV) is not None:
        return f"no GPU: {FORCE_ENV}={os.environ[FORCE_ENV]!r}"
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return f"no GPU visible (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r})"
    return "no GPU: no /dev/nvidiaN device on this machine (gpu tests run with `pytest -m gpu` on a CUDA host)"


def framework_versions() -> dict[str, str | None]:
    """Runtime name -> its installed version (None when not installed), read from package
    metadata: nothing is imported."""
    found: dict[str, str | None] = {}
    for framework in SUPPORTED:
        found[framework.name] = None
        for distribution in framework.distributions:
            try:
                found[framework.name] = version(distribution)
                break
            except PackageNotFoundError:
                continue
    return found
