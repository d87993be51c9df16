"""Inner-session file: a conformance-marked suite-style check that hangs, parametrized over the
selected model cases by the suites plugin (fd_case/fd_device). The hang must reach the matrix."""

from __future__ import annotations

from typing import Any

import pytest

from hang_cases import hangs

pytestmark = pytest.mark.isolated(timeout=1.5)


@pytest.mark.conformance("hang_probe")
def test_hang_probe(fd_case: Any, fd_device: str) -> None:
    hangs.python_loop()


def _never_built(runtime: Any) -> Any:
    raise AssertionError("the hang probe never builds its model")


def hang_case() -> Any:
    """The one model case the inner session certifies (``--fd-model hang_cases/conformance_hang.py:hang_case``)."""
    from fd_conformance.cases import ModelCase

    return ModelCase(name="hang-probe-model", runtime="torch", factory=_never_built, capture_sizes=(1,))
