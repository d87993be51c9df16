"""pytest plugin (pytest11 entry point): markers, options, fixtures and the conformance matrix.

Loading it must cost nothing when unused: no framework (or numpy) import at module level; cases,
runtimes and reports are imported only when a session actually uses them.

Session state lives in :class:`pytest.StashKey` slots, the way pytest's own faulthandler plugin
keeps it, so nothing leaks between sessions run in one process (pytester, ``fd-conformance run``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Generator

    from fd_conformance.cases import ModelCase, Subject
    from fd_conformance.report import CheckResult
    from fd_conformance.runtime.base import Runtime
    from fd_conformance.verdict import CheckVerdict
    from fd_conformance.xdist_gpus import GpuLedger

GPU_MARKER_HELP = "gpu: needs a CUDA device; skipped with a reason when none is visible"
CONFORMANCE_MARKER_HELP = (
    "conformance(check): a graph-opt contract check from fd_conformance.suite; check names its matrix column"
)

FD_MODEL_HELP = (
    "model case(s) to certify, as module:attr or path/to/file.py:attr naming a ModelCase, a list of them "
    "or a zero-argument factory; repeatable. Default: every installed case (entry point group "
    "fd_conformance.cases), mutants excluded."
)
FD_RUNTIME_HELP = "framework whose cases run: torch, paddle or auto (every installed one). Default: auto."
FD_CYCLES_HELP = "weight-update cycles in the weight-cycle check (C4), at least 3 to show steady growth. Default: 5."
FD_REPORT_HELP = "directory to write conformance.json and certificate.md into at the end of the session."
FD_INCLUDE_MUTANTS_HELP = (
    "also run the installed mutants and expect their findings: a mutant's failing check counts as caught "
    "(xfail) when it reports only expected codes, and the session fails unless every mutant reports "
    "exactly its expected codes."
)
FD_CASES_FILE_HELP = (
    "certify only the cases named in FILE (one name per line, # comments), as `fd-conformance changed "
    "--output FILE` writes it; an unknown name is a usage error, an empty file selects no case (every suite "
    "test skips: nothing to certify)."
)
FD_DEVICE_HELP = (
    "which rows to collect: all (default; cuda rows skip without a GPU), cpu (host-emulated graphs), "
    "cuda (real graphs) or auto (cuda when a GPU is visible, else cpu)."
)
FD_ALLOW_EMPTY_HELP = (
    "exit 0 even when every conformance check was skipped (e.g. -m gpu on a machine without a GPU). "
    "By default such a session exits 4: a CI job that certified nothing must not go green."
)
RUNTIME_CHOICES = ("auto", "torch", "paddle")
DEVICE_CHOICES = ("all", "auto", "cpu", "cuda")
DEFAULT_CYCLES = 5
MIN_CYCLES = 3  # "growth in every cycle" needs two deltas, so three measured cycles
DEVICES = ("cpu", "cuda")

CASES_KEY = pytest.StashKey["list[ModelCase] | None"]()
DEVICES_KEY = pytest.StashKey["tuple[str, ...]"]()
CYCLES_KEY = pytest.StashKey[int]()
SESSION_KEY = pytest.StashKey["ConformanceSession"]()
LEDGER_KEY = pytest.StashKey["GpuLedger"]()
VERDICT_KEY = pytest.StashKey["CheckVerdict"]()
RUNTIME_INFO_KEY = pytest.StashKey["dict[str, Any]"]()

pytest_plugins = ["fd_conformance.isolation.plugin"]  # hang/crash isolation: options, marker, worker
ISOLATION_WORKER_ENV = "FD_CONFORMANCE_ISOLATION_WORKER"  # isolation_worker.WORKER_ENV, without importing it
PROP_PREFIX = "fd_"  # user_properties keys travel through xdist and into JUnit XML


# --- options ---------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fd-conformance", "graph-opt conformance suites")
    group.addoption("--fd-model", action="append", default=[], metavar="SPEC", help=FD_MODEL_HELP)
    group.addoption("--fd-runtime", default="auto", metavar="NAME", help=FD_RUNTIME_HELP)
    group.addoption("--fd-cycles", default=str(DEFAULT_CYCLES), metavar="N", help=FD_CYCLES_HELP)
    group.addoption("--fd-report", default=None, metavar="DIR", help=FD_REPORT_HELP)
    group.addoption("--fd-include-mutants", action="store_true", default=False, help=FD_INCLUDE_MUTANTS_HELP)
    group.addoption("--fd-cases-file", default=None, metavar="FILE", help=FD_CASES_FILE_HELP)
    group.addoption("--fd-device", default="all", metavar="ROWS", help=FD_DEVICE_HELP)
    group.addoption("--fd-allow-empty", action="store_true", default=False, help=FD_ALLOW_EMPTY_HELP)


def validate_runtime(value: str) -> str:
    """--fd-runtime: a known framework name that is installed here."""
    if value not in RUNTIME_CHOICES:
        raise pytest.UsageError(f"--fd-runtime {value!r} is not one of {', '.join(RUNTIME_CHOICES)}; fix: pass one of them")
    if value == "auto":
        return value  # nothing to look up: keeps every session that does not certify import-cheap
    from fd_conformance.runtime import installed_runtimes

    if value not in installed_runtimes():
        raise pytest.UsageError(f"--fd-runtime {value!r} is not installed; fix: pip install 'fd-conformance[{value}]' or use auto")
    return value


def validate_cycles(value: str) -> int:
    """--fd-cycles: an integer >= MIN_CYCLES."""
    try:
        cycles = int(value)
    except ValueError:
        raise pytest.UsageError(f"--fd-cycles {value!r} is not an integer; fix: pass e.g. --fd-cycles 5") from None
    if cycles < MIN_CYCLES:
        raise pytest.UsageError(f"--fd-cycles {cycles} is below {MIN_CYCLES}; fix: pass at least {MIN_CYCLES} (steady growth needs two deltas)")
    return cycles


def resolve_devices(value: str) -> tuple[str, ...]:
    """--fd-device: the device rows to collect; "auto" asks the machine (without a framework import)."""
    if value not in DEVICE_CHOICES:
        raise pytest.UsageError(f"--fd-device {value!r} is not one of {', '.join(DEVICE_CHOICES)}; fix: pass one of them")
    if value == "all":
        return DEVICES
    if value == "auto":
        from fd_conformance.devices import visible_gpu_count

        return ("cuda",) if visible_gpu_count() > 0 else ("cpu",)
    return (value,)


def validate_report_dir(value: str | None) -> str | None:
    """--fd-report: a directory (created when missing), not an existing file."""
    if value is None:
        return None
    if os.path.exists(value) and not os.path.isdir(value):
        raise pytest.UsageError(f"--fd-report {value!r} is an existing file; fix: give a directory path")
    return value


def load_session_cases(config: pytest.Config) -> list[ModelCase]:
    """The cases this session certifies; --fd-model errors become one-line usage errors."""
    cached = config.stash.get(CASES_KEY, None)
    if cached is not None:
        return cached
    from fd_conformance.cases import select_cases
    from fd_conformance.errors import UsageError
    from fd_conformance.runtime import installed_runtimes

    cases_file: str | None = config.getoption("--fd-cases-file")
    try:
        selection = None
        if cases_file is not None:
            from fd_conformance.cases import read_selection

            selection = read_selection(cases_file)
        cases = select_cases(
            config.getoption("--fd-model"),
            runtime=config.getoption("--fd-runtime"),
            include_mutants=config.getoption("--fd-include-mutants"),
            installed_runtimes=installed_runtimes(),
            selection=selection,
            selection_source=f"--fd-cases-file {cases_file}",
        )
    except UsageError as err:
        raise pytest.UsageError(str(err)) from None
    config.stash[CASES_KEY] = cases
    return cases


# --- configuration, GPU per xdist worker -------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", GPU_MARKER_HELP)
    config.addinivalue_line("markers", CONFORMANCE_MARKER_HELP)
    # First thing on a worker: pin its GPU before any framework can initialise CUDA.
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        from fd_conformance.xdist_gpus import pin_worker_gpu

        pin_worker_gpu(workerinput)
    validate_runtime(config.getoption("--fd-runtime"))
    config.stash[CYCLES_KEY] = validate_cycles(config.getoption("--fd-cycles"))
    validate_report_dir(config.getoption("--fd-report"))
    config.stash[DEVICES_KEY] = resolve_devices(config.getoption("--fd-device"))
    config.stash[CASES_KEY] = None
    # Results are gathered where reports converge: the xdist controller, never an xdist worker or
    # an isolation worker (whose reports the isolating parent replays into its own session).
    if workerinput is None and not os.environ.get(ISOLATION_WORKER_ENV):
        session = ConformanceSession(config)
        config.stash[SESSION_KEY] = session
        config.pluginmanager.register(session, "fd-conformance-session")
    if config.getoption("--fd-model") or config.getoption("--fd-cases-file") is not None:
        load_session_cases(config)  # fail fast, before collection, on a bad spec or cases file


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: give each new (or replacement) worker the least-used GPU."""
    from fd_conformance.devices import visible_gpu_count
    from fd_conformance.xdist_gpus import WORKERINPUT_KEY, GpuLedger, physical_gpu_ids

    config: pytest.Config = node.config
    ledger = config.stash.get(LEDGER_KEY, None)
    if ledger is None:
        ledger = GpuLedger(physical_gpu_ids(visible_gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES")))
        config.stash[LEDGER_KEY] = ledger
    gpu = ledger.claim(node.gateway.id)
    if gpu is not None:
        node.workerinput[WORKERINPUT_KEY] = gpu


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` on a GPU host: workers per GPU from free memory and cores (several share one GPU:
    the models are tiny). Without a GPU, or with PYTEST_XDIST_AUTO_NUM_WORKERS set, xdist decides.
    tryfirst: xdist's own implementation is a plain one too, and plugin load order (which
    distribution the environment lists first) would otherwise decide whose count wins."""
    from fd_conformance.devices import visible_gpu_count
    from fd_conformance.xdist_gpus import auto_worker_count, free_gpu_bytes, physical_gpu_ids

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    free = free_gpu_bytes(physical_gpu_ids(visible_gpu_count(), os.environ.get("CUDA_VISIBLE_DEVICES")))
    if not free:
        return None
    return auto_worker_count(os.cpu_count() or 1, free)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    ledger = node.config.stash.get(LEDGER_KEY, None)
    if ledger is not None:
        ledger.release(node.gateway.id)


# --- collection: cases x devices ------------------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fd_case" not in metafunc.fixturenames:
        return
    cases = load_session_cases(metafunc.config)
    params = []
    for case in cases:
        for device in metafunc.config.stash[DEVICES_KEY]:
            marks = [pytest.mark.gpu] if device == "cuda" else []
            params.append(pytest.param(case, device, id=f"{case.name}-{device}", marks=marks))
    if not params:
        params = [pytest.param(None, "cpu", id="no-cases", marks=pytest.mark.skip(reason=no_cases_reason(metafunc.config)))]
    metafunc.parametrize(("fd_case", "fd_device"), params)


def framework_free_first(items: list[pytest.Item]) -> None:
    """Checks that build no model (C6 config: it needs the case, not a runtime) run first: their
    results come in seconds, before the first framework import and model build (torch plus
    transformers: 10-20 s in a fresh worker), so a broken config fails fast. Stable otherwise:
    every other item keeps pytest's order, and each check is independent of the others."""
    items.sort(key=lambda item: _case_of(item) is None or "fd_runtime" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from fd_conformance.devices import no_gpu_reason

    framework_free_first(items)
    for item in items:
        case = _case_of(item)
        if case is not None and case.checks is not None and check_name(item) not in case.checks:
            item.add_marker(pytest.mark.skip(reason=f"{case.name} is certified on {', '.join(sorted(case.checks))} only"))
    reason = no_gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


def no_cases_reason(config: pytest.Config) -> str:
    """Why a suite test has no case to run: an empty cases file is a deliberate "nothing to certify"."""
    cases_file = config.getoption("--fd-cases-file")
    if cases_file is not None:
        from fd_conformance.cases import read_selection

        if not read_selection(cases_file):
            return f"nothing to certify: --fd-cases-file {cases_file} selects no case"
    return "no model cases selected (see --fd-model/--fd-runtime/--fd-cases-file)"


# --- fixtures the suites use ------------------------------------------------------------------


@pytest.fixture
def fd_cycles(request: pytest.FixtureRequest) -> int:
    """Weight-update cycles for C4 (--fd-cycles)."""
    return request.config.stash[CYCLES_KEY]


@pytest.fixture
def fd_runtime(request: pytest.FixtureRequest, fd_case: ModelCase, fd_device: str) -> Runtime:
    """A fresh runtime adapter per test, so one test's events never reach another's recorder."""
    from fd_conformance.errors import UsageError
    from fd_conformance.runtime import get_runtime, installed_runtimes

    if fd_case.runtime not in installed_runtimes():
        pytest.skip(f"runtime {fd_case.runtime!r} is not installed here")
    freeze_long_lived()
    try:
        runtime = get_runtime(fd_case.runtime, fd_device)
    except UsageError as err:
        pytest.skip(str(err))
    request.node.stash[RUNTIME_INFO_KEY] = {
        "runtime": runtime.name,
        "runtime_version": runtime.version,
        "device_name": runtime.device_name(),
        "graphs_real": runtime.graphs_are_real,
    }
    return runtime


def freeze_long_lived() -> None:
    """Move every object alive before this test's runtime exists (modules, the framework, pytest
    state) out of the collector's reach: a full ``gc.collect()`` with torch and transformers
    loaded walks ~380k objects (0.13 s), and the checks collect before every memory reading, so
    a reused worker spent seconds per check re-scanning imports. Nothing of a test is frozen:
    the previous subject was released and collected in its teardown, and this test's runtime,
    model and graphs are created after the freeze, so a dropped graph is still collected (and
    still reported when it is not)."""
    import gc

    gc.collect()
    gc.freeze()


# The Subject / ModelRunner protocol members a check touches (cases.Subject, cases.ModelRunner).
SUBJECT_MEMBERS = ("runtime", "wrapper", "draft", "runner", "make_inputs", "forward", "eager_forward", "new_weights", "graphs")
RUNNER_MEMBERS = ("use_cudagraph", "draft_model_use_cudagraph", "capture_model", "clear_parameters", "update_parameters")


def missing_subject_members(subject: object) -> list[str]:
    """Protocol members the factory's result lacks ("runner.x" for the runner's): checked up
    front, so a case author reads one line instead of an AttributeError deep inside a check."""
    missing = [name for name in SUBJECT_MEMBERS if not hasattr(subject, name)]
    runner = getattr(subject, "runner", None)
    if runner is not None:
        missing += [f"runner.{name}" for name in RUNNER_MEMBERS if not hasattr(runner, name)]
    return missing


@pytest.fixture
def fd_subject(fd_case: ModelCase, fd_runtime: Runtime) -> Generator[Subject, None, None]:
    """The case's model built on this test's runtime, torn down after the test.

    Teardown resets every graph the subject still owns and drops it before the next test: in a
    reused (xdist or isolation) worker a mutant's leftover graphs and pools would otherwise be
    measured as the NEXT test's memory or live graphs."""
    try:
        subject = fd_case.factory(fd_runtime)
    except Exception as err:
        # The exception's type and message are the report (terminal, matrix cell, conformance.json);
        # its traceback goes to captured stderr, which pytest.log keeps for debugging.
        import traceback

        traceback.print_exc()
        first = (str(err).strip().splitlines() or [""])[0]
        pytest.fail(
            f"{fd_case.name}: the case factory raised {type(err).__name__}: {first}; "
            "fix: make the factory build its Subject on this runtime (traceback in the captured stderr)",
            pytrace=False,
        )
    missing = missing_subject_members(subject)
    if missing:
        pytest.fail(
            f"{fd_case.name}: the factory returned a {type(subject).__name__} without {', '.join(missing)}; "
            "fix: return an object with every fd_conformance.cases.Subject member",
            pytrace=False,
        )
    yield subject
    release_subject(subject, fd_runtime)


def release_subject(subject: Subject, runtime: Runtime) -> None:
    """Best-effort cleanup: reset graphs directly (the model's own clear may be the mutant's bug),
    then collect garbage and return cached memory to the device."""
    import gc

    try:
        graphs = list(subject.graphs())
    except Exception:  # noqa: BLE001 - a broken subject was already judged by its check
        graphs = []
    for graph in graphs:
        try:
            graph.reset()
        except Exception:  # noqa: BLE001 - resetting a half-dead graph must not fail teardown
            pass
    del graphs, subject
    gc.collect()
    try:
        runtime.synchronize()
        runtime.empty_cache()
    except Exception:  # noqa: BLE001 - a poisoned device is the check's finding, not teardown's
        pass


@pytest.fixture
def fd_verdict(request: pytest.FixtureRequest) -> CheckVerdict:
    """Where a check records findings; ``conclude()`` fails the test on errors."""
    from fd_conformance.verdict import CheckVerdict

    verdict = CheckVerdict(check_name(request.node))
    request.node.stash[VERDICT_KEY] = verdict
    return verdict


def check_name(item: pytest.Item) -> str:
    """The matrix column: the conformance marker's argument, else the test name without test_."""
    marker = item.get_closest_marker("conformance")
    if marker is not None and marker.args:
        return str(marker.args[0])
    name = getattr(item, "originalname", item.name)
    return name[5:] if name.startswith("test_") else name


# --- reporting ----------------------------------------------------------------------------------


def _case_of(item: pytest.Item) -> ModelCase | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("fd_case") if callspec is not None else None


def case_properties(item: pytest.Item) -> list[tuple[str, object]]:
    """The conformance-matrix keys of a suite test (case, device, check, expected codes), as
    ``user_properties`` pairs; [] for any other test. Public because whoever makes a suite test's
    deciding report (this plugin, or the isolation parent for a hung or crashed worker) must attach
    the same keys, or the check vanishes from the matrix and conformance.json."""
    case = _case_of(item)
    if case is None:
        return []
    callspec = getattr(item, "callspec")
    return [
        (PROP_PREFIX + "case", case.name),
        (PROP_PREFIX + "device", callspec.params.get("fd_device", "")),
        (PROP_PREFIX + "check", check_name(item)),
        (PROP_PREFIX + "expected", ",".join(sorted(case.expected_findings))),
    ]


def _is_final(report: pytest.TestReport) -> bool:
    """A report that decides a test's outcome: the call, a setup that did not pass, or a failed
    teardown (a hang while the subject's graphs are destroyed must reach the matrix too)."""
    return report.when == "call" or (report.when == "setup" and not report.passed) or (
        report.when == "teardown" and report.failed
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not _is_final(report):
        return
    # Added at the deciding report (not at setup: a skip mark fires before any setup hook of ours),
    # to the item too, so JUnit XML writes them as <property> elements.
    props = case_properties(item)
    if not props:
        return
    case = _case_of(item)
    assert case is not None  # case_properties returned keys, so the item has a case
    info = item.stash.get(RUNTIME_INFO_KEY, None)
    if info is not None:
        props.extend((PROP_PREFIX + k, v) for k, v in info.items())
    verdict = item.stash.get(VERDICT_KEY, None)
    if verdict is not None:
        props.append((PROP_PREFIX + "findings", json.dumps([f.to_dict() for f in verdict.findings])))
        codes = verdict.error_codes
        if (
            report.failed
            and report.when == "call"
            and codes
            and item.config.getoption("--fd-include-mutants")
            and case.is_mutant
            and set(codes) <= set(case.expected_findings)
        ):
            # An expected violation: the check caught the defect the mutant was built with.
            report.outcome = "skipped"
            report.wasxfail = f"mutant {case.name} caught: {','.join(codes)}"  # type: ignore[attr-defined]
    item.user_properties.extend(props)
    report.user_properties.extend(props)


class ConformanceSession:
    """Per-session collector (registered as a plugin object, kept in the config stash): turns
    suite reports into :class:`CheckResult` records on the controller, prints the matrix and
    writes the reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.results: list[CheckResult] = []
        self.expect_mutants = bool(config.getoption("--fd-include-mutants"))
        self.nothing_certified: str | None = None  # why, when the session certified nothing

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if PROP_PREFIX + "case" not in props or not _is_final(report):
            return
        self.results.append(result_from_report(report, props))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from fd_conformance import report

        if self.results and self.expect_mutants and report.exit_code(self.results, True) != 0 and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a mutant was missed: a check lost its teeth
        out = self.config.getoption("--fd-report")
        if out:  # written even when empty: "nothing ran" must be visible to `fd-conformance run`
            from pathlib import Path

            report.write_reports(Path(out), self.results, self.expect_mutants)
        if (
            self.results
            and not any(r.outcome != report.SKIPPED for r in self.results)
            and not self.config.getoption("--fd-allow-empty")
            and session.exitstatus == pytest.ExitCode.OK
        ):
            # Every conformance check skipped (`-m gpu` without a GPU, a framework missing): the
            # session proved nothing, and exit 0 would let a CI job go green on it.
            from fd_conformance.errors import EXIT_NOTHING_CERTIFIED

            self.nothing_certified = report.nothing_ran_reason(self.results)
            session.exitstatus = EXIT_NOTHING_CERTIFIED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
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


def result_from_report(report: pytest.TestReport, props: dict[str, object]) -> CheckResult:
    """One suite test's final report as a CheckResult."""
    from fd_conformance.report import FAILED, PASSED, SKIPPED, XFAILED, CheckResult

    if hasattr(report, "wasxfail"):
        outcome = XFAILED
    elif report.failed:
        outcome = FAILED
    elif report.skipped:
        outcome = SKIPPED
    else:
        outcome = PASSED
    findings = json.loads(str(props.get(PROP_PREFIX + "findings", "[]")))
    message = ""
    if report.failed and report.longrepr:
        message = failure_reason(report)
    elif report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    graphs_real = props.get(PROP_PREFIX + "graphs_real")
    return CheckResult(
        nodeid=report.nodeid,
        case=str(props[PROP_PREFIX + "case"]),
        device=str(props.get(PROP_PREFIX + "device", "")),
        check=str(props.get(PROP_PREFIX + "check", "")),
        outcome=outcome,
        codes=sorted({f["code"] for f in findings if f["severity"] == "error"}),
        warnings=sorted({f["code"] for f in findings if f["severity"] != "error"}),
        findings=findings,
        expected=[c for c in str(props.get(PROP_PREFIX + "expected", "")).split(",") if c],
        message=message,
        duration=report.duration,
        runtime=str(props.get(PROP_PREFIX + "runtime", "")),
        runtime_version=str(props.get(PROP_PREFIX + "runtime_version", "")),
        device_name=str(props.get(PROP_PREFIX + "device_name", "")),
        graphs_real=graphs_real if isinstance(graphs_real, bool) else None,
    )


def failure_reason(report: pytest.TestReport) -> str:
    """A failed report's reason in one line: its first error finding ("FDC203 graph ..."), else the
    exception as pytest's crash line has it ("ValueError: boom"), never a fixture's source repr."""
    props = dict(report.user_properties)
    for finding in json.loads(str(props.get(PROP_PREFIX + "findings", "[]"))):
        if finding.get("severity") == "error":
            return f"{finding['code']} {finding.get('message', '')}"[:300]
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None and crash.message else str(report.longrepr or "")
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "failed"
    first = first.removeprefix("Failed: ")  # pytest.fail()'s exception name says nothing the check's text does not
    where = {"setup": "error in setup: ", "teardown": "error in teardown: "}.get(report.when, "")
    return (where + first)[:300]
