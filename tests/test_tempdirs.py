"""Issue 24 item 11: the parent owns and removes every temp path of its children, whatever ended
them. Real spawned isolation workers and real torch FileStores; the `fd-conformance run` route
(a SIGINT/SIGTERM mid-run) is covered in tests/test_run_cli.py's interrupted-run test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp root for this process and every worker it spawns (they inherit TMPDIR)."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def _left(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_worker_that_ends_normally_leaves_nothing(temp_root: Path) -> None:
    """The worker leaves by os._exit, so the FileStore's atexit cleanup never runs: its temp root
    is inside the worker's directory, which the parent removes."""
    from fd_conformance.isolation.watchdog import IsolatedRunner

    with IsolatedRunner() as runner:
        outcome = runner.call("hang_cases.temp_paths:group_then_return", timeout=120)
        assert outcome.outcome == "passed", outcome.run.describe()
        worker_temp = Path(outcome.value)
        assert worker_temp.parent.name.startswith("fdc-worker-") and worker_temp.parent.parent == temp_root
        assert any(p.name.startswith("fdc-torch-store-") for p in worker_temp.iterdir())
    assert _left(temp_root) == []


def test_a_hung_worker_killed_by_the_watchdog_leaves_nothing(temp_root: Path) -> None:
    from fd_conformance.isolation.watchdog import IsolatedRunner

    ready = temp_root.parent / "ready"
    # torch imported by an earlier check of the same worker (with a deadline no load reaches), so
    # the hang's own deadline covers only making a group; the ready file says it hung only after
    # its group's files existed.
    with IsolatedRunner() as runner:
        assert runner.call("hang_cases.hangs:use_the_torch_runtime", timeout=240).outcome == "passed"
        outcome = runner.call("hang_cases.temp_paths:group_then_hang", str(ready), timeout=3)
        assert outcome.outcome == "hang", outcome.run.describe()
    assert ready.exists(), outcome.run.describe()
    assert _left(temp_root) == []


def test_the_next_session_removes_the_dirs_of_a_sigkilled_parent(temp_root: Path) -> None:
    """A pytest session (here: a plain script driving a worker) SIGKILLed mid-check runs no cleanup;
    its worker dies with it (PR_SET_PDEATHSIG), and the next process that starts a worker removes
    the dead parent's directory, and only it."""
    from fd_conformance.isolation.watchdog import IsolatedRunner

    ready = temp_root.parent / "ready"
    script = (
        "from fd_conformance.isolation.watchdog import IsolatedRunner\n"
        f"IsolatedRunner().call('hang_cases.temp_paths:group_then_hang', {str(ready)!r}, timeout=300)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    parent = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 120
    while not ready.exists() and parent.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ready.exists(), "the worker never reached its hang"
    worker_pid = int(ready.read_text())
    live = temp_root / "fdc-worker-live"  # another session's worker dir, its parent alive: kept
    live.mkdir()
    (live / "owner.pid").write_text(str(os.getpid()))
    parent.send_signal(signal.SIGKILL)
    parent.wait(30)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{worker_pid}").exists() and time.monotonic() < deadline:
        if Path(f"/proc/{worker_pid}/stat").read_text().rpartition(")")[2].split()[0] in ("Z", "X"):
            break
        time.sleep(0.1)
    stale = [p for p in temp_root.glob("fdc-worker-*") if p != live]
    assert stale, "the SIGKILLed parent's worker dir should still be there before the next session"
    import fd_conformance.isolation.process as process

    process._swept = False  # this test process may have started workers already: a fresh session's state
    with IsolatedRunner() as runner:
        assert runner.call("math:sqrt", 4.0, timeout=60).outcome == "passed"
    assert not any(p.exists() for p in stale) and live.exists()
