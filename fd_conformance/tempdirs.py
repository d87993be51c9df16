"""Temp directories a parent owns for its children: whatever kills a child, nothing it wrote stays.

A child killed by SIGKILL (a hung isolation worker, a pytest whose group a Ctrl-C ended) runs no
cleanup of its own: no ``atexit``, no ``finally``. So the temp paths of a run belong to the
process that outlives them: the parent makes a directory, writes its pid into it (``owner.pid``),
points the child's temp dir into it (``TMPDIR`` and :data:`tempfile.tempdir`, which every
``tempfile`` user and most libraries honour) and removes it when the child is done. A parent that
is itself SIGKILLed leaves its directory behind; the next parent of the same kind removes every
directory of its prefix whose owner process is gone (:func:`remove_stale`).

Here, below everything else, because ``cli/run``, ``isolation/`` and the worker all use it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

OWNER_NAME = "owner.pid"  # in an owned dir: which process made it, so a later one can tell it is stale
TEMP_ENV = "TMPDIR"  # what tempfile (and C libraries via the environment) read for the temp root


def make_owned_dir(prefix: str, parent: str | None = None) -> Path:
    """A fresh ``prefix*`` directory (under ``parent``, else the temp root) owned by this process."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    (path / OWNER_NAME).write_text(str(os.getpid()), encoding="utf-8")
    return path


def remove_stale(prefix: str, parent: str | None = None) -> list[Path]:
    """Remove the ``prefix*`` directories whose owner process is gone (SIGKILLed parents); returns
    them. A live owner's directory (this user's or another's), one without an owner file (being
    made right now, or an older kit's) and one whose owner cannot be told are never touched."""
    removed = []
    for path in Path(parent or tempfile.gettempdir()).glob(prefix + "*"):
        try:
            pid = int((path / OWNER_NAME).read_text(encoding="utf-8"))
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except (OSError, ValueError):
            continue  # no owner file, unreadable, or another user's live process
    return removed


def use_as_temp_root(path: str) -> None:
    """Make ``path`` this process's temp root (called first thing in a child): ``tempfile`` here,
    and ``TMPDIR`` for the processes and libraries it starts."""
    os.makedirs(path, exist_ok=True)
    os.environ[TEMP_ENV] = path
    tempfile.tempdir = path
