"""The plugin route's honesty (issue 11): a session that certified nothing exits 4 with its reason,
a factory that raises reaches the terminal and conformance.json as type + message, bad --fd-model
inputs (module form under plain pytest, duplicate names, unknown runtime) are one line naming what
is wrong. (A file of its own: tests/test_plugin.py is the options/ledger home.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fd_conformance
from fd_conformance.cases import load_spec, select_cases
from fd_conformance.errors import EXIT_NOTHING_CERTIFIED, UsageError

REPO = Path(fd_conformance.__file__).resolve().parents[1]

CASES = textwrap.dedent(
    """
    from fd_conformance.cases import ModelCase

    def _never(runtime):
        raise AssertionError("not built: its rows skip")

    def _raises(runtime):
        raise ValueError("checkpoint /models/glm4 not found")

    CASE = ModelCase(name="tiny", runtime="torch", factory=_never, capture_sizes=(1,))
    RAISES = ModelCase(name="raises", runtime="torch", factory=_raises, capture_sizes=(1,))
    DUP = ModelCase(name="tiny", runtime="torch", factory=_raises, capture_sizes=(2, 1))
    PYTORCH = ModelCase(name="typo", runtime="pytorch", factory=_never, capture_sizes=(1,))
    """
)


def _env(**extra: str) -> dict[str, str]:
    # The repo on PYTHONPATH: the session must import this checkout whatever the install says.
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")])), **extra}


def console_pytest() -> str:
    """The `pytest` executable of this interpreter: beside it (pip's layout), else the first on
    PATH (a venv that reuses the system's packages has no script of its own)."""
    beside = Path(sys.executable).parent / "pytest"
    found = str(beside) if beside.is_file() else shutil.which("pytest")
    assert found, f"no `pytest` executable beside {sys.executable} or on PATH"
    return found


def _pytest(cwd: Path, *args: str, console_script: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """A pytest session in a subprocess; ``console_script`` runs the `pytest` executable, which
    (unlike `python -m pytest`) does not put the current directory on sys.path."""
    head = [console_pytest()] if console_script else [sys.executable, "-m", "pytest"]
    cmd = [*head, "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    return subprocess.run(cmd, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=600)


@pytest.fixture
def cases_dir(tmp_path: Path) -> Path:
    (tmp_path / "mycases").mkdir()
    (tmp_path / "mycases" / "__init__.py").write_text("")
    (tmp_path / "mycases" / "defs.py").write_text(CASES)
    return tmp_path


def test_gpu_rows_without_a_gpu_exit_4_with_the_reason(cases_dir: Path) -> None:
    """`pytest -m gpu --fd-model ...` on a machine without a GPU: every check skips, and the
    session says it certified nothing (exit 4) instead of going green; --fd-allow-empty opts out."""
    args = (
        "--pyargs",
        "fd_conformance.suite",
        "--fd-model=mycases/defs.py:CASE",
        "-m",
        "gpu",
        "--fd-isolate=off",
        "-k",
        "protocol",
    )
    proc = _pytest(cases_dir, *args, FD_CONFORMANCE_GPU="0")
    assert proc.returncode == EXIT_NOTHING_CERTIFIED == 4, proc.stdout + proc.stderr
    # --fd-device=auto collects the cpu rows here, which -m gpu deselects: the line says both.
    assert "fd-conformance: certified nothing (exit 4): all 16 conformance checks were deselected (-k/-m)" in proc.stdout
    assert "-m gpu selects the cuda rows" in proc.stdout and "no GPU" in proc.stdout and "--fd-allow-empty" in proc.stdout
    allowed = _pytest(cases_dir, *args, "--fd-allow-empty", FD_CONFORMANCE_GPU="0")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_factory_that_raises_reaches_terminal_and_json(cases_dir: Path) -> None:
    report = cases_dir / "report"
    proc = _pytest(
        cases_dir, "--pyargs", "fd_conformance.suite", "--fd-model=mycases/defs.py:RAISES", "--fd-device=cpu",
        "-k", "protocol", f"--fd-report={report}", "-rE",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    reason = "the case factory raised ValueError: checkpoint /models/glm4 not found"
    assert reason in proc.stdout
    document = json.loads((report / "conformance.json").read_text())
    (result,) = document["results"]
    assert reason in result["message"] and "fixture" not in result["message"]
    (row,) = document["cases"]
    assert row["checks"]["protocol"]["cell"].startswith("FAIL error in setup: the case factory")
    assert reason in row["checks"]["protocol"]["reason"]


def test_module_form_under_plain_pytest_gives_the_sys_path_hint(cases_dir: Path) -> None:
    """The `pytest` executable leaves the current directory off sys.path, so `mycases.defs:CASE`
    is not importable although mycases/ is right there: the hint says so and names the fixes."""
    proc = _pytest(cases_dir, "--pyargs", "fd_conformance.suite", "--fd-model=mycases.defs:CASE", console_script=True)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage-error exit
    (line,) = [text for text in proc.stderr.splitlines() if "mycases" in text]
    assert "'mycases' is in the current directory, which is not on sys.path (plain `pytest` does not add it)" in line
    assert "python -m pytest" in line and "PYTHONPATH=." in line and "mycases/defs.py:CASE" in line
    assert "Traceback" not in proc.stderr


def test_module_form_hint_only_when_the_directory_is_off_sys_path(cases_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(cases_dir)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(cases_dir))])
    with pytest.raises(UsageError, match="not on sys.path"):
        load_spec("mycases.defs:CASE")
    with pytest.raises(UsageError) as info:
        load_spec("nothere.defs:CASE")
    assert "not on sys.path" not in str(info.value)  # a real typo keeps the usual hint


def test_duplicate_case_names_name_both_sources(cases_dir: Path) -> None:
    spec = f"{cases_dir / 'mycases' / 'defs.py'}:"
    with pytest.raises(UsageError) as info:
        select_cases([spec + "CASE", spec + "DUP"], installed_runtimes=("torch",))
    message = str(info.value)
    assert "two different cases are named 'tiny'" in message
    assert f"one from --fd-model '{spec}CASE', one from --fd-model '{spec}DUP'" in message
    assert [c.name for c in select_cases([spec + "CASE", spec + "CASE"], installed_runtimes=("torch",))] == [
        "tiny"
    ]  # the same case twice is one


def test_unknown_runtime_is_named(cases_dir: Path) -> None:
    spec = f"{cases_dir / 'mycases' / 'defs.py'}:PYTORCH"
    with pytest.raises(UsageError) as info:
        select_cases([spec], installed_runtimes=("torch",))
    assert "case 'typo'" in str(info.value) and "names runtime 'pytorch', which is not one of torch, paddle" in str(info.value)
    assert "\n" not in str(info.value)
