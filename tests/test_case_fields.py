"""Issue 36.7 a/b: a ModelCase's name and numeric fields are refused when the case is BUILT, in
one line naming the case and the field, and `fd-conformance run` exits with the usage-error code
before any check runs (so no other case's result is lost half-way). Capture sizes themselves:
tests/test_capture_sizes.py. Issue 51.1: so is an unknown name in capabilities, checks or
expected_findings (a typo there certified)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.cases.contract import CAPABILITIES, SUITE_CHECKS
from fd_conformance.errors import EXIT_USAGE, UsageError

ROOT = Path(__file__).resolve().parents[1]


def _case(name: Any = "m", **fields: Any) -> ModelCase:
    return ModelCase(name, "torch", lambda rt: None, (4, 2, 1), **fields)


@pytest.mark.parametrize("name", ["", "   ", "\t", None])
def test_an_empty_case_name_is_refused(name: Any) -> None:
    with pytest.raises(UsageError, match=r"^case name .* is empty or not a string; fix: give the ModelCase a name"):
        _case(name)


@pytest.mark.parametrize(
    ("name", "char", "suggested"),
    [
        ("a/b", "/", "a-b"),
        ("qwen[vl]", "[", "qwen-vl"),
        ("x]", "]", "x"),
        ("my model", " ", "my-model"),
        ("a::b", ":", "a-b"),
        ("a#b", "#", "a-b"),
        ("a\nb", "\n", "a-b"),
        ("-lead", "-", "lead"),
        ("glm4-moe·mtp", "·", "glm4-moe-mtp"),
    ],
)
def test_a_case_name_that_breaks_ids_or_cases_files_is_refused(name: str, char: str, suggested: str) -> None:
    """'[', ']', '::' and '/' split pytest node ids (and the report's parsing of them), whitespace
    and '#' a --cases-file line; the message names the character and suggests a name."""
    with pytest.raises(UsageError) as refused:
        _case(name)
    message = str(refused.value)
    assert message.startswith(f"case name {name!r} has {char!r}: ") and message.endswith(f"e.g. {suggested!r}"), message
    assert "\n" not in message


@pytest.mark.parametrize("name", ["torch-glm4-moe-mtp", "Qwen3_VL.8B", "a+b", "7b"])
def test_ordinary_case_names_are_kept(name: str) -> None:
    assert _case(name).name == name


@pytest.mark.parametrize(
    ("tolerances", "says"),
    [
        ({"rtol": -1e-4}, "tolerances['rtol']=-0.0001 is not a finite number >= 0"),
        ({"atol": float("nan")}, "tolerances['atol']=nan is not a finite number >= 0"),
        ({"atol": float("inf")}, "tolerances['atol']=inf is not a finite number >= 0"),
        ({"atol": True}, "tolerances['atol']=True is not a finite number >= 0"),
        ({"atol": "1e-4"}, "tolerances['atol']='1e-4' is not a finite number >= 0"),
        ({"rtoll": 1e-4}, "tolerances has unknown key(s) 'rtoll'"),
        ((1e-4, 1e-4), "tolerances (0.0001, 0.0001) is not a mapping"),
    ],
)
def test_bad_tolerances_are_refused(tolerances: Any, says: str) -> None:
    """A negative or NaN tolerance fails every comparison (a false FDC301/FDC304), an infinite one
    passes every one, a misspelt key was silently replaced by the default."""
    with pytest.raises(UsageError) as refused:
        _case(tolerances=tolerances)
    assert str(refused.value).startswith(f"case 'm': {says}; fix: "), str(refused.value)


def test_good_tolerances_become_a_plain_dict_of_floats() -> None:
    case = _case(tolerances={"rtol": 0, "atol": 1e-5})
    assert case.tolerances == {"rtol": 0.0, "atol": 1e-5} and type(case.tolerances) is dict
    assert _case().tolerances == {"rtol": 1e-4, "atol": 1e-4}


BAD_SPEC = """
from fd_conformance import ModelCase


def build(runtime):
    raise AssertionError("never built: the case is refused first")


GOOD = [ModelCase("good", "torch", build, capture_sizes=(2, 1))]
CASES = GOOD + [ModelCase("bad", "torch", build, capture_sizes={sizes})]
"""


@pytest.mark.parametrize(
    ("sizes", "says"),
    [("(4, 2, 0)", "capture_sizes (4, 2, 0) has 0"), ("(10**9,)", "MAX_CAPTURE_SIZE = 8192")],
)
def test_run_exits_with_the_usage_code_in_one_line_before_any_check(tmp_path: Path, sizes: str, says: str) -> None:
    (tmp_path / "cases.py").write_text(BAD_SPEC.format(sizes=sizes))
    env = {
        **os.environ,
        "FD_CONFORMANCE_GPU": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    cmd = [sys.executable, "-m", "fd_conformance.cli", "run", "--model", "cases.py:CASES", "--out", "report", "-n", "0"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == EXIT_USAGE, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("fd-conformance run: error: --model 'cases.py:CASES': case 'bad': ") and says in line, line
    assert line.count("fix:") == 1, line  # the case's own fix, not "fix the error in that file" on top
    assert not (tmp_path / "report" / "conformance.json").exists()


# --- Issue 51.1: a misspelt name in a set field is refused, not certified -------------------------


def test_a_misspelt_capability_is_refused_with_its_near_miss() -> None:
    """capabilities={"Draft"} dropped the draft promise: a factory building no draft certified."""
    with pytest.raises(UsageError) as refused:
        _case(capabilities=frozenset({"Draft"}))
    message = str(refused.value)
    assert message == (
        "case 'm': capabilities has unknown name 'Draft'; fix: did you mean 'draft'? the valid names are 'draft', 'moe', 'multimodal'"
    )


def test_a_misspelt_check_is_refused_with_its_near_miss() -> None:
    """checks={"capture_replay", "clearr"} certified on capture_replay alone, "clearr" on the certificate."""
    with pytest.raises(UsageError) as refused:
        _case(checks=frozenset({"capture_replay", "clearr"}))
    message = str(refused.value)
    assert message.startswith("case 'm': checks has unknown name 'clearr'; fix: did you mean 'clear'? the valid names are ")
    assert all(repr(check) in message for check in SUITE_CHECKS) and "\n" not in message


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"checks": {"clearr", "weight-cycle"}}, "did you mean 'clear' for 'clearr', 'weight_cycle' for 'weight-cycle'?"),
        (
            {"expected_findings": frozenset({"FDC3O1"})},
            "expected_findings has unknown name 'FDC3O1'; fix: did you mean 'FDC301'?",
        ),
        ({"capabilities": frozenset({"gpu"})}, "capabilities has unknown name 'gpu'; fix: the valid names are "),
        ({"capabilities": "draft"}, "capabilities 'draft' is not a set of names"),
    ],
)
def test_other_unknown_names_are_refused(fields: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError, match=re.escape(says)):
        _case(**fields)


def test_valid_names_are_kept() -> None:
    case = _case(capabilities={"draft", "moe"}, checks=set(SUITE_CHECKS), expected_findings=frozenset({"FDC301"}))
    assert case.capabilities == {"draft", "moe"} and type(case.capabilities) is frozenset and case.has("draft")
    assert case.checks == set(SUITE_CHECKS) and case.expected_findings == {"FDC301"}
    assert _case(capabilities=frozenset(CAPABILITIES)).capabilities == set(CAPABILITIES) and _case().checks is None


def test_the_check_names_are_the_suites_matrix_columns() -> None:
    """SUITE_CHECKS is what a case's checks may name: exactly the columns the shipped suites mark."""
    import fd_conformance.suite

    marked = set()
    for module in pkgutil.iter_modules(fd_conformance.suite.__path__):
        if module.name.startswith("test_"):
            mark = importlib.import_module(f"fd_conformance.suite.{module.name}").pytestmark
            assert mark.name == "conformance", module.name
            marked.add(mark.args[0])
    assert marked == set(SUITE_CHECKS)


def test_the_bundled_cases_still_build() -> None:
    from fd_reference_models.cases import all_cases

    assert all(case.capabilities <= set(CAPABILITIES) for case in all_cases())
