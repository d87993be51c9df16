"""GraphOptModel protocol: every case of issue 2, each with a good and a bad variant.

Classes are built inside each test (fresh class => fresh "warned once" state) from real methods
that record what ran, so "reaches the same method" is observed, not assumed.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import types
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.errors import EXIT_USAGE, UsageError
from fd_conformance.findings import Severity, fix_hint
from fd_conformance.protocol import (
    CANONICAL,
    LEGACY,
    GraphOptModel,
    GraphOptProtocolWarning,
    ProtocolError,
    check_protocol,
    ensure_graph_opt,
    graph_opt_model,
    install_legacy_alias,
    legacy_alias,
    severity_of,
    supports_graph_opt,
)

THIS_FILE = __file__


@contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning, unfiltered: "once" must be the kit's doing, not Python's filter."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def codes(obj: object) -> list[str]:
    return [f.code for f in check_protocol(obj)]


def deprecations(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]


def make_canonical() -> type:
    class Canonical:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def clear_graph_opt_backend(self) -> None:
            self.calls.append("canonical")

    return Canonical


def make_legacy() -> type:
    class LegacyOnly:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def clear_grpah_opt_backend(self) -> None:
            self.calls.append("legacy")

    return LegacyOnly


# --------------------------------------------------------------------------- conforming
def test_canonical_only_conforms_without_findings_or_warnings() -> None:
    cls = make_canonical()
    with recorded() as caught:
        assert check_protocol(cls) == []
        assert check_protocol(cls()) == []
        assert supports_graph_opt(cls) and supports_graph_opt(cls())
    assert caught == []
    assert isinstance(cls(), GraphOptModel)
    assert severity_of([]) is None


def test_object_without_method_is_not_a_graph_opt_model() -> None:
    class Plain:
        def forward(self) -> None: ...

    assert not isinstance(Plain(), GraphOptModel)
    assert not supports_graph_opt(Plain)
    findings = check_protocol(Plain)
    assert [f.code for f in findings] == ["FDC001"]
    assert findings[0].severity is Severity.ERROR
    assert findings[0].location.path == THIS_FILE and findings[0].location.obj.endswith("Plain")
    assert CANONICAL in findings[0].hint and "\n" not in findings[0].format()


# --------------------------------------------------------------------------- legacy only
def test_legacy_only_reports_fdc002_warning_with_location() -> None:
    cls = make_legacy()
    findings = check_protocol(cls)
    assert [f.code for f in findings] == ["FDC002"]
    assert findings[0].severity is Severity.WARNING and severity_of(findings) is Severity.WARNING
    assert findings[0].location.path == THIS_FILE
    assert findings[0].location.obj is not None and findings[0].location.obj.endswith(f"LegacyOnly.{LEGACY}")
    assert f"rename {LEGACY} to {CANONICAL}" in findings[0].hint


def test_legacy_only_class_gets_canonical_method_and_one_deprecation() -> None:
    cls = make_legacy()
    assert not isinstance(cls(), GraphOptModel)  # before the alias the engine's call would fail
    with recorded() as caught:
        install_legacy_alias(cls)
        model = cls()
        model.clear_graph_opt_backend()
        model.clear_graph_opt_backend()
        assert supports_graph_opt(model)
        model.clear_grpah_opt_backend()
    assert model.calls == ["legacy", "legacy", "legacy"]
    messages = deprecations(caught)
    assert len(messages) == 1, messages
    assert "LegacyOnly" in messages[0] and f"rename it to {CANONICAL}" in messages[0]
    assert isinstance(model, GraphOptModel)
    assert codes(cls) == ["FDC002"]  # still reported: the source keeps the misspelling


def test_supports_graph_opt_is_pure_and_ensure_graph_opt_installs_the_alias_warning_once() -> None:
    cls = make_legacy()
    with recorded() as caught:
        assert not supports_graph_opt(cls()) and not supports_graph_opt(cls)  # no canonical name yet
    assert caught == [] and CANONICAL not in vars(cls)  # asking installed nothing and said nothing
    with recorded() as caught:
        assert ensure_graph_opt(cls)
        assert ensure_graph_opt(cls)  # idempotent
        assert supports_graph_opt(cls()) and supports_graph_opt(cls)
        model = cls()
        model.clear_graph_opt_backend()  # TypeIs promised this works
    assert model.calls == ["legacy"]
    assert len(deprecations(caught)) == 1


# --------------------------------------------------------------------------- caller uses legacy
def test_legacy_caller_reaches_canonical_method_with_one_warning_per_call_site() -> None:
    cls = make_canonical()
    install_legacy_alias(cls)
    model = cls()
    with recorded() as caught:
        for _ in range(3):
            model.clear_grpah_opt_backend()  # call site A, three times
        model.clear_grpah_opt_backend()  # call site B
        getattr(model, CANONICAL)()  # canonical callers are never warned
    assert model.calls == ["canonical"] * 5
    dep = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(dep) == 2, [str(w.message) for w in dep]
    assert {w.filename for w in dep} == {THIS_FILE}
    assert dep[0].lineno != dep[1].lineno
    assert f"call {CANONICAL}()" in str(dep[0].message)


def test_legacy_call_without_alias_fails_the_way_the_engine_does() -> None:
    """Negative control: without the kit the legacy caller really breaks on a canonical class."""
    model = make_canonical()()
    with pytest.raises(AttributeError):
        getattr(model, LEGACY)()


# --------------------------------------------------------------------------- both spellings
def test_both_spellings_with_different_bodies_is_fdc003_naming_both() -> None:
    class Both:
        def clear_graph_opt_backend(self) -> None:
            pass

        def clear_grpah_opt_backend(self) -> None:
            print("something else")

    findings = check_protocol(Both)
    assert [f.code for f in findings] == ["FDC003"]
    msg = findings[0].message
    for spelling in (CANONICAL, LEGACY):
        assert f"Both.{spelling} ({THIS_FILE}:" in msg
    with pytest.raises(ProtocolError) as err:
        install_legacy_alias(Both)
    assert f"Both.{CANONICAL}" in str(err.value) and f"Both.{LEGACY}" in str(err.value)
    assert err.value.exit_code == EXIT_USAGE and "\n" not in str(err.value)
    with pytest.raises(ProtocolError):
        graph_opt_model(Both)
    assert LEGACY in Both.__dict__ and callable(Both.__dict__[LEGACY])  # refused => untouched


def test_both_spellings_sharing_one_body_or_forwarding_conform() -> None:
    class Assigned:
        def clear_graph_opt_backend(self) -> None: ...

        clear_grpah_opt_backend = clear_graph_opt_backend

    class ForwardsToCanonical:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def clear_graph_opt_backend(self) -> None:
            self.calls.append("canonical")

        def clear_grpah_opt_backend(self) -> None:
            return self.clear_graph_opt_backend()

    class ForwardsToLegacy:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def clear_graph_opt_backend(self) -> None:
            return self.clear_grpah_opt_backend()

        def clear_grpah_opt_backend(self) -> None:
            self.calls.append("legacy")

    assert codes(Assigned) == []
    assert codes(ForwardsToCanonical) == []
    assert codes(ForwardsToLegacy) == ["FDC002"]  # the real body still carries the old name
    for cls, body in ((ForwardsToCanonical, "canonical"), (ForwardsToLegacy, "legacy")):
        with recorded():
            install_legacy_alias(cls)
            model = cls()
            model.clear_graph_opt_backend()  # must not recurse through the shim
            model.clear_grpah_opt_backend()
        assert model.calls == [body, body]


# --------------------------------------------------------------------------- inheritance
def test_subclass_overriding_only_legacy_spelling_wins_under_both_names() -> None:
    """FastDeploy wrappers subclass each other: the most-derived definition is THE method."""

    class Base:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def clear_graph_opt_backend(self) -> None:
            self.calls.append("base")

        clear_grpah_opt_backend = clear_graph_opt_backend

    class Sub(Base):
        def clear_grpah_opt_backend(self) -> None:  # written against the old name
            self.calls.append("sub")

    # As plain Python runs it, the engine's canonical call skips Sub's override: FDC003 (split).
    findings = check_protocol(Sub)
    assert [f.code for f in findings] == ["FDC003"]
    assert "Base.clear_graph_opt_backend" in findings[0].message and "Sub.clear_grpah_opt_backend" in findings[0].message
    plain = Sub()
    plain.clear_graph_opt_backend()
    assert plain.calls == ["base"]

    with recorded() as caught:
        undo = install_legacy_alias(Base)  # on the base: later/undecorated subclasses follow too
        model = Sub()
        model.clear_graph_opt_backend()
        model.clear_grpah_opt_backend()
        base = Base()
        base.clear_graph_opt_backend()
    assert model.calls == ["sub", "sub"] and base.calls == ["base"]
    assert codes(Sub) == ["FDC002"] and codes(Base) == []
    assert [m for m in deprecations(caught) if "Sub" in m] != []
    undo()
    assert Base.__dict__[CANONICAL] is Base.__dict__[LEGACY]  # restored exactly
    assert codes(Sub) == ["FDC003"]


def test_subclass_overriding_canonical_of_legacy_base_is_reached_by_legacy_callers() -> None:
    Base = make_legacy()

    class Sub(Base):  # type: ignore[misc, valid-type]
        def clear_graph_opt_backend(self) -> None:
            self.calls.append("sub")

    assert codes(Sub) == ["FDC003"]  # old callers would still run the base's body
    with recorded() as caught, legacy_alias(Sub):
        model = Sub()
        model.clear_grpah_opt_backend()
        assert codes(Sub) == []
    assert model.calls == ["sub"]
    assert len(deprecations(caught)) == 1  # the call site, not the class: Sub uses the new name
    assert CANONICAL in Sub.__dict__ and LEGACY not in Sub.__dict__  # context manager undid it


def test_subclass_of_aliased_base_defined_later_follows_the_rule() -> None:
    Base = make_canonical()
    install_legacy_alias(Base)

    class Later(Base):  # type: ignore[misc, valid-type]
        def clear_grpah_opt_backend(self) -> None:
            self.calls.append("later")

    with recorded():
        model = Later()
        model.clear_graph_opt_backend()
    assert model.calls == ["later"]


# --------------------------------------------------------------------------- install mechanics
def test_install_is_idempotent_and_reversible() -> None:
    cls = make_canonical()
    original = cls.__dict__[CANONICAL]
    undo = install_legacy_alias(cls)
    installed = (cls.__dict__[CANONICAL], cls.__dict__[LEGACY])
    noop = install_legacy_alias(cls)
    assert (cls.__dict__[CANONICAL], cls.__dict__[LEGACY]) == installed
    noop()
    assert cls.__dict__[CANONICAL] is installed[0]  # the second call's undo did nothing
    undo()
    assert cls.__dict__[CANONICAL] is original and LEGACY not in cls.__dict__


def test_install_refuses_instances_and_classes_without_method() -> None:
    with pytest.raises(UsageError, match="needs a class"):
        install_legacy_alias(make_canonical()())

    class Nothing:
        pass

    with pytest.raises(ProtocolError, match="FDC001"):
        install_legacy_alias(Nothing)
    assert CANONICAL not in Nothing.__dict__


def test_decorator_provides_alias_and_rejects_bad_classes_at_definition() -> None:
    @graph_opt_model
    class Good:
        def clear_graph_opt_backend(self) -> None:
            self.cleared = True

    model = Good()
    with recorded():
        model.clear_grpah_opt_backend()
    assert model.cleared

    with pytest.raises(ProtocolError, match="FDC005"):

        @graph_opt_model
        class NeedsArgs:
            def clear_graph_opt_backend(self, fd_config: Any) -> None: ...


# --------------------------------------------------------------------------- signatures
def test_required_arguments_are_fdc005_bound_and_unbound() -> None:
    class InnerModel:  # like FastDeploy's @support_graph_optimization model
        def clear_graph_opt_backend(self, fd_config: Any) -> None: ...

    class Defaults:
        def clear_graph_opt_backend(self, fd_config: Any = None, *args: Any, **kw: Any) -> None: ...

    class Static:
        @staticmethod
        def clear_graph_opt_backend() -> None: ...

    class StaticNeedsArg:
        @staticmethod
        def clear_graph_opt_backend(fd_config: Any) -> None: ...

    class ClassLevel:
        @classmethod
        def clear_graph_opt_backend(cls) -> None: ...

    for target in (InnerModel, InnerModel()):
        findings = check_protocol(target)
        assert [f.code for f in findings] == ["FDC005"]
        assert "fd_config" in findings[0].message and findings[0].location.path == THIS_FILE
    for good in (Defaults, Defaults(), Static, Static(), ClassLevel, ClassLevel()):
        assert codes(good) == [], good
    assert codes(StaticNeedsArg) == ["FDC005"] and codes(StaticNeedsArg()) == ["FDC005"]


def test_wrapper_delegating_to_inner_models_legacy_name_is_a_real_body() -> None:
    """FastDeploy's wrapper: ``self.model.clear_grpah_opt_backend(fd_config=...)`` is not a shim."""

    class Inner:
        def __init__(self) -> None:
            self.cleared_with: Any = None

        def clear_grpah_opt_backend(self, fd_config: Any) -> None:
            self.cleared_with = fd_config

    class Wrapper:
        def __init__(self) -> None:
            self.model, self.fd_config = Inner(), object()

        def clear_graph_opt_backend(self) -> None:
            self.model.clear_grpah_opt_backend(fd_config=self.fd_config)

    assert codes(Wrapper) == []
    install_legacy_alias(Wrapper)
    wrapper = Wrapper()
    wrapper.clear_graph_opt_backend()
    assert wrapper.model.cleared_with is wrapper.fd_config
    assert codes(Inner) == ["FDC002", "FDC005"]


# --------------------------------------------------------------------------- near-miss
def test_near_miss_names_are_fdc004_and_ensure_warns_once() -> None:
    class Typo:
        def clear_graph_opt_backed(self) -> None: ...

    class Transposed:
        def claer_graph_opt_backend(self) -> None: ...  # distance 2

    assert codes(Typo) == ["FDC004", "FDC001"]
    assert codes(Transposed) == ["FDC004", "FDC001"]
    finding = check_protocol(Typo)[0]
    assert "'clear_graph_opt_backed'" in finding.message and finding.location.path == THIS_FILE
    assert f"rename clear_graph_opt_backed to {CANONICAL}" in finding.hint
    with recorded() as caught:
        assert not supports_graph_opt(Typo()) and not supports_graph_opt(Typo)
    assert caught == []  # the predicate only answers
    with recorded() as caught:
        assert not ensure_graph_opt(Typo)
        assert not ensure_graph_opt(Typo)
    near = [w for w in caught if issubclass(w.category, GraphOptProtocolWarning)]
    assert len(near) == 1 and f"rename it to {CANONICAL}" in str(near[0].message)


def test_near_miss_next_to_real_method_is_flagged_and_far_names_are_not() -> None:
    class Extra:
        def clear_graph_opt_backend(self) -> None: ...

        def clear_graph_opt_backends(self) -> None: ...  # a subclass "override" that overrides nothing

    class Unrelated:
        def clear_graph_opt_backend(self) -> None: ...

        def clear_graph_backend(self) -> None: ...  # distance 4: a different method

        def clear_graph_opt_cache(self) -> None: ...

    assert codes(Extra) == ["FDC004"]
    assert codes(Unrelated) == []


# --------------------------------------------------------------------------- not callable
def test_non_callable_attribute_under_the_name_is_fdc006() -> None:
    class Flag:
        clear_graph_opt_backend = None

    class LegacyFlag:
        clear_grpah_opt_backend = True

    shadowed = make_canonical()()
    shadowed.clear_graph_opt_backend = 3  # instance attribute shadows the method

    assert codes(Flag) == ["FDC006"]
    assert codes(LegacyFlag) == ["FDC006"]
    assert codes(shadowed) == ["FDC006"]
    assert codes(make_canonical()()) == []
    assert not supports_graph_opt(Flag) and not supports_graph_opt(shadowed)
    with pytest.raises(ProtocolError, match="FDC006"):
        install_legacy_alias(Flag)


# --------------------------------------------------------------------------- shims vs real bodies
def make_draft_sub() -> tuple[type, type]:
    """Issue review item 1: a subclass clears its draft, then calls the base's legacy-named clear."""

    class Base:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def clear_grpah_opt_backend(self) -> None:
            self.calls.append("base main")

    class Sub(Base):
        def clear_graph_opt_backend(self) -> None:
            """Draft first: its graphs captured the main model's shared weights."""
            self.calls.append("sub draft")
            self.clear_grpah_opt_backend()

    return Base, Sub


def test_body_that_works_then_calls_other_spelling_is_not_a_shim() -> None:
    base, sub = make_draft_sub()
    plain = sub()
    plain.clear_graph_opt_backend()
    assert plain.calls == ["sub draft", "base main"]
    # Un-aliased, an engine calling the old name reaches only Base's body and leaks the draft:
    # a split (FDC003). Before the fix the body counted as a shim and this was hidden.
    assert codes(sub) == ["FDC003"]
    with recorded():
        undo = install_legacy_alias(sub)
        model = sub()
        model.clear_graph_opt_backend()
        legacy_caller = sub()
        legacy_caller.clear_grpah_opt_backend()  # the engine's old spelling reaches the same method
    assert model.calls == ["sub draft", "base main"]  # before the fix: ['base main'] (draft leaked)
    assert legacy_caller.calls == ["sub draft", "base main"]
    assert codes(sub) == []  # the alias resolved the split
    undo()
    with recorded():
        install_legacy_alias(base)  # aliasing the base instead: same behaviour for the subclass
        model = sub()
        model.clear_graph_opt_backend()
        model.clear_grpah_opt_backend()
    assert model.calls == ["sub draft", "base main"] * 2


def test_only_exact_forwarding_bodies_are_shims() -> None:
    from fd_conformance.protocol.base import Definition as _Definition
    from fd_conformance.protocol.shims import bytecode_forward
    from fd_conformance.protocol.shims import is_self_shim as _is_self_shim

    def _bytecode_is_shim(code: Any, receiver: str, target: str) -> bool:
        return bytecode_forward(code, receiver) == target

    class Shapes:
        def clear_graph_opt_backend(self) -> None: ...

        def clear_grpah_opt_backend(self, *args: Any, **kwargs: Any) -> None:
            """A documented forwarder is still a forwarder."""
            return self.clear_graph_opt_backend(*args, **kwargs)

    class Works:
        def clear_graph_opt_backend(self) -> None: ...

        def clear_grpah_opt_backend(self) -> None:
            self.clear_graph_opt_backend()
            self.clear_graph_opt_backend()  # a second call: real body

    class Computes:
        def clear_graph_opt_backend(self, x: Any = None) -> None: ...

        def clear_grpah_opt_backend(self) -> None:
            self.clear_graph_opt_backend(print("side effect"))

    assert _is_self_shim(_Definition(Shapes, LEGACY, Shapes.__dict__[LEGACY]))
    assert not _is_self_shim(_Definition(Works, LEGACY, Works.__dict__[LEGACY]))
    assert not _is_self_shim(_Definition(Computes, LEGACY, Computes.__dict__[LEGACY]))
    # Bytecode fallback (no source: exec'd or .pyc-only code) agrees on both shapes.
    namespace: dict[str, Any] = {}
    exec(
        "def shim(self):\n    return self.clear_graph_opt_backend()\n"
        "def stmt(self):\n    self.clear_graph_opt_backend()\n"
        "def work(self):\n    self.draft = None\n    return self.clear_graph_opt_backend()\n"
        "def other(self):\n    return self.model.clear_graph_opt_backend()\n",
        namespace,
    )
    assert _bytecode_is_shim(namespace["shim"].__code__, "self", CANONICAL)
    assert _bytecode_is_shim(namespace["stmt"].__code__, "self", CANONICAL)
    assert not _bytecode_is_shim(namespace["work"].__code__, "self", CANONICAL)
    assert not _bytecode_is_shim(namespace["other"].__code__, "self", CANONICAL)
    for name in ("shim", "stmt", "work", "other"):  # and the full detector falls back to it
        func = namespace[name]
        assert _is_self_shim(_Definition(Shapes, LEGACY, func)) == (name in ("shim", "stmt"))


def test_underscored_private_helpers_are_not_near_misses() -> None:
    class Helper:
        def clear_graph_opt_backend(self) -> None:
            self._clear_graph_opt_backend()

        def _clear_graph_opt_backend(self) -> None: ...

        def __clear_grpah_opt_backend(self) -> None: ...  # name-mangled: _Helper__clear_...

        def _clear_graph_opt_backed(self) -> None: ...  # still a typo under the underscore

    assert codes(Helper) == ["FDC004"]
    assert "'_clear_graph_opt_backed'" in check_protocol(Helper)[0].message


# --------------------------------------------------------------------------- forwarding shims (issue 13, defect 4)
# Wrappers written outside the kit (tests/fixtures/outside/shim_wrappers.py, vLLM-style nn.Modules
# around ``self.backbone``), loaded as a fresh module per test: fresh classes, fresh "once" state.
OUTSIDE = Path(__file__).parent / "fixtures" / "outside"
_loaded = itertools.count()


def outside(name: str) -> types.ModuleType:
    pytest.importorskip("torch")
    module_name = f"outside_{name}_{next(_loaded)}"
    spec = importlib.util.spec_from_file_location(module_name, OUTSIDE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # inspect finds class sources through sys.modules
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # @graph_opt_model on a legacy-named body
        spec.loader.exec_module(module)
    return module


MISSING_MESSAGE = (
    f"has no {CANONICAL}() under either spelling, own or inherited: the engine cannot destroy its "
    f"captured graphs before releasing weights (RL weight sync hangs or leaks)"
)


@pytest.mark.parametrize(
    ("cls_name", "forwarder"),
    [
        ("OrionForCausalLM", f"OrionForCausalLM.{LEGACY} only forwards to self.{CANONICAL}()"),
        ("OrionDraftForCausalLM", f"OrionDraftForCausalLM.{CANONICAL} only forwards to self.{LEGACY}()"),
        ("PingPongForCausalLM", f"PingPongForCausalLM.{LEGACY} only forwards to self.{CANONICAL}()"),
        ("EchoForCausalLM", f"EchoForCausalLM.{CANONICAL} only forwards to self.{LEGACY}()"),
    ],
)
def test_class_of_only_forwarding_shims_is_fdc001_like_a_missing_method(cls_name: str, forwarder: str) -> None:
    """Before the fix: FDC002 (legacy shim), or no finding at all (canonical shim, loops), and
    supports_graph_opt() True -- then the suites' clear raised a raw AttributeError / RecursionError."""
    cls = getattr(outside("shim_wrappers"), cls_name)
    model = cls()
    with pytest.raises((AttributeError, RecursionError)):  # what the engine's call really does
        (getattr(model, CANONICAL, None) or getattr(model, LEGACY))()

    class Plain:
        pass

    usual = check_protocol(Plain)[0]
    for target in (cls, model):
        findings = check_protocol(target)
        assert [f.code for f in findings] == ["FDC001"], [f.format() for f in findings]
        finding = findings[0]
        assert finding.severity is Severity.ERROR
        assert finding.message.startswith(f"{cls_name} {MISSING_MESSAGE}")  # the usual message ...
        assert forwarder in finding.message  # ... naming the shim that hides nothing
        assert finding.hint == usual.hint.replace(Plain.__qualname__, cls_name)  # the usual fix
        assert finding.location.path == str(OUTSIDE / "shim_wrappers.py") and "\n" not in finding.format()
    with recorded() as caught:
        assert not supports_graph_opt(cls) and not supports_graph_opt(model)
        assert not ensure_graph_opt(cls) and not ensure_graph_opt(type(model))
    assert deprecations(caught) == []  # not told a rename would do
    prescriptive = [str(w.message) for w in caught if issubclass(w.category, GraphOptProtocolWarning)]
    assert len(prescriptive) == 1 and forwarder in prescriptive[0] and f"define {CANONICAL}(self)" in prescriptive[0]
    assert not any(type(v).__name__ == "_GraphOptDispatch" for v in vars(cls).values())  # no alias installed
    with pytest.raises(ProtocolError, match="FDC001"):
        install_legacy_alias(cls)
    with pytest.raises(ProtocolError, match="FDC001"):
        graph_opt_model(cls)


def test_shim_in_front_of_an_inherited_body_that_it_cannot_reach_is_fdc001() -> None:
    """The base clears under the canonical name; the subclass overrides it with a forward to the
    legacy name the base no longer has. Before the fix: no finding, supports_graph_opt() True."""
    mod = outside("shim_wrappers")
    cls = mod.OrionChatForCausalLM
    with pytest.raises(AttributeError):
        cls().clear_graph_opt_backend()
    findings = check_protocol(cls)
    assert [f.code for f in findings] == ["FDC001"], [f.format() for f in findings]
    msg = findings[0].message
    assert f"OrionChatForCausalLM.{CANONICAL}" in msg and f"self.{LEGACY}(), which OrionChatForCausalLM does not define" in msg
    assert f"OrionBase.{CANONICAL}" in msg  # the real body it hides
    assert findings[0].hint == fix_hint("FDC001", cls="OrionChatForCausalLM")  # the code's one fix, naming the class
    assert findings[0].location.obj == f"OrionChatForCausalLM.{CANONICAL}"
    with recorded() as caught:
        assert not supports_graph_opt(cls()) and not ensure_graph_opt(cls)
    assert len([w for w in caught if issubclass(w.category, GraphOptProtocolWarning)]) == 1
    assert deprecations(caught) == []
    # The kit's alias routes past the shim (most-derived REAL definition wins): then it conforms.
    with legacy_alias(cls):
        assert codes(cls) == []
        model = cls()
        model.backbone.capture(4)
        model.clear_graph_opt_backend()
        assert model.backbone.captured == {}


def test_real_bodies_next_to_shims_and_kit_decorated_outside_classes_keep_conforming() -> None:
    """Negative controls: delegating to ``self.backbone`` is a body; a shim with a target is a shim;
    the kit's decorator and alias keep working on outside classes."""
    mod = outside("shim_wrappers")
    assert codes(mod.TidalForCausalLM) == [] and codes(mod.TidalForCausalLM()) == []
    assert codes(mod.TidalCompatForCausalLM) == []
    assert codes(mod.TidalLegacyForCausalLM) == ["FDC002"]
    assert codes(mod.TidalKitForCausalLM) == ["FDC002"]  # the real body keeps the old name
    with recorded() as caught:
        for cls in (mod.TidalForCausalLM, mod.TidalCompatForCausalLM, mod.TidalKitForCausalLM):
            model = cls()
            assert supports_graph_opt(model)
            for spelling in (CANONICAL, LEGACY) if hasattr(model, LEGACY) else (CANONICAL,):
                model.backbone.capture(2)
                getattr(model, spelling)()
                assert model.backbone.captured == {}, (cls, spelling)
        legacy_only = mod.TidalLegacyForCausalLM
        undo = install_legacy_alias(legacy_only)
        model = legacy_only()
        model.backbone.capture(1)
        model.clear_graph_opt_backend()
        assert model.backbone.captured == {} and codes(legacy_only) == ["FDC002"]
        undo()
    assert [w for w in caught if issubclass(w.category, GraphOptProtocolWarning)] == []


def test_resolve_clear_method_is_none_exactly_when_the_engine_call_cannot_clear() -> None:
    """What the suites need before calling a wrapper's clear: no side effects, no alias."""
    from fd_conformance.protocol import resolve_clear_method

    mod = outside("shim_wrappers")
    for broken in ("OrionForCausalLM", "OrionDraftForCausalLM", "PingPongForCausalLM", "EchoForCausalLM", "OrionChatForCausalLM"):
        assert resolve_clear_method(getattr(mod, broken)()) is None, broken
    assert resolve_clear_method(object()) is None
    for good in ("TidalForCausalLM", "TidalLegacyForCausalLM", "TidalCompatForCausalLM", "TidalKitForCausalLM"):
        model = getattr(mod, good)()
        method = resolve_clear_method(model)
        assert method is not None, good
        model.backbone.capture(8)
        method()
        assert model.backbone.captured == {}, good
    assert CANONICAL not in vars(mod.TidalLegacyForCausalLM)  # no side effect: no alias was installed


# --------------------------------------------------------------------------- the package's shape
def test_one_check_per_protocol_code_in_the_documented_order() -> None:
    from fd_conformance.findings import RULES
    from fd_conformance.protocol import CHECKS

    codes_in_order = [check.__name__.split("_")[1].upper() for check, _ in CHECKS]
    assert codes_in_order == ["FDC004", "FDC006", "FDC001", "FDC003", "FDC002", "FDC005"]
    assert sorted(codes_in_order) == sorted(code for code in RULES if code.startswith("FDC0"))
    for check, _ in CHECKS:  # the registry names each as its code's protocol detector
        assert f"fd_conformance.protocol.checks.{check.__name__}" in RULES[check.__name__.split("_")[1].upper()].detectors


def test_supports_graph_opt_changes_nothing_on_any_fixture_class() -> None:
    fixtures = Path(__file__).resolve().parent / "fixtures" / "protocol"
    classes = [make_legacy(), make_canonical()]
    for path in sorted(fixtures.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_pure_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        classes += [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    for cls in classes:
        before = dict(vars(cls))
        with recorded() as caught:
            supports_graph_opt(cls)
            supports_graph_opt(cls())
        assert caught == [] and dict(vars(cls)) == before, cls.__qualname__


def test_ensure_graph_opt_warning_points_at_its_caller() -> None:
    class Typo:
        def clear_graph_opt_backed(self) -> None: ...

    with recorded() as caught:
        ensure_graph_opt(Typo)
    (warning,) = [w for w in caught if issubclass(w.category, GraphOptProtocolWarning)]
    assert warning.filename == THIS_FILE
