"""``run --last-failed``: the rows of the previous run in --out that did not pass, run again alone.

As pytest's ``--lf``, at the granularity of the certificate: a row (a case on a device) did not
pass when its verdict is anything but certified or caught (violations, missed, incomplete,
not-judged, not-run), read from OUT/conformance.json before the run moves it to previous/. The rows
reach the session as ``--fd-row CASE@DEVICE`` (the plugin collects no other row, so the report
holds those rows only). When every row passed, everything runs again, and the command says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from fd_conformance.cli.outdir import kit_wrote
from fd_conformance.errors import UsageError

OPTION = "--last-failed"
HELP = (
    "run only the rows (case on device) that did not pass in the previous run's OUT/conformance.json (violations, "
    "missed, incomplete, not-judged, not-run), as pytest's --lf; every row when all passed"
)
ROW_OPTION = "--fd-row"  # plugin.options.FD_ROW, without importing pytest here


def failed_rows(out: Path) -> list[tuple[str, str]]:
    """(case, device) of each row of OUT/conformance.json whose verdict is not a pass, in report
    order; a one-line UsageError when --out holds no report of an earlier run."""
    from fd_conformance.report.verdicts import PASSING_VERDICTS

    report = out / "conformance.json"
    if not kit_wrote(report) or report.stat().st_size == 0:
        raise UsageError(
            f"{OPTION}: --out {str(out)!r} holds no conformance.json of an earlier run to take the failed rows from",
            f"run once without {OPTION}, or pass the --out of the run to repeat",
        )
    document = json.loads(report.read_text(encoding="utf-8"))
    return [(row["name"], row["device"]) for row in document["cases"] if row["verdict"] not in PASSING_VERDICTS]


def row_arguments(rows: list[tuple[str, str]]) -> list[str]:
    """The child's options selecting ``rows`` ([]: every row)."""
    return [f"{ROW_OPTION}={case}@{device}" for case, device in rows]


def announce(rows: list[tuple[str, str]], out: Path) -> str:
    """The line saying what --last-failed selected."""
    if not rows:
        return f"fd-conformance run: {OPTION}: every row of the previous run in {out} passed: running every row"
    names = ", ".join(f"{case} [{device}]" for case, device in rows[:5]) + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
    return f"fd-conformance run: {OPTION}: re-running the {len(rows)} row(s) that did not pass: {names}"
