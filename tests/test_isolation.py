"""The watchdog and worker, driven directly (call mode): real hangs, real crashes, real stacks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fd_conformance import cli
from fd_conformance.errors import UsageError, validate_timeout
from fd_conformance.isolation.causes import classify_error, crash_cause
from fd_conformance.isolation.process import WorkerProcess, stuck_frame
from fd_conformance.isolation.results import ResultLog, new_record, read_results
from fd_conformance.isolation.watchdog import IsolatedRunner, Watchdog

sys.path.insert(0, str(Path(__file__).parent))  # the worker imports hang_cases from the same sys.path

HANG_TIMEOUT_S = 1.0  # how long a hang takes to be reported is bench/hang_latency.py's figure, not asserted here


@pytest.fixture(scope="module")
def runner() -> IsolatedRunner:
    with IsolatedRunner() as shared:
        yield shared


def test_worker_is_reused_across_passing_checks(runner: IsolatedRunner) -> None:
    first = runner.call("hang_cases.hangs:passes", 1, timeout=30)
    second = runner.call("hang_cases.hangs:passes", x=5, timeout=30)
    assert (first.outcome, first.value, second.value) == ("passed", 2, 6)
    assert first.run.pid == second.run.pid  # framework import would be paid once
    assert first.finding is None


@pytest.mark.parametrize("kind", ["python_loop", "c_wait_gil_released", "c_call_holding_gil", "thread_deadlock"])
def test_every_hang_class_is_killed_with_evidence(runner: IsolatedRunner, kind: str) -> None:
    outcome = runner.call(f"hang_cases.hangs:{kind}", timeout=HANG_TIMEOUT_S)
    assert outcome.outcome == "hang"
    assert outcome.finding is not None and outcome.finding.code == "FDC501"
    assert f"in {kind}" in outcome.run.stuck_frame  # the stuck frame names the hanging function
    assert outcome.run.last_event.startswith("hang:")  # streamed before the child went silent
    assert "most recent call first" in outcome.run.python_stacks
    if shutil.which("py-spy"):
        assert kind in outcome.run.native_stacks
    # the hung worker was replaced: the next check runs in a fresh process
    after = runner.call("hang_cases.hangs:passes", 1, timeout=30)
    assert after.outcome == "passed" and after.run.pid != outcome.run.pid


def test_malformed_worker_message_is_that_checks_crash_and_the_next_check_runs(runner: IsolatedRunner) -> None:
    outcome = runner.call("hang_cases.hangs:sends_a_malformed_message", timeout=HANG_TIMEOUT_S)
    assert outcome.outcome == "crash", outcome.run.describe()
    assert "worker protocol error: unknown worker message 'no-such-message'" in outcome.run.cause
    after = runner.call("hang_cases.hangs:passes", 1, timeout=30)
    assert after.outcome == "passed" and after.run.pid != outcome.run.pid


def test_deadlock_stacks_show_both_threads(runner: IsolatedRunner) -> None:
    outcome = runner.call("hang_cases.hangs:thread_deadlock", timeout=HANG_TIMEOUT_S)
    assert outcome.run.python_stacks.count("in take") == 2


def test_runtime_events_stream_to_the_parent(runner: IsolatedRunner) -> None:
    outcome = runner.call("hang_cases.hangs:hang_after_runtime_events", timeout=HANG_TIMEOUT_S)
    assert outcome.outcome == "hang"
    assert outcome.run.last_event.startswith("group_shutdown tp")
    assert any(e.startswith("graph_captured decode-bs8 [draft]") for e in outcome.run.events)


# The hang's own deadline once torch and the adapter are imported (the worker imports them first,
# in a call of its own that returns when done): making a runtime and two marks, then the loop.
RUNTIME_HANG_TIMEOUT_S = HANG_TIMEOUT_S + 1


def test_get_runtime_streams_runtime_events_to_the_parent(runner: IsolatedRunner) -> None:
    """get_runtime() subscribes the worker's stream: the hang report names the runtime's last event."""
    pytest.importorskip("torch")
    assert runner.call("hang_cases.hangs:use_the_torch_runtime", timeout=60).outcome == "passed"
    outcome = runner.call("hang_cases.hangs:hang_after_get_runtime_events", timeout=RUNTIME_HANG_TIMEOUT_S)
    assert outcome.outcome == "hang"
    assert outcome.run.last_event.startswith("mark release parameters [main]")
    assert any(e.startswith("mark draft: clear graphs [draft]") for e in outcome.run.events)


def test_runtime_built_around_get_runtime_streams_nothing(runner: IsolatedRunner) -> None:
    """Known-bad variant: the adapter's create() without get_runtime -> no runtime event reaches
    the parent, so the assertion above would fail for a get_runtime that does not stream."""
    pytest.importorskip("torch")
    assert runner.call("hang_cases.hangs:use_the_torch_runtime", timeout=60).outcome == "passed"
    outcome = runner.call("hang_cases.hangs:hang_after_unstreamed_runtime_events", timeout=RUNTIME_HANG_TIMEOUT_S)
    assert outcome.outcome == "hang"
    assert not any(e.startswith("mark ") for e in outcome.run.events)
    assert outcome.run.last_event == "call hang_cases.hangs:hang_after_unstreamed_runtime_events"


def _spare_ready(runner: IsolatedRunner) -> tuple[int, float]:
    """The warm spare's pid, and how long the first (cold) call waited for its worker's startup."""
    cold = runner.call("hang_cases.hangs:passes", 1, timeout=30)  # the spare is spawned once the worker is ready
    assert runner.spare is not None
    runner.spare.wait_ready()
    return runner.spare.pid, cold.run.ready_wait_s


def test_warm_spare_runs_the_check_after_a_hang() -> None:
    with IsolatedRunner(spares=1, spare_after_s=0) as spared:
        spare_pid, cold_wait_s = _spare_ready(spared)
        hung = spared.call("hang_cases.hangs:python_loop", timeout=HANG_TIMEOUT_S)
        after = spared.call("hang_cases.hangs:passes", 1, timeout=30)
        assert hung.outcome == "hang" and after.outcome == "passed"
        assert after.run.pid == spare_pid  # the process spawned before the hang, already started
        # Relative to the cold start on the same (maybe loaded) box: the spare's startup was not paid again.
        assert after.run.ready_wait_s < cold_wait_s and after.run.worker_spawned < time.time() - HANG_TIMEOUT_S
        assert spared.promoted_spares == 1
        assert spared.spare is not None and spared.spare.pid not in (spare_pid, hung.run.pid)  # a new spare


def test_spare_starts_only_when_a_check_runs_long() -> None:
    """Default policy: fast checks start no spare; a hang starts one while it runs, and that spare
    runs the next check; after a lost worker a spare is kept from then on."""
    with IsolatedRunner(spares=1, spare_after_s=0.3) as lazy:
        for _ in range(3):
            lazy.call("hang_cases.hangs:passes", 1, timeout=30)
        assert lazy.spare is None and lazy.started_workers == 1
        hung = lazy.call("hang_cases.hangs:python_loop", timeout=HANG_TIMEOUT_S + 1)
        assert lazy.spare is not None  # spawned 0.3 s into the hang (its timeout is shorter than the lead)
        spare_pid = lazy.spare.pid
        after = lazy.call("hang_cases.hangs:passes", 1, timeout=30)
        assert after.run.pid == spare_pid and hung.run.worker_spawned < after.run.worker_spawned < time.time()
        assert lazy.spare is not None and lazy.spare.pid != spare_pid  # kept warm after a loss


def test_a_slow_healthy_check_starts_no_spare_until_near_its_timeout() -> None:
    """A check past spare_after_s but far from its timeout (a worker's first model import: 15-20 s
    on the H200, under a 300 s timeout) starts no spare; the same check under a timeout shorter
    than SPARE_LEAD_S does (the known-bad side: before, both started one at spare_after_s)."""
    with IsolatedRunner(spares=1, spare_after_s=0.3) as lazy:
        assert lazy.call("hang_cases.hangs:sleeps", 1.0, timeout=30).value == 1.0
        assert lazy.spare is None and lazy.started_workers == 1
        assert lazy.call("hang_cases.hangs:sleeps", 1.0, timeout=1.6).value == 1.0
        assert lazy.spare is not None and lazy.started_workers == 2


def test_without_spare_the_check_after_a_hang_waits_for_a_new_worker() -> None:
    """The known-bad variant of the test above: with spares=0 the next check's worker is spawned
    only after the hang, and it waits for that worker's whole startup."""
    with IsolatedRunner(spares=0) as bare:
        bare.call("hang_cases.hangs:passes", 1, timeout=30)
        assert bare.spare is None
        hung = bare.call("hang_cases.hangs:python_loop", timeout=HANG_TIMEOUT_S)
        after = bare.call("hang_cases.hangs:passes", 1, timeout=30)
        assert after.run.worker_spawned > hung.run.worker_spawned + HANG_TIMEOUT_S
        assert after.run.ready_wait_s > 0.05 and bare.promoted_spares == 0


def test_spare_imports_no_framework_until_it_runs_a_check() -> None:
    """The active worker imported torch for its check; the idle spare did not (no framework, no
    CUDA context, no device memory). The active worker's answer proves the probe can say yes."""
    pytest.importorskip("torch")
    with IsolatedRunner(spares=1, spare_after_s=0) as spared:
        assert spared.call("hang_cases.hangs:use_torch", timeout=120).value is False
        assert spared.worker is not None and spared.spare is not None
        assert spared.worker.probe()["frameworks"] == ["torch"]
        assert spared.spare.probe() == {"pid": spared.spare.pid, "frameworks": [], "cuda_initialized": False}


def test_spares_other_than_zero_or_one_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="spares=2"):
        IsolatedRunner(spares=2)


@pytest.mark.parametrize(
    ("kind", "cause"),
    [
        ("segfault", "SIGSEGV"),
        ("exit_without_result", "os._exit(3)"),
        ("memory_error", "out of memory: MemoryError"),
    ],
)
def test_crashes_report_their_cause_and_the_next_check_runs(runner: IsolatedRunner, kind: str, cause: str) -> None:
    outcome = runner.call(f"hang_cases.hangs:{kind}", timeout=30)
    assert outcome.outcome == "crash"
    assert outcome.finding is not None and outcome.finding.code == "FDC502"
    assert outcome.run.cause.startswith(cause)
    assert runner.call("hang_cases.hangs:passes", 1, timeout=30).outcome == "passed"


def test_plain_failure_is_not_a_crash(runner: IsolatedRunner) -> None:
    before = runner.call("hang_cases.hangs:passes", 1, timeout=30).run.pid
    outcome = runner.call("hang_cases.hangs:fails", timeout=30)
    assert outcome.outcome == "failed" and outcome.finding is None
    assert "plain failure, not a crash" in outcome.run.payload["details"]
    assert outcome.run.pid == before  # a failure does not cost a worker


def test_lifecycle_rule_catches_the_mtp_order_through_isolation(runner: IsolatedRunner) -> None:
    """CPU twin of the GPU MTP test: gloo group + host graph; FDC202 only for the wrong order."""
    pytest.importorskip("torch")
    wrong = runner.call("hang_cases.gpu_hangs:collective_graph_order", True, "cpu", timeout=120)
    fixed = runner.call("hang_cases.gpu_hangs:collective_graph_order", False, "cpu", timeout=120)
    assert wrong.outcome == "passed", wrong.run.payload.get("details")
    assert wrong.value["findings"] == ["FDC202"]
    assert fixed.value == {"completed": True, "findings": []}


def test_sticky_cuda_and_oom_texts_are_crash_causes() -> None:
    assert classify_error("RuntimeError: CUDA error: an illegal memory access was encountered").startswith("CUDA sticky error")
    assert classify_error("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate").startswith("out of memory")
    assert classify_error("AssertionError: outputs differ") is None


def test_crash_cause_names_signal_and_exit_code() -> None:
    assert crash_cause(-11).startswith("SIGSEGV")
    assert "OOM killer" in crash_cause(-9)
    assert crash_cause(3) == "os._exit(3) (worker exited without reporting a result)"


def test_stuck_frame_skips_stdlib_and_picks_the_main_thread() -> None:
    dump = (
        "Thread 0x00000000000000aa (most recent call first):\n"
        '  File "/elsewhere/other.py", line 3 in helper\n'
        "\n"
        "Current thread 0x00000000000000bb (most recent call first):\n"
        f'  File "{Path(json.__file__)}", line 1 in loads\n'
        '  File "/proj/model.py", line 42 in clear_graphs\n'
    )
    assert stuck_frame(dump, 0xBB) == 'File "/proj/model.py", line 42 in clear_graphs'


@pytest.mark.parametrize("value", ["abc", 0, -1, None])
def test_bad_timeouts_are_usage_errors_naming_their_source(value: object) -> None:
    with pytest.raises(UsageError, match="--fd-timeout"):
        validate_timeout(value, "--fd-timeout")


def test_check_reference_without_colon_is_a_usage_error(runner: IsolatedRunner) -> None:
    with pytest.raises(UsageError, match="module:function"):
        runner.call("hang_cases.hangs.passes", timeout=5)


def _record(nodeid: str, outcome: str) -> dict:
    record = new_record(nodeid, started=1.0, pid=1)
    record["outcome"] = outcome  # type: ignore[typeddict-item]
    return record


def test_results_log_survives_a_torn_tail_and_report_rebuilds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.jsonl"
    log = ResultLog(path)
    log.append(_record("t.py::a", "passed"))  # type: ignore[arg-type]
    log.append(_record("t.py::b", "hang"))  # type: ignore[arg-type]
    log.close()
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"nodeid": "t.py::c", "outc')  # writer killed mid-line
    assert [r["nodeid"] for r in read_results(path)] == ["t.py::a", "t.py::b"]
    assert cli.main(["report", str(path)]) == 3  # rebuilt, but a torn tail means the session did not finish
    out = capsys.readouterr().out
    assert "t.py::a" in out and "t.py::b" in out and "FAIL" in out and "INTERRUPTED (the results file ends in a torn line" in out


def test_report_exit_zero_when_all_pass(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_record("t.py::a", "passed")) + "\n")
    assert cli.main(["report", str(path)]) == 0


def test_report_bad_input_is_one_line_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(tmp_path / "missing.jsonl")]) == 2  # a bad path: usage
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json\n{"nodeid": "x", "outcome": "passed"}\n')
    assert cli.main(["report", str(bad)]) == 3  # an unreadable results file: incomplete input
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("fix:" in line for line in err)


@pytest.mark.gpu
def test_gpu_spare_holds_no_cuda_context() -> None:
    """On the device: the worker that ran a CUDA check reports a context; the warm spare none."""
    with IsolatedRunner(spares=1, spare_after_s=0) as spared:
        assert spared.call("hang_cases.hangs:use_torch", True, timeout=120).value is True
        assert spared.worker is not None and spared.spare is not None
        assert spared.worker.probe()["cuda_initialized"] is True
        assert spared.spare.probe()["cuda_initialized"] is False


# --- the pytest-mode worker collects exactly what its parent collected ---------------------------

# A test package installed somewhere else than where pytest runs, as fd_conformance.suite is in
# site-packages: `pytest --pyargs` names its tests relative to the package, not to the rootdir.
ISOLATED_MODULE = """
import os
import pytest

with open(os.environ["FDC_IMPORT_LOG"], "a") as log:
    log.write("isolated imported in %d\\n" % os.getpid())


@pytest.mark.isolated
def test_runs_in_worker():
    assert os.environ.get("FD_CONFORMANCE_ISOLATION_WORKER") == "1"
"""
PLAIN_MODULE = """
import os

with open(os.environ["FDC_IMPORT_LOG"], "a") as log:
    log.write("plain imported in %d\\n" % os.getpid())


def test_runs_in_parent():
    assert os.environ.get("FD_CONFORMANCE_ISOLATION_WORKER") is None
"""


def _pyargs_session(tmp_path: Path, *options: str) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    site = tmp_path / "site"
    package = site / "fdc_pyargs_suite"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "test_isolated.py").write_text(ISOLATED_MODULE)
    (package / "test_plain.py").write_text(PLAIN_MODULE)
    cwd = tmp_path / "elsewhere"  # no ini file, no conftest: the rootdir is this directory
    cwd.mkdir()
    log = tmp_path / "imports.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "FDC_IMPORT_LOG": str(log),
        "FD_CONFORMANCE_GPU": "0",
    }
    env.pop("FD_CONFORMANCE_ISOLATION_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "fdc_pyargs_suite", "-p", "no:cacheprovider", "-q", *options],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, log.read_text().splitlines() if log.exists() else [], cwd


def test_pyargs_suite_from_another_directory_runs_in_the_worker(tmp_path: Path) -> None:
    """Regression: the worker collected the files themselves and named the tests "::test_x", so
    every isolated test failed with "was not collected in the isolation worker"."""
    results = tmp_path / "results.jsonl"
    # Space form on purpose: "--fd-results FILE" puts FILE among the rootdir/ini candidates.
    report = tmp_path / "report"
    proc, imports, _ = _pyargs_session(tmp_path, "--fd-results", str(results), "--fd-report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (report / "conformance.json").is_file()
    assert "2 passed" in proc.stdout
    assert "was not collected" not in proc.stdout
    (record,) = [r for r in read_results(results) if r["nodeid"].endswith("test_runs_in_worker")]
    assert record["outcome"] == "passed" and record["isolated"] is True
    assert record["worker_pid"] != 0
    # The worker imports only the file holding isolated items: the plain module once (parent),
    # the isolated one twice (parent, worker).
    assert sum(line.startswith("plain imported") for line in imports) == 1, imports
    assert sum(line.startswith("isolated imported") for line in imports) == 2, imports


def test_worker_loads_the_parents_dash_p_plugins(tmp_path: Path) -> None:
    """An isolated test sees the fixtures of the parent's ``-p`` plugins (and `fd-conformance run`'s
    ``-p no:hypothesispytest`` holds in the worker): the option dict carries them, and pytest's
    ``Config.fromdictargs`` loads ``option.plugins``. Without them: "fixture 'extra_value' not found"."""
    site = tmp_path / "site"
    (site / "fdc_plugin_suite").mkdir(parents=True)
    (site / "fdc_plugin_suite" / "__init__.py").write_text("")
    (site / "fdc_extra_plugin.py").write_text(
        "import os, pytest\n\n@pytest.fixture\ndef extra_value():\n    return os.getpid()\n"
    )
    (site / "fdc_plugin_suite" / "test_uses_plugin.py").write_text(
        "import os, pytest\n\n@pytest.mark.isolated\ndef test_in_worker(extra_value):\n"
        "    assert extra_value == os.getpid() and os.environ.get('FD_CONFORMANCE_ISOLATION_WORKER') == '1'\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), "FD_CONFORMANCE_GPU": "0"}
    env.pop("FD_CONFORMANCE_ISOLATION_WORKER", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "fdc_plugin_suite",
            "-p",
            "fdc_extra_plugin",
            "-p",
            "fd_conformance",  # a session that asks for the kit: only then is `isolated` the kit's
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout + proc.stderr


def test_isolate_all_collects_the_parents_arguments_in_the_worker(tmp_path: Path) -> None:
    proc, imports, _ = _pyargs_session(tmp_path, "--fd-isolate", "all", "-k", "runs_in_worker")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 deselected" in proc.stdout
    assert sum(line.startswith("isolated imported") for line in imports) == 2, imports


def test_two_failed_worker_starts_fail_the_remaining_requests_at_once() -> None:
    """A worker that cannot start (here: a mode it does not know, so it exits before ``ready``)
    fails the same way every time: after two in a row no third is spawned, and the remaining
    requests fail at once with the first error instead of each waiting up to STARTUP_TIMEOUT_S."""
    watchdog = Watchdog("no-such-mode")
    try:
        results = [watchdog.run(("call", "hang_cases.hangs:passes", (1,), {}), 30) for _ in range(4)]
    finally:
        watchdog.close()
    assert [r.status for r in results] == ["crash"] * 4
    assert watchdog.started_workers == 2
    assert results[0].cause.startswith("isolation worker failed to start")
    assert "unknown worker mode" in results[3].log_tail  # the first worker's log: the real cause
    assert "no further worker is started" in results[3].cause


def test_a_worker_too_slow_to_start_is_not_a_crash_of_the_model() -> None:
    """Issue 51.2: a worker still starting at the deadline (a loaded host) was FDC502 against the
    model. It is "not_started", with no finding: the check is not judged. One that DIES at start
    stays a crash (the test above)."""
    watchdog = Watchdog("call", startup_timeout=0.001)  # no interpreter starts in a millisecond
    try:
        results = [watchdog.run(("call", "hang_cases.hangs:passes", (1,), {}), 30) for _ in range(3)]
    finally:
        watchdog.close()
    assert [r.status for r in results] == ["not_started"] * 3
    assert all(r.finding("x") is None for r in results)
    assert results[0].cause.startswith("isolation worker failed to start: isolation worker did not start in time")


SLOW_START_CONFTEST = """
import fd_conformance.isolation.watchdog as watchdog

_init = watchdog.Watchdog.__init__


def _no_time_to_start(self, *args, **kwargs):
    kwargs["startup_timeout"] = 0.001  # stands in for a host too loaded to start a worker in time
    _init(self, *args, **kwargs)


watchdog.Watchdog.__init__ = _no_time_to_start
"""


def test_a_session_whose_worker_cannot_start_in_time_skips_as_not_judged(tmp_path: Path) -> None:
    """The same through pytest: the isolated test is skipped "not judged" naming the start, not
    failed with FDC502, and the session goes on to the next test."""
    (tmp_path / "conftest.py").write_text(SLOW_START_CONFTEST)
    (tmp_path / "test_slow_host.py").write_text(
        "import pytest\n\n\n@pytest.mark.isolated\ndef test_model():\n    pass\n\n\ndef test_in_process():\n    pass\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    env.pop("FD_CONFORMANCE_ISOLATION_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "fd_conformance", "-p", "no:cacheprovider", "-rs", "-q", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 1 skipped" in proc.stdout and "FDC502" not in proc.stdout, proc.stdout
    assert "not judged: isolation worker failed to start: isolation worker did not start in time" in proc.stdout, proc.stdout


STARTUP_BUDGET_S = 15.0  # collecting after the file list arrives took over 8 s on a loaded 2-core machine


def test_startup_deadline_starts_when_the_paths_are_sent() -> None:
    """A worker prestarted while the parent collects waits for the file list; the parent's
    collection time (here longer than the whole startup budget) must not count against it."""
    tests = Path(__file__).parent
    target = tests / "hang_cases" / "timeout_interplay.py"
    setup = {
        "option_dict": {},
        "args": ["-p", "no:cacheprovider", str(target)],
        "invocation_dir": str(tests.parent),
        "paths": None,
    }
    worker = WorkerProcess("pytest", setup, startup_timeout=STARTUP_BUDGET_S)
    try:
        # The parent collected for longer than the whole budget: its clock says so (a sleep of the
        # budget did the same, 15 s of this suite's wall time). The worker cannot be ready before
        # it has the paths, so a deadline still counted from the spawn would fail wait_ready.
        worker.startup_from -= STARTUP_BUDGET_S + 0.5
        worker.collect([str(target)])
        worker.wait_ready()
        assert any(nodeid.endswith("::test_plain_after") for nodeid in worker.collected), worker.collected
    finally:
        worker.stop()


FLOODING_CONFTEST = """\
import threading, time
from fd_conformance.isolation import mark


def _flood():
    while True:  # as fast as it can: the pipe never drains
        mark("still importing")


threading.Thread(target=_flood, daemon=True).start()
time.sleep(600)  # an import that never ends, marking all the while
"""


def test_lifecycle_marks_without_end_do_not_outlast_the_startup_deadline(tmp_path: Path) -> None:
    """Marks made while a worker starts are passed over, but a worker that only ever marks is a
    worker that did not start: waiting for its facts ends at the startup deadline."""
    (tmp_path / "conftest.py").write_text(FLOODING_CONFTEST)
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    setup = {
        "option_dict": {},
        "args": ["-p", "no:cacheprovider", str(tmp_path / "test_x.py")],
        "invocation_dir": str(tmp_path),
        "paths": None,
        "send_facts": True,
    }
    worker = WorkerProcess("pytest", setup, startup_timeout=5.0)
    waiting = ThreadPoolExecutor(max_workers=1)
    try:
        facts = waiting.submit(worker.facts).result(timeout=60)  # without the deadline: forever
        assert facts is None and worker.start_timed_out
    finally:
        worker.kill()
        waiting.shutdown(wait=False)


def test_worker_setup_passes_positional_arguments_only_as_args(pytestconfig: pytest.Config) -> None:
    """``file_or_dir`` in the option dict made argparse warn in every worker's log."""
    from fd_conformance.isolation.plugin import CONTROLLER_KEY

    setup = pytestconfig.stash[CONTROLLER_KEY]._worker_setup()
    assert "file_or_dir" not in setup["option_dict"]
    assert setup["args"][-len(pytestconfig.args) :] == list(pytestconfig.args)


def test_worker_messages_are_named_and_checked_at_the_sender() -> None:
    """The protocol table refuses unknown names and fields, and handlers get fields as keywords."""
    from fd_conformance.isolation import messages

    sent = messages.message(messages.ITEM, nodeid="t.py::a", next_nodeid=None)
    assert messages.dispatch(sent, {messages.ITEM: lambda nodeid, next_nodeid: (nodeid, next_nodeid)}) == ("t.py::a", None)
    with pytest.raises(messages.WorkerProtocolError, match="unknown"):
        messages.message(messages.ITEM, nodeid="t.py::a", next_nodeid=None, extra=1)
    with pytest.raises(messages.WorkerProtocolError, match="missing"):
        messages.message(messages.DONE)
    with pytest.raises(messages.WorkerProtocolError, match="unexpected"):
        messages.dispatch(sent, {messages.STOP: lambda: None})
