"""tox.ini is CI config: its envs must exist, call tools the extras install, and agree with .ci/run.

A real ``tox -e lint|gpu|cov`` run needs network and a minute of installs, so these tests read the
file the way tox does (INI) and run the one behaviour that matters without a GPU for real: the
``gpu`` env's command exits 0 with skips, not 5 ("no tests") or a failure.
"""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fd_conformance.devices import no_gpu_reason

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("cpu", "gpu", "lint", "cov")


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


def test_every_documented_env_exists_with_commands() -> None:
    ini = tox_ini()
    for env in ENVS:
        assert ini.has_section(f"testenv:{env}"), env
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
        [sys.executable, *argv[1:], "-p", "no:cacheprovider", "-rs", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped, 1 deselected" in proc.stdout and "no GPU" in proc.stdout
