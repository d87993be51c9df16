"""Inner-session file: pytest-timeout set on the command line, one isolated hang, one plain test."""

from __future__ import annotations

import pytest

from hang_cases import hangs


@pytest.mark.isolated
def test_isolated_python_loop() -> None:
    hangs.python_loop()


def test_plain_after() -> None:
    assert hangs.passes(1) == 2


@pytest.mark.isolated
def test_isolated_orphan(tmp_path_factory: pytest.TempPathFactory) -> None:
    import os

    hangs.hang_after_writing_pid(os.environ["FDC_TEST_PID_FILE"])
