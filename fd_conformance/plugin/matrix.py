"""The conformance matrix: matrix keys on each deciding report, the session's results, the reports.

Session state lives in :class:`pytest.StashKey` slots, the way pytest's own faulthandler plugin
keeps it, so nothing leaks between sessions run in one process (pytester, ``fd-conformance run``).

PYTEST_DONT_REWRITE: the plugin package imports this module before pytest reads its ``pytest_plugins``,
so asking pytest to rewrite it only warned in every user session; it holds no test assertions.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from fd_conformance.errors import EXIT_NOTHING_CERTIFIED
from fd_conformance.matrix_keys import RUNTIME_INFO_KEY, VERDICT_KEY, case_of, case_properties
from fd_conformance.matrix_keys.check_record import TRACE_ATTR, CheckRecord, PhaseFold, is_check_report
from fd_conformance.plugin import lifecycle_trace
from fd_conformance.plugin.options import FD_ALLOW_EMPTY, FD_INCLUDE_MUTANTS, FD_REPORT
from fd_conformance.plugin.shard import empty_shard_reason, recorded_shard, shard_stamp

if TYPE_CHECKING:
    from fd_conformance.report import CheckResult

SESSION_KEY: pytest.StashKey[ConformanceSession] = pytest.StashKey()


def _is_final(report: pytest.TestReport) -> bool:
    """A report that decides a test's outcome: the call, a setup that did not pass, or a failed
    teardown (a hang while the subject's graphs are destroyed must reach the matrix too)."""
    return (
        report.when == "call" or (report.when == "setup" and not report.passed) or (report.when == "teardown" and report.failed)
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    add_matrix_keys(item, report)
    return report


def add_matrix_keys(item: pytest.Item, report: pytest.TestReport) -> None:
    """The matrix keys (and a caught mutant's xfail) on a suite test's deciding report."""
    if not _is_final(report):
        return
    # Added at the deciding report (not at setup: a skip mark fires before any setup hook of ours),
    # to the item too, so JUnit XML writes them as <property> elements.
    props = case_properties(item)
    if not props:
        return
    case = case_of(item)
    assert case is not None  # case_properties returned keys, so the item has a case
    info = item.stash.get(RUNTIME_INFO_KEY, None)
    verdict = item.stash.get(VERDICT_KEY, None)
    # The runtime and findings, encoded by the record's one encoder (after the matrix keys).
    props += CheckRecord(
        item.nodeid, **(info or {}), findings=None if verdict is None else [f.to_dict() for f in verdict.findings]
    ).properties()
    if verdict is not None and report.when == "call":
        # Its picture (report/lifecycle_picture.py): an attribute, like fd_run, so JUnit XML never shows it.
        trace = lifecycle_trace.trace_of(item, verdict)
        if trace is not None:
            setattr(report, TRACE_ATTR, trace)
    if verdict is not None:
        codes = verdict.error_codes
        if (
            report.failed
            and report.when == "call"
            and codes
            and item.config.getoption(FD_INCLUDE_MUTANTS)
            and case.is_mutant
            and set(codes) <= set(case.expected_findings)
        ):
            # An expected violation: the check caught the defect the mutant was built with.
            report.outcome = "skipped"
            report.wasxfail = f"mutant {case.name} caught: {','.join(codes)}"
    item.user_properties.extend(props)
    report.user_properties.extend(props)


class ConformanceSession:
    """Per-session collector (registered as a plugin object, kept in the config stash): turns
    suite reports into :class:`CheckResult` records on the controller, prints the matrix and
    writes the reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[CheckResult] = []
        self.expect_mutants = bool(config.getoption(FD_INCLUDE_MUTANTS))
        self.nothing_certified: str | None = None  # why, when the session certified nothing
        self.outside_failures: set[str] = set()  # failed tests that are no conformance check
        self.phases = PhaseFold()  # one result per test, folded as the results file folds it

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and not is_check_report(report):  # a check's failing reports carry its keys
            self.outside_failures.add(report.nodeid)
        record = self.phases.add(report)
        if record is None or record.case is None:
            return
        from fd_conformance.report import result_of  # the reports' code only in sessions that certify

        self.results.append(result_of(record))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from fd_conformance import report  # the reports' code only in sessions that certified something
        from fd_conformance.isolation.session_plan import session_plan

        # The verdict, once: every check each row owes (deselected ones and ones that never ended
        # included) against what ran. The session's exit status is the report's, so `pytest` and
        # `fd-conformance run` give one answer for one session.
        plan = session_plan(self.config)
        self.results = report.with_plan(self.results, plan.values())
        self._judge(session, plan)
        out = self.config.getoption(FD_REPORT)
        if out:  # written even when empty: "nothing ran" must be visible to `fd-conformance run`
            # After the verdict: the files carry the session's exit status (certified nothing: 4).
            allow_empty = bool(self.config.getoption(FD_ALLOW_EMPTY))
            report.write_reports(
                Path(out),
                self.results,
                self.expect_mutants,
                None,
                self.nothing_certified,
                allow_empty,
                sorted(self.outside_failures),
            )
            shard = shard_stamp(self.config)
            if shard is not None:  # what `fd-conformance merge` checks the shards against
                from fd_conformance.report.merge import stamp_shard

                stamp_shard(Path(out), shard)

    def _judge(self, session: pytest.Session, plan: Mapping[str, Any]) -> None:
        """The session's exit status from the verdict; ``nothing_certified`` when it certified nothing."""
        from fd_conformance import report

        if session.exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED):
            return  # interrupted, internal error, usage error: pytest's own status says more
        if not self.results and not any(t["case"] for t in plan.values()):
            return  # no conformance check in this session: pytest's status is the answer
        if all(r.outcome == report.SKIPPED for r in self.results):
            # Every conformance check skipped (`-m gpu` without a GPU, a framework missing) or was
            # deselected: the session proved nothing, and exit 0 would let a CI job go green on it.
            if not self.config.getoption(FD_ALLOW_EMPTY):
                self.nothing_certified = report.nothing_ran_reason(self.results) if self.results else self._all_deselected(plan)
                session.exitstatus = EXIT_NOTHING_CERTIFIED
            elif session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
                session.exitstatus = pytest.ExitCode.OK  # every check deselected, and the user allowed empty
            return
        verdict = report.exit_code(self.results, self.expect_mutants)
        if verdict != 0 or not self.outside_failures:
            # A failure outside the matrix (a test of the user's own) keeps pytest's 1; otherwise the
            # verdict decides: a mutant caught by a hang is a pass, a deselected check is incomplete.
            session.exitstatus = verdict

    def _all_deselected(self, plan: Mapping[str, Any]) -> str:
        """Why a session whose every conformance check was deselected certified nothing."""
        from fd_conformance.devices import no_gpu_reason

        count = sum(1 for t in plan.values() if t["case"])
        why = f"all {count} conformance checks were deselected (-k/-m)"
        if "gpu" in str(self.config.getoption("markexpr", "")) and no_gpu_reason() is not None:
            # `-m gpu` keeps the cuda rows, which --fd-device=auto does not collect without a GPU.
            why += f"; -m gpu selects the cuda rows, and this machine has no GPU ({no_gpu_reason()})"
        return why

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        shard = recorded_shard(self.config)
        if shard is not None:
            terminalreporter.write_line(
                empty_shard_reason(shard)
                if not shard["cases"]
                else f"fd-conformance: shard {shard['index']}/{shard['count']}: {len(shard['cases'])} of "
                f"{len(shard['all_cases'])} case(s), balanced by {shard['balanced_by']}"
            )
        if self.nothing_certified:
            terminalreporter.write_line(
                f"fd-conformance: certified nothing (exit 4): {self.nothing_certified}; "
                "fix: run where the rows can run (a GPU for cuda rows, the framework installed), or pass --fd-allow-empty",
                red=True,
            )
        if not self.results:
            return
        from fd_conformance.report import format_matrix

        terminalreporter.section("fd-conformance matrix")
        terminalreporter.write_line(format_matrix(self.results, self.expect_mutants))
