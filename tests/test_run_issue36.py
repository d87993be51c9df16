"""Issue 36: what `run` and `report` write always says what they exit with, a refused command
leaves nothing behind, and the run's own settings (-n, --cycles) never fail the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_run_cli import model_dir, run_cli, validate_document

__all__ = ["model_dir"]  # the fixture, shared with test_run_cli

TINY = "author_models.tiny:CASE"


def _document(out: Path) -> dict[str, object]:
    document: dict[str, object] = json.loads((out / "conformance.json").read_text())
    validate_document(document)
    return document


def test_k_matching_no_test_is_nothing_certified_in_the_files_too(model_dir: Path) -> None:
    """b: `-k nomatch` exits 4, and conformance.json and certificate.md say so (they said exit 0 and
    PASS); --allow-empty exits 0 and the files say 0, not PASS without a word; `report` on the
    results file exits 4 as the run did; the pytest route writes the same verdict."""
    out = model_dir / "r"
    args = ("--model", TINY, "--device", "cpu", "--out", str(out))
    proc = run_cli(model_dir, *args, "--", "-k", "nomatch")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    document = _document(out)
    assert document["exit_code"] == 4 and "deselected" in document["run"]["reason"]  # type: ignore[index]
    certificate = (out / "certificate.md").read_text()
    assert "**NOTHING CERTIFIED**" in certificate and "PASS" not in certificate
    again = subprocess.run([sys.executable, "-m", "fd_conformance.cli", "report", str(out)], capture_output=True, text=True)
    assert again.returncode == 4 and "fd-conformance: NOTHING CERTIFIED" in again.stdout, again.stdout + again.stderr
    assert "all 16 conformance checks were deselected (-k/-m)" in again.stderr

    allowed = run_cli(model_dir, *args, "--allow-empty", "--", "-k", "nomatch")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert _document(out)["exit_code"] == 0
    assert "**NOTHING CERTIFIED** (allowed by --allow-empty)" in (out / "certificate.md").read_text()

    pytest_out = model_dir / "pytest-route"
    route = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", f"--fd-model={TINY}",
         "--fd-device=cpu", f"--fd-report={pytest_out}", "-k", "nomatch"],
        cwd=model_dir, capture_output=True, text=True, timeout=300, env={**os.environ, "FD_CONFORMANCE_GPU": "0"},
    )  # fmt: skip
    assert route.returncode == 4, route.stdout + route.stderr
    document = _document(pytest_out)
    assert document["exit_code"] == 4 and "were deselected" in document["run"]["reason"]  # type: ignore[index]


KILLED_PLUGIN = """
import os
import signal


def pytest_runtest_logfinish(nodeid, location):
    if os.environ.get("FD_CONFORMANCE_ISOLATION_WORKER") != "1":
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer does
"""


def test_a_run_whose_pytest_is_killed_still_writes_its_reports(model_dir: Path) -> None:
    """d: pytest SIGKILLed after its first test (the OOM killer of `-n 999`): the run exits 3 and
    writes conformance.json, certificate.md and junit.xml (it wrote none), marked INTERRUPTED with
    the reason, the first test's result kept; `report` agrees."""
    (model_dir / "killed_plugin.py").write_text(KILLED_PLUGIN)
    out = model_dir / "r"
    proc = run_cli(model_dir, "--model", TINY, "--device", "cpu", "--out", str(out), "--", "-p", "killed_plugin")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "fd-conformance run: pytest was killed by SIGKILL (out of memory?) (an incomplete session; " in proc.stderr
    assert "fix: if `dmesg` shows the out-of-memory killer, run fewer -n workers" in proc.stderr
    assert "fd-conformance: INTERRUPTED (pytest was killed by SIGKILL (out of memory?))" in proc.stdout
    document = _document(out)
    assert document["exit_code"] == 3 and document["run"]["status"] == "interrupted"  # type: ignore[index]
    assert "SIGKILL" in document["run"]["reason"] and len(document["results"]) == 1  # type: ignore[index, arg-type]
    assert document["run"]["not_run"]  # type: ignore[index]
    assert "**INTERRUPTED** (pytest was killed by SIGKILL" in (out / "certificate.md").read_text()
    assert (out / "junit.xml").is_file()
    again = subprocess.run([sys.executable, "-m", "fd_conformance.cli", "report", str(out)], capture_output=True, text=True)
    assert again.returncode == 3, again.stdout + again.stderr


def test_workers_are_capped_by_cores_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    """d: an explicit -n above what the host holds is capped, with one line on stderr; auto, 0 and
    a count the host holds pass as given."""
    from fd_conformance.cli.workers import WORKER_HOST_BYTES, capped_workers

    plenty = 1000 * WORKER_HOST_BYTES
    assert capped_workers("999", cores=2, memory=plenty) == "2"
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fd-conformance run: note: -n 999 capped to 2 (this host: 2 cores, ")
    assert capped_workers("64", cores=64, memory=3 * WORKER_HOST_BYTES) == "3"  # memory is the bound
    assert capped_workers("8", cores=64, memory=WORKER_HOST_BYTES // 2) == "1"
    assert len(capsys.readouterr().err.strip().splitlines()) == 2
    for given in (None, "auto", "0", "1"):
        assert capped_workers(given, cores=1, memory=0) == given
    assert capped_workers("2", cores=2, memory=plenty) == "2"
    assert capsys.readouterr().err == ""


def test_weight_cycle_deadline_grows_with_the_cycles() -> None:
    """c: the watchdog deadline of a test running --fd-cycles N is N/5 times the default past the
    default 5 cycles (a million cycles were a "hang", FDC501, blamed on the model); other tests and
    explicit marker deadlines keep theirs. The CLI refuses --cycles above MAX_CYCLES."""
    from fd_conformance.cli import run as run_cli_module
    from fd_conformance.isolation import plugin as isolation
    from fd_conformance.plugin import options

    assert isolation.DEADLINE_CYCLES == options.DEFAULT_CYCLES

    def timeout(cycles: int, fixtures: tuple[str, ...] = ("fd_case", "fd_cycles")) -> float:
        controller = isolation.IsolationController.__new__(isolation.IsolationController)
        controller.default_timeout = 300.0
        controller.config = SimpleNamespace(getoption=lambda name, default=None: str(cycles) if name == "fd_cycles" else default)  # type: ignore[assignment]
        item = SimpleNamespace(fixturenames=list(fixtures), get_closest_marker=lambda name: None)
        return controller._item_timeout(item)  # type: ignore[arg-type]

    assert timeout(3) == timeout(5) == 300.0
    most = run_cli_module.MAX_CYCLES
    assert timeout(most) == 300.0 * most / 5
    assert timeout(most, fixtures=("fd_case",)) == 300.0


def test_a_refused_run_leaves_no_file(model_dir: Path) -> None:
    """f: a run refused after taking --out (pytest rejects its arguments) removes what it made:
    the lock file, pytest.log, results.jsonl, and the --out directories it created."""
    before = sorted(p.name for p in model_dir.iterdir())
    proc = run_cli(model_dir, "--model", TINY, "--out", str(model_dir / "new" / "deeper"), "--", "--no-such-option")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == before


def test_pytest_route_caps_cycles_as_run_does() -> None:
    """c, the pytest route: --fd-cycles above errors.MAX_CYCLES is a one-line usage error naming the
    option and the bound (it was accepted, and a correct model then 'hung', FDC501)."""
    import pytest

    from fd_conformance.errors import MAX_CYCLES
    from fd_conformance.plugin import options

    assert options.validate_cycles(str(MAX_CYCLES)) == MAX_CYCLES
    with pytest.raises(pytest.UsageError, match=rf"--fd-cycles {MAX_CYCLES + 1} is above {MAX_CYCLES}; fix: pass at most"):
        options.validate_cycles(str(MAX_CYCLES + 1))


def test_a_failure_outside_the_matrix_is_in_the_files_too(model_dir: Path) -> None:
    """The pytest route, certifying a model beside a test of the user's own that fails: pytest exits
    1, and conformance.json says 1 and names the failed test (it said 0 with every row certified);
    the certificate does not say PASS."""
    (model_dir / "test_users_own.py").write_text("def test_users_own_check():\n    assert 1 == 2\n")
    out = model_dir / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "test_users_own.py", "-p", "no:cacheprovider",
         f"--fd-model={TINY}", "--fd-device=cpu", f"--fd-report={out}", "-q"],
        cwd=model_dir, capture_output=True, text=True, timeout=600, env={**os.environ, "FD_CONFORMANCE_GPU": "0"},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    document = _document(out)
    assert [c["verdict"] for c in document["cases"]] == ["certified"]  # type: ignore[index]
    assert document["exit_code"] == 1
    assert document["run"]["outside_failures"] == ["test_users_own.py::test_users_own_check"]  # type: ignore[index]
    assert "PASS" not in (out / "certificate.md").read_text().split("\n\n")[0]
