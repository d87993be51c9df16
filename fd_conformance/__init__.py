"""fd-conformance: make graph-lifecycle bugs in LLM-serving model wrappers unmergeable.

The public API is imported lazily so that ``import fd_conformance`` (and loading the pytest
plugin) costs nothing and never imports paddle or torch.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

try:  # one source: pyproject.toml's version, as installed
    __version__ = version("fd-conformance")
except PackageNotFoundError:  # pragma: no cover - a source tree never installed (pip install -e . fixes it)
    __version__ = "0+unknown"

_LAZY = {
    "GraphOptModel": "fd_conformance.protocol",
    "supports_graph_opt": "fd_conformance.protocol",
    "check_protocol": "fd_conformance.protocol",
    "graph_opt_model": "fd_conformance.protocol",
    "install_legacy_alias": "fd_conformance.protocol",
    "Finding": "fd_conformance.findings",
    "Severity": "fd_conformance.findings",
    "ModelCase": "fd_conformance.cases",
    "get_runtime": "fd_conformance.runtime",
}

__all__ = ["__version__", *_LAZY]

if TYPE_CHECKING:  # pragma: no cover
    from fd_conformance.cases import ModelCase
    from fd_conformance.findings import Finding, Severity
    from fd_conformance.protocol import (
        GraphOptModel,
        check_protocol,
        graph_opt_model,
        install_legacy_alias,
        supports_graph_opt,
    )
    from fd_conformance.runtime import get_runtime


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fd_conformance' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
