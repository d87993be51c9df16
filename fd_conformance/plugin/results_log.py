"""The results log (``--fd-results FILE``; ``fd-conformance run`` writes OUT/results.jsonl) as a
plugin of its own, fed by pytest's own hooks only, so tests are logged whether or not isolation runs.

Each line is written where pytest's reports meet: result lines where every report arrives (this
process, or xdist's controller, which re-fires its workers' reports as junitxml and the terminal
see them), the plan line where collection happens (this process, or each xdist worker), the session
line where an in-process session ends (under xdist ``run`` writes it). A test's phases are folded
into one :class:`~fd_conformance.matrix_keys.check_record.CheckRecord` (by ``PhaseFold``, as the
session's matrix folds them) and appended as it ends.

PYTEST_DONT_REWRITE: holds no test assertions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator

import pytest

from fd_conformance.errors import UsageError
from fd_conformance.isolation.messages import in_isolation_worker
from fd_conformance.isolation.plugin import is_xdist_controller
from fd_conformance.isolation.results import FINISHED, INTERRUPTED, ResultLog, plan_record, session_record
from fd_conformance.matrix_keys.check_record import RUN_ATTR, PhaseFold
from fd_conformance.plugin.options import FD_INCLUDE_MUTANTS, FD_RESULTS


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption(FD_RESULTS, None)
    if not path or in_isolation_worker():  # an isolation worker's tests are its parent's to log
        return
    try:
        writer = ResultsWriter(config, path)
    except UsageError as err:  # pytest prints a UsageError as one line and exits 4
        raise pytest.UsageError(str(err)) from None
    config.pluginmanager.register(writer, "fd_results_writer")


class ResultsWriter:
    """One session's results file: the plan, a line per finished test, how the session ended."""

    def __init__(self, config: pytest.Config, path: str) -> None:
        self.config = config
        self.xdist_worker = hasattr(config, "workerinput")
        self.xdist_controller = is_xdist_controller(config)
        self.log = ResultLog(path)
        self.phases = PhaseFold()  # the session's matrix folds with the same (plugin/matrix.py)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The plan line: every test this session will run, with its matrix keys, so a reader of a
        file cut short (SIGTERM, SIGKILL, OOM) can name the checks that never ran."""
        if self.xdist_controller:
            return  # it collects nothing: each worker writes the plan it collected
        from fd_conformance.isolation.session_plan import session_plan  # the plan plugin's hook ran first (tryfirst)

        tests = list(session_plan(self.config).values())
        self.log.append(plan_record(tests, bool(self.config.getoption(FD_INCLUDE_MUTANTS, False))))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """The process that ran the test, on its report (an isolated test's parent sets its own)."""
        report = yield
        if not hasattr(report, RUN_ATTR):
            setattr(report, RUN_ATTR, {"worker_pid": os.getpid()})
        return report

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.xdist_worker:
            return  # the controller writes: it gets this report re-fired
        record = self.phases.add(report)
        if record is not None:
            self.log.append(record.line(finished=time.time(), pid=os.getpid()))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if not (self.xdist_worker or self.xdist_controller):  # under xdist `run` writes how it ended
            interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
            self.log.append(session_record(INTERRUPTED if interrupted else FINISHED, f"pytest exited {int(exitstatus)}"))
        self.log.close()
