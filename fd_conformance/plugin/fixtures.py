"""The fixtures the shipped suites use: cycles, a fresh runtime, the case's subject, a verdict.

What they build is built by plain functions (case_runtime, case_subject, unknown_graphs_of), which
a reproducer (fd_conformance.replay) calls too: a check replayed without pytest meets the same row."""

from __future__ import annotations

import contextlib
import gc
import sys
import time
import traceback
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, cast

import pytest

from fd_conformance.errors import UsageError
from fd_conformance.matrix_keys import RUNTIME_INFO_KEY, VERDICT_KEY, check_name
from fd_conformance.matrix_keys.check_record import BUILD_PROP
from fd_conformance.plugin import lifecycle_trace
from fd_conformance.plugin.options import CYCLES_KEY
from fd_conformance.verdict import CheckVerdict

if TYPE_CHECKING:
    from fd_conformance.cases import ModelCase, Subject
    from fd_conformance.runtime.base import GraphObserver, Runtime


@pytest.fixture
def fd_cycles(request: pytest.FixtureRequest) -> int:
    """Weight-update cycles for C4 (--fd-cycles)."""
    return request.config.stash[CYCLES_KEY]


@pytest.fixture
def fd_runtime(request: pytest.FixtureRequest, fd_case: ModelCase, fd_device: str) -> Runtime:
    """A fresh runtime adapter per test, so one test's events never reach another's recorder."""
    runtime = case_runtime(fd_case, fd_device)
    lifecycle_trace.watch(request.node, runtime)  # its events, for a failing check's picture
    request.node.stash[RUNTIME_INFO_KEY] = {
        "runtime": runtime.name,
        "runtime_version": runtime.version,
        "device_name": runtime.device_name(),
        "graphs_real": runtime.graphs_are_real,
    }
    return runtime


def case_runtime(fd_case: ModelCase, fd_device: str) -> Runtime:
    """The runtime a check of ``fd_case`` runs on, or a skip saying why there is none here. Shared
    by the fixture and a reproducer (fd_conformance.replay), so both build the row alike."""
    from fd_conformance.runtime import get_runtime, installed_runtimes  # the runtime layer only for suite tests

    if fd_case.runtime not in installed_runtimes():
        pytest.skip(f"runtime {fd_case.runtime!r} is not installed here")
    freeze_long_lived()
    try:
        return get_runtime(fd_case.runtime, fd_device)
    except UsageError as err:
        pytest.skip(str(err))


def freeze_long_lived() -> None:
    """Move every object alive before this test's runtime exists (modules, the framework, pytest
    state) out of the collector's reach: a full ``gc.collect()`` with torch and transformers
    loaded walks ~380k objects (0.13 s), and the checks collect before every memory reading, so
    a reused worker spent seconds per check re-scanning imports. Nothing of a test is frozen:
    the previous subject was released and collected in its teardown, and this test's runtime,
    model and graphs are created after the freeze, so a dropped graph is still collected (and
    still reported when it is not)."""
    gc.collect()
    gc.freeze()


# The Subject / ModelRunner protocol members a check touches (cases.Subject, cases.ModelRunner).
SUBJECT_MEMBERS = ("runtime", "wrapper", "draft", "runner", "make_inputs", "forward", "eager_forward", "new_weights", "graphs")
RUNNER_MEMBERS = ("use_cudagraph", "draft_model_use_cudagraph", "capture_model", "clear_parameters", "update_parameters")
#: The runner's members per weight-update contract (ModelCase.weight_update): an in_place engine
#: updates through update_weights(new) and keeps its graphs; it need not tear down at all.
RUNNER_MEMBERS_BY_CONTRACT = {
    "recapture": RUNNER_MEMBERS,
    "in_place": ("use_cudagraph", "draft_model_use_cudagraph", "capture_model", "update_weights"),
}


def missing_subject_members(subject: object, weight_update: str = "recapture") -> list[str]:
    """Protocol members the factory's result lacks ("runner.x" for the runner's): checked up
    front, so a case author reads one line instead of an AttributeError deep inside a check.
    ``graphs`` is optional: a subject without it is certified in native mode."""
    missing = [name for name in SUBJECT_MEMBERS if name != "graphs" and not hasattr(subject, name)]
    runner = getattr(subject, "runner", None)
    if runner is not None:
        missing += [f"runner.{name}" for name in RUNNER_MEMBERS_BY_CONTRACT[weight_update] if not hasattr(runner, name)]
    return missing


# What the check's observer could not read (native mode), for fd_verdict's conclude()
UNKNOWN_GRAPHS_KEY: pytest.StashKey[Callable[[], list[str]]] = pytest.StashKey()


@pytest.fixture
def fd_subject(request: pytest.FixtureRequest, fd_case: ModelCase, fd_runtime: Runtime) -> Generator[Subject, None, None]:
    """The case's model built on this test's runtime, torn down after the test.

    Teardown resets every graph the subject still owns and drops it before the next test: in a
    reused (xdist or isolation) worker a mutant's leftover graphs and pools would otherwise be
    measured as the NEXT test's memory or live graphs.

    Native mode (``graphs="native"``, or a subject without ``graphs()``): the runtime observes
    the framework graphs the model makes itself while the check runs (cases/native.py)."""
    started = time.perf_counter()
    with case_subject(fd_case, fd_runtime) as subject:
        # Each check builds its own model (a check releases weights and destroys graphs): a slow
        # factory is paid once per check, and the progress line says so (cli/progress.py).
        request.node.user_properties.append((BUILD_PROP, round(time.perf_counter() - started, 3)))
        unknown = unknown_graphs_of(subject)
        if unknown is not None:
            request.node.stash[UNKNOWN_GRAPHS_KEY] = unknown
        yield subject


def unknown_graphs_of(subject: Subject) -> Callable[[], list[str]] | None:
    """What a native subject's observer could not read (for the verdict's conclude()); None for a
    subject whose graphs the kit made."""
    from fd_conformance.cases.native import NativeSubject

    return subject.native_observer.unknown_captures if isinstance(subject, NativeSubject) else None


@contextlib.contextmanager
def case_subject(fd_case: ModelCase, runtime: Runtime) -> Iterator[Subject]:
    """The subject (wrapped for native mode when declared or detected), released on exit.

    Each undo is registered the moment its thing is installed, so whatever raises -- the factory,
    the detection, NativeSubject, the check -- the observer is closed: a native observer left
    installed failed every later native check of the worker with "already installed".
    Teardown order: the subject is released, its observation points undone, the observer closed."""
    from fd_conformance.cases.native import NativeSubject, declares_native, hands_no_graphs

    with contextlib.ExitStack() as observing:
        observer = start_native(runtime) if declares_native(fd_case) else None
        if observer is not None:
            observing.callback(observer.close)
        subject: Subject = build_subject(fd_case, runtime)
        with contextlib.ExitStack() as releasing:  # inner: the subject goes before its observer
            releasing.callback(lambda: release_subject(subject, runtime))
            if observer is None and hands_no_graphs(subject):
                observer = start_native(runtime)  # detected: graphs the factory captured were not seen
                observing.callback(observer.close)
            if observer is not None:
                native = NativeSubject(subject, observer)  # forwards every Subject member, graphs() from the observer
                observing.callback(native.close)
                subject = cast("Subject", native)
            yield subject


def build_subject(fd_case: ModelCase, fd_runtime: Runtime) -> Subject:
    """The factory's subject, or a one-line failure naming what is wrong with it."""
    try:
        subject = fd_case.factory(fd_runtime)
    except Exception as err:  # noqa: BLE001 - any factory error is the case author's report, one line
        # The exception's type and message are the report (terminal, matrix cell, conformance.json);
        # its traceback goes to captured stderr, which pytest.log keeps for debugging.
        traceback.print_exc()
        first = (str(err).strip().splitlines() or [""])[0]
        pytest.fail(
            f"{fd_case.name}: the case factory raised {type(err).__name__}: {first}; "
            "fix: make the factory build its Subject on this runtime (traceback in the captured stderr)",
            pytrace=False,
        )
    missing = missing_subject_members(subject, fd_case.weight_update)
    if missing:
        pytest.fail(
            f"{fd_case.name}: the factory returned a {type(subject).__name__} without {', '.join(missing)}; "
            "fix: return an object with every fd_conformance.cases.Subject member",
            pytrace=False,
        )
    if fd_case.has("draft") and subject.draft is None:
        # Every draft check skips on "no draft model": a case that promises a draft and builds
        # none would be certified without its draft ever being looked at.
        pytest.fail(
            f"{fd_case.name}: the case declares capability 'draft' but its factory returned no draft (Subject.draft is None); "
            "fix: return the draft model from the factory, or drop 'draft' from ModelCase.capabilities",
            pytrace=False,
        )
    return subject


def start_native(runtime: Runtime) -> GraphObserver:
    """Observe the framework's graphs from now on, or skip: none to observe here (CPU)."""
    reason = runtime.native_graphs_unavailable()
    if reason is not None:
        pytest.skip(reason)
    return runtime.observe_native_graphs()


LAST_FAILURE = ("last_type", "last_value", "last_traceback", "last_exc")  # what pytest keeps in sys


def forget_last_failure() -> None:
    for name in LAST_FAILURE:
        if getattr(sys, name, None) is not None:
            setattr(sys, name, None)


def release_subject(subject: Subject, runtime: Runtime) -> None:
    """Best-effort cleanup: reset graphs directly (the model's own clear may be the mutant's bug),
    then collect garbage, tear down the groups it left alive and return cached memory to the device.

    A failed check's traceback is kept by pytest in ``sys.last_traceback`` (for post-mortem use)
    until the next failure, and its frames hold the subject: forgotten here, or a failed check's
    model -- its graphs, pools, kept outputs -- lives on into the next check of the worker."""
    from fd_conformance.runtime.graph import reset_graphs  # here: the plugin loads no runtime until a check runs

    forget_last_failure()
    try:
        graphs = list(subject.graphs())
    except Exception:  # noqa: BLE001 - a broken subject was already judged by its check
        graphs = []
    reset_graphs(graphs)
    del graphs, subject
    gc.collect()
    try:
        runtime.synchronize()
        runtime.release_groups()  # communicators the model left alive hold device memory
        runtime.empty_cache()
    except Exception:  # noqa: BLE001 - a poisoned device is the check's finding, not teardown's
        pass


@pytest.fixture
def fd_verdict(request: pytest.FixtureRequest) -> CheckVerdict:
    """Where a check records findings; ``conclude()`` fails the test on errors."""
    node = request.node
    verdict = CheckVerdict(
        check_name(node),
        unknown_graphs=lambda: node.stash.get(UNKNOWN_GRAPHS_KEY, list)(),
        clock=lambda: lifecycle_trace.clock(node),
    )
    node.stash[VERDICT_KEY] = verdict
    return verdict
