"""pytest integration of the isolation watchdog: isolated items run in a spawned pytest worker.

Which items: ``@pytest.mark.isolated`` and ``@pytest.mark.conformance`` ones by default
(``--fd-isolate=marked``), every item with ``--fd-isolate=all``, none with ``--fd-isolate=off``
(for ``--pdb`` debugging). ``isolated`` only in a session that asks for or uses the kit: elsewhere
it is the project's marker (fd_conformance.plugin.usage.owns_kit_markers). The parent replaces
pytest's run of such an item with a request to its worker, re-emits the worker's reports through
its own hooks (terminal, JUnit, xdist see a normal item) and, when the worker hangs or dies, a
synthetic failed report carrying the HANG (FDC501) or crash (FDC502) evidence. Where and when each
item ran (and that evidence) rides on its reports as ``fd_run`` for the results log
(fd_conformance.plugin.results_log), wherever it runs.

pytest-timeout: for isolated items our watchdog wins. An in-process timer cannot fire while a C
call holds the GIL, and its ``thread`` method would kill the whole session, so the item's
pytest-timeout value (marker or ``--timeout``) becomes the watchdog deadline and pytest-timeout
is disarmed for that item (a ``timeout(0)`` marker, in parent and worker). Non-isolated items
keep pytest-timeout as usual. Under pytest-xdist each xdist worker owns its own isolation worker.

PYTEST_DONT_REWRITE: holds no test assertions (plugin.results_log imports it before pytest registers it:
rewriting it then would warn in every session that loads the kit).
"""

from __future__ import annotations

import pickle
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from fd_conformance.devices import no_gpu_reason
from fd_conformance.errors import UsageError, validate_choice, validate_timeout
from fd_conformance.isolation import messages
from fd_conformance.matrix_keys import case_properties
from fd_conformance.matrix_keys.check_record import RUN_ATTR, CheckRecord, add_finding
from fd_conformance.option_ini import IniOption, resolve_all
from fd_conformance.verdict import NOT_JUDGED

if TYPE_CHECKING:
    # This plugin loads in every pytest session, most of which isolate nothing: the watchdog
    # (multiprocessing, subprocess) is imported only where a worker or a timeout is needed.
    from fd_conformance.isolation.process import RunResult
    from fd_conformance.isolation.watchdog import Watchdog

FD_ISOLATE = "--fd-isolate"
FD_TIMEOUT = "--fd-timeout"
FD_NO_SPARE = "--fd-no-spare"
ISOLATE_CHOICES = ("marked", "all", "off")
ISOLATE_HELP = (
    "which tests run in a spawned isolation worker watched from outside: marked (default: tests marked "
    "isolated or conformance), all, or off (run in-process, e.g. for --pdb)."
)
TIMEOUT_HELP = (
    "default watchdog deadline in seconds for isolated tests (setup+call+teardown). Precedence: "
    "isolated(timeout=) marker > pytest-timeout's timeout marker > --fd-timeout > --timeout > 300. "
    "A test running --fd-cycles N > 5 weight cycles gets N/5 times the default: a long soak is not a hang."
)
NO_SPARE_HELP = (
    "do not keep a warm spare isolation worker. By default a second worker starts (and collects) while the "
    "first runs tests, so the test after a hang or crash does not wait for a new worker's startup; it holds "
    "host memory for one more process, but no GPU memory (it initialises no CUDA context until it runs a test)."
)
ISOLATED_MARKER_HELP = (
    "isolated(timeout=None): run this test in a spawned worker; a hang is killed after timeout seconds "
    "and reported as FDC501 with stacks, a crash as FDC502; the session goes on."
)
DEFAULT_TIMEOUT_S = 300.0
# The default deadline is sized for plugin.options.DEFAULT_CYCLES weight cycles (a test keeps them equal);
# a test taking the fd_cycles fixture gets it scaled by --fd-cycles: a long soak is no hang (FDC501).
CYCLES_FIXTURE, DEADLINE_CYCLES = "fd_cycles", 5

CONTROLLER_KEY = pytest.StashKey["IsolationController"]()


#: This plugin's options, each settable by its ini key too (``fd_timeout = 600``; the flag wins).
OPTIONS = {
    FD_ISOLATE: IniOption(FD_ISOLATE, "string", "marked", ISOLATE_HELP),
    FD_TIMEOUT: IniOption(FD_TIMEOUT, "string", None, TIMEOUT_HELP),
    FD_NO_SPARE: IniOption(FD_NO_SPARE, "bool", False, NO_SPARE_HELP),
}
#: Said once, in the terminal, when a debugger flag turns isolation off (a debugger cannot stop in a
#: spawned worker, and the watchdog would kill the session the user is stepping through).
DEBUGGER_NOTE = "fd-conformance: {flag} given, so isolation is off: every test runs in this process (no watchdog)"


#: Whether ``isolated`` is the kit's marker in this session, set at configure by the kit's plugin
#: package (fd_conformance.plugin.usage.owns_kit_markers), which sits above isolation and so is
#: handed down rather than imported. Unset: the kit's plugin is not loaded, the marker is not ours.
OWNS_ISOLATED_KEY = pytest.StashKey[Callable[[], bool]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fd-conformance isolation")
    OPTIONS[FD_ISOLATE].add(group, parser, choices=ISOLATE_CHOICES)
    OPTIONS[FD_TIMEOUT].add(group, parser, metavar="SECONDS")
    OPTIONS[FD_NO_SPARE].add(group, parser, action="store_true")


def pytest_configure(config: pytest.Config) -> None:
    # The `isolated` marker is registered with the kit's `gpu` one, in the kit's sessions only
    # (fd_conformance.plugin.usage.register_kit_markers).
    resolve_all(config, list(OPTIONS.values()))
    try:
        validate_choice(config.getoption(FD_ISOLATE), f"{FD_ISOLATE} (or ini {OPTIONS[FD_ISOLATE].dest})", ISOLATE_CHOICES)
        controller = IsolationController(config)
    except UsageError as err:  # pytest prints a UsageError as one line and exits 4
        raise pytest.UsageError(str(err)) from None
    config.stash[CONTROLLER_KEY] = controller
    config.pluginmanager.register(controller, "fd_isolation_controller")


def prestart_worker(config: pytest.Config) -> None:
    """Spawn the session's worker now, for a session known to isolate tests (one that certifies
    cases), rather than at its first isolated item: its start then overlaps the parent's own
    configure and collection. A worker no item needs is closed at collection, or at unconfigure
    when the session never got that far (a usage error)."""
    controller = config.stash.get(CONTROLLER_KEY, None)
    if controller is not None and controller.watchdog is None and controller.prestart_allowed:
        # No file list yet, so no temp dir either: both follow once configure succeeded (a usage
        # error after this point must find the session's --basetemp untouched).
        controller.prestart(paths=None, send_facts=True)


def worker_facts(config: pytest.Config) -> dict[str, Any] | None:
    """What this session's prestarted worker found at its configure (``pytest_mode.WORKER_FACTS``), once it
    sends it; None without such a worker, or when it failed before (the caller then finds out
    for itself: the same error, raised here)."""
    controller = config.stash.get(CONTROLLER_KEY, None)
    watchdog = controller.watchdog if controller is not None else None
    if watchdog is None or watchdog.worker is None:
        return None
    worker = watchdog.worker
    facts = worker.facts()
    # The model modules were imported there, not here: what they printed is shown where this
    # session's output goes (pytest.log, `run -v`, the terminal), as if imported here, and once.
    printed, worker.configure_output = worker.configure_output, ""
    if printed:
        sys.stdout.write(printed)
        sys.stdout.flush()
    return facts


def is_xdist_controller(config: pytest.Config) -> bool:
    """True in xdist's controller (its workers carry ``workerinput``); decided from options
    because xdist registers its session plugin after our pytest_configure may have run."""
    if hasattr(config, "workerinput"):
        return False
    return bool(getattr(config.option, "numprocesses", None)) or getattr(config.option, "dist", "no") != "no"


def _debugger_flag(config: pytest.Config) -> str | None:
    """``--pdb``/``--trace`` when given and isolation would otherwise be on, else None."""
    if messages.in_isolation_worker() or config.getoption(FD_ISOLATE, "marked") == "off":
        return None
    if config.getoption("usepdb", False):
        return "--pdb"
    return "--trace" if config.getoption("trace", False) else None


def skipped_before_setup(item: pytest.Item) -> bool:
    """True when pytest will skip the item before any fixture runs (skip, or a true skipif):
    it then runs in-process, where skipping costs nothing, instead of waking a worker.
    Uses pytest's own evaluation, so conditions mean exactly what they mean at setup."""
    if item.get_closest_marker("skip") is not None:
        return True
    try:
        from _pytest.skipping import evaluate_skip_marks
    except ImportError:  # pytest moved it: isolate, the worker skips it just the same
        return False
    try:
        return evaluate_skip_marks(item) is not None
    except Exception:  # noqa: BLE001 - a broken condition: the worker reports the error at setup
        return False


def _gpu_item_without_gpu(item: pytest.Item) -> bool:
    """Decided before fd_conformance.plugin.collection adds its skip mark, for the prestart choice only."""
    if item.get_closest_marker("gpu") is None:
        return False
    return no_gpu_reason() is not None


def check_deadline(default_timeout: float, cycles: int | None) -> float:
    """An isolated check's deadline: the default, grown by ``cycles`` (--fd-cycles, for a check that
    takes fd_cycles) past DEADLINE_CYCLES. Also what a reproducer waits before it calls a hang."""
    return default_timeout * max(1.0, cycles / DEADLINE_CYCLES if cycles is not None else 1.0)


def _marker_timeout(item: pytest.Item, name: str) -> Any:
    marker = item.get_closest_marker(name)
    if marker is None:
        return None
    if "timeout" in marker.kwargs:
        return marker.kwargs["timeout"]
    return marker.args[0] if marker.args else None


class IsolationController:
    """Parent-side state of one session: which items are isolated, and the worker."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.in_worker = messages.in_isolation_worker()
        self.mode = "off" if self.in_worker else str(config.getoption(FD_ISOLATE, "marked"))
        self.debugger = _debugger_flag(config)
        if self.debugger is not None:
            self.mode = "off"
        self.timeouts: dict[str, float] = {}
        self.paths: set[str] = set()  # files the worker collects: only those holding isolated items
        self.watchdog: Watchdog | None = None
        self.default_timeout = self._default_timeout()
        self.spares = 0 if config.getoption(FD_NO_SPARE, False) else 1
        # A worker is prestarted only where items really run: not in xdist's controller (its
        # workers run them), not for --collect-only, not with isolation off.
        self.prestart_allowed = (
            self.mode != "off"
            and not is_xdist_controller(config)
            and not any(
                config.getoption(name, False)
                for name in ("collectonly", "help", "markers", "showfixtures", "show_fixtures_per_test")
            )
        )

    def _default_timeout(self) -> float:
        own = self.config.getoption(FD_TIMEOUT, None)
        if own is not None:
            return validate_timeout(own, FD_TIMEOUT)
        theirs = self.config.getoption("timeout", None)  # pytest-timeout, when installed
        if theirs:
            return validate_timeout(theirs, "--timeout")
        return DEFAULT_TIMEOUT_S

    def wants(self, item: pytest.Item) -> bool:
        if self.mode == "all":
            return True
        if self.mode == "marked":
            if item.get_closest_marker("conformance") is not None:
                return True
            return item.get_closest_marker("isolated") is not None and self._owns_isolated()
        return False

    def _owns_isolated(self) -> bool:
        """``isolated`` is the kit's marker only in the kit's sessions: a project's own runs in-process.
        The kit's plugin package (above this one) decides, through OWNS_ISOLATED_KEY."""
        decide = self.config.stash.get(OWNS_ISOLATED_KEY, None)
        return decide is not None and decide()

    # --- prestart ---------------------------------------------------------------------------
    def pytest_sessionstart(self) -> None:
        """--fd-isolate=all: every collected item is isolated, so the worker can start now and
        collect the session's own arguments while the parent collects them too. Under a debugger
        flag, say once that isolation is off."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.debugger is not None and reporter is not None:
            reporter.write_line(DEBUGGER_NOTE.format(flag=self.debugger))
        if self.prestart_allowed and self.mode == "all":
            if self.watchdog is None:
                self.prestart(paths=[messages.ALL_FILES])
            else:  # prestarted at configure
                self.watchdog.set_paths([messages.ALL_FILES], self._basetemp())

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        """--fd-isolate=marked: at the first isolated item the parent collects, spawn the worker;
        it loads plugins and conftests while the parent finishes collecting, then waits for the
        list of files that hold isolated items (sent from pytest_collection_modifyitems)."""
        if self.watchdog is not None or not self.prestart_allowed or not self.wants(item):
            return
        if skipped_before_setup(item) or _gpu_item_without_gpu(item):
            return
        self.prestart(paths=None)

    def prestart(self, paths: list[str] | None, send_facts: bool = False) -> None:
        """Spawn the worker; one spawned without ``paths`` gets them, and the session's temp dir,
        with the ``collect`` message (Watchdog.set_paths). ``send_facts``: see worker_facts."""
        from fd_conformance.isolation.watchdog import Watchdog

        setup = self._worker_setup()
        basetemp = self._basetemp() if paths is not None else None
        if basetemp is not None:
            setup["option_dict"]["basetemp"] = basetemp
        setup["paths"] = paths
        self.watchdog = Watchdog("pytest", setup)
        self.watchdog.prestart(send_facts)

    # --- collection -------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)  # after deselection: only items that really run are isolated
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        timeout_plugin = self.config.pluginmanager.hasplugin("timeout")
        isolated: list[pytest.Item] = []
        for item in items:
            if not (self.in_worker or self.wants(item)):
                continue
            if not self.in_worker and not skipped_before_setup(item):
                try:
                    self.timeouts[item.nodeid] = self._item_timeout(item)
                except UsageError as err:
                    raise pytest.UsageError(str(err)) from None
                isolated.append(item)
                self.paths.add(str(item.path))
            if timeout_plugin:  # our watchdog owns this item's clock (see module docstring)
                item.add_marker(pytest.mark.timeout(0), append=False)
        if self.in_worker or not self.prestart_allowed:
            return
        if not isolated:
            if self.watchdog is not None:  # prestarted for items that were deselected or skipped
                self.watchdog.close()
                self.watchdog = None
            return
        if self.watchdog is None:
            self.prestart(paths=sorted(self.paths))
        else:
            self.watchdog.set_paths(sorted(self.paths), self._basetemp())
        assert self.watchdog is not None
        # A spare only pays off when a test can follow the one that hangs.
        self.watchdog.spares = self.spares if len(isolated) > 1 else 0

    def _item_timeout(self, item: pytest.Item) -> float:
        for name, source in (("isolated", "@pytest.mark.isolated(timeout)"), ("timeout", "@pytest.mark.timeout")):
            value = _marker_timeout(item, name)
            if value is not None:
                return validate_timeout(value, f"{source} on {item.nodeid}")
        cycles = str(self.config.getoption(CYCLES_FIXTURE, "")) if CYCLES_FIXTURE in getattr(item, "fixturenames", ()) else ""
        return check_deadline(self.default_timeout, int(cycles) if cycles.isdigit() else None)

    # --- running ----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        if item.nodeid not in self.timeouts:
            return None  # in-process, pytest as usual
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        started = time.time()
        # The real ``nextitem`` of THIS session: under xdist each worker runs its own order, so
        # a "next item" precomputed in collection order would make the isolation worker keep
        # module setup for an item that never comes to it.
        following = nextitem.nodeid if nextitem is not None else None
        result = self._ensure_watchdog().run(
            messages.message(messages.ITEM, nodeid=item.nodeid, next_nodeid=following), self.timeouts[item.nodeid]
        )
        reports = [self.config.hook.pytest_report_from_serializable(config=self.config, data=d) for d in result.reports]
        run = {
            "isolated": True,
            "worker_pid": result.pid,
            "started": started,
            "worker_spawned": result.worker_spawned,
            "worker_wait_s": result.ready_wait_s,
            "deadline_s": self.timeouts[item.nodeid],  # a reproducer waits as long before it calls a hang
        }
        if result.status == "done" and result.payload.get("outcome") == "failed":  # e.g. not collected there
            # The deciding report, made here: it carries the matrix keys like any other.
            details = str(result.payload.get("details", ""))
            reports = [_synthetic(item, "setup", details, case_properties(item), result.duration)]
        elif result.status == "not_started":  # the host, not the model: not judged, no code (exit 3)
            reports = [_not_judged(item, result.cause, case_properties(item))]
        elif result.status != "done":
            reports = self._with_evidence(item, reports, result, run)
        if not any(r.when == "teardown" for r in reports):
            reports.append(_synthetic(item, "teardown", None, [], 0.0))
        for report in reports:
            setattr(report, RUN_ATTR, run)
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _ensure_watchdog(self) -> Watchdog:
        if self.watchdog is None:  # e.g. items added after collection by another plugin
            from fd_conformance.isolation.watchdog import Watchdog

            setup = self._worker_setup()
            setup["paths"] = sorted(self.paths)
            self.watchdog = Watchdog("pytest", setup, spares=self.spares)
        return self.watchdog

    def _with_evidence(self, item: pytest.Item, reports: list[Any], result: RunResult, run: dict[str, Any]) -> list[Any]:
        finding = result.finding(item.nodeid)
        assert finding is not None  # status is hang or crash here
        text = f"{finding.format()}\n{result.describe()}"
        run.update(
            outcome=result.status,
            cause=result.cause,
            last_event=result.last_event,
            python_stacks=result.python_stacks,
            native_stacks=result.native_stacks,
            stuck_frame=result.stuck_frame,
            details=text,
            findings=[finding.code],
        )
        if result.payload.get("outcome") == "crash":  # worker retired itself after a complete, failed run
            for report in reports:
                if report.failed:
                    add_finding(report, finding.to_dict())
                    report.sections.append(("fd-conformance isolation", text))
            return reports
        done = {r.when for r in reports}
        missing = [w for w in ("setup", "call", "teardown") if w not in done]
        # All three reports arrived yet the worker went silent or died: it was still in pytest's
        # post-teardown work (funcargs dropped, so the subject's graphs destroyed; a logfinish
        # hook). That is the teardown's failure: its report is replaced by the evidence.
        in_flight = missing[0] if missing else "teardown"
        kept = [r for r in reports if r.when != in_flight]
        # A HANG or crash report is made here, in the parent: without the matrix keys the hung
        # check would vanish from the matrix and conformance.json instead of showing FDC501/502.
        props = [*case_properties(item), *CheckRecord(item.nodeid, findings=[finding.to_dict()]).properties()]
        kept.append(_synthetic(item, in_flight, text, props, result.duration))
        return kept

    def _worker_setup(self) -> dict[str, Any]:
        """What the worker needs to rebuild this session's config (xdist's recipe, reduced)."""
        config = self.config
        overrides = {
            "numprocesses": None,
            "dist": "no",
            "xmlpath": None,
            "usepdb": False,
            "looponfail": False,
            "fd_results": None,
            "markexpr": "",  # the parent already selected; the worker must not deselect again
            "keyword": "",
            # Never the session's own --basetemp (pytest empties it when first used): the worker's
            # root inside it is added by prestart, or sent with the file list (_basetemp).
            "basetemp": None,
        }
        option_dict: dict[str, Any] = {}
        for key, value in {**vars(config.option), **overrides}.items():
            if key == "file_or_dir":  # the positional arguments travel in "args"; as an option argparse warns
                continue
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - unpicklable plugin state stays in the parent
                continue
            option_dict[key] = value
        args = ["-p", "no:cacheprovider", f"--rootdir={config.rootpath}"]
        if config.inipath is not None:
            args += ["-c", str(config.inipath)]
        for override in config.getoption("override_ini", None) or []:
            args += ["-o", override]
        # The session's own arguments and invocation directory, so the worker loads the same initial
        # conftests and names every test with the parent's node id; "paths" only narrows which files
        # it imports (see isolation.worker.pytest_mode.WorkerSession.pytest_ignore_collect).
        option = config.option
        return {
            "option_dict": option_dict,
            "args": args + list(config.args),
            "invocation_dir": str(config.invocation_params.dir),
            "paths": None,
            "selects": bool(option.keyword or option.markexpr or getattr(option, "deselect", None)),
        }

    def _basetemp(self) -> str | None:
        """The worker's temp root inside the session's (made here if it is not yet): isolated tests'
        tmp_path lands where the session's does. None without pytest's tmp_path plugin."""
        try:
            return str(self.config._tmp_path_factory.getbasetemp() / "fdc-isolation")  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - no tmp_path plugin: the worker picks its own
            return None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._close_worker()

    def pytest_unconfigure(self) -> None:
        """Also reached without a session: a worker prestarted at configure, then a usage error."""
        self._close_worker()

    def _close_worker(self) -> None:
        if self.watchdog is not None:
            self.watchdog.close()
            self.watchdog = None


def _not_judged(item: pytest.Item, cause: str, props: list[tuple[str, object]]) -> pytest.TestReport:
    """The setup report of a check whose worker did not start in time: skipped as not judged, the
    reason naming the host's failure, so the row reads not-judged (exit 3) instead of FDC502."""
    path, line, _ = item.location
    reason = f"{NOT_JUDGED}: {cause}: the host was too slow or loaded to start it, the model never ran (fix: rerun on a less loaded host)"
    report = _synthetic(item, "setup", None, props, 0.0)
    report.outcome, report.longrepr = "skipped", (str(path), (line or 0) + 1, f"Skipped: {reason}")
    return report


def _synthetic(
    item: pytest.Item, when: str, text: str | None, props: list[tuple[str, object]], duration: float
) -> pytest.TestReport:
    now = time.time()
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords={name: 1 for name in item.keywords},
        outcome="failed" if text else "passed",
        longrepr=text,
        when=when,  # type: ignore[arg-type]
        duration=duration,
        start=now - duration,
        stop=now,
        user_properties=props,
    )
