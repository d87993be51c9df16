"""junit.xml for a run whose pytest never wrote one: an interrupted run.

pytest writes junit.xml only when its session ends, and an interrupted run ends pytest's whole
process group, so there is no junit.xml from pytest then. CI dashboards read junit.xml, not
conformance.json: this writes the partial one from the same document the run's conformance.json
and certificate.md come from, so the three agree on what ran. The interruption is marked three
ways a CI tool shows: suite properties (``fd_status=interrupted``), a ``session`` test case
with an error, and each planned check that did not run as a skipped case saying why.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xml.etree.ElementTree import Element

# xml.etree is imported where a junit.xml is written: cli/run.py imports this module for
# SUITE_NAME in every `fd-conformance` command, and only an interrupted run writes one here.

SUITE_NAME = "fd-conformance"  # the run's --override-ini=junit_suite_name (cli.pytest_command.JUNIT_SUITE)
SESSION_CASE = "session"  # the case that carries the interruption


def _names(nodeid: str) -> tuple[str, str]:
    """(classname, name) as pytest's junitxml spells them: ``test_clear.py::test_x[m-cpu]``
    -> (``test_clear``, ``test_x[m-cpu]``)."""
    path, _, name = nodeid.partition("::")
    module = path.removesuffix(".py").replace("/", ".")
    return module, name or path


def _case(suite: Element, nodeid: str, duration: float, properties: Mapping[str, str]) -> Element:
    import xml.etree.ElementTree as ET

    classname, name = _names(nodeid)
    case = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{duration:.3f}")
    if properties:
        props = ET.SubElement(case, "properties")
        for key, value in properties.items():
            ET.SubElement(props, "property", name=key, value=value)
    return case


def interrupted_junit(document: Mapping[str, Any], reason: str) -> str:
    """The junit.xml text of an interrupted run: ``document`` is its conformance.json (results
    that ended, ``run.not_run`` and ``run.deselected``), ``reason`` what ended it (``SIGINT``)."""
    import xml.etree.ElementTree as ET

    results: list[Mapping[str, Any]] = list(document.get("results", []))
    run: Mapping[str, Any] = document.get("run", {})
    not_run: list[str] = list(run.get("not_run", []))
    deselected: list[str] = list(run.get("deselected", []))
    failures = sum(1 for r in results if r.get("outcome") == "failed")
    skipped = sum(1 for r in results if r.get("outcome") in ("skipped", "xfailed")) + len(not_run)
    total = len(results) + len(not_run) + 1  # + the session case
    root = ET.Element("testsuites", name=SUITE_NAME)
    suite = ET.SubElement(
        root,
        "testsuite",
        name=SUITE_NAME,
        errors="1",
        failures=str(failures),
        skipped=str(skipped),
        tests=str(total),
        time=f"{sum(float(r.get('duration', 0.0) or 0.0) for r in results):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (("fd_status", "interrupted"), ("fd_interrupted", reason), ("fd_not_run", str(len(not_run)))):
        ET.SubElement(props, "property", name=key, value=value)
    for result in results:
        properties = {
            "fd_case": str(result.get("case", "")),
            "fd_device": str(result.get("device", "")),
            "fd_check": str(result.get("check", "")),
            "fd_codes": ",".join(result.get("codes", [])),
        }
        case = _case(suite, str(result.get("nodeid", "?")), float(result.get("duration", 0.0) or 0.0), properties)
        outcome, message = result.get("outcome"), str(result.get("message", ""))
        if outcome == "failed":
            failure = ET.SubElement(case, "failure", message=message.splitlines()[0] if message else "failed")
            failure.text = message
        elif outcome == "skipped":
            ET.SubElement(case, "skipped", type="pytest.skip", message=message)
        elif outcome == "xfailed":  # a mutant caught with its expected codes: pytest writes xfail as a skip
            ET.SubElement(case, "skipped", type="pytest.xfail", message=message or "caught")
    for nodeid in not_run:
        case = _case(suite, nodeid, 0.0, {"fd_status": "not-run"})
        ET.SubElement(case, "skipped", type="fd.not_run", message=f"not run: the run was interrupted by {reason}")
    session = _case(suite, f"{SUITE_NAME}::{SESSION_CASE}", 0.0, {})
    session.set("classname", SUITE_NAME)
    error = ET.SubElement(
        session,
        "error",
        type="fd.interrupted",
        message=f"the run was interrupted by {reason}: {len(not_run)} planned check(s) did not run, so the run is incomplete",
    )
    error.text = "\n".join(
        [f"interrupted by {reason}", *(f"not run: {n}" for n in not_run), *(f"deselected: {n}" for n in deselected)]
    )
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_interrupted_junit(path: Path, document: Mapping[str, Any], reason: str) -> None:
    """Write :func:`interrupted_junit` to ``path`` (through a temp file: never a half-written XML)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(interrupted_junit(document, reason), encoding="utf-8")
    tmp.replace(path)
