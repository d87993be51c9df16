"""Native mode for torch: the model's own ``torch.cuda.CUDAGraph``s, turned into the kit's events.

A model written without the kit captures with ``torch.cuda.CUDAGraph`` / ``torch.cuda.graph`` /
``torch.cuda.make_graphed_callables`` (``torch.compile``'s cudagraph trees use the same class) and
swaps weights its own way (``param.data = new``, ``untyped_storage().resize_(0)``,
``load_state_dict``, ``del``, ``.to("meta")``). It never calls the runtime, so while a
:class:`TorchGraphObserver` is installed the events the lifecycle rules read are derived:

* graph events: the graph CLASS's ``capture_begin``/``capture_end``/``replay``/``reset`` are
  wrapped, so every graph of the process is seen whoever made it; a graph dropped without
  ``reset()`` (caches clear by dropping entries) is seen dying through a weakref callback;
* what a graph captured: the parameters and registered buffers of the modules called between
  ``capture_begin`` and ``capture_end`` (``nn.Module.__call__`` is wrapped while observing), each
  as a *slot* -- (module, name), whatever tensor object fills it later -- with its storage address
  at capture end;
* release and restore: every slot any graph captured is compared with what was last seen at each
  observation point (every graph event, every lifecycle mark): an address that went to 0 (storage
  resized to 0, parameter deleted, moved to meta, module collected) is PARAM_RELEASED; one that
  changed or came back (``param.data = new``, ``load_state_dict(assign=True)``) is PARAM_RESTORED,
  in the order first observable. ``load_state_dict`` into the same storage changes nothing a
  graph reads, and emits nothing.

What it cannot see: a release and restore that both happen between two observation points (the
address it compares may even be the same one); tensors a capture reads that are not parameters or
buffers of a module called through ``module(...)`` while capturing (functional code over raw
tensors, a top-level ``model.forward(...)`` call's own direct parameters; ``torch.compile``'s
graphs are seen, but compiled code calls no module, so not what they captured); collectives
outside ``torch.distributed``'s functions (see :mod:`fd_conformance.runtime.torch_collectives`).
* collectives: the process groups of the ``torch.distributed`` collectives called while a capture
  is open are the groups the graph captured; ``destroy_process_group`` shuts them down (FDC202 when
  a graph that captured one is still alive).
"""

from __future__ import annotations

import gc
import itertools
import operator
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fd_conformance.errors import UsageError
from fd_conformance.runtime import torch_collectives
from fd_conformance.runtime.base import (
    OBSERVED_GRAPH_TYPES,
    BufferRef,
    EventKind,
    Graph,
    GraphObserver,
    Runtime,
)

# torch's own class, whatever a test patches in place of the torch.cuda.CUDAGraph name
TORCH_CUDA_GRAPH: type = torch.cuda.graphs.CUDAGraph
HOOKED = ("capture_begin", "capture_end", "replay", "reset")  # the class methods wrapped while observing
TABLES = ("_parameters", "_buffers")  # where nn.Module keeps what a graph reads by address
# Unbound, mapped over every watched slot at C speed; None where a tensor or table should be raises TypeError
DATA_PTR: Callable[[Any], int] = torch.Tensor.data_ptr
LOOKUP: Callable[[Any, str], Any] = dict.get
SLOT_REF = operator.attrgetter("ref")
# Modules of torch._dynamo that keep torch's nn.Module.__call__, read once at their import
DYNAMO_UNPATCHED_CALL = ("torch._dynamo.utils", "torch._dynamo.variables.nn_module")
_deref = operator.methodcaller("__call__")  # a weakref's referent at C speed (operator.call is 3.11+)

# The observer installed now (one at a time: two would wrap the class twice and double every event).
_ACTIVE: list[TorchGraphObserver] = []


def observing(runtime: Runtime) -> bool:
    """An observer installed on ``runtime``'s events is watching the graph class now."""
    return any(observer.runtime is runtime for observer in _ACTIVE)


def live_native_graphs() -> int:
    """Observed framework graphs alive now (the CUDA runtime keeps cuBLAS workspaces while any is)."""
    return sum(observer.live_count() for observer in _ACTIVE)


def storage_address(tensor: Any) -> int:
    """Where a graph would read ``tensor``: its storage's data pointer; 0 when there is none (no
    tensor, storage resized to 0 bytes, meta)."""
    if not isinstance(tensor, torch.Tensor):
        return 0
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without plain storage
        return int(tensor.data_ptr()) if not tensor.is_meta else 0


class _Slot:
    """One captured parameter or buffer position: ``module.<table>[key]``, weakly (the observer
    must keep nothing alive: a deleted weight has to free its memory as it would unobserved)."""

    __slots__ = ("__weakref__", "key", "last", "module", "ptr", "ref", "table")

    def __init__(self, module: torch.nn.Module, table: str, key: str, name: str, died: Callable[[Any], None]) -> None:
        self.module = weakref.ref(module, died)
        self.table = table
        self.key = key
        self.ptr, self.last = -1, 0  # the tensor's data_ptr() when last looked at, and its storage address then
        # The slot's identity in events is id(self): stable for the check, whatever tensor object
        # fills the position (a load_state_dict(assign=True) or .to("meta") makes new ones).
        self.ref = BufferRef(id(self), self.address(), name)

    def address(self) -> int:
        """The storage address now (0: none). It is read at every graph event, so the tensor's
        data_ptr() -- one cheap call -- says whether anything moved since the last look, and only
        then is the storage asked (a view's data_ptr() stays nonzero when its storage is freed)."""
        module = self.module()  # runs for every slot at every graph event: kept to plain lookups
        state = module.__dict__ if module is not None else {}
        tensor = state.get(self.table, {}).get(self.key)
        if tensor is None:
            tensor = state.get(self.key)
        if not isinstance(tensor, torch.Tensor):
            self.ptr = -1
            return 0
        try:
            ptr = int(tensor.data_ptr())
        except (RuntimeError, NotImplementedError):  # no plain data pointer: ask every time
            ptr = -2
        if ptr != self.ptr or ptr == -2:
            self.ptr, self.last = ptr, storage_address(tensor)
        return self.last


@dataclass
class _Observed:
    """A framework graph object as the observer knows it."""

    graph: weakref.ref[Any]
    proxy: NativeGraph
    alive: bool = False
    slots: tuple[_Slot, ...] = ()
    modules: dict[int, torch.nn.Module] = field(default_factory=dict)  # ran during the open capture
    tokens: int | None = None  # leading dim of the first module's first tensor input (the label's size)
    groups: set[int] = field(default_factory=set)  # id() of the process groups its collectives ran on
    # Its slots' refs as its events carry them, and the observer's move count they were read at:
    # the same tuple at every replay while nothing moved (the recorder compares it by identity)
    refs: tuple[BufferRef, ...] = ()
    refs_at: int = -1


class NativeGraph(Graph):
    """The kit's view of one framework graph: what the suites read (label, owner, alive, reset),
    without holding the framework's graph alive (the model decides when it dies)."""

    def __init__(self, observer: TorchGraphObserver, graph: Any) -> None:
        self._observer = observer
        self._graph = weakref.ref(graph)
        self._identity = id(graph)
        self.label = f"{type(graph).__name__}#{observer.next_number()}"
        self.owner = ""

    @property
    def identity(self) -> int:
        return self._identity

    @property
    def alive(self) -> bool:
        record = self._observer.record_of(self._identity)
        return record is not None and record.proxy is self and record.alive and self._graph() is not None

    def capture(self, fn: Callable[[], Any], *, buffers: Any = (), groups: Sequence[Any] = ()) -> Any:
        raise UsageError(
            f"native graph {self.label!r} is captured by the model itself",
            "capture with torch.cuda.graph(...) in the model; the kit only observes native graphs",
        )

    def replay(self) -> None:
        graph = self._graph()
        if graph is None or not self.alive:
            raise RuntimeError(f"native graph {self.label!r} is not captured")
        graph.replay()

    def reset(self) -> None:
        graph = self._graph()
        if graph is not None and self.alive:
            graph.reset()  # through the wrapped class method: GRAPH_DESTROYED is emitted there


class TorchGraphObserver(GraphObserver):
    """Observes every graph of ``graph_class`` (default: ``torch.cuda.CUDAGraph`` as it is when
    installed, so a test double patched in its place is observed instead) on ``runtime``'s bus."""

    def __init__(self, runtime: Runtime, graph_class: type | None = None) -> None:
        if _ACTIVE:
            raise UsageError(
                "a native graph observer is already installed in this process",
                "close() the previous observer (one check at a time observes the graph class)",
            )
        self.runtime = runtime
        self.graph_class: type = graph_class if graph_class is not None else torch.cuda.CUDAGraph
        self._records: dict[int, _Observed] = {}
        self._proxies: dict[int, NativeGraph] = {}  # by id(graph), in capture order; the collected drop out
        self._watched: dict[tuple[int, str, str], _Slot] = {}
        # _watched as parallel columns for the scan's C-speed pass: each slot's table -- the
        # module's own dict, held (not its module, weakly) so the pass costs two C calls a slot --
        # and key. Rebuilt when _watched changes or a watched module dies (None then: a dead
        # module's dict must not outlive it). _seen: that pass's pointers at the last scan (None:
        # look slot by slot). _died: a watched module was collected since the last scan.
        self._columns: tuple[list[dict[str, Any]], list[str]] | None = None
        self._seen: list[int] | None = None
        self._died = False
        self._moves = 0  # slot refs replaced so far (each _Observed.refs is valid at one count)
        self._module_slots: dict[int, tuple[weakref.ref[torch.nn.Module], tuple[tuple[str, ...], ...], tuple[_Slot, ...]]] = {}
        # The slots of a capture, by the ids of the modules that ran in it: the same modules run in
        # every capture of a model, and a capture's cost is paid on the serving path. Valid while
        # no parameter or buffer was registered anywhere since (torch's global registration hooks
        # count those: a rebuilt model registers its weights, whatever ids its modules reuse).
        self._capture_slots: dict[tuple[int, ...], tuple[int, tuple[weakref.ref[torch.nn.Module], ...], tuple[_Slot, ...]]] = {}
        self._registrations = 0
        self._registration_hooks: list[Any] = []
        self._capturing: list[_Observed] = []
        self._numbers = itertools.count(1)
        self._roots: list[tuple[str, Any]] = []
        self._names: dict[int, tuple[frozenset[str], str]] = {}  # id(module) -> (roles, qualified name)
        self._saved: dict[str, Any] = {}
        self._closed = False
        self._collecting = False
        self._names_fresh = False
        self._groups: dict[int, Any] = {}  # every group a capture used, by id (destroy(None) ends them all)
        self._collectives = torch_collectives.CollectiveHooks(
            self._collective_ran, self._groups_destroyed, lambda: bool(self._capturing), lambda: list(self._groups.values())
        )
        self._install()

    # --- GraphObserver ---------------------------------------------------------------------
    @property
    def graph_types(self) -> tuple[type, ...]:
        return (self.graph_class,)

    def graphs(self) -> list[Graph]:
        return list(self._proxies.values())

    def set_roots(self, roots: Sequence[tuple[str, Any]]) -> None:
        self._roots = [(role, model) for role, model in roots if model is not None]
        self._names.clear()

    def observe(self, point: str) -> None:
        self._scan()
        self.runtime.events.mark(point)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name, original in self._saved.items():
            if original is None:
                delattr(self.graph_class, name)
            else:
                setattr(self.graph_class, name, original)
        self._capturing.clear()  # a wrapper someone kept past close() records nothing
        self._columns = self._seen = None  # the modules' tables, held for the scan
        if torch.nn.Module.__dict__.get("__call__") is self._module_call:
            torch.nn.Module.__call__ = self._saved_call  # type: ignore[method-assign]
        for name in DYNAMO_UNPATCHED_CALL:
            # Dynamo first imported while we observed took our wrapper for torch's own __call__
            # and would trace it, not inline torch's, in every later compile of the process.
            dynamo = sys.modules.get(name)
            if getattr(dynamo, "unpatched_nn_module_call", None) is self._module_call:
                dynamo.unpatched_nn_module_call = self._saved_call  # type: ignore[union-attr]
        for handle in self._registration_hooks:
            handle.remove()
        self._collectives.close()
        self._groups.clear()  # the observer must keep no group alive past its check
        if self.graph_class in OBSERVED_GRAPH_TYPES:
            OBSERVED_GRAPH_TYPES.remove(self.graph_class)
        if self in _ACTIVE:
            _ACTIVE.remove(self)

    # --- for the stand-ins ------------------------------------------------------------------
    def record_of(self, graph_id: int) -> _Observed | None:
        return self._records.get(graph_id)

    def next_number(self) -> int:
        return next(self._numbers)

    def live_count(self) -> int:
        return sum(1 for r in self._records.values() if r.alive and r.graph() is not None)

    # --- installing -------------------------------------------------------------------------
    def _install(self) -> None:
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
            original = getattr(cls, name)
            self._saved[name] = cls.__dict__.get(name)  # None: inherited, so delete ours on close
            setattr(cls, name, wrap(original))
        self._collectives.install()
        self._saved_call = torch.nn.Module.__dict__["__call__"]
        self._module_call = self._wrap_module_call(self._saved_call)
        torch.nn.Module.__call__ = self._module_call  # type: ignore[method-assign]
        module_hooks = torch.nn.modules.module
        self._registration_hooks = [
            module_hooks.register_module_parameter_registration_hook(self._registered),
            module_hooks.register_module_buffer_registration_hook(self._registered),
        ]
        OBSERVED_GRAPH_TYPES.append(cls)
        _ACTIVE.append(self)

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
            self._destroyed(id(graph))
            return result

        return reset

    # --- graph events -----------------------------------------------------------------------
    def _record(self, graph: Any) -> _Observed:
        record = self._records.get(id(graph))
        if record is None or record.graph() is not graph:  # new, or an id reused after a graph died
            proxy = NativeGraph(self, graph)
            # Death without reset(): FastDeploy-style caches clear by dropping their entries. A
            # weakref callback, not weakref.finalize (a tenth of its cost, paid per capture); after
            # close() it finds the observer closed and does nothing.
            graph_id = id(graph)
            record = _Observed(weakref.ref(graph, lambda _: self._collected(graph_id)), proxy)
            self._records[graph_id] = record
            self._proxies[graph_id] = proxy
        return record

    def _begin(self, graph: Any) -> None:
        if self._closed:
            return
        record = self._record(graph)
        record.modules, record.tokens, record.groups = {}, None, set()
        self._capturing.append(record)
        # No scan here: capture_end scans before it emits, and nothing is emitted in between.

    def _abort(self, graph: Any) -> None:
        record = self._records.get(id(graph))
        if record is not None and record in self._capturing:
            self._capturing.remove(record)

    def _registered(self, module: torch.nn.Module, name: str, value: Any) -> None:
        """A parameter or buffer was registered on some module: cached capture slots may be stale."""
        self._registrations += 1

    def _end(self, graph: Any) -> None:
        if self._closed:
            return
        record = self._records.get(id(graph))
        if record is None or record not in self._capturing:  # began before we were installed
            record = self._record(graph)
        else:
            self._capturing.remove(record)
        self._scan()  # changes before this capture belong before it
        self._names_fresh = False
        modules = list(record.modules.values())
        record.slots, record.refs_at = self._captured_slots(modules), -1
        record.modules = {}
        record.alive = True
        proxy = record.proxy
        proxy.owner = self._owner(modules)
        first = type(modules[0]).__name__ if modules else "graph"
        size = f"@{record.tokens}" if record.tokens is not None else ""
        proxy.label = f"{first}{size}#{proxy.label.rpartition('#')[2]}"
        self.runtime.events.emit(
            EventKind.GRAPH_CAPTURED,
            proxy.label,
            id(graph),
            owner=proxy.owner,
            buffers=self._refs(record),
            groups=tuple(sorted(record.groups)),
        )

    def _replayed(self, graph: Any) -> None:
        if self._closed:
            return
        record = self._records.get(id(graph))
        if record is None or not record.alive or record.graph() is not graph:
            return  # captured before observing began: nothing to compare its replay with
        self._scan()
        proxy = record.proxy
        self.runtime.events.emit(EventKind.GRAPH_REPLAYED, proxy.label, id(graph), owner=proxy.owner, buffers=self._refs(record))

    def _refs(self, record: _Observed) -> tuple[BufferRef, ...]:
        if record.refs_at != self._moves:
            record.refs, record.refs_at = tuple(map(SLOT_REF, record.slots)), self._moves
        return record.refs

    def _destroyed(self, graph_id: int) -> None:
        """reset(), or the finalizer of a graph collected without one (no reference to the graph)."""
        record = self._records.get(graph_id)
        if self._closed or record is None or not record.alive:
            return  # reset twice, or never captured: nothing was alive
        if not self._collecting:
            self._scan()  # a weight released before the graph died must read as such (FDC201)
        record.alive = False
        record.slots, record.refs_at = (), -1
        proxy = record.proxy
        self.runtime.events.emit(EventKind.GRAPH_DESTROYED, proxy.label, graph_id, owner=proxy.owner)

    def _collected(self, graph_id: int) -> None:
        """The framework graph is gone: destroyed if it was alive, then forgotten, so a check that
        captures a graph per size per weight cycle holds no record of each one it ever saw."""
        self._destroyed(graph_id)
        self._records.pop(graph_id, None)
        self._proxies.pop(graph_id, None)

    def _collective_ran(self, group: Any) -> None:
        """A collective on ``group`` was called while capturing: every open capture captured it."""
        self._groups[id(group)] = group
        for record in self._capturing:
            record.groups.add(id(group))

    def _groups_destroyed(self, groups: list[Any]) -> None:
        """``destroy_process_group`` is about to run: GROUP_SHUTDOWN first (the destroy may hang),
        after a scan, so a weight released before it reads as such."""
        if self._closed:
            return
        self._scan()
        for group in groups:
            self.runtime.events.emit(EventKind.GROUP_SHUTDOWN, torch_collectives.group_name(group), id(group))
            self._groups.pop(id(group), None)

    def _wrap_module_call(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """``nn.Module.__call__`` for the observer's lifetime: while a capture is open, it records
        the module in every open capture (a dict store; a key stored again keeps its first place,
        so the first module that ran stays first), then calls torch's own.

        Not a global forward pre-hook: any hook sends every module call down torch's slow path,
        several times this wrapper's cost (bench/native_overhead.py, hooks alone). Installed once
        per observer, not per capture: assigning a class attribute of ``nn.Module`` invalidates
        the type caches of all its subclasses (about 0.4 ms). Dynamo inlines a patched
        ``__call__``; it folds ``is_dynamo_compiling()`` to True and so never reads (nor guards on)
        the open captures -- a model compiled outside a capture and replayed inside one, as vLLM
        does, must not recompile under the observer."""
        capturing = self._capturing
        dynamo_compiling = torch.compiler.is_dynamo_compiling

        def __call__(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if not dynamo_compiling() and capturing:
                for record in capturing:
                    modules = record.modules
                    if not modules:  # the first module's leading input dim is the graph's size in its label
                        first = args[0] if args else None
                        if isinstance(first, torch.Tensor) and first.dim() > 0:
                            record.tokens = int(first.shape[0])
                    modules[id(module)] = module
            return call(module, *args, **kwargs)

        return __call__

    # --- storage --------------------------------------------------------------------------
    def _slot(self, module: torch.nn.Module, table: str, key: str) -> _Slot:
        index = (id(module), table, key)
        slot = self._watched.get(index)
        if slot is None or slot.module() is not module:
            slot = self._watched[index] = _Slot(module, table, key, self._name(module, key), self._module_died)
            self._columns = None
        return slot

    def _slots_of(self, module: torch.nn.Module) -> tuple[_Slot, ...]:
        """The module's own parameter and buffer slots, remembered per module: the same modules
        run in every capture, and a capture's cost is paid on the serving path."""
        state = module.__dict__
        # What keys the tables hold, read at C speed (no per-entry Python): a weight deleted, or
        # registered under another name, changes it; one set to None or back in place does not.
        names = (tuple(state.get(TABLES[0], ())), tuple(state.get(TABLES[1], ())))
        cached = self._module_slots.get(id(module))
        if cached is None or cached[0]() is not module or cached[1] != names:
            slots = tuple(self._slot(module, table, key) for table, key in _captured_keys(module))
            cached = (weakref.ref(module), names, slots)
            self._module_slots[id(module)] = cached
        return cached[2]

    def _captured_slots(self, modules: list[torch.nn.Module]) -> tuple[_Slot, ...]:
        """The slots of every module that ran in a capture, from the cache when the same modules
        ran before and nothing was registered since."""
        key = tuple(map(id, modules))
        cached = self._capture_slots.get(key)
        # list == compares by identity first, and nn.Module has no __eq__: the same modules, alive
        if cached is not None and cached[0] == self._registrations and list(map(_deref, cached[1])) == modules:
            return cached[2]
        slots = tuple(slot for module in modules for slot in self._slots_of(module))
        self._capture_slots[key] = (self._registrations, tuple(map(weakref.ref, modules)), slots)
        return slots

    def _module_died(self, _: Any) -> None:
        """A watched module was collected (a weakref callback, mid-deallocation: no work here)."""
        self._columns, self._died = None, True

    def _pointers(self) -> list[int] | None:
        """Every watched slot's tensor's data_ptr(), read without a Python frame per slot (a scan
        runs at every capture and replay: hundreds of weights in a real model). None when some
        slot cannot be read that way -- its module collected, its entry deleted or None, a tensor
        without a plain pointer -- and the scan must look slot by slot.

        The pass reads the tables it held since the columns were built: a module whose
        ``_parameters`` dict itself is replaced (no torch API does) is seen by the slow path only."""
        if self._columns is None:
            slots = list(self._watched.values())
            modules = [slot.module() for slot in slots]  # once per rebuild: no need for C speed
            if None in modules:  # collected: the slow path reports its slots, then they are forgotten
                return None
            self._columns = (list(map(LOOKUP, map(vars, modules), (s.table for s in slots))), [s.key for s in slots])
            self._seen = None
        tables, keys = self._columns
        try:
            return list(map(DATA_PTR, map(LOOKUP, tables, keys)))
        except (TypeError, RuntimeError, NotImplementedError):
            return None

    def _scan(self) -> None:
        """Emit a release/restore for every watched slot whose address moved since last seen."""
        now = self._pointers()
        if now is not None and now == self._seen:
            return  # no pointer moved: every slot's address is the one last seen
        self._seen = None  # until every move below is emitted: a listener raising must not hide the rest
        moved = [(slot, address) for slot in self._watched.values() if (address := slot.address()) != slot.ref.address]
        while moved:
            self._emit_moves(moved)
            # A collection in there may have killed watched modules: their slots are released too
            moved = [(slot, 0) for slot in self._watched.values() if slot.ref.address and slot.module() is None]
        if self._died:  # a collected module's slots are reported (above) and cannot come back
            self._forget_collected()
            now = self._pointers()
        self._seen = now  # only now: a listener raising above must not hide the moves left

    def _emit_moves(self, moved: list[tuple[_Slot, int]]) -> None:
        released = {id(slot) for slot, address in moved if address == 0}
        if released and any(r.alive and released.intersection(map(id, r.slots)) for r in self._records.values()):
            # A graph nothing can reach any more is being destroyed: one held only by a reference
            # cycle (make_graphed_callables keeps its graphs in a local class's closures) dies at
            # the next collection. Collect before judging, as the recorder does before FDC203, so
            # a release after an unreachable graph reads as the right order. Paid only here.
            self._collect()
        events = self.runtime.events
        for slot, address in moved:
            before = slot.ref
            self._moves += 1
            slot.ref = BufferRef(before.obj_id, address, before.name)
            kind = EventKind.PARAM_RELEASED if address == 0 else EventKind.PARAM_RESTORED
            events.emit(kind, before.name, before.obj_id, buffers=(slot.ref,))

    def _forget_collected(self) -> None:
        """Drop the slots and cache entries of collected modules: their release is reported, they
        cannot come back, and every scan would read them again (a model rebuilt per weight sync
        would grow the scan by a model each time)."""
        self._died = False
        self._watched = {k: slot for k, slot in self._watched.items() if slot.module() is not None}
        self._columns = None
        self._module_slots = {k: entry for k, entry in self._module_slots.items() if entry[0]() is not None}
        self._capture_slots = {k: entry for k, entry in self._capture_slots.items() if all(r() is not None for r in entry[1])}

    def _collect(self) -> None:
        """gc.collect(); the graphs it destroys report without scanning (we are mid-scan)."""
        self._collecting = True
        try:
            gc.collect()
        finally:
            self._collecting = False

    # --- names ----------------------------------------------------------------------------
    def _known(self, module: torch.nn.Module) -> tuple[frozenset[str], str] | None:
        # Rebuilt once per capture at most (models gain modules between captures, never during one)
        if id(module) not in self._names and not self._names_fresh:
            self._names_fresh = True
            self._names.clear()
            for role, root in self._roots:
                if isinstance(root, torch.nn.Module):
                    for name, sub in root.named_modules(remove_duplicate=False):
                        roles, qualname = self._names.get(id(sub), (frozenset(), ""))
                        self._names[id(sub)] = (roles | {role}, qualname or _join(role, name))
        return self._names.get(id(module))

    def _name(self, module: torch.nn.Module, key: str) -> str:
        known = self._known(module)
        if known is None:
            return f"{type(module).__name__}.{key}"
        return f"{known[1]}.{key}" if known[1] else key

    def _owner(self, modules: list[torch.nn.Module]) -> str:
        """The role ("main", "draft") of the first module that ran and belongs to one model alone
        (a draft's graph runs the shared embedding too); else the first module's class name."""
        for module in modules:
            known = self._known(module)
            if known is not None and len(known[0]) == 1:
                return next(iter(known[0]))
        return type(modules[0]).__name__ if modules else ""


def _join(role: str, name: str) -> str:
    """How a finding names a module: "main" models' names bare, others prefixed ("draft.head")."""
    if role == "main":
        return name
    return f"{role}.{name}" if name else role


def _captured_keys(module: torch.nn.Module) -> list[tuple[str, str]]:
    """(table, key) of the module's own parameters and registered buffers (its children report
    their own when they run: what ran is what the graph read)."""
    state = module.__dict__
    return [(table, key) for table in TABLES for key, tensor in state.get(table, {}).items() if tensor is not None]
