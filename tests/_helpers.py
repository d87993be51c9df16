"""Helpers several of the kit's own test modules share (imported as ``_helpers``: pytest puts
``tests/`` on ``sys.path`` because it has no ``__init__.py``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only when a torch test asks for the runtime: paddle tests stay torch-free
    from fd_conformance.runtime.torch import TorchRuntime

# How many xdist workers a gpu test's suite session over many rows runs on the one GPU (the plugin
# places them). 8, not 4: on an H100 (16 cores) the bundled rows with every mutant took 44 s
# against 70 s, every reference row native 42 s against 60 s, beside the other gpu tests' sessions.
# FDC_GPU_SESSION_WORKERS=N tries another count.
GPU_SESSION_WORKERS = os.environ.get("FDC_GPU_SESSION_WORKERS", "8")


def torch_cpu_runtime() -> TorchRuntime:
    """A fresh torch runtime on CPU (host-emulated graphs), checked to be the torch adapter."""
    from fd_conformance.runtime import get_runtime
    from fd_conformance.runtime.torch import TorchRuntime

    runtime = get_runtime("torch", "cpu")
    assert isinstance(runtime, TorchRuntime)
    return runtime
