"""Inner-session file: skip-marked isolated items (no worker needed) and two hangs, each followed
by a test that the warm spare should run (tests/test_hang_regressions.py)."""

from __future__ import annotations

import pytest

from hang_cases import hangs

pytestmark = pytest.mark.isolated(timeout=1.5)


@pytest.mark.skip(reason="static skip")
def test_skip() -> None:
    raise AssertionError("a skipped test ran")


@pytest.mark.skipif("1 == 1", reason="true skipif")
def test_skipif_true() -> None:
    raise AssertionError("a skipped test ran")


@pytest.mark.skipif("1 == 2", reason="false skipif")
def test_skipif_false() -> None:
    assert hangs.passes(1) == 2


def test_hang_first() -> None:
    hangs.python_loop()


def test_after_first_hang() -> None:
    assert hangs.passes(2) == 3


def test_hang_second() -> None:
    hangs.c_call_holding_gil()


def test_after_second_hang() -> None:
    assert hangs.passes(3) == 4
