"""Records the session's plan (:mod:`fd_conformance.isolation.session_plan`) where collection happens.

In-process that is the session itself; under xdist each worker collects the same items and sends
its plan to the controller through ``workeroutput``, so the verdict is computed once, where every
result arrives, from what each row owes and what ran.
"""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.isolation.results import PlannedTest
from fd_conformance.isolation.session_plan import planned_test, session_plan
from fd_conformance.matrix_keys import case_properties
from fd_conformance.plugin.usage import in_use, start_using

# The key of an xdist worker's plan in its workeroutput (sent to the controller as it shuts down).
WORKEROUTPUT_PLAN = "fd_conformance_plan"


def pytest_deselected(items: list[pytest.Item]) -> None:
    # Only conformance checks: a deselected test of the user's own is none of the matrix's business.
    for item in items:
        if case_properties(item):
            session_plan(item.config)[item.nodeid] = planned_test(item, deselected=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    # tryfirst: the isolation plugin writes this plan into its results file in its own hook.
    if not in_use(session.config):
        return  # a project's own suite: no plan of ours (usage)
    plan = session_plan(session.config)
    for item in session.items:
        plan[item.nodeid] = planned_test(item)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: fold a worker's plan into the session's (each worker collected the same)."""
    tests: list[PlannedTest] = getattr(node, "workeroutput", {}).get(WORKEROUTPUT_PLAN, [])
    if not in_use(node.config) and any(test["case"] for test in tests):
        start_using(node.config)  # a worker whose every kit test was deselected sends no report, only this plan
    plan = session_plan(node.config)
    for test in tests:
        plan.setdefault(test["nodeid"], test)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and in_use(session.config):  # an xdist worker: the controller judges, with this plan
        workeroutput[WORKEROUTPUT_PLAN] = list(session_plan(session.config).values())
