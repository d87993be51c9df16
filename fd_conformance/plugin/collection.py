"""Collection: the session's cases, one parametrized row per case and device, skips decided early.

PYTEST_DONT_REWRITE: the plugin package imports this module before pytest reads its ``pytest_plugins``,
so asking pytest to rewrite it only warned in every user session; it holds no test assertions.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import pytest

from fd_conformance.devices import no_gpu_reason
from fd_conformance.isolation.messages import in_isolation_worker
from fd_conformance.isolation.plugin import prestart_worker, skipped_before_setup, worker_facts
from fd_conformance.isolation.worker.pytest_mode import AFTER_FACTS, PARENT_SELECTS, WORKER_FACTS
from fd_conformance.matrix_keys import case_of, check_name
from fd_conformance.plugin.options import (
    DEVICES_KEY,
    FD_CASES_FILE,
    FD_DURATIONS,
    FD_INCLUDE_MUTANTS,
    FD_MODEL,
    FD_ROW,
    FD_RUNTIME,
    FD_SHARD,
    ROWS_KEY,
    raises_pytest_usage_error,
)
from fd_conformance.plugin.shard import SHARD_KEY, empty_shard_reason
from fd_conformance.plugin.usage import in_use, names_suite, owns_kit_markers, register_kit_markers, registers_own_gpu_marker

if TYPE_CHECKING:
    from fd_conformance.cases import ModelCase, Shard

CASES_KEY: pytest.StashKey[list[ModelCase] | None] = pytest.StashKey()
UNSHARDED_KEY: pytest.StashKey[list[ModelCase]] = pytest.StashKey()  # every shard's cases (a worker sends them)
CASE_RECORDS = "cases"  # the worker's fact: its cases as records (cases/manifest.py)
CASES_ERROR = "cases_error"  # ... or the one-line error loading them raised there
FRAMEWORK_FREE_CHECKS = frozenset({"config"})  # C6 needs the case, not a runtime (framework_free_first)


@raises_pytest_usage_error
def load_session_cases(config: pytest.Config) -> list[ModelCase]:
    """The cases this session certifies; --fd-model errors become one-line usage errors. Taken
    from the session's isolation worker when it sends them (cases/manifest.py: the parent then
    imports no model module), else loaded here."""
    cached = config.stash.get(CASES_KEY, None)
    if cached is not None:
        return cached
    shard = _read_shard(config)  # a bad --fd-shard or durations file fails first, before any import
    cases = _cases_from_worker(config)
    if cases is None:
        cases = _load_cases_here(config)
    config.stash[UNSHARDED_KEY] = cases
    if shard is not None:
        cases = _keep_shard(config, cases, *shard)
    config.stash[CASES_KEY] = cases
    return cases


def _cases_from_worker(config: pytest.Config) -> list[ModelCase] | None:
    """The cases as the prestarted worker loaded them (records: the real cases load here only for
    a test that runs in this process, see pytest_runtest_setup), or None: no such worker, or it
    failed before sending them (then loading here raises what it raised). A spec the worker could
    not load raises the one-line error it sent: the module is not imported a second time."""
    facts = worker_facts(config)
    if facts is not None and CASES_ERROR in facts:  # a bad spec: its error, without importing the module again
        raise pytest.UsageError(facts[CASES_ERROR])
    records = facts.get(CASE_RECORDS) if facts is not None else None
    if records is None:  # no such worker, it failed first, or its cases are not plain data
        return None
    from fd_conformance.cases.manifest import case_from_record

    @functools.cache
    def load_real() -> dict[str, ModelCase]:
        return {case.name: case for case in _load_cases_here(config)}

    try:
        return [case_from_record(record, load_real) for record in records]
    except Exception:  # noqa: BLE001 - a record this kit cannot rebuild: load the cases here, as before
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that runs in this process (not isolated: a project's own test taking ``fd_case``)
    gets the real case, not the one rebuilt from the worker's record (cases/manifest.py)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    case = params.get("fd_case")
    if case is not None and not skipped_before_setup(item):  # a skipped test must not import the model
        from fd_conformance.cases.manifest import real_case

        params["fd_case"] = real_case(case)


def _load_cases_here(config: pytest.Config) -> list[ModelCase]:
    """The session's cases, from its specs or the installed ones, by this process's imports."""
    # Here, not at import: a session that certifies nothing loads neither cases nor runtimes.
    from fd_conformance.cases import read_selection, select_cases
    from fd_conformance.runtime import installed_runtimes

    cases_file: str | None = config.getoption(FD_CASES_FILE)
    return select_cases(
        config.getoption(FD_MODEL),
        runtime=config.getoption(FD_RUNTIME),
        include_mutants=config.getoption(FD_INCLUDE_MUTANTS),
        installed_runtimes=installed_runtimes(),
        selection=read_selection(cases_file) if cases_file is not None else None,
        selection_source=f"{FD_CASES_FILE} {cases_file}",
    )


@pytest.hookimpl(trylast=True)  # after every other configure: the kit's options are validated, pytest's tmp dirs set
def pytest_configure(config: pytest.Config) -> None:
    """A session that certifies here spawns its isolation worker first; the worker loads the
    cases at its configure and sends them as records, so this process collects without importing
    a model module (a framework import each). Cases named by an option load now, to fail fast on
    a bad spec or cases file, before collection: a spec the worker could not load fails here with
    the one-line error the worker sent (or, when the worker died first, loaded here, with its own)."""
    loads_cases = any(config.getoption(name) is not None for name in (FD_CASES_FILE, FD_SHARD)) or bool(
        config.getoption(FD_MODEL)
    )
    certifies = loads_cases or names_suite(config)
    if in_isolation_worker():  # its parent waits for the cases it loads (load_session_cases)
        if certifies:
            facts = config.stash.get(WORKER_FACTS, None)  # there only when the parent waits for it
            try:
                load_session_cases(config)
            except pytest.UsageError as err:
                if facts is None:
                    raise
                facts[CASES_ERROR] = str(err)  # the parent raises it, then stops this worker
                config.stash[CASES_KEY] = []
                return
            if facts is None:  # a spare or a replacement: no collection of its parent's to overlap
                return
            from fd_conformance.cases.manifest import as_records

            facts[CASE_RECORDS] = as_records(config.stash[UNSHARDED_KEY])  # every case: the parent takes its shard
            frameworks = frameworks_to_import(config)
            if frameworks:  # imported while the parent collects (a spare never used would pay for nothing)
                from fd_conformance.runtime import import_in_background

                config.stash.setdefault(AFTER_FACTS, []).append(functools.partial(import_in_background, frameworks))
        return
    if certifies and _rows_can_run(config):
        prestart_worker(config)
    if loads_cases:
        load_session_cases(config)


def frameworks_to_import(config: pytest.Config) -> set[str]:
    """The frameworks this worker's model checks will import: those of its shard's cases that owe
    a check beyond the framework-free ones. Nothing when -k, -m or --deselect narrow the session
    (what they leave is known only once the parent collects, and may be C6 alone) or nothing runs
    (--collect-only)."""
    if config.stash.get(PARENT_SELECTS, False) or config.option.collectonly:
        return set()
    cases = config.stash.get(CASES_KEY, None) or []
    return {case.runtime for case in cases if case.checks is None or case.checks - FRAMEWORK_FREE_CHECKS}


def _rows_can_run(config: pytest.Config) -> bool:
    """False where every row would skip for want of a GPU (no worker is worth spawning for them):
    only cuda rows, or a ``-m`` that keeps only ``gpu``-marked tests. A guess that errs toward True
    costs one worker's start, never a verdict."""
    if no_gpu_reason() is None:
        return True
    if config.stash[DEVICES_KEY] == ("cuda",):
        return False
    markexpr = config.getoption("markexpr", "") or ""
    if not markexpr:
        return True
    try:
        from _pytest.mark.expression import Expression  # how pytest itself reads -m

        return bool(Expression.compile(markexpr).evaluate(_cpu_row_markers))
    except Exception:  # noqa: BLE001 - pytest reports a bad -m itself, at collection
        return True


def _cpu_row_markers(name: str, /, **kwargs: str | int | bool | None) -> bool:
    """A cpu row carries every marker but gpu, as far as _rows_can_run's guess needs."""
    return name != "gpu"


def _read_shard(config: pytest.Config) -> tuple[Shard, dict[str, float] | None] | None:
    """The session's --fd-shard and the durations balancing it, or None when it is not sharded."""
    shard_text: str | None = config.getoption(FD_SHARD)
    if shard_text is None:
        return None
    from fd_conformance.cases import parse_shard, read_durations

    durations_file: str | None = config.getoption(FD_DURATIONS)
    return parse_shard(shard_text, FD_SHARD), read_durations(durations_file, FD_DURATIONS) if durations_file else None


def _keep_shard(
    config: pytest.Config, cases: list[ModelCase], shard: Shard, durations: dict[str, float] | None
) -> list[ModelCase]:
    """The cases of shard K/N (whole cases; the partition is cases/shard.py's), recorded in SHARD_KEY."""
    from fd_conformance.cases import shard_of

    durations_file: str | None = config.getoption(FD_DURATIONS)
    names = [case.name for case in cases]
    kept = shard_of(cases, names, shard, durations)
    devices: tuple[str, ...] = config.stash[DEVICES_KEY]
    config.stash[SHARD_KEY] = {
        "index": shard.index,
        "count": shard.count,
        "cases": sorted(case.name for case in kept),
        "all_cases": names,  # in the session's order: the merged report lists rows as the unsharded one
        "balanced_by": f"durations ({durations_file})" if durations else "count",
        "devices": list(devices),
    }
    return kept


def shard_info(config: pytest.Config) -> dict[str, Any] | None:
    """The session's shard (SHARD_KEY), or None when the session is not sharded."""
    if config.getoption(FD_SHARD) is None:
        return None
    load_session_cases(config)
    return config.stash.get(SHARD_KEY, None)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fd_case" not in metafunc.fixturenames:
        return
    register_kit_markers(metafunc.config)  # a test of the kit's: its cuda rows carry the kit's `gpu`
    cases = load_session_cases(metafunc.config)
    rows = metafunc.config.stash.get(ROWS_KEY, None)
    params = []
    for case in cases:
        for device in metafunc.config.stash[DEVICES_KEY]:
            if rows is not None and (case.name, device) not in rows:
                continue  # not a row --fd-row names: out of the session, not deselected (owes nothing)
            marks = [pytest.mark.gpu] if device == "cuda" else []
            params.append(pytest.param(case, device, id=f"{case.name}-{device}", marks=marks))
    if not params:
        params = [pytest.param(None, "cpu", id="no-cases", marks=pytest.mark.skip(reason=no_cases_reason(metafunc.config)))]
    metafunc.parametrize(("fd_case", "fd_device"), params)


def framework_free_first(items: list[pytest.Item]) -> None:
    """Checks that build no model (C6 config: it needs the case, not a runtime) run first: their
    results come in seconds, before the first framework import and model build (torch plus
    transformers: 10-20 s in a fresh worker), so a broken config fails fast. Stable otherwise:
    every other item keeps pytest's order, and each check is independent of the others.

    Not done, measured: moving the weight cycles (the longest checks) right after C6 made the
    H200 main job slower (median 30.5 s against 26.0 s, bench/main_job_ab.py): xdist hands out
    consecutive pairs, so two cycles landed on one worker, and each ran cold, after its worker's
    15-20 s first import, where at the end they run warm on whichever workers are free."""
    items.sort(key=lambda item: case_of(item) is None or "fd_runtime" in getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if in_use(config):  # a project's own suite keeps pytest's order (usage)
        framework_free_first(items)
        for item in items:
            case = case_of(item)
            if case is not None and case.checks is not None and check_name(item) not in case.checks:
                item.add_marker(pytest.mark.skip(reason=f"{case.name} is certified on {', '.join(sorted(case.checks))} only"))
    if not owns_kit_markers(config):  # not the kit's session: `gpu` is the project's marker (usage)
        return
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    reason = no_gpu_reason() if gpu_items else None
    if reason is None:
        return
    # The kit's `gpu` marker (its cuda rows, and tests that use the marker it registers) skips here
    # without a GPU; a `gpu` marker the project registered itself means what the project says.
    theirs = registers_own_gpu_marker(config)
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        if not theirs or case_of(item) is not None:
            item.add_marker(skip)


def no_cases_reason(config: pytest.Config) -> str:
    """Why a suite test has no case to run: an empty cases file is a deliberate "nothing to certify"."""
    shard = shard_info(config)
    if shard is not None and not shard["cases"]:
        return empty_shard_reason(shard)
    cases_file = config.getoption(FD_CASES_FILE)
    if cases_file is not None:
        from fd_conformance.cases import read_selection  # only with a cases file: see load_session_cases

        if not read_selection(cases_file):
            return f"nothing to certify: {FD_CASES_FILE} {cases_file} selects no case"
    if config.stash.get(ROWS_KEY, None) is not None:
        return f"no row named by {FD_ROW} is a selected case on a selected device"
    return "no model cases selected (see --fd-model/--fd-runtime/--fd-cases-file)"
