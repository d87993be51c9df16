"""What a session's rows owe: its plan of conformance checks, selected or deselected.

A row (one case on one device) owes every suite test collected for it. A test that ``-k``, ``-m``
or another plugin deselected did not run, and neither did a selected one that ``-x`` or a crash
left behind: either makes its row incomplete, never certified, or a certificate could be talked
into "PASS" by leaving out the check that fails. A row deselected whole is not part of the session.

Below both pytest plugins: the kit's (which records the plan and judges with it) and the isolation
parent's (which writes it into the results file, so a run cut short still names what never ran).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from fd_conformance.isolation.results import PlannedTest
from fd_conformance.matrix_keys import PROP_PREFIX, case_properties

PLAN_KEY: pytest.StashKey[dict[str, PlannedTest]] = pytest.StashKey()


def session_plan(config: pytest.Config) -> dict[str, PlannedTest]:
    """The plan so far (node id -> planned test), created empty on first use."""
    plan = config.stash.get(PLAN_KEY, None)
    if plan is None:
        plan = config.stash[PLAN_KEY] = {}
    return plan


def planned_test(item: pytest.Item, deselected: bool = False) -> PlannedTest:
    """One collected test as the plan records it (case "" for a test that is no conformance check)."""
    props = {key[len(PROP_PREFIX) :]: value for key, value in case_properties(item)}
    test = PlannedTest(
        nodeid=item.nodeid,
        case=str(props.get("case", "")),
        device=str(props.get("device", "")),
        check=str(props.get("check", "")),
        expected=[c for c in str(props.get("expected", "")).split(",") if c],
    )
    if deselected:
        test["deselected"] = True
    return test


def owed_checks(plan: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The conformance checks the session's rows owe: every planned one of a row that kept at least
    one selected test (a row deselected whole is out of the session, not incomplete)."""
    checks = [t for t in plan if t.get("case")]
    selected_rows = {(t["case"], t["device"]) for t in checks if not t.get("deselected")}
    return [t for t in checks if (t["case"], t["device"]) in selected_rows]
