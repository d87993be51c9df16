"""tox.ini is CI config: its envs must exist, call tools the extras install, and agree with .ci/run.

A real ``tox -e lint|gpu|cov`` run needs network and a minute of installs, so these tests read the
file the way tox does (INI) and run the one behaviour that matters without a GPU for real: the
``gpu`` env's command exits 0 with skips, not 5 ("no tests") or a failure.
"""

from __future__ import annotations

import configparser
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.devices import no_gpu_reason

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (tox -e py310 runs this file too): the same parser as tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = ("3.10", "3.11", "3.12", "3.13")  # requires-python's floor to the newest tested
PYTHON_ENVS = tuple(f"py{v.replace('.', '')}" for v in PYTHONS)
VERSION_ENVS = (*PYTHON_ENVS, "lowest", "highest")  # one CI matrix job each
ENVS = ("cpu", "gpu", "lint", "cov", *VERSION_ENVS)
FRAMEWORKS = ("torch", "transformers", "paddlepaddle")  # the framework floors `lowest` installs


def tox_ini() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(ROOT / "tox.ini")
    return parser


def env_value(ini: configparser.ConfigParser, env: str, key: str) -> str:
    """tox's lookup: the env's own section, else [testenv]."""
    for section in (f"testenv:{env}", "testenv"):
        if ini.has_option(section, key):
            return ini.get(section, key)
    return ""


def commands(ini: configparser.ConfigParser, env: str) -> list[list[str]]:
    lines = [line.strip() for line in env_value(ini, env, "commands").splitlines() if line.strip()]
    return [shlex.split(line.replace("{posargs}", "")) for line in lines]


def envlist(ini: configparser.ConfigParser) -> set[str]:
    return {e.strip() for e in ini.get("tox", "envlist").replace("\n", ",").split(",") if e.strip()}


def test_every_documented_env_exists_with_commands() -> None:
    ini = tox_ini()
    for env in ENVS:
        # A pyXY env needs no section of its own: tox makes it from [testenv] on that Python.
        assert ini.has_section(f"testenv:{env}") or env in envlist(ini), env
        assert commands(ini, env), f"{env}: no commands"


def test_commands_use_only_tools_the_extras_install() -> None:
    ini = tox_ini()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    scripts = set(project["scripts"])
    extras = project["optional-dependencies"]
    for env in ENVS:
        wanted = {e.strip() for e in env_value(ini, env, "extras").replace(",", "\n").split() if e.strip()}
        assert wanted <= extras.keys(), f"{env}: unknown extras {wanted - extras.keys()}"
        installed = {req.split(">")[0].split("=")[0].split("[")[0] for extra in wanted for req in extras[extra]}
        for argv in commands(ini, env):
            tool = argv[0]
            if tool == "python":
                tool = argv[2] if argv[1] == "-m" else tool
            assert tool == "python" or tool in scripts or tool in installed, f"{env}: {tool} is not installed by {wanted}"


def test_cpu_env_runs_the_same_test_command_as_ci() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (cpu,) = commands(tox_ini(), "cpu")
    assert " ".join(cpu) in ci  # "python -m pytest -n 2": tox -e cpu is what CI runs


def test_cov_env_combines_spawned_worker_data_before_reporting() -> None:
    steps = [argv[:2] for argv in commands(tox_ini(), "cov")]
    tools = [argv[1] for argv in steps if argv[0] == "coverage"]
    # parallel=true writes one file per process: erase stale ones, combine before any report.
    assert tools[0] == "erase" and tools.index("combine") < tools.index("report") < tools.index("xml")
    assert ["coverage", "run"] in steps


def test_gpu_env_uses_the_machines_cuda_builds() -> None:
    ini = tox_ini()
    assert env_value(ini, "gpu", "system_site_packages").strip() == "true"
    assert "torch" not in env_value(ini, "gpu", "extras") and "paddle" not in env_value(ini, "gpu", "extras")
    (argv,) = commands(ini, "gpu")
    assert argv[:4] == ["python", "-m", "pytest", "-m"] and argv[4] == "gpu"


@pytest.mark.skipif(no_gpu_reason() is None, reason="a GPU is visible: the gpu env would run, not skip")
def test_gpu_env_command_skips_cleanly_without_a_gpu(tmp_path: Path) -> None:
    (tmp_path / "test_needs_gpu.py").write_text(
        "import pytest\n\n\n@pytest.mark.gpu\ndef test_graphs():\n    raise AssertionError('must not run without a GPU')\n\n\n"
        "def test_cpu():\n    pass\n"
    )
    (argv,) = commands(tox_ini(), "gpu")
    proc = subprocess.run(
        # -p fd_conformance: what this repository's addopts give every session (issue 51.16: a session
        # that does not ask for the kit keeps its own `gpu` marker).
        [sys.executable, *argv[1:], "-p", "fd_conformance", "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped, 1 deselected" in proc.stdout and "no GPU" in proc.stdout


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def floors() -> dict[str, str]:
    """Each framework's declared floor (``name>=X``) across the extras."""
    found: dict[str, str] = {}
    for reqs in pyproject()["project"]["optional-dependencies"].values():
        for req in reqs:
            match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", req.split(";")[0].strip())
            if match and match[1] in FRAMEWORKS:
                found[match[1]] = match[2]
    return found


def test_every_declared_python_has_an_env() -> None:
    """requires-python's floor is tested, and every newer minor the envs name (issue 36.2)."""
    floor = pyproject()["project"]["requires-python"]
    assert floor == f">={PYTHONS[0]}", "a new floor needs its own pyXY env (and CI matrix entry)"
    ini = tox_ini()
    assert set(VERSION_ENVS) <= envlist(ini)
    # The oldest Python is typed as itself: mypy reads pyproject's python_version otherwise.
    assert ["python", "-m", "mypy", "--python-version", PYTHONS[0]] in commands(ini, PYTHON_ENVS[0])


def test_lowest_env_installs_every_declared_framework_floor() -> None:
    """A floor pyproject declares is a version some env installs: the floor is tested, not hoped for."""
    declared = floors()
    assert set(declared) == set(FRAMEWORKS), declared
    deps = {}
    for line in env_value(tox_ini(), "lowest", "deps").splitlines():
        if line.strip():
            name, _, version = line.strip().partition("==")
            deps[name] = re.sub(r"\{env:[A-Z_]+:([0-9.]+)\}", r"\1", version)  # the default of an override
    for name, floor in declared.items():
        assert deps.get(name, "").split(".")[: len(floor.split("."))] == floor.split("."), (
            f"lowest: {name} {deps.get(name)} != {floor}"
        )


def test_version_envs_drop_the_constraints_that_would_pin_their_frameworks() -> None:
    ini = tox_ini()
    for env in ("lowest", "highest"):
        assert "CONSTRAINT" not in env_value(ini, env, "set_env"), env
    assert env_value(ini, "highest", "uv_resolution").strip() == "highest"
    # The other envs install the tested CPU build of torch, through uv (tox-uv) as through pip.
    base = env_value(ini, "py312", "set_env")
    assert "UV_CONSTRAINT" in base and "PIP_CONSTRAINT" in base and "tox-uv" in ini.get("tox", "requires")


def test_ci_runs_every_version_env_on_its_python() -> None:
    yaml = pytest.importorskip("yaml")
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    job = ci["jobs"]["tox"]
    matrix = {entry["env"]: entry["python"] for entry in job["strategy"]["matrix"]["include"]}
    assert set(matrix) == set(VERSION_ENVS)
    for env, python in zip(PYTHON_ENVS, PYTHONS, strict=True):
        assert matrix[env] == python
    ini = tox_ini()
    for env in ("lowest", "highest"):
        assert env_value(ini, env, "base_python").strip() == f"python{matrix[env]}", env
    assert any("tox -e ${{ matrix.env }}" in step.get("run", "") for step in job["steps"])
    # torch from PyTorch's CPU index (PyPI's Linux wheels are multi-GB CUDA builds).
    assert job["env"]["UV_INDEX"] == "https://download.pytorch.org/whl/cpu"
    assert "UV_*" in env_value(ini, "py310", "pass_env")
