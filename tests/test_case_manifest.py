"""A case sent as a record (cases/manifest.py) reads as the real case wherever the parent looks,
and stands for it: the real case is what a parent-side test gets, whichever callable it has."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from fd_conformance.cases import ModelCase, load_spec
from fd_conformance.cases.manifest import LoadedOnCall, as_records, case_from_record, real_case

ACME = f"{Path(__file__).resolve().parent / 'fixtures' / 'outside_models' / 'acme_lm.py'}:GOOD"


def _round_trip(case: ModelCase) -> tuple[ModelCase, list[int]]:
    loads: list[int] = []

    def load_real() -> dict[str, ModelCase]:
        loads.append(1)
        return {case.name: case}

    records = as_records([case])
    assert records is not None
    return case_from_record(records[0], load_real), loads


def test_a_rebuilt_case_reads_like_the_real_one_and_loads_it_only_when_asked() -> None:
    (case,) = load_spec(ACME)
    rebuilt, loads = _round_trip(case)
    data = [f.name for f in dataclasses.fields(case) if f.name not in ("factory", "config_postprocessor", "config_builder")]
    assert {name: getattr(rebuilt, name) for name in data} == {name: getattr(case, name) for name in data}
    assert rebuilt.module == case.module and rebuilt.module in sys.modules  # the model module's name
    assert isinstance(rebuilt.factory, LoadedOnCall) and not loads
    assert real_case(rebuilt) is case and loads


def test_a_case_without_a_factory_still_stands_for_the_real_one() -> None:
    """A config-only case may have no factory: its post-processor's stand-in leads to the real case."""
    (acme,) = load_spec(ACME)

    def keep(cfg: object) -> object:
        return cfg

    case = dataclasses.replace(acme, factory=None, config_postprocessor=keep)  # type: ignore[arg-type]
    rebuilt, _ = _round_trip(case)
    assert rebuilt.factory is None and isinstance(rebuilt.config_postprocessor, LoadedOnCall)
    assert real_case(rebuilt) is case
