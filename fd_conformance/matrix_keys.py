"""The conformance matrix's keys of one suite item (its case, device, check) and of its reports.

Below both pytest plugins: the kit's (collection, fixtures, matrix) and the isolation parent's,
which makes a hung or crashed suite test's deciding report and must attach the same keys and
reason, or the check vanishes from the matrix and conformance.json.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fd_conformance.cases import ModelCase
    from fd_conformance.verdict import CheckVerdict

PROP_PREFIX = "fd_"  # user_properties keys travel through xdist and into JUnit XML
VERDICT_KEY: pytest.StashKey[CheckVerdict] = pytest.StashKey()
RUNTIME_INFO_KEY: pytest.StashKey[dict[str, Any]] = pytest.StashKey()


def check_name(item: pytest.Item) -> str:
    """The matrix column: the conformance marker's argument, else the test name without test_."""
    marker = item.get_closest_marker("conformance")
    if marker is not None and marker.args:
        return str(marker.args[0])
    name = getattr(item, "originalname", item.name)
    return name[5:] if name.startswith("test_") else name


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
    return [
        (PROP_PREFIX + "case", case.name),
        (PROP_PREFIX + "device", callspec.params.get("fd_device", "")),
        (PROP_PREFIX + "check", check_name(item)),
        (PROP_PREFIX + "expected", ",".join(sorted(case.expected_findings))),
    ]


def report_failure_reason(report: pytest.TestReport) -> str:
    """A failed report's reason in one line: its first error finding ("FDC203 graph ..."), else the
    exception as pytest's crash line has it ("ValueError: boom"), never a fixture's source repr."""
    props = dict(report.user_properties)
    for finding in json.loads(str(props.get(PROP_PREFIX + "findings", "[]"))):
        if finding.get("severity") == "error":
            return f"{finding['code']} {finding.get('message', '')}"[:300]
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None and crash.message else str(report.longrepr or "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "failed"
    first = first.removeprefix("Failed: ")  # pytest.fail()'s exception name says nothing the check's text does not
    where = {"setup": "error in setup: ", "teardown": "error in teardown: "}.get(report.when, "")
    return (where + first)[:300]
