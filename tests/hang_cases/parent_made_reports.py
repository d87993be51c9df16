"""Inner-session file: suite-style checks whose deciding report the isolation parent makes or
amends. Both must keep the matrix keys and the check's own findings."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.isolated(timeout=60)


@pytest.mark.conformance("pid_probe")
@pytest.mark.parametrize("pid", [os.getpid()])  # differs in the worker: the item is not collected there
def test_not_collected_in_worker(fd_case: Any, fd_device: str, pid: int) -> None:
    pass


@pytest.mark.conformance("oom_probe")
def test_finding_then_oom(fd_case: Any, fd_device: str, fd_verdict: Any) -> None:
    """Records a real finding, then fails with an error that poisons the worker: it retires
    itself after a complete run (FDC502), and the check's finding must survive next to it."""
    from fd_conformance.findings import Location, make_finding

    fd_verdict.add(make_finding("FDC202", "probe finding", Location(obj="probe")))
    raise MemoryError("out of memory (probe)")


def test_after() -> None:
    pass


def _never_built(runtime: Any) -> Any:
    raise AssertionError("the probe never builds its model")


def probe_case() -> Any:
    """``--fd-model hang_cases/parent_made_reports.py:probe_case``."""
    from fd_conformance.cases import ModelCase

    return ModelCase(name="parent-probe-model", runtime="torch", factory=_never_built, capture_sizes=(1,))
