"""Helpers several of the kit's own test modules share (imported as ``_helpers``: pytest puts
``tests/`` on ``sys.path`` because it has no ``__init__.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only when a torch test asks for the runtime: paddle tests stay torch-free
    from fd_conformance.runtime.torch import TorchRuntime


def torch_cpu_runtime() -> TorchRuntime:
    """A fresh torch runtime on CPU (host-emulated graphs), checked to be the torch adapter."""
    from fd_conformance.runtime import get_runtime
    from fd_conformance.runtime.torch import TorchRuntime

    runtime = get_runtime("torch", "cpu")
    assert isinstance(runtime, TorchRuntime)
    return runtime
