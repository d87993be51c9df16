"""The GraphOptModel protocol, the legacy ``clear_grpah_opt_backend`` alias, and protocol findings.

FastDeploy's wrappers spell the clear method two ways across branches and no shim accepts both,
so an engine calling one spelling on a model that defines the other crashes (or silently skips
clearing). This module makes both spellings reach the same method, says so once, and turns every
way a wrapper can get the contract wrong into a :class:`~fd_conformance.findings.Finding`.

Inheritance rule (FastDeploy wrappers subclass each other): **the most-derived definition under
either spelling is the method, under both names.** A subclass that overrides only
``clear_grpah_opt_backend`` of a base that defined both therefore wins for callers of
``clear_graph_opt_backend`` too -- once the alias is installed on the base (or the subclass).
Without the alias, plain Python would run the base's stale canonical method; :func:`check_protocol`
reports that split as FDC003. A method whose body only forwards to a spelling on ``self``
(``return self.clear_graph_opt_backend()``) is a shim, not a definition: it never wins, and a
class defining a real body plus such a shim is consistent. A class whose clear methods are ALL
shims (a legacy name forwarding to a canonical name nothing defines, the reverse, or two names
forwarding to each other) defines nothing: FDC001, exactly like a class without the method. One
whose real body exists but is out of reach of the engine's call (a shim in the way that forwards
to a missing name or back to itself) is FDC001 too, naming the shim.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import sys
import textwrap
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, overload, runtime_checkable

from typing_extensions import TypeIs

from fd_conformance.errors import UsageError
from fd_conformance.findings import Finding, Location, Severity, fix_hint, make_finding
from fd_conformance.spelling import CANONICAL, LEGACY, SPELLINGS, edit_distance, near_miss
from fd_conformance.spelling import NEAR_MISS_MAX_DISTANCE as NEAR_MISS_MAX_DISTANCE  # re-exported: its old home

_T = TypeVar("_T", bound=type)


@runtime_checkable
class GraphOptModel(Protocol):
    """An engine-facing model wrapper whose captured graphs the engine can destroy."""

    def clear_graph_opt_backend(self) -> None:
        """Destroy every captured graph the model owns (a draft's included); no arguments."""


class GraphOptProtocolWarning(UserWarning):
    """A model that will not conform as written (near-miss name): fix the source."""


class ProtocolError(UsageError):
    """A class the kit was asked to decorate or alias breaks the protocol (e.g. FDC003)."""


# --------------------------------------------------------------------------- "once" registries
# The kit, not Python's warning filter, decides "once", so tests with simplefilter("always")
# see exactly one warning and users with default filters see no repeats either.
_WARNED_LEGACY_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()
_WARNED_NONCONFORMING_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()  # near-miss, shims only
_WARNED_CALL_SITES: set[tuple[str, int]] = set()


def _warn_legacy_class(cls: type, stacklevel: int) -> None:
    if cls in _WARNED_LEGACY_CLASSES:
        return
    _WARNED_LEGACY_CLASSES.add(cls)
    warnings.warn(
        f"{cls.__module__}.{cls.__qualname__} defines the legacy misspelling {LEGACY}(); "
        f"rename it to {CANONICAL}() (the kit provides the old name as an alias)",
        DeprecationWarning,
        stacklevel=stacklevel + 1,
    )


def _warn_call_site(cls: type, frame: types.FrameType | None) -> None:
    key = (frame.f_code.co_filename, frame.f_lineno) if frame is not None else ("<unknown>", 0)
    if key in _WARNED_CALL_SITES:
        return
    _WARNED_CALL_SITES.add(key)
    warnings.warn_explicit(
        f"{LEGACY} is a deprecated misspelling; call {CANONICAL}() on {cls.__qualname__} instead (same method)",
        DeprecationWarning,
        filename=key[0],
        lineno=key[1],
        module=frame.f_globals.get("__name__", "") if frame is not None else "",
    )


# --------------------------------------------------------------------------- definitions
@dataclass(frozen=True)
class _Definition:
    """One real definition of the clear method: where it lives and under which spelling."""

    owner: type
    spelling: str
    entry: Any  # the raw class-__dict__ value (function, staticmethod, ...), never our descriptor

    @property
    def function(self) -> Any:
        """The plain function behind the entry, for identity, code and source position (a
        ``functools.partialmethod``'s is the function it partially applies)."""
        entry = self.entry.func if isinstance(self.entry, functools.partialmethod) else self.entry
        return inspect.unwrap(getattr(entry, "__func__", entry))

    @property
    def qualname(self) -> str:
        if isinstance(self.entry, functools.partialmethod):  # the name is the method; the function is a helper
            return f"{self.owner.__qualname__}.{self.spelling}"
        return getattr(self.function, "__qualname__", f"{self.owner.__qualname__}.{self.spelling}")

    @property
    def location(self) -> Location:
        code = getattr(self.function, "__code__", None)
        if code is None:
            return _class_location(self.owner, obj=f"{self.owner.__qualname__}.{self.spelling}")
        return Location(path=code.co_filename, line=code.co_firstlineno, obj=self.qualname)

    def describe(self) -> str:
        loc = self.location
        where = f"{loc.path}:{loc.line}" if loc.path else "<unknown source>"
        return f"{self.qualname} ({where})"


def _other(spelling: str) -> str:
    return LEGACY if spelling == CANONICAL else CANONICAL


# Opcodes a pure forwarding body may contain besides its one attribute load and call: bookkeeping
# (RESUME, NOP, PUSH_NULL, ...), argument loads, the call itself under every CPython 3.9-3.14 name,
# and the return. LOAD_FAST_BORROW is CPython 3.14's LOAD_FAST.
_SHIM_RECEIVER_LOADS = frozenset({"LOAD_FAST", "LOAD_FAST_BORROW", "LOAD_FAST_CHECK"})
_SHIM_ATTR_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_SHIM_FILLER = frozenset(
    {"RESUME", "NOP", "CACHE", "PUSH_NULL", "PRECALL", "KW_NAMES", "EXTENDED_ARG", "COPY_FREE_VARS", "NOT_TAKEN"}
)
_SHIM_ARG_OPS = frozenset(
    {
        "LOAD_FAST",
        "LOAD_FAST_BORROW",
        "LOAD_FAST_CHECK",
        "LOAD_FAST_LOAD_FAST",
        "LOAD_FAST_BORROW_LOAD_FAST_BORROW",
        "LOAD_CONST",
        "LOAD_SMALL_INT",
        "BUILD_TUPLE",
        "BUILD_LIST",
        "BUILD_MAP",
        "LIST_EXTEND",
        "LIST_TO_TUPLE",
        "DICT_MERGE",
        "CALL_INTRINSIC_1",
    }
)
_SHIM_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_FUNCTION_EX", "CALL_METHOD"})
_SHIM_RETURNS = (("RETURN_VALUE",), ("POP_TOP", "RETURN_CONST"), ("POP_TOP", "LOAD_CONST", "RETURN_VALUE"))


def _is_self_shim(defn: _Definition) -> bool:
    """True when the whole body is ``[return] self.<a spelling>(...)``: it forwards, it does not define.

    Only the exact one-call shape counts: a body that clears the draft and THEN calls the other
    spelling is a real definition (treating it as a shim would route calls past its own work and
    leak the draft's graphs). ``self.model.clear_grpah_opt_backend(...)`` (FastDeploy's wrapper
    delegating to its inner model) is a real body too. The AST decides when source is available;
    bytecode of exactly load-self/load-attr/call/return decides otherwise.
    """
    return _shim_target(defn) is not None


def _shim_target(defn: _Definition) -> str | None:
    """The spelling a shim forwards to on its receiver, or None for a real body.

    The other spelling is the usual target; the shim's own spelling counts too: forwarding to
    itself (``clear_grpah_opt_backend = clear_graph_opt_backend`` over a body that calls
    ``self.clear_grpah_opt_backend()``) is a recursion, not a definition.
    """
    func = defn.function
    code = getattr(func, "__code__", None)
    if code is None or code.co_argcount == 0 or isinstance(defn.entry, staticmethod):
        return None
    receiver = code.co_varnames[0]
    forward = _ast_forward(func, receiver)
    if forward is _NO_SOURCE:
        forward = _bytecode_forward(code, receiver)
    return forward if forward in SPELLINGS else None


_NO_SOURCE = object()


def _ast_forward(func: Any, receiver: str) -> Any:
    """The attribute an exact one-call forwarding body calls on ``receiver`` (None: a real body);
    ``_NO_SOURCE`` when the source cannot be read or parsed (exec'd, lambdas, .pyc only)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return _NO_SOURCE
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None or node.name != func.__name__:
        return _NO_SOURCE
    body = list(node.body)
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], (ast.Return, ast.Expr)):
        return None
    call = body[0].value
    if not isinstance(call, ast.Call):
        return None
    callee = call.func
    if not (isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) and callee.value.id == receiver):
        return None
    # Arguments are forwarded as they came: names and constants only, nothing that runs code.
    args = [a.value if isinstance(a, ast.Starred) else a for a in call.args]
    args += [k.value for k in call.keywords]
    return callee.attr if all(isinstance(a, (ast.Name, ast.Constant)) for a in args) else None


def _ast_is_shim(func: Any, receiver: str, target: str) -> bool | None:
    """The AST verdict, or None when the source cannot be read or parsed (exec'd, lambdas, .pyc only)."""
    forward = _ast_forward(func, receiver)
    return None if forward is _NO_SOURCE else forward == target


def _bytecode_forward(code: types.CodeType, receiver: str) -> str | None:
    """Exactly: load receiver, load an attribute, argument loads, one call, return -> that attribute."""
    ops = [i for i in dis.get_instructions(code) if i.opname not in _SHIM_FILLER]
    if len(ops) < 3:
        return None
    load_self, load_attr = ops[0], ops[1]
    if load_self.opname not in _SHIM_RECEIVER_LOADS or load_self.argval != receiver:
        return None
    if load_attr.opname not in _SHIM_ATTR_LOADS or not isinstance(load_attr.argval, str):
        return None
    rest = [i.opname for i in ops[2:]]
    for tail in _SHIM_RETURNS:
        if tuple(rest[-len(tail) :]) != tail:
            continue
        middle = rest[: -len(tail)]
        if not middle or middle[-1] not in _SHIM_CALLS:
            continue
        if all(op in _SHIM_ARG_OPS for op in middle[:-1]):
            return load_attr.argval
    return None


def _bytecode_is_shim(code: types.CodeType, receiver: str, target: str) -> bool:
    """Exactly: load receiver, load attribute ``target``, argument loads, one call, return."""
    return _bytecode_forward(code, receiver) == target


def _own_definitions(klass: type) -> list[_Definition]:
    """Definitions in ``klass.__dict__`` itself, canonical first, aliases skipped."""
    found: list[_Definition] = []
    for spelling in SPELLINGS:
        if spelling not in klass.__dict__:
            continue
        entry = klass.__dict__[spelling]
        if isinstance(entry, _GraphOptDispatch):
            if entry.original is None:
                continue  # a pure alias defines nothing
            entry = entry.original
        found.append(_Definition(klass, spelling, entry))
    return found


def _resolve(cls: type) -> _Definition | None:
    """The most-derived non-shim definition under either spelling (the inheritance rule).

    None when there is none: no method at all, or only shims forwarding to names nothing defines
    (or to each other) -- calling one raises AttributeError or RecursionError, never clears.
    """
    for klass in cls.__mro__:
        for defn in _own_definitions(klass):
            if not _is_self_shim(defn):
                return defn
    return None


def _shims(cls: type) -> list[_Definition]:
    """Every forwarding shim in the MRO, most-derived first (what an all-shim class consists of)."""
    return [d for klass in cls.__mro__ for d in _own_definitions(klass) if _is_self_shim(d)]


@dataclass(frozen=True)
class _Reach:
    """Where a plain call under one spelling ends: a real body, or a broken forwarding chain."""

    body: _Definition | None  # None: the chain ends at a missing name or loops
    chain: tuple[_Definition, ...]  # the shims passed on the way, in call order
    missing: str | None  # the name the last shim forwards to that nothing defines; None for a loop


def _reach(cls: type, spelling: str) -> _Reach | None:
    """Follow what plain Python does when ``instance.<spelling>()`` is called (None: no such name).

    Shims forward to a name on ``self``, looked up again from ``cls``; a name already passed is a
    loop (RecursionError at run time). An installed alias resolves by the inheritance rule.
    """
    defn = _plain_lookup(cls, spelling)
    if defn is None:
        return None
    chain: list[_Definition] = []
    while True:
        target = _shim_target(defn)
        if target is None:
            return _Reach(defn, tuple(chain), None)
        if defn in chain:
            return _Reach(None, tuple(chain), None)
        chain.append(defn)
        nxt = _plain_lookup(cls, target)
        if nxt is None:
            return _Reach(None, tuple(chain), target)
        defn = nxt


def _engine_reach(cls: type) -> _Reach | None:
    """The engine's call (canonical, else the legacy name, as the kit's suites call it)."""
    return _reach(cls, CANONICAL) or _reach(cls, LEGACY)


def resolve_clear_method(obj: object) -> Callable[[], Any] | None:
    """The clear method an engine's call on ``obj`` reaches as Python resolves it (no alias added).

    ``getattr(obj, CANONICAL)``, else ``getattr(obj, LEGACY)``; None when neither name exists, or
    when the name found only forwards to a name nothing defines (or back to itself), so calling
    it would raise AttributeError / RecursionError instead of clearing, or when what it binds to
    is not callable or needs arguments (TypeError). No side effects: for callers (the suites)
    that must not call a method that cannot work. For a class, the function.
    """
    own = _instance_method(obj)
    if own is not None:  # an instance attribute shadows the class (e.g. a functools.partial set in __init__)
        return None if _unfilled(own, receiver_pending=False) else own
    cls = obj if isinstance(obj, type) else type(obj)
    for spelling in SPELLINGS:
        reach = _reach(cls, spelling)
        if reach is None:
            continue
        if reach.body is None:
            return None
        defn = _plain_lookup(cls, spelling)
        if defn is not None and _required_params(defn, obj):
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
    return _call_identity(a) == _call_identity(b)


def _call_identity(fn: object) -> object:
    if isinstance(fn, functools.partial):
        return ("partial", _call_identity(fn.func), fn.args, fn.keywords)
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None) or fn


def _called_from(defn: _Definition, frame: types.FrameType | None) -> bool:
    """True when ``frame`` runs ``defn``'s own body (the definition reaching for the other name)."""
    code = getattr(defn.function, "__code__", None)
    return frame is not None and code is not None and frame.f_code is code


def _inherited_original(cls: type, spelling: str) -> _Definition | None:
    """The real entry plain Python would find under ``spelling`` had no alias been installed.

    A class's pure alias is skipped; an aliased class contributes the entry it had before.
    """
    for klass in cls.__mro__:
        entry = klass.__dict__.get(spelling)
        if isinstance(entry, _GraphOptDispatch):
            entry = entry.original
        if entry is None:
            continue
        return _Definition(klass, spelling, entry)
    return None


def _plain_lookup(cls: type, spelling: str) -> _Definition | None:
    """What plain Python attribute lookup reaches under one spelling, aliases excluded."""
    for klass in cls.__mro__:
        if spelling not in klass.__dict__:
            continue
        entry = klass.__dict__[spelling]
        if isinstance(entry, _GraphOptDispatch):
            return _resolve(cls)  # the alias dispatches by the inheritance rule
        return _Definition(klass, spelling, entry)
    return None


class _GraphOptDispatch:
    """Non-data descriptor installed under both spellings: resolves by the inheritance rule.

    Resolution happens at access time from the instance's own type, so subclasses defined after
    installation (undecorated third-party ones included) follow the rule too.
    """

    def __init__(self, owner: type, spelling: str, original: Any) -> None:
        self.owner = owner
        self.spelling = spelling
        self.original = original  # the class's own entry under this name, or None (pure alias)
        # (a class attribute that is literally None is refused as FDC006 before we get here)

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        cls = objtype if objtype is not None else type(obj)
        defn = _resolve(cls)
        if defn is None:  # pragma: no cover - installation refuses classes without a definition
            raise AttributeError(f"{cls.__qualname__} has no {CANONICAL}() under either spelling")
        if defn.spelling != self.spelling and _called_from(defn, sys._getframe(1)):
            # The winning body itself calls the other spelling on self (clear the draft, then
            # ``self.clear_grpah_opt_backend()`` for the base's main graphs): it means what plain
            # Python gave it, the inherited method under that name. Routing it back to itself
            # would recurse; routing it to itself silently would skip the base's work.
            defn = _inherited_original(cls, self.spelling)
            if defn is None:
                raise AttributeError(f"{cls.__qualname__} has no {self.spelling}() to call besides the alias")
        if defn.spelling == LEGACY:
            _warn_legacy_class(defn.owner, stacklevel=2)
        elif self.spelling == LEGACY:
            _warn_call_site(cls, sys._getframe(1))
        return defn.entry.__get__(obj, cls) if hasattr(defn.entry, "__get__") else defn.entry


# --------------------------------------------------------------------------- installation
def _own_conflict(cls: type) -> tuple[_Definition, _Definition] | None:
    """Two disagreeing real bodies in the class the inheritance rule picks from, if any.

    Only a conflict *inside one class* stops the alias: a split across a base and a subclass is
    exactly what the alias resolves (most-derived wins).
    """
    for klass in cls.__mro__:
        defs = _own_definitions(klass)
        if not defs:
            continue
        if len(defs) == 2 and not _same_body(*defs) and not any(_is_self_shim(d) for d in defs):
            return defs[0], defs[1]
        return None
    return None


def _refuse_unaliasable(cls: type) -> None:
    """The alias cannot fix a missing, non-callable or self-contradicting method: say so."""
    conflict = _own_conflict(cls)
    if conflict is not None:
        raise ProtocolError(
            f"{cls.__qualname__} defines both spellings with different bodies: "
            f"{conflict[0].describe()} and {conflict[1].describe()} (FDC003)",
            fix_hint("FDC003"),
        )
    defn = _resolve(cls)
    if defn is None:
        raise ProtocolError(
            f"{cls.__qualname__} has no {CANONICAL}() under either spelling (FDC001)",
            fix_hint("FDC001", cls=cls.__qualname__),
        )
    if not callable(defn.entry) and getattr(type(defn.entry), "__get__", None) is None:  # a plain value, not a descriptor
        raise ProtocolError(
            f"{cls.__qualname__}.{defn.spelling} is not callable (FDC006)",
            fix_hint("FDC006", spelling=defn.spelling),
        )


def install_legacy_alias(cls: type) -> Callable[[], None]:
    """Make both spellings reach the same method on ``cls`` (and its subclasses); no source edit.

    For third-party classes at test time. Idempotent: a second call changes nothing and returns
    a no-op. Returns an undo callable that restores the class exactly. Raises
    :class:`ProtocolError` when the class has no definition or two disagreeing ones (FDC003).
    """
    if not isinstance(cls, type):
        raise UsageError(
            f"install_legacy_alias() needs a class, got {type(cls).__name__}",
            "pass the model class (type(model)), not an instance",
        )
    if all(isinstance(cls.__dict__.get(s), _GraphOptDispatch) for s in SPELLINGS):
        return lambda: None
    _refuse_unaliasable(cls)
    saved = {s: cls.__dict__[s] for s in SPELLINGS if s in cls.__dict__}
    for spelling in SPELLINGS:
        setattr(cls, spelling, _GraphOptDispatch(cls, spelling, saved.get(spelling)))
    defn = _resolve(cls)
    if defn is not None and defn.spelling == LEGACY:
        _warn_legacy_class(defn.owner, stacklevel=2)

    def undo() -> None:
        for spelling in SPELLINGS:
            if spelling in saved:
                setattr(cls, spelling, saved[spelling])
            elif spelling in cls.__dict__:
                delattr(cls, spelling)

    return undo


@contextmanager
def legacy_alias(cls: type) -> Iterator[type]:
    """``with legacy_alias(ThirdPartyModel): ...`` -- the alias for one block, then undone."""
    undo = install_legacy_alias(cls)
    try:
        yield cls
    finally:
        undo()


def graph_opt_model(cls: _T) -> _T:
    """Class decorator for our own wrappers: install the alias, then fail at import time on any
    protocol error (a required argument, a near-miss name) rather than at the engine's first clear."""
    undo = install_legacy_alias(cls)
    errors = [f for f in check_protocol(cls) if f.is_error]
    if errors:
        undo()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ProtocolError(f"@graph_opt_model {cls.__qualname__}: {errors[0].code} {errors[0].message}{more}", errors[0].hint)
    return cls


# --------------------------------------------------------------------------- supports_graph_opt
@overload
def supports_graph_opt(obj: type[object]) -> TypeIs[type[GraphOptModel]]: ...


@overload
def supports_graph_opt(obj: object) -> TypeIs[GraphOptModel]: ...


def supports_graph_opt(obj: object) -> TypeIs[GraphOptModel | type[GraphOptModel]]:
    """Whether ``obj`` (instance or class) can be cleared through ``clear_graph_opt_backend()``.

    A legacy-only class conforms: the alias is installed (so the TypeIs promise holds) and its
    author is told once. A near-miss name does not conform and earns a prescriptive warning; so
    do clear methods that are all forwarding shims, and a clear name whose call cannot reach the
    real body (a shim in the way forwarding to a missing name): FDC001 in :func:`check_protocol`,
    never the legacy DeprecationWarning (a rename would not fix them).
    """
    if _instance_method(obj) is not None:
        return True  # the instance's own callable shadows the class: the engine's call reaches it
    cls = obj if isinstance(obj, type) else type(obj)
    defn = _resolve(cls)
    if defn is None:
        misses = _near_misses(obj)
        shims = _shims(cls)
        if misses:
            _warn_nonconforming(
                cls,
                f"{cls.__qualname__} defines {', '.join(n + '()' for n in misses)}, a "
                f"near-miss of {CANONICAL}(); rename it to {CANONICAL} or the engine "
                f"cannot clear its graphs",
            )
        elif shims:
            _warn_nonconforming(
                cls,
                f"{cls.__qualname__}: {_describe_shims(shims)}, and no body destroys a "
                f"graph; define {CANONICAL}(self) with the clearing or the engine cannot "
                f"clear its graphs",
            )
        return False
    if defn.spelling == LEGACY and not isinstance(cls.__dict__.get(CANONICAL), _GraphOptDispatch):
        try:
            install_legacy_alias(cls)
        except ProtocolError:
            return False
        _warn_legacy_class(defn.owner, stacklevel=2)
    reach = _engine_reach(cls)
    if reach is not None and reach.body is None:
        broken = _unreachable(cls, reach, defn)
        _warn_nonconforming(cls, f"{broken.message}; {broken.hint}")
        return False
    if isinstance(obj, type):
        binding = _bind(defn, obj)  # a descriptor that binds only on an instance cannot be judged here
        return binding.error is None and (not binding.known or callable(binding.value))
    return callable(getattr(obj, CANONICAL, None))


def _warn_nonconforming(cls: type, message: str) -> None:
    """One prescriptive GraphOptProtocolWarning per class (the kit decides "once")."""
    if cls in _WARNED_NONCONFORMING_CLASSES:
        return
    _WARNED_NONCONFORMING_CLASSES.add(cls)
    warnings.warn(message, GraphOptProtocolWarning, stacklevel=3)


def _describe_shims(shims: list[_Definition]) -> str:
    """``A.clear_grpah_opt_backend only forwards to self.clear_graph_opt_backend()`` for each shim."""
    return "; ".join(f"{d.qualname} only forwards to self.{_shim_target(d)}()" for d in shims)


# --------------------------------------------------------------------------- check_protocol
def _near_misses(obj: object) -> list[str]:
    """Names within edit distance of a spelling that are not one of them (typos, wrong case).

    Underscore-wrapped spellings (``_clear_graph_opt_backend``, ``__clear_grpah_opt_backend``) are
    deliberate private helpers, not typos: flagging them as FDC004 errors would be a false alarm.
    """
    names = set(dir(obj if isinstance(obj, type) else type(obj)))
    names.update(getattr(obj, "__dict__", {}) if not isinstance(obj, type) else ())
    return sorted(n for n in names if near_miss(n) is not None)


def _class_location(cls: type, obj: str | None = None) -> Location:
    try:
        path = inspect.getsourcefile(cls)
        line = inspect.getsourcelines(cls)[1] if path else None
    except (OSError, TypeError):
        path, line = None, None
    return Location(path=path, line=line, obj=obj or cls.__qualname__)


@dataclass(frozen=True)
class _Binding:
    """What the engine's ``model.<spelling>()`` gets from one definition: the attribute as Python binds it.

    Judged instead of the raw class entry, because a descriptor (``functools.partialmethod``, a
    custom ``__get__``, a property returning a method) is not callable itself, yet binds to a
    call that works.
    """

    value: Any  # what the call is made on (meaningless when ``known`` is False or ``error`` is set)
    receiver_pending: bool  # a function looked up on the class: its first positional is the instance
    known: bool = True  # False: a descriptor that binds only on an instance, judged on a class
    error: Exception | None = None  # binding it raised: the engine's attribute read raises too


def _bind(defn: _Definition, target: object) -> _Binding:
    """Bind ``defn`` as the engine would: on the instance when there is one (the descriptor
    protocol, as ``getattr`` runs it), else as far as the class alone can tell."""
    entry = defn.entry
    getter = getattr(type(entry), "__get__", None)
    if getter is None:  # not a descriptor (a partial object, a callable instance, a plain value): used as is
        return _Binding(entry, receiver_pending=False)
    if not isinstance(target, type):
        try:
            return _Binding(getter(entry, target, type(target)), receiver_pending=False)
        except Exception as err:  # noqa: BLE001 - whatever it raises, the engine's call raises
            return _Binding(None, receiver_pending=False, error=err)
    if isinstance(entry, (types.FunctionType, functools.partialmethod)):
        return _Binding(getter(entry, None, target), receiver_pending=True)
    if isinstance(entry, (staticmethod, classmethod)):
        return _Binding(getter(entry, None, target), receiver_pending=False)
    # A custom descriptor (or property, cached_property...): what it gives an instance is unknowable
    # from the class; the suites judge the built instance.
    return _Binding(None, receiver_pending=False, known=False)


def _unfilled(value: Any, receiver_pending: bool) -> list[str]:
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


def _required_params(defn: _Definition, target: object) -> list[str]:
    """Parameters the engine's no-argument call would leave unfilled (``self`` excluded, bound or not)."""
    binding = _bind(defn, target)
    if not binding.known or binding.error is not None or not callable(binding.value):
        return []  # FDC006's business, or nothing to prove from the class alone
    return _unfilled(binding.value, binding.receiver_pending)


def _same_body(a: _Definition, b: _Definition) -> bool:
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


def check_protocol(obj_or_cls: object) -> list[Finding]:
    """Every way ``obj_or_cls`` breaks the GraphOptModel contract, as findings (empty = conforms)."""
    cls = obj_or_cls if isinstance(obj_or_cls, type) else type(obj_or_cls)
    name = cls.__qualname__
    findings: list[Finding] = []

    for miss in _near_misses(obj_or_cls):
        raw = inspect.getattr_static(obj_or_cls, miss, None)
        func = inspect.unwrap(getattr(raw, "__func__", raw)) if raw is not None else None
        code = getattr(func, "__code__", None)
        loc = (
            Location(code.co_filename, code.co_firstlineno, obj=f"{name}.{miss}")
            if code
            else _class_location(cls, obj=f"{name}.{miss}")
        )
        target = min(SPELLINGS, key=lambda s: edit_distance(miss, s))
        findings.append(
            make_finding(
                "FDC004",
                f"{name} defines {miss!r}, {edit_distance(miss, target)} edit(s) from {target!r}: "
                f"the engine calls {CANONICAL}() and will never reach it",
                loc,
                name=miss,
            )
        )

    # An instance attribute shadows any method: check it first (e.g. ``self.clear_... = None``).
    if not isinstance(obj_or_cls, type):
        for spelling in SPELLINGS:
            inst = getattr(obj_or_cls, "__dict__", {}).get(spelling, _MISSING)
            if inst is not _MISSING and not callable(inst):
                findings.append(_not_callable(name, spelling, inst, _class_location(cls)))
                return findings
        method = _instance_method(obj_or_cls)
        if method is not None:
            # The engine's call gets exactly this (e.g. ``self.clear_graph_opt_backend =
            # functools.partial(...)``); the class's own definitions never run for this instance.
            required = _unfilled(method, receiver_pending=False)
            if required:
                what = f"{name}.{CANONICAL} (an instance attribute, {type(method).__name__})"
                findings.append(_requires_args(what, required, _class_location(cls)))
            return findings

    canonical = _plain_lookup(cls, CANONICAL)
    legacy = _plain_lookup(cls, LEGACY)
    if canonical is None and legacy is None:
        findings.append(_missing(cls))
        return findings

    for defn in (d for d in (canonical, legacy) if d is not None):
        # Judged as bound, the way the engine's call gets it: a descriptor is not callable itself
        # but may bind to a call that works (functools.partialmethod, a custom __get__).
        binding = _bind(defn, obj_or_cls)
        if binding.error is not None or (binding.known and not callable(binding.value)):
            findings.append(_not_callable(name, defn.spelling, defn.entry, defn.location, binding))
            return findings

    real = _resolve(cls)
    if real is None:  # only forwarding shims: nothing to forward to, so nothing is defined
        findings.append(_missing(cls, shims=_shims(cls)))
        return findings
    reach = _engine_reach(cls)
    if reach is not None and reach.body is None:
        findings.append(_unreachable(cls, reach, real))
        return findings

    if canonical is not None and legacy is not None and not _same_body(canonical, legacy):
        if not (_is_self_shim(canonical) or _is_self_shim(legacy)):
            findings.append(
                make_finding(
                    "FDC003",
                    f"{name}: the two spellings reach different methods -- {CANONICAL} is "
                    f"{canonical.describe()} and {LEGACY} is {legacy.describe()}; callers of one "
                    f"spelling skip the other's clearing",
                    canonical.location if canonical.owner is cls or legacy.owner is not cls else legacy.location,
                )
            )
            return findings

    effective = real
    if effective.spelling == LEGACY:
        findings.append(
            make_finding(
                "FDC002",
                f"{name} defines only the legacy misspelling {LEGACY}() ({effective.describe()}); it "
                f"conforms through the kit's alias, but engines without the alias call {CANONICAL}()",
                effective.location,
            )
        )

    required = _required_params(effective, obj_or_cls)
    if required:
        findings.append(_requires_args(f"{effective.qualname}()", required, effective.location))
    return findings


def _requires_args(what: str, required: list[str], loc: Location) -> Finding:
    """FDC005 for ``what`` (the method as the engine reaches it) leaving ``required`` unfilled."""
    return make_finding(
        "FDC005",
        f"{what} requires argument(s) {', '.join(required)}; the engine calls "
        f"{CANONICAL}() with none, so clearing raises TypeError",
        loc,
        params=", ".join(required),
    )


def _instance_method(obj: object) -> Any | None:
    """A callable the instance itself holds under the canonical name (it shadows the class), else None."""
    if isinstance(obj, type):
        return None
    value = getattr(obj, "__dict__", {}).get(CANONICAL, _MISSING)
    return value if value is not _MISSING and callable(value) else None


_MISSING = object()


def _missing(cls: type, shims: list[_Definition] | None = None) -> Finding:
    """FDC001, one message for "no method" and "only shims" (a shim with no target defines nothing)."""
    name = cls.__qualname__
    detail = (
        f"; its only clear methods are forwarding shims ({_describe_shims(shims)}), so a call raises AttributeError or recurses"
        if shims
        else ""
    )
    return make_finding(
        "FDC001",
        f"{name} has no {CANONICAL}() under either spelling, own or inherited: the engine cannot "
        f"destroy its captured graphs before releasing weights (RL weight sync hangs or leaks){detail}",
        _class_location(cls),
        cls=name,
    )


def _unreachable(cls: type, reach: _Reach, real: _Definition) -> Finding:
    """FDC001 for a real body that the engine's call cannot reach: a shim in the way forwards to a
    missing name or loops. The kit's alias would reach it; an engine without the alias crashes."""
    name, shim = cls.__qualname__, reach.chain[0]
    end = (
        f"which {name} does not define (AttributeError)"
        if reach.missing
        else f"a forwarding loop back to {shim.spelling} (RecursionError)"
    )
    return make_finding(
        "FDC001",
        f"{name}: the engine's {shim.spelling}() call reaches {shim.describe()}, which only forwards to "
        f"self.{_shim_target(shim)}(), {end}; the real body {real.describe()} is never reached, so the "
        f"engine cannot destroy {name}'s captured graphs",
        shim.location,
        cls=name,
    )


def _not_callable(name: str, spelling: str, value: object, loc: Location, binding: _Binding | None = None) -> Finding:
    """FDC006: what the engine's call gets under ``spelling`` cannot be called (a value, or a
    descriptor binding to a non-callable, or one whose binding raises)."""
    if binding is None or binding.value is value and binding.error is None:
        return make_finding(
            "FDC006",
            f"{name}.{spelling} is a {type(value).__name__} ({value!r:.60}), not a method: the engine's call raises TypeError",
            loc,
            spelling=spelling,
        )
    if binding.error is not None:
        err = binding.error
        detail = (str(err).strip().splitlines() or [""])[0]
        return make_finding(
            "FDC006",
            f"reading {name}.{spelling} (a {type(value).__name__} descriptor) raised {type(err).__name__}: {detail}; "
            f"the engine's call fails before clearing",
            loc,
            spelling=spelling,
        )
    got = binding.value
    return make_finding(
        "FDC006",
        f"{name}.{spelling} is a {type(value).__name__} descriptor that gives the instance a {type(got).__name__} "
        f"({got!r:.60}), not a callable: the engine's call raises TypeError",
        loc,
        spelling=spelling,
    )


def severity_of(findings: list[Finding]) -> Severity | None:
    """The worst severity among ``findings`` (None when empty): what a caller gates on."""
    if any(f.is_error for f in findings):
        return Severity.ERROR
    return Severity.WARNING if findings else None
