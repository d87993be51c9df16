"""Reproducers: one failed check of a run, re-run in a plain Python process (issue 52, "Replay").

``fd-conformance run`` writes ``OUT/repro/<case>-<test>-<device>.py`` for every check that found a
defect; ``python repro/x.py`` builds the case from the run's spec and calls the check directly,
with no pytest session, isolation worker or kit plugin in the way, so a breakpoint,
``CUDA_LAUNCH_BLOCKING=1`` or ``compute-sanitizer`` can be put in front of it.

  target  the check a node id names: its function, matrix column and parametrize values
  runner  the run itself: the case, the fixtures' values (the kit's own builders), the outcome
  script  the reproducer file: its name and text

Importing this package costs nothing: ``fd-conformance`` reads :mod:`.script` for every run, and
only a reproducer imports the runner (pytest, the plugin's builders, the suites).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    """``replay`` (runner.replay), imported on first use: see the module docstring."""
    if name == "replay":
        from fd_conformance.replay.runner import replay

        return replay
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["replay"]
