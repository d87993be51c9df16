"""The protocol checks: one ``check_fdc00N_*`` function per finding code, run in :data:`CHECKS` order.

Why this order: each check may assume what the checks before it established. Near-miss names
(FDC004) are reported whatever else holds. Then what the engine's call gets must be callable
(FDC006); then a real body must be reachable through it (FDC001); then the two spellings must not
reach different bodies (FDC003). A finding of any of those ends the run: what follows would
restate it or cannot be judged (the arguments of a method that cannot be called). Only then the
legacy-only spelling (FDC002, a warning) and required arguments (FDC005) are judged.

A callable the instance itself holds under the canonical name shadows the class: the class's
definitions never run for that instance, so the class-level checks say nothing about it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fd_conformance.findings import Finding, Location, Severity, make_finding
from fd_conformance.protocol.base import Definition, class_location, own_attributes
from fd_conformance.protocol.resolution import (
    MISSING,
    Binding,
    Reach,
    bind,
    describe_shims,
    engine_reach,
    instance_method,
    near_misses,
    plain_lookup,
    required_params,
    resolve,
    same_body,
    shims,
    unfilled,
)
from fd_conformance.protocol.shims import is_self_shim, shim_target
from fd_conformance.spelling import CANONICAL, LEGACY, SPELLINGS, edit_distance


@dataclass(frozen=True)
class Target:
    """What is checked: a class or an instance, and what resolution says about it (computed once,
    on first use, since the checks share it)."""

    obj: object

    @property
    def cls(self) -> type:
        return self.obj if isinstance(self.obj, type) else type(self.obj)

    @property
    def name(self) -> str:
        return self.cls.__qualname__

    @cached_property
    def shadow(self) -> Any | None:
        """The instance's own callable under the canonical name (the class is never reached), or None."""
        return instance_method(self.obj)

    @cached_property
    def canonical(self) -> Definition | None:
        return plain_lookup(self.cls, CANONICAL)

    @cached_property
    def legacy(self) -> Definition | None:
        return plain_lookup(self.cls, LEGACY)

    @cached_property
    def real(self) -> Definition | None:
        """The inheritance rule's method: the most-derived real body under either spelling."""
        return resolve(self.cls)


ProtocolCheck = Callable[[Target], list[Finding]]


def check_fdc004_near_miss(target: Target) -> list[Finding]:
    """Names within two edits of a spelling: the engine never calls them."""
    found = []
    for miss in near_misses(target.obj):
        raw = inspect.getattr_static(target.obj, miss, None)
        func = inspect.unwrap(getattr(raw, "__func__", raw)) if raw is not None else None
        code = getattr(func, "__code__", None)
        obj = f"{target.name}.{miss}"
        loc = Location(code.co_filename, code.co_firstlineno, obj=obj) if code else class_location(target.cls, obj=obj)
        spelling = min(SPELLINGS, key=lambda s: edit_distance(miss, s))
        found.append(
            make_finding(
                "FDC004",
                f"{target.name} defines {miss!r}, {edit_distance(miss, spelling)} edit(s) from {spelling!r}: "
                f"the engine calls {CANONICAL}() and will never reach it",
                loc,
                name=miss,
            )
        )
    return found


def check_fdc006_not_callable(target: Target) -> list[Finding]:
    """What the engine's call gets is no callable: an instance attribute value (it shadows the
    class), else a class definition that binds to a non-callable or whose binding raises. The
    first one found: the engine's call fails there."""
    if not isinstance(target.obj, type):
        for spelling in SPELLINGS:
            value = own_attributes(target.obj).get(spelling, MISSING)
            if value is not MISSING and not callable(value):
                return [_not_callable(target.name, spelling, value, class_location(target.cls))]
    if target.shadow is not None:
        return []
    for defn in (d for d in (target.canonical, target.legacy) if d is not None):
        # Judged as bound, the way the engine's call gets it: a descriptor is not callable itself
        # but may bind to a call that works (functools.partialmethod, a custom __get__).
        binding = bind(defn, target.obj)
        if binding.error is not None or (binding.known and not callable(binding.value)):
            return [_not_callable(target.name, defn.spelling, defn.entry, defn.location, binding)]
    return []


def check_fdc001_no_reachable_clear(target: Target) -> list[Finding]:
    """No real body the engine's call reaches: no method under either name, only forwarding shims,
    or a shim in the way forwarding to a missing name or looping."""
    if target.shadow is not None:
        return []
    if target.canonical is None and target.legacy is None:
        return [_missing(target.cls)]
    if target.real is None:  # only forwarding shims: nothing to forward to, so nothing is defined
        return [_missing(target.cls, found_shims=shims(target.cls))]
    path = engine_reach(target.cls)
    if path is not None and path.body is None:
        return [unreachable(target.cls, path, target.real)]
    return []


def check_fdc003_split_bodies(target: Target) -> list[Finding]:
    """The two spellings reach two real bodies: callers of one skip the other's clearing."""
    canonical, legacy = target.canonical, target.legacy
    if target.shadow is not None or canonical is None or legacy is None or same_body(canonical, legacy):
        return []
    if is_self_shim(canonical) or is_self_shim(legacy):
        return []
    where = canonical.location if canonical.owner is target.cls or legacy.owner is not target.cls else legacy.location
    return [
        make_finding(
            "FDC003",
            f"{target.name}: the two spellings reach different methods -- {CANONICAL} is "
            f"{canonical.describe()} and {LEGACY} is {legacy.describe()}; callers of one "
            f"spelling skip the other's clearing",
            where,
        )
    ]


def check_fdc002_legacy_only(target: Target) -> list[Finding]:
    """The method is defined under the legacy spelling only (a warning: the alias makes it work)."""
    real = target.real
    if target.shadow is not None or real is None or real.spelling != LEGACY:
        return []
    return [
        make_finding(
            "FDC002",
            f"{target.name} defines only the legacy misspelling {LEGACY}() ({real.describe()}); it "
            f"conforms through the kit's alias, but engines without the alias call {CANONICAL}()",
            real.location,
        )
    ]


def check_fdc005_requires_arguments(target: Target) -> list[Finding]:
    """The engine's no-argument call leaves parameters unfilled (TypeError instead of clearing)."""
    if target.shadow is not None:
        required = unfilled(target.shadow, receiver_pending=False)
        what = f"{target.name}.{CANONICAL} (an instance attribute, {type(target.shadow).__name__})"
        return [_requires_args(what, required, class_location(target.cls))] if required else []
    real = target.real
    required = required_params(real, target.obj) if real is not None else []
    return [_requires_args(f"{real.qualname}()", required, real.location)] if real is not None and required else []


#: (check, whether a finding from it ends the run), in the order they run (see the module docstring).
CHECKS: tuple[tuple[ProtocolCheck, bool], ...] = (
    (check_fdc004_near_miss, False),
    (check_fdc006_not_callable, True),
    (check_fdc001_no_reachable_clear, True),
    (check_fdc003_split_bodies, True),
    (check_fdc002_legacy_only, False),
    (check_fdc005_requires_arguments, False),
)


def check_protocol(obj_or_cls: object) -> list[Finding]:
    """Every way ``obj_or_cls`` breaks the GraphOptModel contract, as findings (empty = conforms)."""
    target = Target(obj_or_cls)
    findings: list[Finding] = []
    for check, ends_run in CHECKS:
        found = check(target)
        findings += found
        if found and ends_run:
            break
    return findings


def severity_of(findings: list[Finding]) -> Severity | None:
    """The worst severity among ``findings`` (None when empty): what a caller gates on."""
    if any(f.is_error for f in findings):
        return Severity.ERROR
    return Severity.WARNING if findings else None


# --------------------------------------------------------------------------- the findings' wording


def _requires_args(what: str, required: list[str], loc: Location) -> Finding:
    """FDC005 for ``what`` (the method as the engine reaches it) leaving ``required`` unfilled."""
    return make_finding(
        "FDC005",
        f"{what} requires argument(s) {', '.join(required)}; the engine calls "
        f"{CANONICAL}() with none, so clearing raises TypeError",
        loc,
        params=", ".join(required),
    )


def _missing(cls: type, found_shims: list[Definition] | None = None) -> Finding:
    """FDC001, one message for "no method" and "only shims" (a shim with no target defines nothing)."""
    name = cls.__qualname__
    detail = (
        f"; its only clear methods are forwarding shims ({describe_shims(found_shims)}), so a call raises AttributeError or recurses"
        if found_shims
        else ""
    )
    return make_finding(
        "FDC001",
        f"{name} has no {CANONICAL}() under either spelling, own or inherited: the engine cannot "
        f"destroy its captured graphs before releasing weights (RL weight sync hangs or leaks){detail}",
        class_location(cls),
        cls=name,
    )


def unreachable(cls: type, reach: Reach, real: Definition) -> Finding:
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
        f"self.{shim_target(shim)}(), {end}; the real body {real.describe()} is never reached, so the "
        f"engine cannot destroy {name}'s captured graphs",
        shim.location,
        cls=name,
    )


def _not_callable(name: str, spelling: str, value: object, loc: Location, binding: Binding | None = None) -> Finding:
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
