"""Issue 36.6: a project's own test suite, run where the kit is installed (its plugin loads through
the pytest11 entry point into every session), sees nothing of the kit unless it asks for it.

The sample project has a plain test, a Hypothesis ``@given`` test and a ``gpu`` marker of its own
(registered in its ini, meaning "GPU when there is one"). Its output -- header, warnings, outcomes,
summary, Hypothesis's own statistics -- is the same with the kit as with ``-p no:fd_conformance``,
but for pytest's "plugins:" line, which lists installed distributions whether they act or not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fd_conformance
from fd_conformance.devices import no_gpu_reason

SAMPLE_INI = """[pytest]
markers =
    gpu: runs on a GPU when there is one, on the CPU otherwise (this project's own marker)
"""
SAMPLE_TESTS = {
    "test_plain.py": """
import pytest


def test_plain():
    assert 1 + 1 == 2


@pytest.mark.gpu
def test_uses_the_gpu_if_any():
    assert True  # runs on every machine: the project's marker, not the kit's
""",
    "test_props.py": """
from hypothesis import given, strategies as st


@given(st.integers())
def test_int_roundtrip(x):
    assert int(str(x)) == x
""",
}
# Issue 51.16: a project that registers neither marker. Without the kit its isolated test runs in
# its own process and its gpu test runs; --strict-markers refuses both (unregistered).
UNREGISTERED_MARKERS = """
import os

import pytest


@pytest.mark.isolated
def test_their_isolated_marker():
    assert os.environ.get("FD_CONFORMANCE_ISOLATION_WORKER") is None, "ran in a kit worker"


@pytest.mark.gpu
def test_their_gpu_marker():
    pass
"""
KIT_ROOT = Path(fd_conformance.__file__).resolve().parents[1]
# Each passes a flag of pytest's or Hypothesis's own, never one of the kit's.
RUNS = {
    "plain": [],
    "verbose-reasons": ["-v", "-rA"],
    "hypothesis-statistics": ["--hypothesis-show-statistics"],
}


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("their_project")
    (root / "pytest.ini").write_text(SAMPLE_INI)
    for name, text in SAMPLE_TESTS.items():
        (root / name).write_text(text)
    return root


def run_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest`` in ``project``, loading this tree's kit (the entry point of an editable
    install made elsewhere would load that copy's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "FD_CONFORMANCE_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KIT_ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def comparable(output: str) -> str:
    """Without pytest's plugin list and Hypothesis's "Typical runtimes" ("< 1ms" or "~ 1-2 ms", as the
    host's load has it), every other number (timings, counts) as N."""
    lines = [line for line in output.splitlines() if not line.startswith("plugins:") and "Typical runtimes" not in line]
    return re.sub(r"\d+(\.\d+)?", "N", "\n".join(lines))


@pytest.mark.parametrize("args", list(RUNS.values()), ids=list(RUNS))
def test_their_session_is_the_same_with_and_without_the_kit(sample: Path, args: list[str]) -> None:
    with_kit = run_pytest(sample, *args)
    without_kit = run_pytest(sample, "-p", "no:fd_conformance", *args)
    assert with_kit.returncode == without_kit.returncode == 0, with_kit.stdout + with_kit.stderr
    assert "fd-conformance" not in with_kit.stdout.replace(f"fd-conformance-{fd_conformance.__version__}", "")
    assert comparable(with_kit.stdout) == comparable(without_kit.stdout)
    assert comparable(with_kit.stderr) == comparable(without_kit.stderr)
    assert "2 passed" not in with_kit.stdout and "3 passed" in with_kit.stdout  # their gpu test ran
    if "--hypothesis-show-statistics" in args:
        statistics = with_kit.stdout.split("Hypothesis Statistics", 1)[-1]
        assert "test_props.py::test_int_roundtrip" in statistics and "100 passing" in statistics, with_kit.stdout


def test_their_session_that_asks_for_the_kit_gets_it(sample: Path) -> None:
    """The same project with one of the kit's flags: the header says which kit judged the session."""
    asked = run_pytest(sample, "--fd-runtime=auto")
    assert asked.returncode == 0, asked.stdout + asked.stderr
    assert f"fd-conformance {fd_conformance.__version__} (" in asked.stdout


@pytest.fixture(scope="module")
def unregistered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("their_markers")
    (root / "test_markers.py").write_text(UNREGISTERED_MARKERS)
    return root


@pytest.mark.parametrize("args", [["-rA"], ["-rA", "--strict-markers"]], ids=["plain", "strict-markers"])
def test_their_gpu_and_isolated_markers_are_theirs(unregistered: Path, args: list[str]) -> None:
    """Issue 51.16: the kit's plugin registered ``gpu`` and ``isolated`` in every session, so their
    isolated test ran in a kit worker, their gpu test was skipped ("no GPU") and --strict-markers
    said nothing. Now both run as without the kit, and --strict-markers fails the same way."""
    with_kit = run_pytest(unregistered, *args)
    without_kit = run_pytest(unregistered, "-p", "no:fd_conformance", *args)
    assert with_kit.returncode == without_kit.returncode, with_kit.stdout + with_kit.stderr
    assert comparable(with_kit.stdout) == comparable(without_kit.stdout)
    if "--strict-markers" in args:
        assert with_kit.returncode == pytest.ExitCode.INTERRUPTED
        assert "'isolated' not found in `markers` configuration option" in with_kit.stdout, with_kit.stdout
    else:
        assert with_kit.returncode == 0 and "2 passed" in with_kit.stdout, with_kit.stdout + with_kit.stderr


def test_a_session_that_asks_for_the_kit_gets_its_markers(unregistered: Path) -> None:
    """With ``-p fd_conformance`` (the kit's own test suite's addopts) both markers are the kit's:
    registered (--strict-markers passes), gpu skipped with a reason here, isolated in a worker."""
    asked = run_pytest(unregistered, "-p", "fd_conformance", "--strict-markers", "-rs")
    no_gpu = no_gpu_reason()
    assert "ran in a kit worker" in asked.stdout, asked.stdout + asked.stderr  # the isolated test's own assertion
    if no_gpu is not None:
        # "no GPU: ..." with the child's own reason (its environment, not this process's, decides which)
        assert re.search(r"SKIPPED \[1\] test_markers\.py:\d+: no GPU: ", asked.stdout), asked.stdout
        assert "1 failed, 1 skipped" in asked.stdout, asked.stdout
