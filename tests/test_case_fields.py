"""Issue 36.7 a/b: a ModelCase's name and numeric fields are refused when the case is BUILT, in
one line naming the case and the field, and `fd-conformance run` exits with the usage-error code
before any check runs (so no other case's result is lost half-way). Capture sizes themselves:
tests/test_capture_sizes.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.cases import ModelCase
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
