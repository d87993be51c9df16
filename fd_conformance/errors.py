"""User-facing errors: one line that names the problem and the fix, and a distinct exit code."""

from __future__ import annotations

from typing import Any

EXIT_OK = 0
EXIT_VIOLATIONS = 1  # the kit ran and found contract violations
EXIT_USAGE = 2  # bad input: path, config, --fd-model, option value
EXIT_INTERNAL = 3  # the kit itself broke; please report it


class UsageError(Exception):
    """Bad input from the user. ``str(err)`` is the whole message: one line, problem + fix."""

    exit_code = EXIT_USAGE

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; fix: {fix}")
        self.problem = problem
        self.fix = fix


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
