"""The conformance matrix's keys of one suite item (its case, device, check) and of its reports.

Below both pytest plugins: the kit's (collection, fixtures, matrix) and the isolation parent's,
which makes a hung or crashed suite test's deciding report and must attach the same keys and
reason, or the check vanishes from the matrix and conformance.json. How the keys are encoded on a
report, and read back, is :mod:`.check_record`'s (the one codec of a finished check).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from fd_conformance.matrix_keys.check_record import PROP_PREFIX, CheckRecord
from fd_conformance.matrix_keys.check_record import failure_reason as report_failure_reason

if TYPE_CHECKING:
    from fd_conformance.cases import ModelCase
    from fd_conformance.verdict import CheckVerdict

__all__ = ["PROP_PREFIX", "RUNTIME_INFO_KEY", "VERDICT_KEY", "case_of", "case_properties", "check_name", "report_failure_reason"]

VERDICT_KEY: pytest.StashKey[CheckVerdict] = pytest.StashKey()
RUNTIME_INFO_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()


def check_name(item: pytest.Item) -> str:
    """The matrix column: the conformance marker's argument, else the test name without test_."""
    return check_column(item.get_closest_marker("conformance"), getattr(item, "originalname", item.name))


def check_column(marker: pytest.Mark | None, test_name: str) -> str:
    """:func:`check_name` from the marker and the test function's name (a reproducer has no item)."""
    if marker is not None and marker.args:
        return str(marker.args[0])
    return test_name[5:] if test_name.startswith("test_") else test_name


def case_of(item: pytest.Item) -> ModelCase | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("fd_case") if callspec is not None else None


def case_properties(item: pytest.Item) -> list[tuple[str, object]]:
    """The conformance-matrix keys of a suite test (case, device, check, expected codes), as
    ``user_properties`` pairs; [] for any other test. Public because whoever makes a suite test's
    deciding report (this plugin, or the isolation parent for a hung or crashed worker) must attach
    the same keys, or the check vanishes from the matrix and conformance.json."""
    case = case_of(item)
    if case is None:
        return []
    callspec = item.callspec  # type: ignore[attr-defined]  # case_of found one: a parametrized Function
    keys = CheckRecord(item.nodeid, case=case.name, device=callspec.params.get("fd_device", ""), check=check_name(item))
    keys.expected = sorted(case.expected_findings)
    if case.weight_update != "recapture":
        keys.contract = case.weight_update
    return keys.properties()
