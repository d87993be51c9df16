"""User-facing errors: one line that names the problem and the fix, and a distinct exit code.

The one table of exit codes of every ``fd-conformance`` command and of the plugin's certifying
pytest sessions (README "CI gating" documents it; tests/test_run_cli.py keeps the two equal).
A CI step can branch on them: 1 means "the model is wrong", everything else "the run is".
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from typing import Any

EXIT_OK = 0  # every row certified (with mutants: every mutant caught exactly)
EXIT_VIOLATIONS = 1  # the kit ran and found contract violations (or a mutant was missed)
EXIT_USAGE = 2  # bad input: path, config, --fd-model, option value, unwritable --out
EXIT_INCOMPLETE = 3  # the session did not finish (INTERNALERROR, killed) or its results file is truncated/unreadable
EXIT_INTERNAL = EXIT_INCOMPLETE  # the older name: a kit that broke mid-session is an incomplete session
EXIT_NOTHING_CERTIFIED = 4  # no conformance check ran (no GPU for cuda rows, everything skipped); --allow-empty opts out
EXIT_LOCKED = 5  # --out is in use by another `fd-conformance run`
EXIT_MISSING_DEPENDENCY = 6  # `fd-conformance fastdeploy`: a package the FastDeploy tree imports is not installed
EXIT_SIGINT = 128 + signal.SIGINT  # 130: interrupted by Ctrl-C; partial report marked INTERRUPTED
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143: terminated (CI cancel, timeout); partial report marked INTERRUPTED

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "certified: every row passed (with mutants: every mutant caught exactly)",
    EXIT_VIOLATIONS: "violations: a row failed a check, or a mutant was missed",
    EXIT_USAGE: "usage error: one line naming the problem and the fix",
    EXIT_INCOMPLETE: "incomplete: the session did not finish, or the results file is truncated or unreadable",
    EXIT_NOTHING_CERTIFIED: "certified nothing: no check ran on the requested rows (opt out with --allow-empty / --fd-allow-empty)",
    EXIT_LOCKED: "--out is locked by another run that is still going",
    EXIT_MISSING_DEPENDENCY: "missing dependency: the FastDeploy tree imports a package that is not installed (the [fastdeploy] extra)",
    EXIT_SIGINT: "interrupted (SIGINT): partial report marked INTERRUPTED",
    EXIT_SIGTERM: "terminated (SIGTERM): partial report marked INTERRUPTED",
}


class UsageError(Exception):
    """Bad input from the user. ``str(err)`` is the whole message: one line, problem + fix.
    ``exit_code``: what the CLI exits with (a subclass may name a more precise code)."""

    exit_code = EXIT_USAGE

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; fix: {fix}")
        self.problem = problem
        self.fix = fix


# One validator per kind of value, for options, markers and ini values alike: the error names
# where the value came from (``source``) and how to fix it. Here, not with the options, so the
# pytest plugin and the CLI share them and option handling imports nothing heavy.


def validate_int(value: Any, source: str, *, minimum: int, example: int | None = None, why: str = "") -> int:
    """An integer >= ``minimum`` (--fd-cycles, --cycles, -n, --jobs); ``why`` explains the minimum."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"{source} {value!r} is not an integer", f"pass e.g. {source} {minimum if example is None else example}"
        ) from None
    if number < minimum:
        raise UsageError(f"{source} {number} is below {minimum}", f"pass at least {minimum}" + (f" ({why})" if why else ""))
    return number


def validate_choice(value: str, source: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (--fd-runtime, --fd-device, ...)."""
    if value not in choices:
        raise UsageError(f"{source} {value!r} is not one of {', '.join(choices)}", "pass one of them")
    return value


def validate_directory(value: str, source: str) -> str:
    """A directory path, created later when missing; an existing file is refused. An empty value
    is refused too: it is an unset shell variable (``--out "$DIR"``), and read as a path it would
    be the cwd, where reports (and the moves of earlier ones) would land among the user's files."""
    if not value.strip():
        raise UsageError(
            f"{source} {value!r} is empty (an unset variable?)", f"pass a directory path, e.g. {source} fd-conformance-report"
        )
    if os.path.exists(value) and not os.path.isdir(value):
        raise UsageError(f"{source} {value!r} is an existing file", "give a directory path")
    return value


def validate_timeout(value: Any, source: str) -> float:
    """Timeouts come from options, markers and ini files; errors name which one. Here, not in
    the isolation module, so option handling at configure time imports no process machinery."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{source}={value!r} is not a number of seconds", f"set {source} to e.g. 300") from None
    if not seconds > 0:
        raise UsageError(f"{source}={value!r} must be positive", f"set {source} to e.g. 300") from None
    return seconds
