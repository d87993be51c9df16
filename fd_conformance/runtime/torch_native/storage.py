"""What a native graph captured, by position, and the scan that sees it released or restored.

A graph reads its weights by address. Each parameter or buffer of a module that ran during a
capture is watched as a *slot* -- ``module.<table>[key]``, whatever tensor object fills it later --
and every slot is compared with what was last seen at each observation point: an address that went
to 0 (storage resized to 0, parameter deleted, moved to meta, module collected) is PARAM_RELEASED;
one that changed or came back (``param.data = new``, ``load_state_dict(assign=True)``) is
PARAM_RESTORED. The scan runs at every capture and replay, so its common case -- nothing moved --
is paid at C speed.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from typing import Any

import torch

from fd_conformance.runtime.base import BufferRef, EventKind, Runtime

TABLES = ("_parameters", "_buffers")
PARAMETER_CONTAINERS = (torch.nn.ParameterDict, torch.nn.ParameterList)  # where nn.Module keeps what a graph reads by address
# Unbound, mapped over every watched slot at C speed; None where a tensor or table should be raises TypeError
DATA_PTR: Callable[[Any], int] = torch.Tensor.data_ptr
LOOKUP: Callable[[Any, str], Any] = dict.get
SLOT_REF = operator.attrgetter("ref")
_deref = operator.methodcaller("__call__")  # a weakref's referent at C speed (operator.call is 3.11+)


def storage_address(tensor: Any) -> int:
    """Where a graph would read ``tensor``: its storage's data pointer; 0 when there is none (no
    tensor, storage resized to 0 bytes, meta)."""
    if not isinstance(tensor, torch.Tensor):
        return 0
    try:
        return int(tensor.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a tensor subclass without plain storage
        return int(tensor.data_ptr()) if not tensor.is_meta else 0


def captured_keys(module: torch.nn.Module) -> list[tuple[str, str]]:
    """(table, key) of the module's own parameters and registered buffers (its children report
    their own when they run: what ran is what the graph read)."""
    state = module.__dict__
    return [(table, key) for table in TABLES for key, tensor in state.get(table, {}).items() if tensor is not None]


def read_containers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """The module's ParameterDict / ParameterList children: never called, read by their owner's
    forward (``self.mats["up"]``), so what they hold is the owner's when the owner runs."""
    return [child for child in module.__dict__.get("_modules", {}).values() if isinstance(child, PARAMETER_CONTAINERS)]


def reads_any(module: torch.nn.Module, table: str, key: str, pointers: frozenset[int]) -> bool:
    """The module's ``table[key]`` is at one of ``pointers`` (a tensor's or its storage's address)."""
    tensor = module.__dict__.get(table, {}).get(key)
    if not isinstance(tensor, torch.Tensor):
        return False
    try:
        return int(tensor.data_ptr()) in pointers or storage_address(tensor) in pointers
    except (RuntimeError, NotImplementedError):
        return False


class Slot:
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


class StorageScan:
    """The storage half of the native observer: the watched slots, their caches and the scan.

    A base class of the observer rather than an object it holds, so the observer's state stays one
    object; it asks the observer for two things: a slot's name, and a chance to act (collect the
    garbage) before releases are reported.
    """

    runtime: Runtime

    def __init__(self) -> None:
        super().__init__()
        self._watched: dict[tuple[int, str, str], Slot] = {}
        # _watched as parallel columns for the scan's C-speed pass: each slot's table -- the
        # module's own dict, held (not its module, weakly) so the pass costs two C calls a slot --
        # and key. Rebuilt when _watched changes or a watched module dies (None then: a dead
        # module's dict must not outlive it). _seen: that pass's pointers at the last scan (None:
        # look slot by slot). _died: a watched module was collected since the last scan.
        self._columns: tuple[list[dict[str, Any]], list[str]] | None = None
        self._seen: list[int] | None = None
        self._died = False
        self._moves = 0  # slot refs replaced so far (a graph's refs tuple is valid at one count)
        self._module_slots: dict[int, tuple[weakref.ref[torch.nn.Module], tuple[tuple[str, ...], ...], tuple[Slot, ...]]] = {}
        # The slots of a capture, by the ids of the modules that ran in it: the same modules run in
        # every capture of a model, and a capture's cost is paid on the serving path. Valid while
        # no parameter or buffer was registered anywhere since (torch's global registration hooks
        # count those: a rebuilt model registers its weights, whatever ids its modules reuse).
        self._capture_slots: dict[tuple[int, ...], tuple[int, tuple[weakref.ref[torch.nn.Module], ...], tuple[Slot, ...]]] = {}
        self._registrations = 0

    # --- what the observer provides -----------------------------------------------------------
    def _slot_name(self, module: torch.nn.Module, key: str) -> str:
        raise NotImplementedError

    def _releasing(self, released: set[int]) -> None:
        """The slots with these ids are about to be reported released."""

    # --- slots ----------------------------------------------------------------------------------
    def _registered(self, module: torch.nn.Module, name: str, value: Any) -> None:
        """A parameter or buffer was registered on some module: cached capture slots may be stale."""
        self._registrations += 1

    def _slot(self, module: torch.nn.Module, table: str, key: str) -> Slot:
        index = (id(module), table, key)
        slot = self._watched.get(index)
        if slot is None or slot.module() is not module:
            slot = self._watched[index] = Slot(module, table, key, self._slot_name(module, key), self._module_died)
            self._columns = None
        return slot

    def _slots_of(self, module: torch.nn.Module) -> tuple[Slot, ...]:
        """The module's own parameter and buffer slots, remembered per module: the same modules
        run in every capture, and a capture's cost is paid on the serving path."""
        state = module.__dict__
        # What keys the tables hold, read at C speed (no per-entry Python): a weight deleted, or
        # registered under another name, changes it; one set to None or back in place does not.
        names: tuple[tuple[str, ...], ...] = (tuple(state.get(TABLES[0], ())), tuple(state.get(TABLES[1], ())))
        containers = read_containers(module) if state.get("_modules") else []
        for container in containers:
            names += (tuple(container.__dict__.get(TABLES[0], ())),)
        cached = self._module_slots.get(id(module))
        if cached is None or cached[0]() is not module or cached[1] != names:
            slots = tuple(self._slot(owner, table, key) for owner in (module, *containers) for table, key in captured_keys(owner))
            cached = (weakref.ref(module), names, slots)
            self._module_slots[id(module)] = cached
        return cached[2]

    def _captured_slots(self, modules: list[torch.nn.Module]) -> tuple[Slot, ...]:
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

    # --- the scan -------------------------------------------------------------------------------
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

    def _emit_moves(self, moved: list[tuple[Slot, int]]) -> None:
        released = {id(slot) for slot, address in moved if address == 0}
        if released:
            self._releasing(released)
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
