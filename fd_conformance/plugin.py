"""pytest plugin (pytest11 entry point): markers, options, fixtures and the conformance matrix.

Loading it must cost nothing when unused: no framework import at module level.
"""

from __future__ import annotations

import pytest

GPU_MARKER_HELP = "gpu: needs a CUDA device; skipped with a reason when none is visible"
CONFORMANCE_MARKER_HELP = "conformance: a graph-opt contract check from fd_conformance.suite"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", GPU_MARKER_HELP)
    config.addinivalue_line("markers", CONFORMANCE_MARKER_HELP)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from fd_conformance.devices import no_gpu_reason

    reason = no_gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
