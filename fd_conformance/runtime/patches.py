"""Patches on a framework's classes and modules that are undone all or nothing.

Native mode patches several things in sequence (the graph class, ``nn.Module.__call__``,
``torch.distributed``'s functions, ``ProcessGroup``). A failure partway must not leak the patches
already made: the next observer would wrap them again and every event would be reported twice.
A failure while undoing one must not stop the others, nor leave anything registered that makes
every later check in the worker refuse to start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

_ABSENT = object()  # the owner had no entry of its own (an inherited method): deleted on undo


class Patches:
    """Undo actions on an :class:`contextlib.ExitStack`, each registered as its patch is made and run
    last-made first by :meth:`close`, every one of them even when some raise."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._errors: list[BaseException] = []

    def setattr(self, owner: Any, name: str, value: Any) -> None:
        """``owner.name = value``, undone by putting back the owner's own entry: for a class, what
        its ``__dict__`` held (pybind11 keeps methods there in a descriptor that ``getattr`` would
        unwrap), or deleting ours where it held none."""
        entry = vars(owner).get(name, _ABSENT)
        setattr(owner, name, value)
        self.callback(lambda: delattr(owner, name) if entry is _ABSENT else setattr(owner, name, entry))

    def callback(self, undo: Callable[[], object]) -> None:
        """Run ``undo`` on :meth:`close`; register it right after the change it undoes succeeded."""
        self._stack.callback(self._run, undo)

    def close(self) -> None:
        """Run every undo; then raise the first error any of them raised (the others as its notes)."""
        self._stack.close()
        errors, self._errors = self._errors, []
        if errors:
            first = errors[0]
            for other in errors[1:]:
                _note(first, f"another undo failed too: {other!r}")
            raise first

    def abandon(self, cause: BaseException) -> None:
        """An install failed with ``cause``: run every undo, noting on ``cause`` those that failed
        (``cause`` is what the caller re-raises: the failure that matters)."""
        self._stack.close()
        errors, self._errors = self._errors, []
        for error in errors:
            _note(cause, f"undoing the partial install failed too: {error!r}")

    def _run(self, undo: Callable[[], object]) -> None:
        try:
            undo()
        except BaseException as error:  # noqa: BLE001  (kept and raised by close() once every undo ran)
            self._errors.append(error)


def _note(error: BaseException, text: str) -> None:
    add_note = getattr(error, "add_note", None)  # Python 3.11+
    if add_note is not None:
        add_note(text)
