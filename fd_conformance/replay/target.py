"""Which check a reproducer calls: a suite test's node id resolved to its function, its matrix
column and the values of its own ``pytest.mark.parametrize`` marks, with no pytest session.

The node id is the one the run reported (conformance.json, junit.xml, pytest.log): its file names
a module of the shipped suites, its name the function, and the end of its brackets the device row
and the parametrize ids. Those ids are matched against the ids the function's own marks produce
(every combination, as pytest makes them), never split on ``-`` (case names and ids contain it).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fd_conformance.errors import UsageError
from fd_conformance.matrix_keys import check_column

SUITE_PACKAGE = "fd_conformance.suite"
PRIMITIVES = (str, int, float, bool, type(None))  # values pytest names by themselves in an id


@dataclass(frozen=True)
class CheckTarget:
    """One parametrization of one suite check, ready to call."""

    nodeid: str
    function: Callable[..., Any]
    check: str  # the matrix column (the conformance marker's argument)
    params: dict[str, Any] = field(default_factory=dict)  # argument name -> value, from the function's marks

    @property
    def arguments(self) -> list[str]:
        """The function's arguments in order: fixtures and parametrized names alike."""
        return list(inspect.signature(self.function).parameters)


def resolve_check(nodeid: str, device: str) -> CheckTarget:
    """The check ``nodeid`` names on the ``device`` row; a one-line UsageError when it is no
    shipped suite check or none of its parametrizations has the node id's ids."""
    module_name = suite_module(nodeid)
    function_name, _, bracket = nodeid.partition("::")[2].partition("[")
    if module_name is None:
        raise UsageError(
            f"{nodeid!r} is no check of the shipped suites ({SUITE_PACKAGE})",
            "give a node id from the run's conformance.json (e.g. test_clear.py::test_clear_before_capture_and_twice[my-model-cpu])",
        )
    module = importlib.import_module(module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise UsageError(f"{module_name} has no check {function_name!r} (from {nodeid!r})", "give a node id of this kit version")
    check = check_column(_closest(function, module, "conformance"), function_name)
    ids = bracket.removesuffix("]") if bracket else ""
    for suffix, params in sorted(parametrizations(function), key=lambda pair: -len(pair[0])):
        row = f"-{device}" + (f"-{suffix}" if suffix else "")
        if f"-{ids}".endswith(row):
            return CheckTarget(nodeid, function, check, params)
    raise UsageError(
        f"{nodeid!r} names no {device} row of {function_name} with parametrize ids it has",
        f"give a node id of this kit version whose brackets end in -{device}[-ids]",
    )


def suite_module(nodeid: str) -> str | None:
    """The shipped suite module a node id's file names (``test_clear.py::...`` ->
    ``fd_conformance.suite.test_clear``), found without importing it; None for any other test."""
    path, sep, name = nodeid.partition("::")
    stem = path.replace("\\", "/").rsplit("/", 1)[-1].removesuffix(".py")
    if not sep or not stem.startswith("test_") or "::" in name:
        return None
    module_name = f"{SUITE_PACKAGE}.{stem}"
    return module_name if importlib.util.find_spec(module_name) is not None else None


def parametrizations(function: Callable[..., Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, argument values) of every combination of the function's parametrize marks, the ids
    joined by ``-`` in the order pytest joins them (the mark nearest the function first)."""
    choices = [list(_mark_choices(mark)) for mark in _marks(function) if mark.name == "parametrize"]
    for combination in itertools.product(*choices):
        values: dict[str, Any] = {}
        for _, chosen in combination:
            values.update(chosen)
        yield "-".join(part for part, _ in combination), values


def _mark_choices(mark: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, values) of each parameter set of one parametrize mark."""
    argnames, argvalues = mark.args[0], mark.args[1]
    names = [n.strip() for n in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
    given_ids = mark.kwargs.get("ids")
    for index, raw in enumerate(argvalues):
        explicit = getattr(raw, "id", None)  # a pytest.param(..., id=...)
        values = tuple(getattr(raw, "values", raw if len(names) > 1 else (raw,)))
        if explicit is None and isinstance(given_ids, Sequence) and index < len(given_ids):
            explicit = given_ids[index]
        ident = (
            str(explicit)
            if explicit is not None
            else "-".join(_value_id(v, n, index) for n, v in zip(names, values, strict=True))
        )
        yield ident, dict(zip(names, values, strict=True))


def _value_id(value: Any, name: str, index: int) -> str:
    """pytest's id for a value without an explicit one: primitives by themselves, else name+index."""
    return str(value) if isinstance(value, PRIMITIVES) else f"{name}{index}"


def _marks(function: Callable[..., Any]) -> list[Any]:
    """The function's own marks, nearest the function first (as pytest stores them)."""
    return list(getattr(function, "pytestmark", []))


def _closest(function: Callable[..., Any], module: Any, name: str) -> Any:
    """The function's marker ``name``, else its module's (pytest's get_closest_marker, for one function)."""
    module_marks = getattr(module, "pytestmark", [])
    module_marks = module_marks if isinstance(module_marks, list) else [module_marks]
    for mark in [*_marks(function), *module_marks]:
        mark = getattr(mark, "mark", mark)  # a MarkDecorator at module level
        if mark.name == name:
            return mark
    return None
