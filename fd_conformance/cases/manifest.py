"""A session's cases as data: how a parent collects without importing the model modules.

Every check of a certifying session runs in its isolation worker, and the worker imports the
model modules anyway (to build the models). The parent needs only what names, marks and judges a
row: a case's name, runtime, sizes, capabilities and expected findings. So the worker loads the
cases and sends these records (:func:`case_record`), and the parent rebuilds each case from its
record (:func:`case_from_record`) instead of importing the module itself: a framework import
(1.5 s of CPU for torch) less in every such session.

A case's callables -- its factory, config post-processor and builder -- cannot travel. In the
parent each becomes a :class:`LoadedOnCall`, which loads the real cases there when called; and a
test that runs in the parent (a project's own test taking ``fd_case``, not isolated) is given the
real case before its setup (:func:`real_case`), so it sees the very object it would have seen.

Only a case made of plain data travels (:func:`as_records`): a ModelCase subclass, or a field
holding an object of the model module's own (an Enum member), would not come back as it was --
or would import that module in the parent to unpickle -- so such a session's parent loads the
cases itself, as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fd_conformance.cases.contract import ModelCase
from fd_conformance.errors import UsageError

#: The case's callables; every other field is data and travels as it is.
CALLABLES = ("factory", "config_postprocessor", "config_builder")


PLAIN_SCALARS = (str, int, float, bool, type(None))


def as_records(cases: list[ModelCase]) -> list[dict[str, Any]] | None:
    """The cases as picklable records of plain data, or None when any case is not plain data
    (the parent then loads the cases itself)."""
    if any(type(case) is not ModelCase for case in cases):
        return None
    records = [case_record(case) for case in cases]
    return records if all(_plain(value) for record in records for value in record.values()) else None


def _plain(value: Any) -> bool:
    """Builtin scalars, and tuples, lists, frozensets and dicts of them: what unpickles anywhere."""
    if type(value) in PLAIN_SCALARS:
        return True
    if type(value) in (tuple, list, frozenset):
        return all(_plain(item) for item in value)
    if type(value) is dict:
        return all(_plain(k) and _plain(v) for k, v in value.items())
    return False


def case_record(case: ModelCase) -> dict[str, Any]:
    """The case as data: its data fields, and for each callable whether it has one."""
    record = {f.name: getattr(case, f.name) for f in dataclasses.fields(case) if f.name not in CALLABLES}
    record["callables"] = [name for name in CALLABLES if getattr(case, name) is not None]
    record["module"] = case.module  # what case.module says in the parent too (changed-file selection)
    return record


def case_from_record(record: dict[str, Any], load_real: Callable[[], dict[str, ModelCase]]) -> ModelCase:
    """The case a record describes, its callables standing in for the real ones (see LoadedOnCall).
    ``load_real`` loads the real cases by name: it is called only if a callable is."""
    data: dict[str, Any] = {name: value for name, value in record.items() if name not in ("callables", "module")}
    for name in CALLABLES:
        data[name] = LoadedOnCall(load_real, record["name"], name, record["module"]) if name in record["callables"] else None
    return ModelCase(**data)


def real_case(case: ModelCase) -> ModelCase:
    """The real case a case rebuilt from a record stands for (loaded here on first use); any other
    case is returned as it is."""
    stand_in = next((value for name in CALLABLES if isinstance(value := getattr(case, name), LoadedOnCall)), None)
    return stand_in.real() if stand_in is not None else case


class LoadedOnCall:
    """A case's callable in a parent that took the case as a record: calling it loads the real
    cases here (once: ``load_real`` caches) and calls the real callable."""

    def __init__(self, load_real: Callable[[], dict[str, ModelCase]], case: str, attr: str, module: str) -> None:
        self.load_real = load_real
        self.case = case
        self.attr = attr
        self.__module__ = module  # the real factory's, so case.module reads the same here

    def real(self) -> ModelCase:
        found = self.load_real().get(self.case)
        if found is None:  # the module gave the worker a case it does not give this process
            raise UsageError(
                f"case {self.case!r} was loaded by the isolation worker but not by this process",
                "make the module build the same cases in every process (no dependence on the environment)",
            )
        return found

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.real(), self.attr)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.attr} of case {self.case!r}, loaded on call>"
