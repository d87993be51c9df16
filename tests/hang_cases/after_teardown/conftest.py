"""Inner-session conftest: a logfinish hook that blocks in the isolation worker after the test's
three reports were sent (the second way a worker goes silent past teardown)."""

from __future__ import annotations

import os

from hang_cases import hangs
from fd_conformance.isolation.messages import WORKER_ENV


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    if os.environ.get(WORKER_ENV) == "1" and nodeid.endswith("test_logfinish_blocks"):
        hangs.c_wait_gil_released()
