"""User-facing errors: one line that names the problem and the fix, and a distinct exit code.

The one table of exit codes of every ``fd-conformance`` command and of the plugin's certifying
pytest sessions (README "CI gating" documents it; tests/test_run_cli.py keeps the two equal).
A CI step can branch on them: 1 means "the model is wrong", everything else "the run is".
"""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

EXIT_OK = 0  # every row certified (with mutants: every mutant caught exactly)
EXIT_VIOLATIONS = 1  # the kit ran and found contract violations (or a mutant was missed)
EXIT_USAGE = 2  # bad input: path, config, --fd-model, option value, unwritable --out
EXIT_INCOMPLETE = 3  # the session did not finish (INTERNALERROR, killed) or its results file is truncated/unreadable
EXIT_INTERNAL = EXIT_INCOMPLETE  # the older name: a kit that broke mid-session is an incomplete session
EXIT_NOTHING_CERTIFIED = 4  # no conformance check ran (no GPU for cuda rows, everything skipped); --allow-empty opts out
EXIT_LOCKED = 5  # --out is in use by another `fd-conformance run`
EXIT_MISSING_DEPENDENCY = 6  # `fd-conformance fastdeploy`: a package the FastDeploy tree imports is not installed
EXIT_SHARDS = (
    7  # `fd-conformance merge`: the shard outputs do not make one run (versions, case sets, counts, a missing or duplicate shard)
)
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
    EXIT_SHARDS: "shards refused: `merge` was given shard outputs that do not make one run (kit versions, case sets, devices or shard counts differ, a shard given twice, or one missing)",
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


# Weight-update cycles a run may ask for (--cycles, --fd-cycles): a soak of 1000 cycles takes
# minutes a case on CPU; a million (a typo) would only end in the watchdog, blamed on the model.
MAX_CYCLES = 1000


def validate_int(
    value: Any, source: str, *, minimum: int, maximum: int | None = None, example: int | None = None, why: str = ""
) -> int:
    """An integer in [``minimum``, ``maximum``] (--fd-cycles, --cycles, -n, --jobs); ``why`` explains the minimum."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(
            f"{source} {value!r} is not an integer", f"pass e.g. {source} {minimum if example is None else example}"
        ) from None
    if number < minimum:
        raise UsageError(f"{source} {number} is below {minimum}", f"pass at least {minimum}" + (f" ({why})" if why else ""))
    if maximum is not None and number > maximum:
        raise UsageError(f"{source} {number} is above {maximum}", f"pass at most {maximum}")
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


#: The largest capture size (tokens in one graphed step) a model case may declare. Engines capture
#: decode batches of a few hundred tokens (FastDeploy's and vLLM's default largest size is 512) and
#: piecewise prefill graphs of a few thousand; the kit runs a step at every declared size, so a size
#: far above that is a typo that would have every check killed for memory (and blamed on the model).
MAX_CAPTURE_SIZE = 8192


def validate_capture_sizes(value: Any, source: str, example: str) -> tuple[int, ...]:
    """Capture sizes (token counts, each with a graph of its own): a non-empty collection of distinct
    positive integers (never bool) up to :data:`MAX_CAPTURE_SIZE`, as a tuple in the given order.
    ``source`` names the field (``case 'm': capture_sizes``), ``example`` the fix's example value."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise UsageError(f"{source} {value!r} is not a tuple of token counts", f"give e.g. {example}")
    sizes = tuple(value)
    if not sizes:
        raise UsageError(f"{source} is empty", f"declare the sizes the engine captures, e.g. {example}")
    for raw in sizes:
        if isinstance(raw, bool) or not isinstance(raw, Integral):
            raise UsageError(f"{source} {sizes!r} has {raw!r}, which is not an integer token count", f"give e.g. {example}")
        size = int(raw)
        if size <= 0:
            raise UsageError(f"{source} {sizes!r} has {size!r}: a token count is positive", f"give e.g. {example}")
        if size > MAX_CAPTURE_SIZE:
            raise UsageError(
                f"{source} {sizes!r} has {size!r}, above the largest capture size the kit runs "
                f"(fd_conformance.errors.MAX_CAPTURE_SIZE = {MAX_CAPTURE_SIZE})",
                f"declare only the sizes the engine captures, at most {MAX_CAPTURE_SIZE} tokens each",
            )
    counts = [int(size) for size in sizes]
    twice = sorted({size for size in counts if counts.count(size) > 1})
    if twice:
        once = tuple(dict.fromkeys(counts))
        raise UsageError(
            f"{source} {sizes!r} lists {', '.join(map(str, twice))} more than once", f"list each size once: {once!r}"
        )
    return tuple(counts)


def validate_tolerance(value: Any, source: str) -> float:
    """A comparison tolerance (rtol, atol): a finite real number >= 0, never bool. A negative or NaN
    tolerance fails every comparison (a false positive), an infinite one passes every one."""
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
        raise UsageError(f"{source}={value!r} is not a finite number >= 0", f"set {source} to e.g. 1e-4")
    return float(value)
