"""The native observer: a model's own graph-class calls turned into the kit's events.

The graph CLASS's ``capture_begin``/``capture_end``/``replay``/``reset`` are wrapped, so every graph
of the process is seen whoever made it; a graph dropped without ``reset()`` is seen dying through a
weakref callback (:mod:`.deaths` says when that death is reported). Between ``capture_begin`` and
``capture_end`` the modules called through ``nn.Module.__call__`` on the capturing thread (and, on a
CUDA graph, while that thread's stream is capturing) are what the graph captured; a module another
thread runs meanwhile is not. Every graph event and lifecycle mark is an observation point, where
the storage of what any graph captured is compared with what was last seen (:mod:`.storage`).
"""

from __future__ import annotations

import gc
import itertools
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fd_conformance.errors import UsageError
from fd_conformance.runtime import torch_collectives
from fd_conformance.runtime.base import OBSERVED_GRAPH_TYPES, BufferRef, EventKind, Graph, GraphObserver, Runtime
from fd_conformance.runtime.patches import Patches
from fd_conformance.runtime.torch_native.compiled import compiled_capture
from fd_conformance.runtime.torch_native.deaths import DeathQueue
from fd_conformance.runtime.torch_native.names import ModuleNames
from fd_conformance.runtime.torch_native.records import GraphRecord, NativeGraph
from fd_conformance.runtime.torch_native.storage import SLOT_REF, Slot, StorageScan, captured_keys, reads_any

# torch's own class, whatever a test patches in place of the torch.cuda.CUDAGraph name
TORCH_CUDA_GRAPH: type = torch.cuda.graphs.CUDAGraph
HOOKED = ("capture_begin", "capture_end", "replay", "reset")  # the class methods wrapped while observing
# Modules of torch._dynamo that keep torch's nn.Module.__call__, read once at their import
DYNAMO_UNPATCHED_CALL = ("torch._dynamo.utils", "torch._dynamo.variables.nn_module")

# The observer installed now (one at a time: two would wrap the class twice and double every event).
_ACTIVE: list[TorchGraphObserver] = []


def observing(runtime: Runtime) -> bool:
    """An observer installed on ``runtime``'s events is watching the graph class now."""
    return any(observer.runtime is runtime for observer in _ACTIVE)


def live_native_graphs() -> int:
    """Observed framework graphs alive now (the CUDA runtime keeps cuBLAS workspaces while any is)."""
    return sum(observer.live_count() for observer in _ACTIVE)


class TorchGraphObserver(StorageScan, GraphObserver):
    """Observes every graph of ``graph_class`` (default: ``torch.cuda.CUDAGraph`` as it is when
    installed, so a test double patched in its place is observed instead) on ``runtime``'s bus.

    Installing patches torch in several steps, each undone by :meth:`close` (all of them, even when
    one raises; the observer is unregistered whatever fails); a step failing undoes those before it.
    """

    def __init__(self, runtime: Runtime, graph_class: type | None = None) -> None:
        if _ACTIVE:
            raise UsageError(
                "a native graph observer is already installed in this process",
                "close() the previous observer (one check at a time observes the graph class)",
            )
        super().__init__()
        self.runtime = runtime
        self.graph_class: type = graph_class if graph_class is not None else torch.cuda.CUDAGraph
        self._records: dict[int, GraphRecord] = {}
        self._proxies: dict[int, NativeGraph] = {}  # by id(graph), in capture order; the collected drop out
        self._capturing: list[GraphRecord] = []
        self._unknown: list[str] = []  # labels of captures whose weights could not be read
        self._numbers = itertools.count(1)
        self._names = ModuleNames()
        self._deaths: DeathQueue[GraphRecord] = DeathQueue(self._report_death)
        self._closed = False
        self._groups: dict[int, Any] = {}  # every group a capture used, by id (destroy(None) ends them all)
        self._collectives = torch_collectives.CollectiveHooks(
            self._collective_ran, self._groups_destroyed, lambda: bool(self._capturing), lambda: list(self._groups.values())
        )
        self._patches = Patches()
        try:
            self._install(self._patches)
        except BaseException as error:
            self._closed = True
            self._patches.abandon(error)
            raise

    # --- GraphObserver ---------------------------------------------------------------------
    @property
    def graph_types(self) -> tuple[type, ...]:
        return (self.graph_class,)

    def graphs(self) -> list[Graph]:
        return list(self._proxies.values())

    def set_roots(self, roots: Sequence[tuple[str, Any]]) -> None:
        self._names.set_roots(roots)

    def observe(self, point: str) -> None:
        self._observe_now()
        self.runtime.events.mark(point)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._capturing.clear()  # a wrapper someone kept past close() records nothing
        self._columns = self._seen = None  # the modules' tables, held for the scan
        self._groups.clear()  # the observer must keep no group alive past its check
        self._patches.close()

    # --- for the stand-ins ------------------------------------------------------------------
    def record_of(self, graph_id: int) -> GraphRecord | None:
        return self._records.get(graph_id)

    def live_count(self) -> int:
        return sum(1 for r in self._records.values() if r.alive and r.graph() is not None)

    # --- installing -------------------------------------------------------------------------
    def _install(self, patches: Patches) -> None:
        """Each step registers its undo on ``patches`` as soon as it is made."""
        cls = self.graph_class
        missing = [name for name in HOOKED if not callable(getattr(cls, name, None))]
        if missing:
            raise UsageError(
                f"{cls.__qualname__} has no {', '.join(missing)}: not a graph class native mode can observe",
                "observe torch.cuda.CUDAGraph (or a class with capture_begin/capture_end/replay/reset)",
            )
        wrappers = {
            "capture_begin": self._wrap_capture_begin,
            "capture_end": self._wrap_capture_end,
            "replay": self._wrap_replay,
            "reset": self._wrap_reset,
        }
        for name, wrap in wrappers.items():
            patches.setattr(cls, name, wrap(getattr(cls, name)))
        self._collectives.install(patches)
        self._saved_call = torch.nn.Module.__dict__["__call__"]
        self._module_call = self._wrap_module_call(self._saved_call)
        torch.nn.Module.__call__ = self._module_call  # type: ignore[method-assign]
        patches.callback(self._put_back_module_call)
        module_hooks = torch.nn.modules.module
        for register in ("register_module_parameter_registration_hook", "register_module_buffer_registration_hook"):
            patches.callback(getattr(module_hooks, register)(self._registered).remove)
        phase = self._deaths.phase
        gc.callbacks.append(phase)
        patches.callback(lambda: gc.callbacks.remove(phase))
        OBSERVED_GRAPH_TYPES.append(cls)
        patches.callback(lambda: OBSERVED_GRAPH_TYPES.remove(cls))
        _ACTIVE.append(self)
        patches.callback(lambda: _ACTIVE.remove(self))

    def _put_back_module_call(self) -> None:
        if torch.nn.Module.__dict__.get("__call__") is self._module_call:
            torch.nn.Module.__call__ = self._saved_call  # type: ignore[method-assign]
        for name in DYNAMO_UNPATCHED_CALL:
            # Dynamo first imported while we observed took our wrapper for torch's own __call__
            # and would trace it, not inline torch's, in every later compile of the process.
            dynamo = sys.modules.get(name)
            if getattr(dynamo, "unpatched_nn_module_call", None) is self._module_call:
                dynamo.unpatched_nn_module_call = self._saved_call  # type: ignore[union-attr]

    # Each wrapper is a plain function over ``self`` and the class's original method; the graph
    # is its first argument, whichever subclass instance or alias of the class called it.
    def _wrap_capture_begin(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            self._begin(graph)
            try:
                return original(graph, *args, **kwargs)
            except BaseException:
                self._abort(graph)
                raise

        return capture_begin

    def _wrap_capture_end(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                result = original(graph, *args, **kwargs)
            except BaseException:
                self._abort(graph)
                raise
            self._end(graph)
            return result

        return capture_end

    def _wrap_replay(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def replay(graph: Any, *args: Any, **kwargs: Any) -> Any:
            self._replayed(graph)
            return original(graph, *args, **kwargs)

        return replay

    def _wrap_reset(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def reset(graph: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(graph, *args, **kwargs)
            self._reset(graph)
            return result

        return reset

    def _wrap_module_call(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """``nn.Module.__call__`` for the observer's lifetime: while a capture is open, it records
        the module in every capture open on this thread (and stream: :class:`GraphRecord`) -- a
        dict store; a key stored again keeps its first place, so the first module that ran stays
        first -- then calls torch's own.

        Not a global forward pre-hook: any hook sends every module call down torch's slow path,
        several times this wrapper's cost (bench/native_overhead.py, hooks alone). Installed once
        per observer, not per capture: assigning a class attribute of ``nn.Module`` invalidates
        the type caches of all its subclasses (about 0.4 ms). Dynamo inlines a patched
        ``__call__``; it folds ``is_dynamo_compiling()`` to True and so never reads (nor guards on)
        the open captures -- a model compiled outside a capture and replayed inside one, as vLLM
        does, must not recompile under the observer."""
        capturing = self._capturing
        dynamo_compiling = torch.compiler.is_dynamo_compiling
        this_thread = threading.get_ident
        stream_capturing = torch.cuda.is_current_stream_capturing

        def __call__(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if not dynamo_compiling() and capturing:
                thread = this_thread()
                for record in capturing:
                    if record.thread != thread or (record.stream_checked and not stream_capturing()):
                        continue  # another thread's module, or this thread's work on a stream not captured
                    modules = record.modules
                    if not modules:  # the first module's leading input dim is the graph's size in its label
                        first = args[0] if args else None
                        if isinstance(first, torch.Tensor) and first.dim() > 0:
                            record.tokens = int(first.shape[0])
                    modules[id(module)] = module
            return call(module, *args, **kwargs)

        return __call__

    # --- graph events -----------------------------------------------------------------------
    def _record(self, graph: Any) -> GraphRecord:
        record = self._records.get(id(graph))
        if record is None or record.graph() is not graph:  # new, or an id reused after a graph died
            proxy = NativeGraph(self.record_of, graph, next(self._numbers))
            # Death without reset(): FastDeploy-style caches clear by dropping their entries. A
            # weakref callback, not weakref.finalize (a tenth of its cost, paid per capture); after
            # close() it finds the observer closed and does nothing.
            graph_id = id(graph)
            record = GraphRecord(weakref.ref(graph, lambda ref: self._collected(graph_id, ref)), proxy)
            self._records[graph_id] = record
            self._proxies[graph_id] = proxy
        return record

    def _begin(self, graph: Any) -> None:
        if self._closed:
            return
        record = self._record(graph)
        record.modules, record.tokens, record.groups = {}, None, set()
        record.thread = threading.get_ident()
        record.stream_checked = isinstance(graph, TORCH_CUDA_GRAPH) and torch.cuda.is_available()
        self._capturing.append(record)
        # No scan here: capture_end scans before it emits, and nothing is emitted in between.

    def _abort(self, graph: Any) -> None:
        record = self._records.get(id(graph))
        if record is not None and record in self._capturing:
            self._capturing.remove(record)

    def _end(self, graph: Any) -> None:
        if self._closed:
            return
        record = self._records.get(id(graph))
        if record is None or record not in self._capturing:  # began before we were installed
            record = self._record(graph)
        else:
            self._capturing.remove(record)
        self._observe_now()  # changes before this capture belong before it
        self._names.stale()
        modules = _inlined(list(record.modules.values()))
        record.slots, record.refs_at = self._captured_slots(modules), -1
        record.modules = {}
        compiled = compiled_capture(graph)
        record.compiled = compiled is not None
        if compiled is not None:  # torch.compile's cudagraph trees: what it reads is its static inputs
            static_modules, static_slots = self._slots_reading(compiled.pointers or frozenset())
            modules, record.slots = modules + static_modules, record.slots + static_slots
            record.tokens = compiled.tokens if record.tokens is None else record.tokens
        record.alive = True
        proxy = record.proxy
        proxy.owner = self._names.owner(modules)
        first = "CompiledGraph" if compiled is not None else (type(modules[0]).__name__ if modules else "graph")
        size = f"@{record.tokens}" if record.tokens is not None else ""
        proxy.label = f"{first}{size}#{proxy.label.rpartition('#')[2]}"
        if compiled is not None and compiled.pointers is None:
            self._unknown.append(proxy.label)
        self.runtime.events.emit(
            EventKind.GRAPH_CAPTURED,
            proxy.label,
            id(graph),
            owner=proxy.owner,
            buffers=self._refs(record),
            groups=tuple(sorted(record.groups)),
        )

    def _slots_reading(self, pointers: frozenset[int]) -> tuple[list[torch.nn.Module], tuple[Slot, ...]]:
        """The models' modules owning a parameter or buffer at one of ``pointers``, and those slots."""
        modules: list[torch.nn.Module] = []
        slots: list[Slot] = []
        for module in self._names.modules() if pointers else ():
            own = [
                self._slot(module, table, key) for table, key in captured_keys(module) if reads_any(module, table, key, pointers)
            ]
            if own:
                modules.append(module)
                slots.extend(own)
        return modules, tuple(slots)

    def unknown_captures(self) -> list[str]:
        """Labels of the graphs, alive or not, whose captured weights could not be read (see
        :mod:`.compiled`): what was judged against them is not judged."""
        return list(self._unknown)

    def _replayed(self, graph: Any) -> None:
        if self._closed:
            return
        record = self._records.get(id(graph))
        if record is None or not record.alive or record.graph() is not graph:
            return  # captured before observing began: nothing to compare its replay with
        self._observe_now()
        proxy = record.proxy
        self.runtime.events.emit(EventKind.GRAPH_REPLAYED, proxy.label, id(graph), owner=proxy.owner, buffers=self._refs(record))

    def _refs(self, record: GraphRecord) -> tuple[BufferRef, ...]:
        if record.refs_at != self._moves:
            record.refs, record.refs_at = tuple(map(SLOT_REF, record.slots)), self._moves
        return record.refs

    def _reset(self, graph: Any) -> None:
        record = self._records.get(id(graph))
        if not self._closed and record is not None and record.alive and record.graph() is graph:
            self._graph_died(record)

    def _collected(self, graph_id: int, ref: weakref.ref[Any]) -> None:
        """The framework graph is gone (its weakref's callback): destroyed if it was alive, and
        forgotten, so a check that captures a graph per size per weight cycle holds no record of
        each one it ever saw."""
        record = self._records.get(graph_id)
        if not self._closed and record is not None and record.graph is ref:
            self._graph_died(record)

    def _graph_died(self, record: GraphRecord) -> None:
        """reset(), or a graph collected: reported now, after a scan (a weight released before it
        reads as such: FDC201), or later when found by the collector or inside an observation
        point (:mod:`.deaths`)."""
        if self._deaths.must_wait():
            self._deaths.defer(record)
            return
        self._observe_now()
        self._report_death(record)

    def _report_death(self, record: GraphRecord) -> None:
        graph_id = record.proxy.identity
        if record.graph() is None and self._records.get(graph_id) is record:
            del self._records[graph_id]
            self._proxies.pop(graph_id, None)
        if self._closed or not record.alive:
            return  # reset twice, or never captured: nothing was alive
        record.alive = False
        record.slots, record.refs_at = (), -1
        self.runtime.events.emit(EventKind.GRAPH_DESTROYED, record.proxy.label, graph_id, owner=record.proxy.owner)

    def _observe_now(self) -> None:
        """An observation point: the deaths found since the last one, then the storage scan, then
        the deaths found on the way. Re-entered (a finalizer or a listener inside one), it does
        nothing: the point under way reports everything, in the order it saw it."""
        deaths = self._deaths
        if deaths.busy:
            return
        deaths.busy = True
        try:
            deaths.flush()
            self._scan()
        finally:
            deaths.busy = False
        deaths.flush()

    def _collect(self) -> None:
        """A graph nothing can reach any more is being destroyed -- one held only by a reference
        cycle dies at the next collection -- so it is dead before what is about to be judged
        against it (a release, a group shutdown), whether or not the collector ran already: the
        same verdict either way (:mod:`.deaths`). Paid only then (a collection costs ~0.1 s)."""
        gc.collect()
        self._deaths.flush()

    # --- what StorageScan asks ----------------------------------------------------------------
    def _slot_name(self, module: torch.nn.Module, key: str) -> str:
        return self._names.name(module, key)

    def _releasing(self, released: set[int]) -> None:
        if any(r.alive and not released.isdisjoint(map(id, r.slots)) for r in self._records.values()):
            self._collect()

    # --- collectives ------------------------------------------------------------------------
    def _open_here(self) -> list[GraphRecord]:
        """The captures open on this thread (and stream) now: what runs here is theirs."""
        thread = threading.get_ident()
        return [
            r
            for r in self._capturing
            if r.thread == thread and (not r.stream_checked or torch.cuda.is_current_stream_capturing())
        ]

    def _collective_ran(self, group: Any) -> None:
        """A collective on ``group`` was called while capturing: the captures open here captured it."""
        for record in self._open_here():
            self._groups[id(group)] = group
            record.groups.add(id(group))

    def _groups_destroyed(self, groups: list[Any]) -> None:
        """A teardown is about to end ``groups``: GROUP_SHUTDOWN first (the teardown may hang),
        after an observation point, so a weight released before it reads as such."""
        if self._closed:
            return
        self._observe_now()
        ended = {id(group) for group in groups}
        if any(r.alive and not r.groups.isdisjoint(ended) for r in self._records.values()):
            self._collect()
        for group in groups:
            self.runtime.events.emit(EventKind.GROUP_SHUTDOWN, torch_collectives.group_name(group), id(group))
            self._groups.pop(id(group), None)


def _inlined(modules: list[torch.nn.Module]) -> list[torch.nn.Module]:
    """The modules that ran, and with a ``torch.compile``d one (an ``OptimizedModule``, holding the
    model as ``_orig_mod``) every module under that model: dynamo inlines their calls,
    so none reaches ``nn.Module.__call__`` and the capture would read as holding no weight (a
    compiled model captured by the engine's own ``torch.cuda.graph``, vLLM's and SGLang's style,
    certified blind). Every module of the compiled model may have run, so each one's weights count."""
    found: dict[int, torch.nn.Module] = {}
    for module in modules:
        found.setdefault(id(module), module)  # the compiled wrapper stays first: it names the graph
        inner = getattr(module, "_orig_mod", None)
        for ran in inner.modules() if isinstance(inner, torch.nn.Module) else ():
            found.setdefault(id(ran), ran)
    return list(found.values())
