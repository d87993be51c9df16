"""User-facing errors: one line that names the problem and the fix, and a distinct exit code."""

from __future__ import annotations

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
