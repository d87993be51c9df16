"""Inner-session file: workers that hang *after* sending setup, call and teardown reports.

pytest drops ``item.funcargs`` after teardown, so a fixture value's ``__del__`` runs there: the
subject and its captured graphs are destroyed at that point, and a graph destroyed after its
comm group was shut down is the MTP hang. The parent must report it (FDC501, in the matrix for a
conformance check) and go on with the next test.
"""

from __future__ import annotations

from typing import Any

import pytest

from hang_cases import hangs

pytestmark = pytest.mark.isolated(timeout=2)


class GraphHolder:
    """Stands in for a subject whose captured graph's destructor blocks forever."""

    def __del__(self) -> None:
        hangs.python_loop()


@pytest.fixture
def graph_holder() -> GraphHolder:
    return GraphHolder()


def test_del_hangs_after_teardown(graph_holder: GraphHolder) -> None:
    assert isinstance(graph_holder, GraphHolder)


@pytest.mark.conformance("del_probe")
def test_conformance_del_hangs(fd_case: Any, fd_device: str, graph_holder: GraphHolder) -> None:
    assert isinstance(graph_holder, GraphHolder)


def test_logfinish_blocks() -> None:
    assert hangs.passes(1) == 2  # the conftest's logfinish hook blocks after this


def test_after() -> None:
    assert hangs.passes(1) == 2


def _never_built(runtime: Any) -> Any:
    raise AssertionError("the probe never builds its model")


def probe_case() -> Any:
    """``--fd-model hang_cases/after_teardown/after_teardown_hangs.py:probe_case``."""
    from fd_conformance.cases import ModelCase

    return ModelCase(name="del-probe-model", runtime="torch", factory=_never_built, capture_sizes=(1,))
