"""Worker-side callables that leave temp paths behind the way real checks do (issue 24 item 11):
a torch runtime's communication group makes a FileStore directory that only ``atexit`` removes,
and an isolation worker never runs ``atexit`` (killed, or leaving by ``os._exit``)."""

from __future__ import annotations

import os
import tempfile
import threading

_kept: list[object] = []  # the runtime and its group stay alive, as a model's would mid-check


def group_then_return() -> str:
    """Start a one-rank gloo group (its FileStore lands in the temp root) and return the temp root."""
    from fd_conformance.runtime import get_runtime

    runtime = get_runtime("torch", "cpu")
    _kept.extend([runtime, runtime.new_group("tp")])
    leftover = tempfile.mkdtemp(prefix="model-scratch-")  # a model's own temp files, never removed by it
    _kept.append(leftover)
    return tempfile.gettempdir()


def group_then_hang(ready_file: str) -> None:
    """The same, then block forever (a real wait nobody ends): the parent's watchdog kills us."""
    group_then_return()
    with open(ready_file, "w", encoding="utf-8") as handle:
        handle.write(str(os.getpid()))
    threading.Event().wait()
