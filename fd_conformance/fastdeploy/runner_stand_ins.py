"""The recorded stand-ins FastDeploy's runner teardown runs over: a falsy recording stand-in for
anything the bridge does not model (:class:`Anything`), parameters and a TP group as the recorder
sees them, a model whose graphs are recorded, and a weight manager that releases and restores as
FastDeploy's ``DynamicWeightManager`` does. Every call they receive is logged (:class:`CallLog`)
and turned into lifecycle events on the run's bus.

Apart from :mod:`.runner_bridge`, which runs FastDeploy's body over them and judges the events:
the runner over real wrappers reuses the parameters, group and call log with other models.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from fd_conformance.runtime.base import BufferRef, EventBus, EventKind

CAPTURE_SIZES = (4, 2, 1)


class CallLog(list[str]):
    """The calls FastDeploy's body made on the stand-ins, in order (``model.clear_graph_opt_backend()``)."""


class Anything:
    """A falsy recording stand-in for any attribute FastDeploy reads that the bridge did not
    model: calling it logs the call; attributes and results are more stand-ins."""

    _path: str  # declared: every other attribute is a stand-in made by __getattr__
    _log: CallLog

    def __init__(self, path: str, log: CallLog) -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_log", log)

    def __getattr__(self, name: str) -> Any:  # Any: a stand-in stands for whatever FastDeploy reads
        if name.startswith("__"):
            raise AttributeError(name)
        child = Anything(f"{self._path}.{name}", self._log)
        object.__setattr__(self, name, child)
        return child

    def __call__(self, *args: Any, **kwargs: Any) -> Anything:
        self._log.append(f"{self._path}()")
        return Anything(f"{self._path}()", self._log)

    def __bool__(self) -> bool:
        return False

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __getitem__(self, key: Any) -> Anything:
        return Anything(f"{self._path}[{key!r}]", self._log)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._log.append(f"{self._path}[{key!r}] = ...")


class RecordedParam:
    """A parameter as the recorder sees it: a stable identity and a data address."""

    _addresses = itertools.count(0x1000, 0x100)

    def __init__(self, name: str) -> None:
        self.name = name
        self.address = next(self._addresses)

    def ref(self) -> BufferRef:
        return BufferRef(id(self), self.address, self.name)


class RecordedGroup:
    def __init__(self, name: str) -> None:
        self.name = name
        self.alive = True


class _Graph:
    def __init__(self, label: str) -> None:
        self.label = label


class StandInModel(Anything):
    """A model whose graphs are recorded: captured over its parameters and the TP group;
    ``clear_graph_opt_backend()`` (either spelling) destroys them."""

    def __init__(self, owner: str, bus: EventBus, params: list[RecordedParam], group: RecordedGroup, log: CallLog) -> None:
        super().__init__(owner, log)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "bus", bus)
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "graphs", {})

    def capture(self) -> None:
        """One graph per capture size, unless that size's graph is still alive (FastDeploy's
        backend replays an entry that already has a graph instead of capturing it again)."""
        for size in CAPTURE_SIZES:
            if size in self.graphs:
                continue
            graph = self.graphs[size] = _Graph(f"{self.owner}:{size}")
            self.bus.emit(
                EventKind.GRAPH_CAPTURED,
                graph.label,
                id(graph),
                owner=self.owner,
                buffers=tuple(p.ref() for p in self.params),
                groups=(id(self.group),),
            )

    def replay(self) -> None:
        for graph in self.graphs.values():
            self.bus.emit(
                EventKind.GRAPH_REPLAYED, graph.label, id(graph), owner=self.owner, buffers=tuple(p.ref() for p in self.params)
            )

    def clear_graph_opt_backend(self, *args: Any, **kwargs: Any) -> None:
        self._log.append(f"{self.owner}.clear_graph_opt_backend()")
        for graph in self.graphs.values():
            self.bus.emit(EventKind.GRAPH_DESTROYED, graph.label, id(graph), owner=self.owner)
        self.graphs.clear()

    clear_grpah_opt_backend = clear_graph_opt_backend

    def __bool__(self) -> bool:
        return True


class StandInWeightManager(Anything):
    """FastDeploy's DynamicWeightManager as far as teardown order goes: release every main-model
    parameter, then shut the TP group down when asked (or when configured to, for old call sites
    that pass no flag); update restarts the group and restores weights into NEW buffers."""

    def __init__(
        self, bus: EventBus, params: list[RecordedParam], group: RecordedGroup, shutdown_default: bool, log: CallLog
    ) -> None:
        super().__init__("dynamic_weight_manager", log)
        for key, value in (("bus", bus), ("params", params), ("group", group), ("shutdown_default", shutdown_default)):
            object.__setattr__(self, key, value)

    def clear_parameters(self, pid: Any = None, shutdown_comm_group_if_worker_idle: bool | None = None) -> None:
        self._log.append("dynamic_weight_manager.clear_parameters()")
        for param in self.params:
            param.address = 0
            self.bus.emit(EventKind.PARAM_RELEASED, param.name, id(param), buffers=(param.ref(),))
        shutdown = self.shutdown_default if shutdown_comm_group_if_worker_idle is None else shutdown_comm_group_if_worker_idle
        if shutdown and self.group.alive:
            self.group.alive = False
            self.bus.emit(EventKind.GROUP_SHUTDOWN, self.group.name, id(self.group))

    def update_parameters(self, pid: Any = None, shutdown_comm_group_if_worker_idle: bool | None = None) -> None:
        self._log.append("dynamic_weight_manager.update_parameters()")
        self._restart_group()
        self._restore()

    # The v1 RL doors (sleep/wakeup by tag, #6761): the same releases, one call each.
    def clear_model_weight(self) -> None:
        self._log.append("dynamic_weight_manager.clear_model_weight()")
        for param in self.params:
            param.address = 0
            self.bus.emit(EventKind.PARAM_RELEASED, param.name, id(param), buffers=(param.ref(),))

    def clear_communication_group(self) -> None:
        self._log.append("dynamic_weight_manager.clear_communication_group()")
        if self.group.alive:
            self.group.alive = False
            self.bus.emit(EventKind.GROUP_SHUTDOWN, self.group.name, id(self.group))

    def restart_communication_group(self) -> None:
        self._log.append("dynamic_weight_manager.restart_communication_group()")
        self._restart_group()

    def reload_model_weights(self) -> None:
        self._log.append("dynamic_weight_manager.reload_model_weights()")
        self._restore()

    def update_weights_by_rdma(self, version: Any = None, verify_checksum: bool = False) -> dict[str, Any]:
        """In place (``set_value`` into the live parameters): same addresses, nothing released, so
        the graphs captured on them read the new weights and need no recapture."""
        self._log.append("dynamic_weight_manager.update_weights_by_rdma()")
        return {"status": "ok"}

    def _restart_group(self) -> None:
        if not self.group.alive:
            self.group.alive = True
            self.bus.emit(EventKind.GROUP_CREATED, self.group.name, id(self.group))

    def _restore(self) -> None:
        for param in self.params:
            param.address = next(RecordedParam._addresses)
            self.bus.emit(EventKind.PARAM_RESTORED, param.name, id(param), buffers=(param.ref(),))
