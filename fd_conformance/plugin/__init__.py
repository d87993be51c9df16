"""pytest plugin (pytest11 entry point): markers, options, fixtures and the conformance matrix.

Loading it must cost nothing when unused: no framework (or numpy) import at module level; cases,
runtimes and reports are imported only when a session actually uses them. And a session that does
not use it sees nothing of it (usage: no header, no collector, no GPU pinning, no reordering).

  options     option names, help, defaults and validation
  usage       whether the session asks for or uses the kit; the session collector, registered then
  (fd_conformance.matrix_keys: an item's case, matrix column and matrix keys, and check_record,
  the one record of a finished check and its codec, shared with the isolation parent, sit below
  this package)
  collection  the session's cases, parametrized per device; skips decided at collection
  shard       the session's shard (--fd-shard K/N), recorded by collection, stamped by matrix
  plan        what each row owes: every collected check, deselected ones included
  fixtures    fd_cycles, fd_runtime, fd_subject, fd_verdict
  lifecycle_trace  each check's lifecycle events, and a failing check's trace on its report
  matrix      matrix keys on the deciding report, ConformanceSession, the reports
  results_log the results file (--fd-results): a line per finished test, where reports meet
  xdist, gpus a GPU per xdist worker; ``-n auto`` on a GPU host
  entry       the pytest11 entry point, which loads this package

PYTEST_DONT_REWRITE: the entry point's module imports this package before pytest reads its
``pytest_plugins``; it holds no test assertions.
"""

from __future__ import annotations

import pytest

from fd_conformance import __version__
from fd_conformance.devices import framework_versions
from fd_conformance.isolation.plugin import OWNS_ISOLATED_KEY
from fd_conformance.plugin.collection import CASES_KEY
from fd_conformance.plugin.gpus import pin_worker_gpu
from fd_conformance.plugin.matrix import SESSION_KEY
from fd_conformance.plugin.options import (
    CYCLES_KEY,
    DEVICES_KEY,
    FD_CYCLES,
    FD_DEVICE,
    FD_REPORT,
    FD_ROW,
    FD_RUNTIME,
    ROWS_KEY,
    resolve_devices,
    selected_rows,
    validate_cycles,
    validate_report_dir,
    validate_runtime,
)
from fd_conformance.plugin.shard import SHARD_KEY
from fd_conformance.plugin.usage import (
    GPU_MARKER_HELP,
    decide_requested,
    owns_kit_markers,
    register_kit_markers,
    requested,
    start_using,
)

__all__ = ["CASES_KEY", "CYCLES_KEY", "DEVICES_KEY", "GPU_MARKER_HELP", "SESSION_KEY", "SHARD_KEY"]

# The plugin's parts, each a pytest plugin module of its own; hang/crash isolation: options, marker, worker.
pytest_plugins = [
    "fd_conformance.plugin.options",
    "fd_conformance.plugin.usage",
    "fd_conformance.plugin.collection",
    "fd_conformance.plugin.plan",
    "fd_conformance.plugin.fixtures",
    "fd_conformance.plugin.matrix",
    "fd_conformance.plugin.xdist",
    "fd_conformance.plugin.results_log",
    "fd_conformance.isolation.plugin",
]

CONFORMANCE_MARKER_HELP = (
    "conformance(check): a graph-opt contract check from fd_conformance.suite; check names its matrix column"
)


def pytest_report_header(config: pytest.Config) -> str | None:
    """``fd-conformance 0.1.0 (torch 2.13.0, paddle not installed)``: which kit judged the session and
    the runtimes it could use, from package metadata (no framework is imported for a header). Only
    in a session that asks for the kit: a project's own test suite sees no line of ours."""
    if not requested(config):
        return None
    runtimes = ", ".join(f"{name} {found or 'not installed'}" for name, found in framework_versions().items())
    return f"fd-conformance {__version__} ({runtimes})"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", CONFORMANCE_MARKER_HELP)  # the `gpu` and `isolated` ones: start_using
    config.stash[OWNS_ISOLATED_KEY] = lambda: owns_kit_markers(config)  # isolation asks, lazily
    # First thing on a worker: pin its GPU before any framework can initialise CUDA.
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        pin_worker_gpu(workerinput)
    validate_runtime(config.getoption(FD_RUNTIME))
    config.stash[CYCLES_KEY] = validate_cycles(config.getoption(FD_CYCLES))
    validate_report_dir(config.getoption(FD_REPORT))
    config.stash[DEVICES_KEY] = resolve_devices(config.getoption(FD_DEVICE))
    config.stash[ROWS_KEY] = selected_rows(config.getoption(FD_ROW))
    config.stash[CASES_KEY] = None
    config.stash[SHARD_KEY] = None
    # The session's collector where reports converge (usage.collects_results) and the kit's markers,
    # now when the session asks for the kit, else once a test of the kit's is collected or reported (usage).
    if decide_requested(config):
        start_using(config)
    elif owns_kit_markers(config):  # an isolation worker: its parent's tests may carry them
        register_kit_markers(config)
