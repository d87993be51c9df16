"""Resolution: which definition of the clear method the engine's call reaches, as Python resolves
it, without changing anything.

The inheritance rule: the most-derived real (non-shim) definition under either spelling is THE
method. :func:`resolve` applies it; :func:`reach` follows what a plain call under one spelling does
(through shims, to a body, a missing name or a loop); :func:`bind` binds a definition the way the
engine's attribute read does. Nothing here installs, warns or reports: the alias, the warnings and
the findings build on these answers.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fd_conformance.protocol.base import AliasEntry, Definition, own_attributes
from fd_conformance.protocol.shims import is_self_shim, shim_target
from fd_conformance.spelling import CANONICAL, LEGACY, SPELLINGS, near_miss


def own_definitions(klass: type) -> list[Definition]:
    """Definitions in ``klass.__dict__`` itself, canonical first, aliases skipped."""
    found: list[Definition] = []
    for spelling in SPELLINGS:
        if spelling not in klass.__dict__:
            continue
        entry = klass.__dict__[spelling]
        if isinstance(entry, AliasEntry):
            if entry.original is None:
                continue  # a pure alias defines nothing
            entry = entry.original
        found.append(Definition(klass, spelling, entry))
    return found


def resolve(cls: type) -> Definition | None:
    """The most-derived non-shim definition under either spelling (the inheritance rule).

    None when there is none: no method at all, or only shims forwarding to names nothing defines
    (or to each other) -- calling one raises AttributeError or RecursionError, never clears.
    """
    for klass in cls.__mro__:
        for defn in own_definitions(klass):
            if not is_self_shim(defn):
                return defn
    return None


def shims(cls: type) -> list[Definition]:
    """Every forwarding shim in the MRO, most-derived first (what an all-shim class consists of)."""
    return [d for klass in cls.__mro__ for d in own_definitions(klass) if is_self_shim(d)]


@dataclass(frozen=True)
class Reach:
    """Where a plain call under one spelling ends: a real body, or a broken forwarding chain."""

    body: Definition | None  # None: the chain ends at a missing name or loops
    chain: tuple[Definition, ...]  # the shims passed on the way, in call order
    missing: str | None  # the name the last shim forwards to that nothing defines; None for a loop


def reach(cls: type, spelling: str) -> Reach | None:
    """Follow what plain Python does when ``instance.<spelling>()`` is called (None: no such name).

    Shims forward to a name on ``self``, looked up again from ``cls``; a name already passed is a
    loop (RecursionError at run time). An installed alias resolves by the inheritance rule.
    """
    defn = plain_lookup(cls, spelling)
    if defn is None:
        return None
    chain: list[Definition] = []
    while True:
        target = shim_target(defn)
        if target is None:
            return Reach(defn, tuple(chain), None)
        if defn in chain:
            return Reach(None, tuple(chain), None)
        chain.append(defn)
        nxt = plain_lookup(cls, target)
        if nxt is None:
            return Reach(None, tuple(chain), target)
        defn = nxt


def engine_reach(cls: type) -> Reach | None:
    """The engine's call (canonical, else the legacy name, as the kit's suites call it)."""
    return reach(cls, CANONICAL) or reach(cls, LEGACY)


def resolve_clear_method(obj: object) -> Callable[[], Any] | None:
    """The clear method an engine's call on ``obj`` reaches as Python resolves it (no alias added).

    ``getattr(obj, CANONICAL)``, else ``getattr(obj, LEGACY)``; None when neither name exists, or
    when the name found only forwards to a name nothing defines (or back to itself), so calling
    it would raise AttributeError / RecursionError instead of clearing, or when what it binds to
    is not callable or needs arguments (TypeError). No side effects: for callers (the suites)
    that must not call a method that cannot work. For a class, the function.
    """
    own = instance_method(obj)
    if own is not None:  # an instance attribute shadows the class (e.g. a functools.partial set in __init__)
        return None if unfilled(own, receiver_pending=False) else own
    cls = obj if isinstance(obj, type) else type(obj)
    for spelling in SPELLINGS:
        path = reach(cls, spelling)
        if path is None:
            continue
        if path.body is None:
            return None
        defn = plain_lookup(cls, spelling)
        if defn is not None and required_params(defn, obj):
            return None  # FDC005: the call would raise TypeError
        try:
            method = getattr(obj, spelling, None)
        except Exception:  # noqa: BLE001 - a descriptor whose binding raises: FDC006 reports it
            return None
        return method if callable(method) else None
    return None


def same_clear_target(a: object, b: object) -> bool:
    """Whether two reads of the clear method (e.g. under both spellings) reach one definition.

    Identity is not enough: a bound method, a ``functools.partialmethod`` or a custom descriptor
    makes a new object on every attribute read. Compared are the function behind bound methods,
    a partial's function and arguments, and a function's code (two closures of one ``def``).
    """
    return call_identity(a) == call_identity(b)


def call_identity(fn: object) -> object:
    """What makes two reads of a clear method the same call (see :func:`same_clear_target`)."""
    if isinstance(fn, functools.partial):
        return ("partial", call_identity(fn.func), fn.args, fn.keywords)
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None) or fn


def inherited_original(cls: type, spelling: str) -> Definition | None:
    """The real entry plain Python would find under ``spelling`` had no alias been installed.

    A class's pure alias is skipped; an aliased class contributes the entry it had before.
    """
    for klass in cls.__mro__:
        entry = klass.__dict__.get(spelling)
        if isinstance(entry, AliasEntry):
            entry = entry.original
        if entry is None:
            continue
        return Definition(klass, spelling, entry)
    return None


def plain_lookup(cls: type, spelling: str) -> Definition | None:
    """What plain Python attribute lookup reaches under one spelling, aliases excluded."""
    for klass in cls.__mro__:
        if spelling not in klass.__dict__:
            continue
        entry = klass.__dict__[spelling]
        if isinstance(entry, AliasEntry):
            return resolve(cls)  # the alias dispatches by the inheritance rule
        return Definition(klass, spelling, entry)
    return None


def own_conflict(cls: type) -> tuple[Definition, Definition] | None:
    """Two disagreeing real bodies in the class the inheritance rule picks from, if any.

    Only a conflict *inside one class* stops the alias: a split across a base and a subclass is
    exactly what the alias resolves (most-derived wins).
    """
    for klass in cls.__mro__:
        defs = own_definitions(klass)
        if not defs:
            continue
        if len(defs) == 2 and not same_body(*defs) and not any(is_self_shim(d) for d in defs):
            return defs[0], defs[1]
        return None
    return None


def describe_shims(found: list[Definition]) -> str:
    """``A.clear_grpah_opt_backend only forwards to self.clear_graph_opt_backend()`` for each shim."""
    return "; ".join(f"{d.qualname} only forwards to self.{shim_target(d)}()" for d in found)


def near_misses(obj: object) -> list[str]:
    """Names within edit distance of a spelling that are not one of them (typos, wrong case).

    Underscore-wrapped spellings (``_clear_graph_opt_backend``, ``__clear_grpah_opt_backend``) are
    deliberate private helpers, not typos: flagging them as FDC004 errors would be a false alarm.
    """
    names = set(dir(obj if isinstance(obj, type) else type(obj)))
    names.update(own_attributes(obj))
    return sorted(n for n in names if near_miss(n) is not None)


@dataclass(frozen=True)
class Binding:
    """What the engine's ``model.<spelling>()`` gets from one definition: the attribute as Python binds it.

    Judged instead of the raw class entry, because a descriptor (``functools.partialmethod``, a
    custom ``__get__``, a property returning a method) is not callable itself, yet binds to a
    call that works.
    """

    value: Any  # what the call is made on (meaningless when ``known`` is False or ``error`` is set)
    receiver_pending: bool  # a function looked up on the class: its first positional is the instance
    known: bool = True  # False: a descriptor that binds only on an instance, judged on a class
    error: Exception | None = None  # binding it raised: the engine's attribute read raises too


def bind(defn: Definition, target: object) -> Binding:
    """Bind ``defn`` as the engine would: on the instance when there is one (the descriptor
    protocol, as ``getattr`` runs it), else as far as the class alone can tell."""
    entry = defn.entry
    getter = getattr(type(entry), "__get__", None)
    if getter is None:  # not a descriptor (a partial object, a callable instance, a plain value): used as is
        return Binding(entry, receiver_pending=False)
    if not isinstance(target, type):
        try:
            return Binding(getter(entry, target, type(target)), receiver_pending=False)
        except Exception as err:  # noqa: BLE001 - whatever it raises, the engine's call raises
            return Binding(None, receiver_pending=False, error=err)
    if isinstance(entry, (types.FunctionType, functools.partialmethod)):
        return Binding(getter(entry, None, target), receiver_pending=True)
    if isinstance(entry, (staticmethod, classmethod)):
        return Binding(getter(entry, None, target), receiver_pending=False)
    # A custom descriptor (or property, cached_property...): what it gives an instance is unknowable
    # from the class; the suites judge the built instance.
    return Binding(None, receiver_pending=False, known=False)


def unfilled(value: Any, receiver_pending: bool) -> list[str]:
    """Parameters a no-argument call of ``value`` would leave unfilled (a pending receiver excluded)."""
    try:
        sig = inspect.signature(value)
    except (TypeError, ValueError):
        return []  # builtins without a signature: nothing to prove
    params = list(sig.parameters.values())
    if receiver_pending and params:
        params = params[1:]  # the instance fills the first positional
    return [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]


def required_params(defn: Definition, target: object) -> list[str]:
    """Parameters the engine's no-argument call would leave unfilled (``self`` excluded, bound or not)."""
    binding = bind(defn, target)
    if not binding.known or binding.error is not None or not callable(binding.value):
        return []  # FDC006's business, or nothing to prove from the class alone
    return unfilled(binding.value, binding.receiver_pending)


def same_body(a: Definition, b: Definition) -> bool:
    """One body under two names: the same entry, function, code, or partialmethod of one helper."""
    if a.entry is b.entry:
        return True
    if isinstance(a.entry, functools.partialmethod) or isinstance(b.entry, functools.partialmethod):
        # Two partialmethods of one helper are one body only with the same bound arguments.
        pa, pb = a.entry, b.entry
        return (
            isinstance(pa, functools.partialmethod)
            and isinstance(pb, functools.partialmethod)
            and pa.func is pb.func
            and pa.args == pb.args
            and pa.keywords == pb.keywords
        )
    fa, fb = a.function, b.function
    if fa is fb:
        return True
    ca, cb = getattr(fa, "__code__", None), getattr(fb, "__code__", None)
    return ca is not None and ca is cb


def instance_method(obj: object) -> Any | None:
    """A callable the instance itself holds under the canonical name (it shadows the class), else None."""
    if isinstance(obj, type):
        return None
    value = own_attributes(obj).get(CANONICAL, MISSING)
    return value if value is not MISSING and callable(value) else None


MISSING = object()
