"""A communication group as every adapter's group behaves: no collective after shutdown.

A module of its own because graphs capture groups and runtimes make them: both sides read it.
"""

from __future__ import annotations

import abc
from typing import Any


class Group(abc.ABC):
    """A communication group (gloo on CPU, NCCL on GPU).

    The alive flag and the refusal to communicate after shutdown live here once, so a test that
    uses a shut-down group fails the same way on every framework; adapters implement
    ``_all_reduce`` and set ``_alive = False`` when they shut the group down.
    """

    name: str
    _alive: bool = True

    def all_reduce(self, tensor: Any) -> None:
        """In-place sum across the group; capturable inside a graph on NCCL."""
        if not self._alive:
            raise RuntimeError(f"all_reduce on group {self.name!r} after it was shut down; create a new one")
        self._all_reduce(tensor)

    @abc.abstractmethod
    def _all_reduce(self, tensor: Any) -> None:
        """The framework's collective on a live group."""

    @property
    def alive(self) -> bool:
        return self._alive
