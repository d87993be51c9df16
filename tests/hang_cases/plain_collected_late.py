"""Inner-session file with no isolated item, collected after skip_and_spare.py. It records every
import inside an isolation worker (the worker should not collect it under --fd-isolate=marked),
and makes the parent's collection slow, so a worker prestarted during collection is visible."""

from __future__ import annotations

import os
import time

if os.environ.get("FD_CONFORMANCE_ISOLATION_WORKER") == "1":
    with open(os.environ["FDC_TEST_WORKER_IMPORTS"], "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")
else:
    time.sleep(1.0)  # slow collection (a heavy import); not a hang stand-in


def test_in_process() -> None:
    assert time.time() > 0  # where it ran is what the session checks (its record's worker_pid)
