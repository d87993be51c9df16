"""Issue 24 item 7: the protocol judges the callable the engine's call actually gets.

A clear built from a descriptor (``functools.partialmethod``, a custom ``__get__``, a property, a
no-argument staticmethod or classmethod) or set on the instance (``functools.partial``) is not a
plain function, yet ``model.clear_graph_opt_backend()`` works: no FDC006. What binds to something
that is not callable is still FDC006, and what binds to a call that needs arguments is FDC005 --
on the instance, where the engine calls it, and on the class as far as the class can tell.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest

from fd_conformance.protocol import (
    CANONICAL,
    LEGACY,
    check_protocol,
    install_legacy_alias,
    legacy_alias,
    resolve_clear_method,
    same_clear_target,
    supports_graph_opt,
)


def _drop(model: Any, *, hard: bool) -> None:
    model.dropped = "hard" if hard else "soft"


class BindsTo:
    """A descriptor handing the instance ``factory(instance)``."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        return self if obj is None else self.factory(obj)


class CallableObject:
    """Not a descriptor: a class attribute of this type is called as is, without ``self``."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


class Partialmethod:
    clear_graph_opt_backend = functools.partialmethod(_drop, hard=True)


class CustomDescriptor:
    clear_graph_opt_backend = BindsTo(lambda obj: functools.partial(_drop, obj, hard=True))


class PropertyMethod:
    @property
    def clear_graph_opt_backend(self) -> Any:
        return functools.partial(_drop, self, hard=False)


class NoArgStatic:
    @staticmethod
    def clear_graph_opt_backend() -> None: ...


class NoArgClassmethod:
    @classmethod
    def clear_graph_opt_backend(cls) -> None: ...


class PartialOnClass:
    clear_graph_opt_backend = functools.partial(print, end="")  # not a descriptor: called with no self


class CallableOnClass:
    clear_graph_opt_backend = CallableObject()


class InstancePartial:
    def __init__(self) -> None:
        self.clear_graph_opt_backend = functools.partial(_drop, self, hard=True)


class LegacyPartialmethod:
    clear_grpah_opt_backend = functools.partialmethod(_drop, hard=True)


GOOD = [Partialmethod, CustomDescriptor, PropertyMethod, NoArgStatic, NoArgClassmethod, PartialOnClass, CallableOnClass]


def codes(target: object) -> list[str]:
    return [f.code for f in check_protocol(target)]


@pytest.mark.parametrize("cls", GOOD, ids=lambda c: c.__name__)
def test_descriptor_binding_to_a_no_argument_call_conforms(cls: type) -> None:
    instance = cls()
    assert codes(cls) == [] and codes(instance) == []
    assert supports_graph_opt(cls) and supports_graph_opt(instance)
    method = resolve_clear_method(instance)
    assert method is not None
    method()  # what the engine does: it works
    assert getattr(instance, "dropped", "hard") in ("hard", "soft")


def test_the_clear_actually_runs_through_each_descriptor() -> None:
    for cls, expected in ((Partialmethod, "hard"), (CustomDescriptor, "hard"), (PropertyMethod, "soft")):
        instance = cls()
        instance.clear_graph_opt_backend()
        assert instance.dropped == expected, cls


def test_instance_partial_conforms_on_the_instance() -> None:
    """Only the instance has it (set in ``__init__``): the instance conforms; the class alone
    has no clear method (FDC001), as before."""
    instance = InstancePartial()
    assert codes(instance) == [] and supports_graph_opt(instance)
    assert resolve_clear_method(instance) is instance.clear_graph_opt_backend
    assert codes(InstancePartial) == ["FDC001"]


def test_legacy_partialmethod_gets_the_alias_and_both_spellings_agree() -> None:
    assert codes(LegacyPartialmethod) == ["FDC002"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with legacy_alias(LegacyPartialmethod):
            model = LegacyPartialmethod()
            canonical, legacy = getattr(model, CANONICAL), getattr(model, LEGACY)
            assert canonical is not legacy  # a partialmethod binds a new object per read...
            assert same_clear_target(canonical, legacy)  # ...of one definition
            canonical()
            assert model.dropped == "hard"


def test_install_alias_accepts_a_descriptor() -> None:
    undo = install_legacy_alias(Partialmethod)
    try:
        model = Partialmethod()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the call site's spelling, not the point here
            model.clear_grpah_opt_backend()
        assert model.dropped == "hard"
    finally:
        undo()


# --------------------------------------------------------------------------- still flagged
class PartialmethodMissingArg:
    clear_graph_opt_backend = functools.partialmethod(_drop)  # ``hard`` is required


class DescriptorToNone:
    clear_graph_opt_backend = BindsTo(lambda obj: None)


class DescriptorNeedsArg:
    clear_graph_opt_backend = BindsTo(lambda obj: functools.partial(_drop, obj))


class PropertyToValue:
    @property
    def clear_graph_opt_backend(self) -> Any:
        return 0


class DescriptorRaises:
    clear_graph_opt_backend = BindsTo(lambda obj: obj.no_such_teardown)


class CallableOnClassNeedsArg:
    clear_graph_opt_backend = functools.partial(_drop)  # called with no self: ``model`` missing


class InstancePartialNeedsArg:
    def __init__(self) -> None:
        self.clear_graph_opt_backend = functools.partial(_drop, self)


class PlainValue:
    clear_graph_opt_backend = 3


@pytest.mark.parametrize(
    ("cls", "on_class", "on_instance", "says"),
    [
        (PartialmethodMissingArg, ["FDC005"], ["FDC005"], "requires argument(s) hard"),
        (DescriptorToNone, [], ["FDC006"], "BindsTo descriptor that gives the instance a NoneType"),
        (DescriptorNeedsArg, [], ["FDC005"], "requires argument(s) hard"),
        (PropertyToValue, [], ["FDC006"], "gives the instance a int"),
        (DescriptorRaises, [], ["FDC006"], "raised AttributeError"),
        (CallableOnClassNeedsArg, ["FDC005"], ["FDC005"], "requires argument(s) model, hard"),
        (PlainValue, ["FDC006"], ["FDC006"], "is a int (3), not a method"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else None,
)
def test_descriptor_binding_to_a_call_that_cannot_work_is_flagged(
    cls: type, on_class: list[str], on_instance: list[str], says: str
) -> None:
    """On the class, a custom descriptor cannot be judged (it binds only on an instance); the
    suites judge the built instance, where the engine calls it."""
    instance = cls()
    assert codes(cls) == on_class
    findings = check_protocol(instance)
    assert [f.code for f in findings] == on_instance
    assert says in findings[0].message, findings[0].message
    assert resolve_clear_method(instance) is None  # the suites must not call it
    if on_instance == ["FDC006"]:
        assert not supports_graph_opt(instance)


def test_instance_partial_needing_an_argument_is_fdc005() -> None:
    instance = InstancePartialNeedsArg()
    findings = check_protocol(instance)
    assert [f.code for f in findings] == ["FDC005"]
    assert "instance attribute" in findings[0].message and "hard" in findings[0].message
    assert resolve_clear_method(instance) is None


def test_two_partialmethods_with_different_arguments_are_two_bodies() -> None:
    class Split:
        clear_graph_opt_backend = functools.partialmethod(_drop, hard=True)
        clear_grpah_opt_backend = functools.partialmethod(_drop, hard=False)

    class Same:
        clear_graph_opt_backend = functools.partialmethod(_drop, hard=True)
        clear_grpah_opt_backend = clear_graph_opt_backend

    assert codes(Split) == ["FDC003"]
    assert codes(Same) == []
