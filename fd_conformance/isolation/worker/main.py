"""The spawn target of every isolation worker: arm, subscribe to runtimes, serve one mode.

Two serving modes share one channel protocol (:mod:`fd_conformance.isolation.messages`):
  * ``call``: run an importable callable ``"module:qualname"`` with picklable arguments;
  * ``pytest``: host a pytest session that collected the isolated items once, then runs the
    items the parent names, one at a time, streaming their reports (xdist's model, reduced).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from fd_conformance.isolation.worker.calls import CallServer
from fd_conformance.isolation.worker.channel import arm, stream_events
from fd_conformance.runtime.base import RUNTIME_HOOKS

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

MODES = ("call", "pytest")


def main(conn: Connection, stack_path: str, log_path: str, mode: str, setup: dict[str, Any], temp_root: str = "") -> None:
    """``setup`` for pytest mode: see :func:`fd_conformance.isolation.worker.pytest_mode.serve_pytest`;
    ``temp_root``: this worker's temp root, which the parent removes (see isolation.process)."""
    channel = arm(conn, stack_path, log_path, temp_root)
    if mode not in MODES:  # after arm: the parent quotes this from the worker's log
        raise ValueError(f"unknown worker mode {mode!r}")
    # Every runtime built in this process streams its lifecycle events to the parent, so a hang
    # report names the last graph/parameter/group event (the runtime layer offers the hook).
    RUNTIME_HOOKS.append(stream_events)
    if mode == "call":
        CallServer(channel).serve()
    else:
        from fd_conformance.isolation.worker.pytest_mode import serve_pytest  # pytest only in pytest mode

        serve_pytest(channel, setup)
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: leftover non-daemon threads of a check must not hang exit
