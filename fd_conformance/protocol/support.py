"""``supports_graph_opt`` (a pure TypeIs predicate, vLLM ``interfaces.py`` style), ``ensure_graph_opt``
(which makes a class conform where the kit can), and the ``@graph_opt_model`` decorator.

Why two functions: a predicate that mutates the class it is asked about (installing the alias)
surprises every caller that only wanted to know, and its answer depended on whether it had been
asked before. ``supports_graph_opt`` now only answers; ``ensure_graph_opt`` is the explicit step
that installs the legacy alias and tells the author, once, what to fix.
"""

from __future__ import annotations

import warnings
import weakref
from typing import TypeVar, overload

from typing_extensions import TypeIs

from fd_conformance.protocol.alias import has_alias, install_legacy_alias, warn_legacy_class
from fd_conformance.protocol.base import GraphOptModel, GraphOptProtocolWarning, ProtocolError
from fd_conformance.protocol.checks import check_protocol, unreachable
from fd_conformance.protocol.resolution import (
    bind,
    describe_shims,
    engine_reach,
    instance_method,
    near_misses,
    plain_lookup,
    resolve,
    shims,
)
from fd_conformance.spelling import CANONICAL, LEGACY

_T = TypeVar("_T", bound=type)
# One prescriptive warning per class (near-miss names, shims only): the kit decides "once".
_WARNED_NONCONFORMING_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()


@overload
def supports_graph_opt(obj: type[object]) -> TypeIs[type[GraphOptModel]]: ...


@overload
def supports_graph_opt(obj: object) -> TypeIs[GraphOptModel]: ...


def supports_graph_opt(obj: object) -> TypeIs[GraphOptModel | type[GraphOptModel]]:
    """Whether ``clear_graph_opt_backend()`` on ``obj`` (instance or class) reaches a real body the
    engine can call with no arguments. No side effects: nothing is installed or warned.

    A class with only the legacy spelling answers False until :func:`ensure_graph_opt` installs the
    alias (``clear_graph_opt_backend`` does not exist on it before).
    """
    if instance_method(obj) is not None:
        return True  # the instance's own callable shadows the class: the engine's call reaches it
    cls = obj if isinstance(obj, type) else type(obj)
    defn = resolve(cls)
    if defn is None or plain_lookup(cls, CANONICAL) is None:
        return False  # no body, or only the legacy name (ensure_graph_opt adds the canonical one)
    path = engine_reach(cls)
    if path is not None and path.body is None:
        return False
    if isinstance(obj, type):
        binding = bind(defn, obj)  # a descriptor that binds only on an instance cannot be judged here
        return binding.error is None and (not binding.known or callable(binding.value))
    return callable(getattr(obj, CANONICAL, None))


def ensure_graph_opt(cls: type) -> bool:
    """Make ``cls`` conform where the kit can, then answer :func:`supports_graph_opt` for it.

    A legacy-only class gets the alias, and its author one DeprecationWarning naming the rename. A
    near-miss name, clear methods that are all forwarding shims, or a shim in the way of the real
    body earn one prescriptive :class:`GraphOptProtocolWarning` (a rename would not fix them; see
    :func:`~fd_conformance.protocol.checks.check_protocol`'s FDC004/FDC001), and False.
    """
    defn = resolve(cls)
    if defn is None:
        _warn_why_not(cls)
        return False
    if defn.spelling == LEGACY and not has_alias(cls):
        try:
            install_legacy_alias(cls)
        except ProtocolError:
            return False
        warn_legacy_class(defn.owner, stacklevel=2)
    path = engine_reach(cls)
    if path is not None and path.body is None:
        broken = unreachable(cls, path, defn)
        _warn_nonconforming(cls, f"{broken.message}; {broken.hint}", stacklevel=3)
        return False
    return supports_graph_opt(cls)


def _warn_why_not(cls: type) -> None:
    """The prescriptive warning for a class with no real body: a near-miss name, or shims only."""
    misses = near_misses(cls)
    found_shims = shims(cls)
    if misses:
        _warn_nonconforming(
            cls,
            f"{cls.__qualname__} defines {', '.join(n + '()' for n in misses)}, a "
            f"near-miss of {CANONICAL}(); rename it to {CANONICAL} or the engine "
            f"cannot clear its graphs",
            stacklevel=4,
        )
    elif found_shims:
        _warn_nonconforming(
            cls,
            f"{cls.__qualname__}: {describe_shims(found_shims)}, and no body destroys a "
            f"graph; define {CANONICAL}(self) with the clearing or the engine cannot "
            f"clear its graphs",
            stacklevel=4,
        )


def _warn_nonconforming(cls: type, message: str, stacklevel: int) -> None:
    """One prescriptive GraphOptProtocolWarning per class (the kit decides "once"), attributed to
    ``stacklevel`` frames up (the caller of :func:`ensure_graph_opt`)."""
    if cls in _WARNED_NONCONFORMING_CLASSES:
        return
    _WARNED_NONCONFORMING_CLASSES.add(cls)
    warnings.warn(message, GraphOptProtocolWarning, stacklevel=stacklevel)


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
