"""The lines ``run`` and ``report`` print about a document: the verdict line, the not-run summary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def verdict_line(document: Mapping[str, Any]) -> str:
    """The last line of `run` and `report`: the overall verdict and its counts."""
    from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_NOTHING_CERTIFIED, EXIT_OK

    counts: dict[str, int] = {}
    for c in document["cases"]:
        counts[c["verdict"]] = counts.get(c["verdict"], 0) + 1
    rows = ", ".join(f"{n} {v}" for v, n in counts.items())
    tests = ", ".join(f"{n} {o}" for o, n in document["summary"].items() if n)
    run = document.get("run", {})
    code = document["exit_code"]
    if run.get("status") == "interrupted":
        head = f"INTERRUPTED ({run['reason']})"
    elif code == EXIT_INCOMPLETE:
        head = "INCOMPLETE"
    elif code == EXIT_NOTHING_CERTIFIED:
        head = "NOTHING CERTIFIED"
    else:
        head = "PASS" if code == EXIT_OK else "FAIL"
    missing = f"; {len(run['not_run'])} planned check(s) did not run" if run.get("not_run") else ""
    if run.get("deselected"):
        missing += f"; {len(run['deselected'])} owed check(s) deselected"
    return f"fd-conformance: {head} (rows: {rows or 'none'}; tests: {tests or 'none'}{missing})"


def not_run_summary(not_run: Sequence[str], shown: int = 10) -> str:
    """``N planned check(s) did not run: a, b, ... and K more`` for one terminal line."""
    names = ", ".join(not_run[:shown]) + (f" and {len(not_run) - shown} more" if len(not_run) > shown else "")
    return f"{len(not_run)} planned check(s) did not run: {names}"
