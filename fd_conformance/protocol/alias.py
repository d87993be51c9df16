"""The legacy alias: both spellings reach the most-derived definition (the inheritance rule).

:class:`GraphOptDispatch` is installed under both names of a class; it resolves at attribute access,
from the instance's own type, so subclasses defined later follow the rule too. A class whose method
the alias cannot fix (none, a non-callable value, two disagreeing bodies in one class) is refused
with :class:`~fd_conformance.protocol.base.ProtocolError` naming the finding code. The kit, not
Python's warning filter, decides "once" for the deprecation warnings it gives.
"""

from __future__ import annotations

import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fd_conformance.errors import UsageError
from fd_conformance.findings import fix_hint
from fd_conformance.protocol.base import AliasEntry, Definition, ProtocolError
from fd_conformance.protocol.resolution import inherited_original, own_conflict, resolve
from fd_conformance.spelling import CANONICAL, LEGACY, SPELLINGS

# --------------------------------------------------------------------------- "once" registries
# The kit, not Python's warning filter, decides "once", so tests with simplefilter("always")
# see exactly one warning and users with default filters see no repeats either.
_WARNED_LEGACY_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()
_WARNED_CALL_SITES: set[tuple[str, int]] = set()


def warn_legacy_class(cls: type, stacklevel: int) -> None:
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


def called_from(defn: Definition, frame: types.FrameType | None) -> bool:
    """True when ``frame`` runs ``defn``'s own body (the definition reaching for the other name)."""
    code = getattr(defn.function, "__code__", None)
    return frame is not None and code is not None and frame.f_code is code


class GraphOptDispatch(AliasEntry):
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
        defn = resolve(cls)
        if defn is None:  # pragma: no cover - installation refuses classes without a definition
            raise AttributeError(f"{cls.__qualname__} has no {CANONICAL}() under either spelling")
        if defn.spelling != self.spelling and called_from(defn, sys._getframe(1)):
            # The winning body itself calls the other spelling on self (clear the draft, then
            # ``self.clear_grpah_opt_backend()`` for the base's main graphs): it means what plain
            # Python gave it, the inherited method under that name. Routing it back to itself
            # would recurse; routing it to itself silently would skip the base's work.
            defn = inherited_original(cls, self.spelling)
            if defn is None:
                raise AttributeError(f"{cls.__qualname__} has no {self.spelling}() to call besides the alias")
        if defn.spelling == LEGACY:
            warn_legacy_class(defn.owner, stacklevel=2)
        elif self.spelling == LEGACY:
            _warn_call_site(cls, sys._getframe(1))
        return defn.entry.__get__(obj, cls) if hasattr(defn.entry, "__get__") else defn.entry


def refuse_unaliasable(cls: type) -> None:
    """The alias cannot fix a missing, non-callable or self-contradicting method: say so."""
    conflict = own_conflict(cls)
    if conflict is not None:
        raise ProtocolError(
            f"{cls.__qualname__} defines both spellings with different bodies: "
            f"{conflict[0].describe()} and {conflict[1].describe()} (FDC003)",
            fix_hint("FDC003"),
        )
    defn = resolve(cls)
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
    if all(isinstance(cls.__dict__.get(s), GraphOptDispatch) for s in SPELLINGS):
        return lambda: None
    refuse_unaliasable(cls)
    saved = {s: cls.__dict__[s] for s in SPELLINGS if s in cls.__dict__}
    for spelling in SPELLINGS:
        setattr(cls, spelling, GraphOptDispatch(cls, spelling, saved.get(spelling)))
    defn = resolve(cls)
    if defn is not None and defn.spelling == LEGACY:
        warn_legacy_class(defn.owner, stacklevel=2)

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


def has_alias(cls: type) -> bool:
    """Whether the kit's alias is installed on ``cls`` itself."""
    return isinstance(cls.__dict__.get(CANONICAL), GraphOptDispatch)
