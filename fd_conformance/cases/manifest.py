"""A session's cases as data: how a parent collects without importing the model modules.

Every check of a certifying session runs in its isolation worker, and the worker imports the
model modules anyway (to build the models). The parent needs only what names, marks and judges a
row: a case's name, runtime, sizes, capabilities and expected findings. So the worker loads the
cases and sends these records (:func:`case_record`), and the parent rebuilds each case from its
record (:func:`case_from_record`) instead of importing the module itself: a framework import
(1.5 s of CPU for torch) less in every such session.

A case's callables -- its factory, config post-processor and builder -- cannot travel. In the
parent each becomes a :class:`LoadedOnCall`: a test that does run in the parent (a project's own
test taking ``fd_case`` and not isolated) calls it, and only then are the real cases loaded here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fd_conformance.cases.contract import ModelCase

#: The case's callables; every other field is data and travels as it is.
CALLABLES = ("factory", "config_postprocessor", "config_builder")


def case_record(case: ModelCase) -> dict[str, Any]:
    """The case as picklable data: its data fields, and for each callable whether it has one."""
    record = {f.name: getattr(case, f.name) for f in dataclasses.fields(case) if f.name not in CALLABLES}
    record["callables"] = [name for name in CALLABLES if getattr(case, name) is not None]
    return record


def case_from_record(record: dict[str, Any], load_real: Callable[[], dict[str, ModelCase]]) -> ModelCase:
    """The case a record describes, its callables standing in for the real ones (see LoadedOnCall).
    ``load_real`` loads the real cases by name: it is called only if a callable is."""
    data: dict[str, Any] = {name: value for name, value in record.items() if name != "callables"}
    for name in CALLABLES:
        data[name] = LoadedOnCall(load_real, record["name"], name) if name in record["callables"] else None
    return ModelCase(**data)


class LoadedOnCall:
    """A case's callable in a parent that took the case as a record: calling it loads the real
    cases here (once: ``load_real`` caches) and calls the real callable."""

    def __init__(self, load_real: Callable[[], dict[str, ModelCase]], case: str, attr: str) -> None:
        self.load_real = load_real
        self.case = case
        self.attr = attr

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        real = getattr(self.load_real()[self.case], self.attr)
        return real(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{self.attr} of case {self.case!r}, loaded on call>"
