"""The plugin's command-line options: names, help, defaults, ini keys, and their validation.

Option names are constants (pytest-timeout's style) so the code that reads an option and the
help, errors and tests that name it cannot drift apart. Each validator turns the shared
:mod:`fd_conformance.errors` validator's ``UsageError`` into pytest's, which pytest prints as one
line and exits 4 on.

PYTEST_DONT_REWRITE: the plugin package imports this module before pytest reads its ``pytest_plugins``,
so asking pytest to rewrite it only warned in every user session; it holds no test assertions.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

import pytest

from fd_conformance.devices import visible_gpu_count
from fd_conformance.errors import MAX_CYCLES, UsageError, validate_choice, validate_directory, validate_int
from fd_conformance.frameworks import FRAMEWORKS
from fd_conformance.option_ini import IniOption, resolve_all

FD_MODEL = "--fd-model"
FD_RUNTIME = "--fd-runtime"
FD_CYCLES = "--fd-cycles"
FD_REPORT = "--fd-report"
FD_INCLUDE_MUTANTS = "--fd-include-mutants"
FD_CASES_FILE = "--fd-cases-file"
FD_DEVICE = "--fd-device"
FD_ALLOW_EMPTY = "--fd-allow-empty"
FD_SHARD = "--fd-shard"
FD_DURATIONS = "--fd-durations"
FD_RESULTS = "--fd-results"
FD_ROW = "--fd-row"
FD_RUN_ID = "--fd-run-id"

FD_MODEL_HELP = (
    "model case(s) to certify, as module:attr or path/to/file.py:attr naming a ModelCase, a list of them "
    "or a zero-argument factory; repeatable. Default: every installed case (entry point group "
    "fd_conformance.cases), mutants excluded."
)
FD_RUNTIME_HELP = "framework whose cases run: torch, paddle or auto (every installed one). Default: auto."
FD_CYCLES_HELP = (
    "weight-update cycles in the weight-cycle check (C4), at least 3 to show steady growth, at most 1000 "
    "(its watchdog deadline grows with them). Default: 5."
)
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
    "which rows to collect: auto (default: cuda when a GPU is visible, else cpu, as `fd-conformance run`), "
    "all (cuda rows that cannot run here are not-run, which fails the verdict), cpu (host-emulated graphs) "
    "or cuda (real graphs)."
)
FD_ALLOW_EMPTY_HELP = (
    "exit 0 even when every conformance check was skipped (e.g. -m gpu on a machine without a GPU). "
    "By default such a session exits 4: a CI job that certified nothing must not go green."
)
FD_SHARD_HELP = (
    "certify only shard K of N (e.g. 2/3): a deterministic partition of the session's cases, whole cases "
    "(a case's checks share a built model), balanced by --fd-durations when given, by count otherwise; "
    "`fd-conformance merge` rebuilds the one report from the N shards' report directories. A shard with no "
    "case (N above the cases) certifies nothing and exits 0, saying so."
)
FD_RESULTS_HELP = "append one JSON line per finished test to FILE (fsynced), for `fd-conformance report FILE`."
FD_ROW_HELP = (
    "certify only this row, a case on a device (e.g. my-glm4@cpu); repeatable. A row of no selected case or "
    "device is left out (`fd-conformance run --last-failed` names the rows that did not pass)."
)
FD_RUN_ID_HELP = (
    "with --fd-shard: the id of the run this shard belongs to, the same for every shard of one run; "
    "`fd-conformance merge` refuses shards whose ids differ. Default: the CI's run id (GITHUB_RUN_ID, "
    "CI_PIPELINE_ID, BUILDKITE_BUILD_ID, CIRCLE_WORKFLOW_ID or BUILD_BUILDID), else a hash of the "
    "run's settings and environment."
)
FD_DURATIONS_HELP = (
    "balance --fd-shard by the per-case seconds in FILE: an earlier run's results.jsonl or conformance.json "
    "(a merged one too), or a JSON object {case: seconds}. Every shard must be given the same file."
)
RUNTIME_CHOICES = ("auto", *FRAMEWORKS)
DEVICE_CHOICES = ("all", "auto", "cpu", "cuda")
DEFAULT_CYCLES = 5
MIN_CYCLES = 3  # "growth in every cycle" needs two deltas, so three measured cycles
SUITE_DEVICES = ("cpu", "cuda")  # the device rows `--fd-device all` collects

CYCLES_KEY = pytest.StashKey[int]()
DEVICES_KEY: pytest.StashKey[tuple[str, ...]] = pytest.StashKey()
ROWS_KEY: pytest.StashKey[set[tuple[str, str]] | None] = pytest.StashKey()  # --fd-row, None: every row

P = ParamSpec("P")
R = TypeVar("R")


#: Every option of this plugin, each settable by its ini key too (``fd_runtime = torch``): see
#: :mod:`fd_conformance.option_ini` (the command line wins, then the ini, then the default).
OPTIONS = {
    FD_MODEL: IniOption(FD_MODEL, "linelist", [], FD_MODEL_HELP),
    FD_RUNTIME: IniOption(FD_RUNTIME, "string", "auto", FD_RUNTIME_HELP),
    FD_CYCLES: IniOption(FD_CYCLES, "string", str(DEFAULT_CYCLES), FD_CYCLES_HELP),
    FD_REPORT: IniOption(FD_REPORT, "string", None, FD_REPORT_HELP),
    FD_INCLUDE_MUTANTS: IniOption(FD_INCLUDE_MUTANTS, "bool", False, FD_INCLUDE_MUTANTS_HELP),
    FD_CASES_FILE: IniOption(FD_CASES_FILE, "string", None, FD_CASES_FILE_HELP),
    # auto, as `fd-conformance run`: one session gives one answer through either route, and a CPU
    # host's session is not failed by a cuda row it could never run.
    FD_DEVICE: IniOption(FD_DEVICE, "string", "auto", FD_DEVICE_HELP),
    FD_ALLOW_EMPTY: IniOption(FD_ALLOW_EMPTY, "bool", False, FD_ALLOW_EMPTY_HELP),
    FD_SHARD: IniOption(FD_SHARD, "string", None, FD_SHARD_HELP),
    FD_DURATIONS: IniOption(FD_DURATIONS, "string", None, FD_DURATIONS_HELP),
    FD_RESULTS: IniOption(FD_RESULTS, "string", None, FD_RESULTS_HELP),
    FD_ROW: IniOption(FD_ROW, "linelist", [], FD_ROW_HELP),
    FD_RUN_ID: IniOption(FD_RUN_ID, "string", None, FD_RUN_ID_HELP),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fd-conformance", "graph-opt conformance suites")
    OPTIONS[FD_MODEL].add(group, parser, action="append", metavar="SPEC")
    OPTIONS[FD_RUNTIME].add(group, parser, metavar="NAME")
    OPTIONS[FD_CYCLES].add(group, parser, metavar="N")
    OPTIONS[FD_REPORT].add(group, parser, metavar="DIR")
    OPTIONS[FD_INCLUDE_MUTANTS].add(group, parser, action="store_true")
    OPTIONS[FD_CASES_FILE].add(group, parser, metavar="FILE")
    OPTIONS[FD_DEVICE].add(group, parser, metavar="ROWS")
    OPTIONS[FD_ALLOW_EMPTY].add(group, parser, action="store_true")
    OPTIONS[FD_SHARD].add(group, parser, metavar="K/N")
    OPTIONS[FD_DURATIONS].add(group, parser, metavar="FILE")
    OPTIONS[FD_RESULTS].add(group, parser, metavar="FILE")
    OPTIONS[FD_ROW].add(group, parser, action="append", metavar="CASE@DEVICE")
    OPTIONS[FD_RUN_ID].add(group, parser, metavar="ID")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before any part of the plugin reads an option: absent flags take their ini value."""
    resolve_all(config, list(OPTIONS.values()))


def raises_pytest_usage_error(validator: Callable[P, R]) -> Callable[P, R]:
    """The validator's ``UsageError`` as pytest's (same one-line text)."""

    @wraps(validator)
    def validate(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return validator(*args, **kwargs)
        except UsageError as err:
            raise pytest.UsageError(str(err)) from None

    return validate


@raises_pytest_usage_error
def validate_runtime(value: str) -> str:
    """--fd-runtime: a known framework name that is installed here."""
    validate_choice(value, FD_RUNTIME, RUNTIME_CHOICES)
    if value == "auto":
        return value  # nothing to look up: keeps every session that does not certify import-cheap
    # Only when a framework is named: a session that certifies nothing never loads the runtime layer.
    from fd_conformance.runtime import installed_runtimes

    if value not in installed_runtimes():
        raise UsageError(f"{FD_RUNTIME} {value!r} is not installed", f"pip install 'fd-conformance[{value}]' or use auto")
    return value


@raises_pytest_usage_error
def validate_cycles(value: str) -> int:
    """--fd-cycles: an integer from MIN_CYCLES to errors.MAX_CYCLES (as `run --cycles`)."""
    return validate_int(
        value, FD_CYCLES, minimum=MIN_CYCLES, maximum=MAX_CYCLES, example=DEFAULT_CYCLES, why="steady growth needs two deltas"
    )


@raises_pytest_usage_error
def resolve_devices(value: str) -> tuple[str, ...]:
    """--fd-device: the device rows to collect; "auto" asks the machine (without a framework import)."""
    validate_choice(value, FD_DEVICE, DEVICE_CHOICES)
    if value == "all":
        return SUITE_DEVICES
    if value == "auto":
        return ("cuda",) if visible_gpu_count() > 0 else ("cpu",)
    return (value,)


@raises_pytest_usage_error
def selected_rows(values: list[str]) -> set[tuple[str, str]] | None:
    """--fd-row: the (case, device) rows to keep, None when not given; ``case@device`` each."""
    if not values:
        return None
    rows = set()
    for value in values:
        case, sep, device = str(value).rpartition("@")
        if not sep or not case or device not in SUITE_DEVICES:
            raise UsageError(f"{FD_ROW} {value!r} is not CASE@DEVICE", f"write e.g. {FD_ROW} my-glm4@cpu (device cpu or cuda)")
        rows.add((case, device))
    return rows


@raises_pytest_usage_error
def validate_report_dir(value: str | None) -> str | None:
    """--fd-report: a directory (created when missing), not an existing file."""
    return None if value is None else validate_directory(value, FD_REPORT)
