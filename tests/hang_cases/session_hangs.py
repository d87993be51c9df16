"""A test file run by an INNER pytest session (tests/test_hang_regressions.py): one test per hang
and crash class, interleaved with passing tests that must still run and report afterwards."""

from __future__ import annotations

import pytest

from hang_cases import hangs

pytestmark = pytest.mark.isolated(timeout=1.5)


def test_before() -> None:
    assert hangs.passes(1) == 2


@pytest.mark.parametrize("kind", sorted(hangs.HANGS))
def test_hang(kind: str) -> None:
    hangs.HANGS[kind]()


def test_between() -> None:
    assert hangs.passes(2) == 3


def test_segfault() -> None:
    hangs.segfault()


def test_exit_code() -> None:
    hangs.exit_without_result()


def test_memory_error() -> None:
    hangs.memory_error()


def test_plain_failure() -> None:
    hangs.fails()


def test_after() -> None:
    assert hangs.passes(3) == 4
