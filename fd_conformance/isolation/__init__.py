"""Hang and crash isolation (FDC5xx): checks run in spawned workers; the parent owns the clock.

  messages   the parent <-> worker protocol (named messages, keyword fields)
  causes     why a worker cannot be trusted any more (crash cause, CUDA sticky error, OOM)
  process    one worker seen from the parent: requests, hang evidence, native stacks
  watchdog   Watchdog (reused worker + warm spare) and IsolatedRunner (call mode)
  results    the fsynced JSONL result log
  plugin     the pytest plugin (isolated items run in a pytest-mode worker)
  worker/    the spawned side: channel, calls, pytest_mode, main

What checked code calls inside a worker is imported here (stdlib only, so importing the package
starts nothing): ``mark("...")`` and ``stream_events(bus)``. The names the flat ``isolation``
module had (IsolatedRunner, Watchdog, ResultLog, ...) load from their modules on first use, so
``from fd_conformance.isolation import IsolatedRunner`` keeps working without costing the others.
"""

from __future__ import annotations

import importlib
from typing import Any

from fd_conformance.isolation.worker.channel import describe_event, in_worker, mark, stream_events

_LAZY = {
    "CheckOutcome": "watchdog",
    "IsolatedRunner": "watchdog",
    "Watchdog": "watchdog",
    "RunResult": "process",
    "WorkerProcess": "process",
    "WorkerStartError": "process",
    "crash_cause": "causes",
    "ResultLog": "results",
    "ResultRecord": "results",
    "new_record": "results",
    "read_results": "results",
}

__all__ = ["describe_event", "in_worker", "mark", "stream_events", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fd_conformance.isolation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fd_conformance.isolation.{module}"), name)
