"""Hang and crash isolation (FDC5xx): checks run in spawned workers; the parent owns the clock.

  messages   the parent <-> worker protocol (named messages, keyword fields)
  causes     why a worker cannot be trusted any more (crash cause, CUDA sticky error, OOM)
  process    one worker seen from the parent: requests, hang evidence, native stacks
  watchdog   Watchdog (reused worker + warm spare) and IsolatedRunner (call mode)
  results    the fsynced JSONL result log
  plugin     the pytest plugin (isolated items run in a pytest-mode worker)
  worker/    the spawned side: channel, calls, pytest_mode, main

This package's own namespace holds only what checked code calls inside a worker (stdlib only,
so importing it starts nothing): ``mark("...")`` and ``stream_events(bus)``.
"""

from __future__ import annotations

from fd_conformance.isolation.worker.channel import describe_event, in_worker, mark, stream_events

__all__ = ["describe_event", "in_worker", "mark", "stream_events"]
