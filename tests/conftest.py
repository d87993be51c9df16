"""Fixtures shared by the kit's own test modules."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fd_conformance.cli.pytest_command import NO_HYPOTHESIS_PLUGIN
from fd_conformance.frameworks import FRAMEWORKS
from fd_conformance.runtime.base import Runtime, RuntimeEvent

# One intra-op thread per process, for this run and every process it starts (xdist workers, inner
# sessions, `fd-conformance run`, isolation workers: they inherit the variable; no framework is
# imported yet). The README's `-n 2` on 2 cores already keeps every core busy; torch's and paddle's
# OpenMP pools of one thread per core on top of that spin-wait for each other: the same inner
# session over torch-glm4-moe-mtp took 19.3 s of CPU with the default pool and 9.6 s with one
# thread, with the same verdicts. A value the caller set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Every pytest process this run starts (inner sessions, `fd-conformance run`'s, their xdist and
# isolation workers: ~400 of them) runs without pytest plugins that none of them uses:
# * Hypothesis's, as `fd-conformance run` runs its own (cli/pytest_command.py): its terminal summary
#   imports all of Hypothesis, 0.8 s of CPU in each of ~60 inner sessions, for a summary no test
#   reads (the suite's own @given tests need no plugin);
# * anyio's and pytest-benchmark's, which this machine's image carries (httpx needs anyio): loading
#   them cost 0.15 s of CPU in every pytest process (0.43 -> 0.28 s for a one-test session).
# A test about a project's own session (test_plugin_stays_out) clears PYTEST_*. A value the caller
# set is kept.
UNUSED_PLUGINS = (*NO_HYPOTHESIS_PLUGIN, "-p", "no:anyio", "-p", "no:benchmark")
os.environ.setdefault("PYTEST_ADDOPTS", " ".join(UNUSED_PLUGINS))
# Bytecode caching back on, for this run and every process it starts. This host (like many CI
# images) sets PYTHONDONTWRITEBYTECODE=1, so each of a run's ~560 interpreters compiled the kit's
# modules from source again, and pytest rewrote again the asserts of every module it marks (the
# kit's plugin and suite modules, and all of Hypothesis, whose pytest11 entry point marks the
# package: `import hypothesis` under pytest took 1.0 s of CPU, 0.2 s once its rewrite is cached, in
# every worker that runs a config check). The caches go to __pycache__ directories, which git
# ignores; what a test checks does not depend on them.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


# pytester's in-process runs remove from sys.modules whatever the inner session imported. A
# framework with C extensions cannot be imported a second time in one process (torch then fails
# with "SystemError: ... bad call flags" or a segfault, depending on which test runs next), so the
# frameworks are imported before the first test that uses pytester, ahead of its snapshot, and stay
# put. Only then: this conftest is also loaded by every inner session over a file under tests/
# (hang_cases, ...) and by its isolation workers, which need no framework (seconds of CPU each).
def _import_frameworks() -> None:
    for framework in FRAMEWORKS:
        if framework not in sys.modules and importlib.util.find_spec(framework) is not None:
            importlib.import_module(framework)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if "pytester" in getattr(item, "fixturenames", ()):
        _import_frameworks()


# --- scheduling under xdist (the README's `python -m pytest -n 2`) ---------------------------------
# A module whose tests read one expensive module-scoped session (a whole suite run in a subprocess)
# runs on ONE xdist worker: with xdist's default "load" its tests spread over both workers and each
# worker ran the session again. And the longest work starts first, so it is not the tail of the run.
SHARED_SESSION_MODULES = (
    "test_suites_cpu.py",
    "test_outside_models.py",
    "test_outside_engines.py",
    "test_outside_sizes_descriptors_arena.py",
)
DURATIONS = Path(__file__).with_name("durations.json")  # bench/kit_test_time.py --write records it


_KIT_SESSION = pytest.StashKey[bool]()


def _kit_session(config: pytest.Config) -> bool:
    """This repository's own test run (its tests/ directory or modules directly in it), not an
    inner session a test starts: those load this conftest too (a session from this directory, or
    over a file under tests/) and must keep the scheduling and order they are testing."""
    if config.getoption("pyargs", False):
        return False
    tests = Path(__file__).resolve().parent
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::", 1)[0]).resolve()
        if path != tests and path.parent != tests:
            return False
    return True


def _dist_given(config: pytest.Config) -> bool:
    given = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    return any(a in ("-d", "--dist") or a.startswith("--dist=") for a in given)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KIT_SESSION] = _kit_session(config)
    # -n N without --dist means "load"; make it "loadgroup" (xdist_group below) in our own order.
    if config.stash[_KIT_SESSION] and getattr(config.option, "dist", "no") == "load" and not _dist_given(config):
        config.option.dist = "loadgroup"
        config.option.loadscopereorder = False
    if config.stash[_KIT_SESSION] and hasattr(config, "workerinput") and not _dist_given(config):
        config.option.loadgroup = True  # a worker parses the plain command line again: "-n 2", no --dist


def _group(item: pytest.Item) -> str | None:
    """The xdist group of ``item``: its module's, or the one a test names itself (a few tests of a
    module that share one module-scoped session: ``@pytest.mark.xdist_group(NAME)``)."""
    module = item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    if module in SHARED_SESSION_MODULES:
        return module
    marker = item.get_closest_marker("xdist_group")
    return str(marker.args[0]) if marker is not None and marker.args else None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not (config.stash[_KIT_SESSION] and hasattr(config, "workerinput")):
        return  # a serial run keeps the collection order; an inner session is left as it is
    for item in items:
        group = _group(item)
        if group and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    try:
        recorded: dict[str, float] = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    cost: dict[str, float] = {}
    for item in items:  # a group costs what its tests cost together; a test on its own, itself
        key = _group(item) or item.nodeid
        cost[key] = cost.get(key, 0.0) + recorded.get(item.nodeid, 0.0)
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (-cost[_group(item) or item.nodeid], order[id(item)]))


# --- per-test CPU time (bench/kit_test_time.py): FDC_TEST_CPU_LOG=FILE appends one line a test ---
def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    log = os.environ.get("FDC_TEST_CPU_LOG")
    if not log:
        yield
        return
    cpu, wall = _cpu_seconds(), time.perf_counter()
    yield
    line = json.dumps(
        {"nodeid": item.nodeid, "cpu": round(_cpu_seconds() - cpu, 3), "wall": round(time.perf_counter() - wall, 3)}
    )
    with open(log, "a", encoding="utf-8") as out:
        out.write(line + "\n")


@pytest.fixture
def events(rt: Runtime) -> Iterator[list[RuntimeEvent]]:
    """Every event the module's ``rt`` fixture emits during the test, in order.

    Each module defines ``rt`` for its framework (torch, paddle); this one fixture serves them
    all. Unsubscribed afterwards, so a module-scoped runtime does not keep feeding a finished
    test's list.
    """
    seen: list[RuntimeEvent] = []
    unsubscribe = rt.events.subscribe(seen.append)
    try:
        yield seen
    finally:
        unsubscribe()
