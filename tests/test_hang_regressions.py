"""Hang regressions through the pytest plugin: real hangs in an inner pytest session.

Each inner session is a real ``python -m pytest`` subprocess, so what is asserted is what a CI
job sees: the JSONL log, the JUnit XML and the exit code, with every other test still reported.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.isolation.results import read_results

TESTS = Path(__file__).parent
CASES = TESTS / "hang_cases"
SESSION_TIMEOUT_S = 1.5  # session_hangs.py's isolated(timeout=)
# How long a hang takes to be reported is bench/hang_latency.py's figure, not a test's to assert:
# on a loaded runner any bound here is a flake.
SLOW_COLLECTION_S = 1.0  # plain_collected_late.py's import-time sleep
AFTER_TEARDOWN = CASES / "after_teardown" / "after_teardown_hangs.py"


def inner_pytest(tmp_path: Path, target: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", str(target), "-p", "no:cacheprovider", "-q", *extra]
    full_env = {**os.environ, "PYTHONPATH": str(TESTS), **(env or {})}
    done = subprocess.run(cmd, cwd=TESTS.parent, capture_output=True, text=True, timeout=240, env=full_env)
    return done.returncode, done.stdout + done.stderr


def by_test(path: Path) -> dict[str, dict[str, Any]]:
    return {r["nodeid"].split("::", 1)[1]: dict(r) for r in read_results(path)}


def test_cpu_session_survives_every_hang_and_crash_class(tmp_path: Path) -> None:
    results, junit = tmp_path / "r.jsonl", tmp_path / "junit.xml"
    rc, out = inner_pytest(tmp_path, CASES / "session_hangs.py", f"--fd-results={results}", f"--junitxml={junit}")
    assert rc == 1, out
    got = by_test(results)
    assert len(got) == 11, out  # no test lost
    for name in ("test_before", "test_between", "test_after"):
        assert got[name]["outcome"] == "passed"
    for kind in ("python_loop", "c_wait_gil_released", "c_call_holding_gil", "thread_deadlock"):
        record = got[f"test_hang[{kind}]"]
        assert record["outcome"] == "hang" and record["findings"] == ["FDC501"]
        assert record["duration"] >= SESSION_TIMEOUT_S  # killed at its deadline, not before
        assert f"in {kind}" in record["stuck_frame"]
        assert record["last_event"].startswith("hang:")
        assert record["isolated"] is True
    assert got["test_segfault"]["cause"].startswith("SIGSEGV")
    assert got["test_exit_code"]["cause"].startswith("os._exit(3)")
    assert got["test_memory_error"]["cause"].startswith("out of memory")
    assert all(got[t]["findings"] == ["FDC502"] for t in ("test_segfault", "test_exit_code", "test_memory_error"))
    assert got["test_plain_failure"]["outcome"] == "failed" and got["test_plain_failure"]["findings"] == []
    cases = ET.parse(junit).getroot().iter("testcase")
    assert len(list(cases)) == 11  # the JUnit report was written too: the session ended normally
    assert "FDC501" in out and "stuck frame" in out


def test_pytest_timeout_value_becomes_the_watchdog_deadline(tmp_path: Path) -> None:
    """--timeout=1 with the thread method: in-process it would os._exit the whole session on the
    python loop; isolated, our watchdog uses the 1 s, kills only the worker, and the next test runs."""
    results = tmp_path / "r.jsonl"
    rc, out = inner_pytest(
        tmp_path,
        CASES / "timeout_interplay.py",
        "--timeout=1",
        "--timeout-method=thread",
        f"--fd-results={results}",
        "-k",
        "not orphan",
    )
    got = by_test(results)
    assert rc == 1, out
    assert got["test_isolated_python_loop"]["outcome"] == "hang"
    assert got["test_isolated_python_loop"]["cause"] == "no result within 1s"
    assert got["test_plain_after"]["outcome"] == "passed"
    assert "Timeout" not in out  # pytest-timeout never fired


def test_pytest_timeout_alone_loses_the_session(tmp_path: Path) -> None:
    """The known-bad variant the watchdog exists for: isolation off, thread method on."""
    rc, out = inner_pytest(
        tmp_path,
        CASES / "timeout_interplay.py",
        "--timeout=1",
        "--timeout-method=thread",
        "--fd-isolate=off",
        "-k",
        "not orphan",
        f"--junitxml={tmp_path / 'j.xml'}",
    )
    assert "Timeout" in out
    assert "1 passed" not in out and not (tmp_path / "j.xml").exists()  # later test and JUnit lost


def test_under_xdist_each_result_is_written_once(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    results = tmp_path / "r.jsonl"
    rc, out = inner_pytest(
        tmp_path, CASES / "timeout_interplay.py", "-n", "1", "--fd-timeout=1", f"--fd-results={results}", "-k", "not orphan"
    )
    records = read_results(results)
    assert rc == 1, out
    assert sorted((r["nodeid"].split("::")[1], r["outcome"]) for r in records) == [
        ("test_isolated_python_loop", "hang"),
        ("test_plain_after", "passed"),
    ]


def _orphan_after_controller_kill(
    tmp_path: Path, env: dict[str, str] | None = None, cwd: Path = TESTS.parent
) -> tuple[int, list[str]]:
    """SIGKILL a controller while its worker hangs; (the worker's pid, nodeids in the results log)."""
    results, pid_file = tmp_path / "r.jsonl", tmp_path / "worker.pid"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(CASES / "timeout_interplay.py"),
        "-p",
        "no:cacheprovider",
        "-q",
        "--fd-timeout=120",
        f"--fd-results={results}",
        "-k",
        "orphan or plain",
    ]
    # TMPDIR: the SIGKILLed controller cannot remove its worker's temp dir; it stays in this test's own
    full_env = {
        **os.environ,
        "PYTHONPATH": str(TESTS),
        "FDC_TEST_PID_FILE": str(pid_file),
        "TMPDIR": str(tmp_path),
        **(env or {}),
    }
    controller = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker_pid = int(pid_file.read_text())
    finally:
        controller.send_signal(signal.SIGKILL)
        controller.wait(10)
    return worker_pid, [r["nodeid"].split("::")[1] for r in read_results(results)]


def _assert_worker_gone(pid: int, within_s: float = 5.0) -> None:
    """Fails unless ``pid`` exits (or is a zombie: dead, not yet reaped) within ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat")
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]  # after "(comm)", which may hold spaces
        except (OSError, IndexError):
            return  # gone
        if state in ("Z", "X"):
            return
        time.sleep(0.05)
    pytest.fail(f"orphaned worker {pid} still running {within_s:g}s after its controller was killed")


def test_killing_the_controller_loses_only_the_test_in_flight(tmp_path: Path) -> None:
    worker_pid, logged = _orphan_after_controller_kill(tmp_path)
    assert logged == ["test_plain_after"]
    _assert_worker_gone(worker_pid)  # the orphaned worker dies with its parent (PR_SET_PDEATHSIG)


def test_orphan_check_fails_when_the_worker_does_not_die_with_its_parent(tmp_path: Path) -> None:
    """Known-bad variant: a copy of the kit whose _die_with_parent does nothing, first on the
    path; the orphan check above must fail on it (it once could not fail at all)."""
    import fd_conformance

    mutant = tmp_path / "mutant"
    shutil.copytree(Path(fd_conformance.__file__).parent, mutant / "fd_conformance", ignore=shutil.ignore_patterns("__pycache__"))
    worker_py = mutant / "fd_conformance" / "isolation" / "worker" / "channel.py"
    source = worker_py.read_text()
    marker = "def _die_with_parent() -> None:\n"
    assert marker in source
    worker_py.write_text(source.replace(marker, marker + "    return  # mutant: no PR_SET_PDEATHSIG\n", 1))
    # run from the copy's directory: ``python -m`` puts the cwd first on sys.path, ahead of PYTHONPATH
    worker_pid, _ = _orphan_after_controller_kill(tmp_path, {"PYTHONPATH": f"{mutant}{os.pathsep}{TESTS}"}, cwd=mutant)
    try:
        with pytest.raises(pytest.fail.Exception, match="still running"):
            _assert_worker_gone(worker_pid, within_s=2.0)
    finally:
        try:  # the mutant's orphan: this test started it, so it ends it, by pid
            os.kill(worker_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_bad_fd_timeout_is_a_one_line_usage_error(tmp_path: Path) -> None:
    rc, out = inner_pytest(tmp_path, CASES / "timeout_interplay.py", "--fd-timeout=soon")
    assert rc == 4
    assert "--fd-timeout='soon' is not a number of seconds; fix:" in out


def _late_session(tmp_path: Path, *extra: str) -> tuple[dict[str, dict[str, Any]], Path, str]:
    results, imports = tmp_path / "r.jsonl", tmp_path / "worker_imports.txt"
    rc, out = inner_pytest(
        tmp_path,
        CASES / "skip_and_spare.py",
        str(CASES / "plain_collected_late.py"),
        f"--fd-results={results}",
        *extra,
        env={"FDC_TEST_WORKER_IMPORTS": str(imports)},
    )
    assert rc == 1, out  # the two hangs
    return by_test(results), imports, out


def test_marked_session_prestarts_skips_in_process_and_replaces_hangs_with_the_spare(tmp_path: Path) -> None:
    got, imports, out = _late_session(tmp_path)
    assert len(got) == 8, out
    in_process_pid = got["test_in_process"]["worker_pid"]
    for name in ("test_skip", "test_skipif_true"):  # skipped in the parent: no worker woken for them
        assert got[name]["outcome"] == "skipped" and "isolated" not in got[name]
        assert got[name]["worker_pid"] == in_process_pid
    first = got["test_skipif_false"]
    assert first["isolated"] is True and first["outcome"] == "passed" and first["worker_pid"] != in_process_pid
    # prestarted at the first isolated item collected, i.e. before the parent's slow collection ended
    # (the sleep is a lower bound on that gap: load only widens it; 0.1 s covers clock granularity)
    assert first["worker_spawned"] <= first["started"] - (SLOW_COLLECTION_S - 0.1), first
    for hang, after in (("test_hang_first", "test_after_first_hang"), ("test_hang_second", "test_after_second_hang")):
        assert got[hang]["outcome"] == "hang" and got[after]["outcome"] == "passed"
        assert got[after]["worker_pid"] != got[hang]["worker_pid"]
        assert got[after]["worker_spawned"] < got[hang]["finished"]  # the warm spare, started during the hang
    assert not imports.exists(), "the worker collected a file without isolated items"


def test_without_spare_and_isolating_all_the_worker_starts_after_the_hang(tmp_path: Path) -> None:
    """Known-bad variants of the test above: --fd-no-spare spawns after each hang; --fd-isolate=all
    makes the worker collect the plain file too, which the import record must show."""
    got, imports, out = _late_session(tmp_path, "--fd-no-spare", "--fd-isolate=all")
    assert got["test_in_process"]["isolated"] is True and got["test_in_process"]["outcome"] == "passed", out
    for hang, after in (("test_hang_first", "test_after_first_hang"), ("test_hang_second", "test_after_second_hang")):
        assert got[after]["worker_spawned"] > got[hang]["finished"]
    assert got["test_skip"]["outcome"] == "skipped" and "isolated" not in got["test_skip"]
    assert imports.exists()


def test_hung_conformance_check_reaches_the_matrix_as_fdc501(tmp_path: Path) -> None:
    """A suite check that hangs is reported by the parent; its synthetic report must carry the case
    keys, or the hang would vanish from conformance.json (the bug this guards against)."""
    report_dir = tmp_path / "report"
    rc, out = inner_pytest(
        tmp_path,
        CASES / "conformance_hang.py",
        f"--fd-model={CASES / 'conformance_hang.py'}:hang_case",
        f"--fd-report={report_dir}",
    )
    assert rc == 1, out
    cases = json.loads((report_dir / "conformance.json").read_text())["cases"]
    cpu = next(c for c in cases if c["name"] == "hang-probe-model" and c["device"] == "cpu")
    assert cpu["checks"]["hang_probe"]["codes"] == ["FDC501"], cpu
    assert cpu["verdict"] == "violations"


def test_hang_after_the_last_report_is_reported_and_the_session_goes_on(tmp_path: Path) -> None:
    """A worker silent after sending setup, call and teardown (a fixture value's ``__del__`` when
    pytest drops funcargs; a blocking logfinish hook) once crashed the parent with StopIteration:
    INTERNALERROR, exit 3, every later test lost. Now: FDC501 on the teardown, in the matrix too."""
    results, report_dir = tmp_path / "r.jsonl", tmp_path / "report"
    rc, out = inner_pytest(
        tmp_path,
        AFTER_TEARDOWN,
        f"--fd-model={AFTER_TEARDOWN}:probe_case",
        f"--fd-results={results}",
        f"--fd-report={report_dir}",
    )
    assert rc == 1 and "INTERNALERROR" not in out, out
    got = by_test(results)
    for name in ("test_del_hangs_after_teardown", "test_conformance_del_hangs[del-probe-model-cpu]", "test_logfinish_blocks"):
        assert got[name]["outcome"] == "hang" and got[name]["findings"] == ["FDC501"], got[name]
    assert got["test_after"]["outcome"] == "passed"  # the test after the silent worker still ran
    assert "hang: python loop" in got["test_del_hangs_after_teardown"]["last_event"]
    cases = json.loads((report_dir / "conformance.json").read_text())["cases"]
    cpu = next(c for c in cases if c["name"] == "del-probe-model" and c["device"] == "cpu")
    assert cpu["checks"]["del_probe"]["codes"] == ["FDC501"] and cpu["verdict"] == "violations", cpu


def test_reports_made_by_the_parent_keep_matrix_keys_and_the_checks_findings(tmp_path: Path) -> None:
    """ "Not collected in the worker" is decided in the parent: its report needs the case keys or
    the check vanishes from the matrix. A worker that retires after a complete, failed run (out of
    memory) adds FDC502: the check's own finding (FDC202) must stay next to it, not be replaced."""
    target, report_dir = CASES / "parent_made_reports.py", tmp_path / "report"
    rc, out = inner_pytest(tmp_path, target, f"--fd-model={target}:probe_case", f"--fd-report={report_dir}")
    assert rc == 1, out
    cases = json.loads((report_dir / "conformance.json").read_text())["cases"]
    checks = next(c for c in cases if c["name"] == "parent-probe-model" and c["device"] == "cpu")["checks"]
    assert checks["pid_probe"]["outcomes"] == ["failed"], checks
    assert checks["oom_probe"]["codes"] == ["FDC202", "FDC502"], checks
    assert "1 passed" in out  # test_after


# --- GPU: run by the lead on the H200 -------------------------------------------------------


@pytest.mark.gpu
def test_gpu_spin_kernel_is_reported_as_hang() -> None:
    from fd_conformance.isolation.watchdog import IsolatedRunner

    with IsolatedRunner() as runner:
        outcome = runner.call("hang_cases.gpu_hangs:spin_kernel", timeout=20)
        print(f"gpu spin: outcome={outcome.outcome} cause={outcome.run.cause} frame={outcome.run.stuck_frame}")
        print(outcome.run.native_stacks[:2000])
        assert outcome.outcome == "hang" and outcome.finding is not None and outcome.finding.code == "FDC501"
        assert "spin_kernel" in outcome.run.stuck_frame
        assert runner.call("hang_cases.hangs:passes", 1, timeout=60).outcome == "passed"


@pytest.mark.gpu
def test_gpu_mtp_order_hang_or_caught_by_lifecycle_rule() -> None:
    """Whatever the H200 does with the wrong order (hang, error, completes) is printed as data;
    the kit must report it as FDC501 or catch the order as FDC202. The fixed order completes clean."""
    from fd_conformance.isolation.watchdog import IsolatedRunner

    with IsolatedRunner() as runner:
        wrong = runner.call("hang_cases.gpu_hangs:collective_graph_order", True, timeout=60)
        fixed = runner.call("hang_cases.gpu_hangs:collective_graph_order", False, timeout=60)
    print(
        f"MTP wrong order: outcome={wrong.outcome} value={wrong.value} cause={wrong.run.cause} "
        f"last_event={wrong.run.last_event} frame={wrong.run.stuck_frame}"
    )
    print(f"MTP fixed order: outcome={fixed.outcome} value={fixed.value}")
    if wrong.outcome == "hang":
        assert wrong.finding is not None and wrong.finding.code == "FDC501"
        assert "group" in wrong.run.last_event or "mtp" in wrong.run.last_event
    elif wrong.outcome == "passed":
        assert "FDC202" in wrong.value["findings"]
    else:
        assert wrong.outcome in ("failed", "crash"), wrong.run.describe()
    assert fixed.outcome == "passed" and fixed.value == {"completed": True, "findings": []}


@pytest.mark.gpu
def test_gpu_illegal_address_is_a_crash_with_cause() -> None:
    from fd_conformance.isolation.watchdog import IsolatedRunner

    with IsolatedRunner() as runner:
        outcome = runner.call("hang_cases.gpu_hangs:illegal_address", timeout=60)
        print(f"illegal address: outcome={outcome.outcome} cause={outcome.run.cause}")
        assert outcome.outcome == "crash" and "CUDA" in outcome.run.cause
        assert runner.call("hang_cases.hangs:passes", 1, timeout=60).outcome == "passed"
