"""Where an inner model keeps the communication group its collectives run on.

The runner sets the group on every weight cycle (groups are shut down with the weights and
started again on reload); the backend asks ``graph_groups()`` for the groups a capture records,
so the lifecycle checks know a graph depends on them (shutting one down under a live graph is
FastDeploy's NCCL hang). Stored in ``__dict__``: not a submodule/parameter of the framework.
"""

from __future__ import annotations

from collections.abc import Sequence

from fd_conformance.runtime.base import Group

__all__ = ["CommGroupMixin"]


class CommGroupMixin:
    """The communication group an inner model's collectives run on (set by the runner)."""

    def set_comm_group(self, group: Group | None) -> None:
        self.__dict__["comm_group"] = group

    def graph_groups(self) -> Sequence[Group]:
        group = self.__dict__.get("comm_group")
        return (group,) if group is not None else ()
