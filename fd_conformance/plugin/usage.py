"""Whether a session uses the kit: the plugin shows itself only in sessions that do.

The plugin loads in every pytest session of an environment with the kit installed (pytest11). A
project's own test suite that neither passes the kit's options nor runs its suites sees nothing of
it: no header line, no session collector, no reordering, no GPU pinned per xdist worker, no ``gpu``
or ``isolated`` marker registered, skipped or isolated (register_kit_markers: a project's own test
with either marker runs, or fails ``--strict-markers``, as it would without the kit). Hypothesis's
pytest plugin stays out of the way the same way (``_hypothesis_pytestplugin``: its header and
configure work only when its options are given or Hypothesis is in use).

A session *asks for* the kit (decided at configure, before the header) when it passes an ``--fd-*``
option (command line, ``addopts`` or ``PYTEST_ADDOPTS``), sets an ``fd_*`` ini key to something
other than its default, loads the plugin by name (``-p fd_conformance``) or names the shipped
suites (``--pyargs fd_conformance.suite``). It *uses* the kit from the moment it collects a test
that takes the kit's ``fd_case`` fixture or its ``conformance`` marker -- on an xdist controller,
which collects nothing, from the first such test's report or plan.

PYTEST_DONT_REWRITE: the plugin package imports this module before pytest reads its ``pytest_plugins``,
so asking pytest to rewrite it only warned in every user session; it holds no test assertions.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.isolation.messages import WORKER_ENV, in_isolation_worker
from fd_conformance.matrix_keys.check_record import is_check_report
from fd_conformance.option_ini import IniOption, resolve_all

REQUESTED_KEY = pytest.StashKey[bool]()  # the session asked for the kit (options, ini, -p, suite paths)
IN_USE_KEY = pytest.StashKey[bool]()  # asked for, or a test of the kit's was collected or reported
FAILED_BEFORE_KEY = pytest.StashKey[bool]()  # a test of the project's own failed before the collector existed
MARKERS_KEY = pytest.StashKey[bool]()  # the kit's gpu and isolated markers are registered (register_kit_markers)
WORKERINPUT_REQUESTED = "fd_conformance_requested"  # the xdist controller's decision, for its workers
PLUGIN_NAMES = ("fd_conformance", "fd_conformance.plugin")
SUITE_PACKAGE = "fd_conformance.suite"
SUITE_DIR = Path(__file__).resolve().parents[1] / "suite"
KIT_FIXTURE, KIT_MARKER = "fd_case", "conformance"
GPU_MARKER_HELP = "gpu: needs a CUDA device; skipped with a reason when none is visible"


def decide_requested(config: pytest.Config) -> bool:
    """Whether the session asks for the kit (see the module docstring), decided once and stashed.
    Asked first by xdist's ``-n auto`` (pytest_cmdline_main), before any pytest_configure: the options
    are resolved here then (resolving is idempotent: the flag, else the ini, else the default)."""
    cached = config.stash.get(REQUESTED_KEY, None)
    if cached is not None:
        return cached
    from fd_conformance.isolation.plugin import OPTIONS as ISOLATION_OPTIONS  # both plugins' options
    from fd_conformance.plugin.options import OPTIONS

    options = [*OPTIONS.values(), *ISOLATION_OPTIONS.values()]
    resolve_all(config, options)
    workerinput = getattr(config, "workerinput", None)
    requested = bool(workerinput.get(WORKERINPUT_REQUESTED)) if workerinput is not None else _asked(config, options)
    config.stash[REQUESTED_KEY] = requested
    if requested:
        config.stash[IN_USE_KEY] = True
    return requested


def _asked(config: pytest.Config, options: Sequence[IniOption]) -> bool:
    raw = [*config.invocation_params.args, *_addopts(config)]
    if any(arg.startswith("--fd-") for arg in raw) or _loads_plugin_by_name(raw):
        return True
    if any(option.kind != "linelist" and config.getoption(option.dest) != option.default for option in options):
        return True  # an ini key (the flags were found above) that changes a default
    if any(config.getoption(option.dest) for option in options if option.kind == "linelist"):
        return True
    return names_suite(config)


def _addopts(config: pytest.Config) -> list[str]:
    ini: list[str] = list(config.getini("addopts"))
    return [*ini, *shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))]


def _loads_plugin_by_name(raw: Sequence[str]) -> bool:
    """``-p fd_conformance`` (or ``-pfd_conformance``, ``-p fd_conformance.plugin``)."""
    for index, arg in enumerate(raw):
        name = raw[index + 1] if arg == "-p" and index + 1 < len(raw) else (arg[2:] if arg.startswith("-p") else "")
        if name in PLUGIN_NAMES:
            return True
    return False


def _names_suite(arg: str, invocation_dir: Path) -> bool:
    """A positional argument that reaches the shipped suites: the package (``--pyargs``) or a path in it."""
    target = arg.split("::", 1)[0]
    if target == SUITE_PACKAGE or target.startswith(SUITE_PACKAGE + "."):
        return True
    path = Path(target) if os.path.isabs(target) else invocation_dir / target
    try:
        return path.resolve().is_relative_to(SUITE_DIR)
    except OSError:
        return False


def names_suite(config: pytest.Config) -> bool:
    """The session's arguments reach the shipped suites (it will run the kit's checks)."""
    return any(_names_suite(arg, config.invocation_params.dir) for arg in config.args)


def requested(config: pytest.Config) -> bool:
    return decide_requested(config)


def in_use(config: pytest.Config) -> bool:
    return config.stash.get(IN_USE_KEY, False)


def is_kit_item(item: pytest.Item) -> bool:
    """A test of the kit's: it takes the ``fd_case`` fixture (the suites, a project's own conformance
    tests) or carries the ``conformance`` marker."""
    return KIT_FIXTURE in getattr(item, "fixturenames", ()) or item.get_closest_marker(KIT_MARKER) is not None


def collects_results(config: pytest.Config) -> bool:
    """Where a session's results converge: not an xdist worker, not an isolation worker (whose
    reports the isolating parent replays into its own session)."""
    return getattr(config, "workerinput", None) is None and not os.environ.get(WORKER_ENV)


def owns_kit_markers(config: pytest.Config) -> bool:
    """Whether ``gpu`` and ``isolated`` are the kit's markers here: in a session that asks for or uses
    the kit, and in an isolation worker (only such a session spawns one). Anywhere else they are the
    project's: unregistered (pytest's --strict-markers error stands), never skipped, never isolated."""
    return in_use(config) or in_isolation_worker()


def register_kit_markers(config: pytest.Config) -> None:
    """Register ``gpu`` (unless the project has its own) and ``isolated``, once the session is the kit's."""
    if config.stash.get(MARKERS_KEY, False):
        return
    config.stash[MARKERS_KEY] = True
    from fd_conformance.isolation.plugin import ISOLATED_MARKER_HELP

    if not registers_own_gpu_marker(config):  # a project's own `gpu` marker is theirs: not ours to skip
        config.addinivalue_line("markers", GPU_MARKER_HELP)
    config.addinivalue_line("markers", ISOLATED_MARKER_HELP)


def start_using(config: pytest.Config) -> None:
    """From now on the session uses the kit: its markers are registered and, where results converge,
    its collector (once), told whether a test of the project's own already failed."""
    config.stash[IN_USE_KEY] = True
    register_kit_markers(config)
    from fd_conformance.plugin.matrix import SESSION_KEY, ConformanceSession

    if not collects_results(config) or config.stash.get(SESSION_KEY, None) is not None:
        return
    session = ConformanceSession(config)
    if config.stash.get(FAILED_BEFORE_KEY, False):
        session.outside_failures.add("(a test that failed before the first conformance check)")
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "fd-conformance-session")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a process that collects (in-process, an xdist worker, an isolation worker): before any
    other plugin deselects, so a session whose every check is deselected still certifies nothing."""
    if not in_use(config) and any(is_kit_item(item) for item in items):
        start_using(config)


@pytest.hookimpl(wrapper=True)
def pytest_report_from_serializable(config: pytest.Config, data: dict[str, Any]) -> Generator[None, Any, Any]:
    """An xdist controller collects nothing: it learns of the kit from the first report of a kit's
    test (before that report reaches any logreport hook, so the collector sees it too)."""
    report = yield
    if in_use(config) or not isinstance(report, pytest.TestReport):
        return report
    if is_check_report(report):
        start_using(config)
    elif report.failed:
        config.stash[FAILED_BEFORE_KEY] = True
    return report


def registers_own_gpu_marker(config: pytest.Config) -> bool:
    """Whether the project (its ini, or a plugin before ours) registered a ``gpu`` marker of its own."""
    return any(_marker_name(line) == "gpu" and line != GPU_MARKER_HELP for line in config.getini("markers"))


def _marker_name(line: str) -> str:
    return line.split(":", 1)[0].split("(", 1)[0].strip()
