"""Verdicts: a matrix cell per check, a verdict per row (case and device), the session's exit code.

Computed once, here, from what each row owes (the plan's placeholders included) and what ran;
every output (conformance.json, the certificate, the terminal matrix) shows these values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fd_conformance.report.results import (
    DESELECTED,
    FAILED,
    MISSING,
    NOT_RAN,
    PASSED,
    SKIPPED,
    XFAILED,
    CheckResult,
)
from fd_conformance.verdict import NOT_JUDGED

# Per-case verdicts. A mutant is "caught" when the suite reports exactly its expected codes.
CERTIFIED, VIOLATIONS, NOT_RUN, CAUGHT, MISSED = "certified", "violations", "not-run", "caught", "missed"
INCOMPLETE = "incomplete"  # a check the row owes has no result: the run did not finish
NOT_JUDGED_ROW = "not-judged"  # a check could not see what a graph captured (verdict.NOT_JUDGED)
# Only these pass: a row is certified when every check it owes ran (or skipped for its stated
# reason) and passed; a row that ran nothing (not-run) certified nothing, so it is not a pass.
PASSING_VERDICTS = frozenset({CERTIFIED, CAUGHT})

LINE_LIMIT = 400  # one certificate line (a finding message can be a whole traceback)
CELL_REASON_LIMIT = 40  # a failing cell without a finding code shows this much of its reason


def _row_key(result: CheckResult) -> tuple[str, str]:
    return (result.case, result.device)


def checks_of(results: Sequence[CheckResult]) -> list[str]:
    """Column order: first appearance, which follows the suite's module order."""
    return list(dict.fromkeys(r.check for r in results))


def cell(results: Sequence[CheckResult]) -> str:
    """One matrix cell from every test of one check on one case (parametrized variants merge)."""
    codes = sorted({c for r in results for c in r.codes})
    if any(r.outcome == FAILED for r in results):
        if codes:
            return "FAIL " + ",".join(codes)
        # No finding code (a factory that raised, an assertion of the suite): the reason, short.
        failed = next((r for r in results if r.outcome == FAILED and r.message), None)
        reason = failed.message.replace(f"{failed.case}: ", "", 1) if failed is not None else "error"
        return "FAIL " + shorten(reason, CELL_REASON_LIMIT)
    if any(r.outcome == MISSING for r in results):
        return "NOT RUN"
    if any(r.outcome == DESELECTED for r in results):
        return "DESELECTED"
    if any(r.outcome == XFAILED for r in results):
        return "CAUGHT " + ",".join(codes)
    if any(r.outcome == PASSED for r in results):
        warned = sorted({c for r in results for c in r.warnings})
        return "PASS" + (f" (warn {','.join(warned)})" if warned else "")
    return "SKIP" if results else "-"


def shorten(text: str, limit: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def result_failure_reason(result: CheckResult) -> str:
    """One line saying why a result failed: its first error finding, else its message."""
    for finding in result.findings:
        if finding.get("severity", "error") == "error":
            return f"{finding['code']} {finding.get('message', '')}".strip()
    return result.message or (",".join(result.codes) if result.codes else "failed without a message (see pytest.log)")


def case_verdict(results: Sequence[CheckResult], expect_mutants: bool) -> tuple[str, list[str]]:
    """(verdict, observed codes) for one case on one device; warnings count as observed, so a
    mutant built to draw a warning (FDC002) is caught by it. A row with a planned check that has
    no result (it did not run, or was deselected) is INCOMPLETE whatever the others say: its verdict
    is not final, unless a check of a model (not a mutant) failed: that is final. A failure that carries finding codes is explained by them: a mutant caught by a
    hang (FDC501) or crash (FDC502), whose report the isolation parent makes, is caught like any other."""
    observed = sorted(
        {c for r in results if r.outcome in (FAILED, XFAILED) for c in r.codes} | {c for r in results for c in r.warnings}
    )
    expected = sorted({c for r in results for c in r.expected})
    if any(r.outcome in NOT_RAN for r in results):
        # A failure of a model (not a mutant, whose codes must be complete) is final however
        # many checks did not run: the row can never be certified, and "incomplete" would hide it.
        failed = any(r.outcome == FAILED for r in results)
        return (VIOLATIONS if failed and not (expect_mutants and expected) else INCOMPLETE), observed
    ran = any(r.outcome != SKIPPED for r in results)
    if not ran:
        # A mutant that ran nothing proved nothing: with expect_mutants it is MISSED (a check
        # lost its reach, e.g. a device row skipping it), unless the row cannot be judged here.
        if expect_mutants and expected and not any(unavailable_here(r) or _not_judged(r) for r in results):
            return MISSED, observed
        return NOT_RUN, observed
    if not any(r.outcome == FAILED for r in results) and any(_not_judged(r) for r in results):
        return NOT_JUDGED_ROW, observed  # never certified, nor a caught mutant: nothing was seen
    if expect_mutants and expected:
        failed_unexplained = any(r.outcome == FAILED and not r.codes for r in results)
        return (CAUGHT if observed == expected and not failed_unexplained else MISSED), observed
    if any(r.outcome == FAILED for r in results):
        return VIOLATIONS, observed
    return CERTIFIED, observed


# Skip reasons meaning "this machine cannot run the row", not "the check chose not to run": only
# these excuse a mutant that ran nothing. Their texts are made where the skips are (none shares a
# constant with this module); tests/test_issue51_verdicts.py pins each source's text to a marker.
UNAVAILABLE_SKIP_MARKERS = (
    "is not installed",  # plugin.fixtures.fd_runtime: the case's framework is not installed
    "no GPU",  # devices.no_gpu_reason (a cuda row on a GPU-less host); paddle's create("cuda")
    "sees no CUDA device",  # torch's create("cuda") on a torch without CUDA
    "need a GPU",  # TorchRuntime.native_graphs_unavailable: a native row on a cpu device
)


def _not_judged(result: CheckResult) -> bool:
    return result.outcome == SKIPPED and result.message.removeprefix("Skipped: ").startswith(NOT_JUDGED)


def unavailable_here(result: CheckResult) -> bool:
    """A skip because the row's framework or device is absent here, which proves nothing either way."""
    return result.outcome == SKIPPED and any(marker in result.message for marker in UNAVAILABLE_SKIP_MARKERS)


def excused(verdict: str, row: Sequence[CheckResult], expect_mutants: bool) -> bool:
    """A mutant row that could not be judged here (case_verdict makes it NOT_RUN, never MISSED): it
    proves nothing either way, so it neither passes nor fails the run; a model's not-run row does."""
    return verdict == NOT_RUN and expect_mutants and any(r.expected for r in row)


def rows_by_key(results: Sequence[CheckResult]) -> dict[tuple[str, str], list[CheckResult]]:
    rows: dict[tuple[str, str], list[CheckResult]] = {}
    for result in results:
        rows.setdefault(_row_key(result), []).append(result)
    return rows


def graphs_label(results: Sequence[CheckResult]) -> str:
    real = {r.graphs_real for r in results if r.graphs_real is not None}
    if real == {True}:
        return "real"
    if real == {False}:
        return "host-emulated"
    return "mixed" if real else "n/a"


def exit_code(results: Sequence[CheckResult], expect_mutants: bool = False) -> int:
    """EXIT_OK when every row is certified (or every mutant caught exactly); EXIT_INCOMPLETE when
    a planned check has no result; EXIT_NOTHING_CERTIFIED when rows exist but no check ran in any;
    else EXIT_VIOLATIONS. No rows at all is EXIT_OK: an empty selection certifies nothing on purpose."""
    from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_NOTHING_CERTIFIED, EXIT_OK, EXIT_VIOLATIONS

    rows = list(rows_by_key(results).values())
    verdicts = [case_verdict(row, expect_mutants)[0] for row in rows]
    if INCOMPLETE in verdicts or NOT_JUDGED_ROW in verdicts:
        return EXIT_INCOMPLETE  # a verdict that is not final: more must run (or be readable) first
    if verdicts and all(v == NOT_RUN for v in verdicts):
        return EXIT_NOTHING_CERTIFIED
    passing = all(v in PASSING_VERDICTS or excused(v, row, expect_mutants) for v, row in zip(verdicts, rows, strict=True))
    return EXIT_OK if passing else EXIT_VIOLATIONS


def session_exit_code(
    results: Sequence[CheckResult],
    expect_mutants: bool = False,
    interrupted: str | None = None,
    nothing_certified: str | None = None,
    allow_empty: bool = False,
    outside_failures: Sequence[str] = (),
) -> int:
    """The exit code a session's documents carry, equal to the one its command exits with:
    :func:`exit_code` of the results, EXIT_INCOMPLETE when the session was ``interrupted`` (even
    with every planned check done), EXIT_NOTHING_CERTIFIED when the caller knows it certified
    nothing (``nothing_certified``: every check deselected leaves no row to say so), and EXIT_OK
    for a session that certified nothing when the user allowed that (``allow_empty``); a passing
    verdict is EXIT_VIOLATIONS when tests outside the matrix failed (``outside_failures``), as pytest exits."""
    from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_NOTHING_CERTIFIED, EXIT_OK, EXIT_VIOLATIONS

    if interrupted:
        return EXIT_INCOMPLETE
    code = exit_code(results, expect_mutants)
    if outside_failures and code == EXIT_OK:
        return EXIT_VIOLATIONS
    if nothing_certified is not None and code == EXIT_OK and not any(r.outcome != SKIPPED for r in results):
        code = EXIT_NOTHING_CERTIFIED
    return EXIT_OK if allow_empty and code == EXIT_NOTHING_CERTIFIED else code


def all_deselected_reason(planned: Iterable[Mapping[str, Any]]) -> str | None:
    """Why a session certified nothing when its plan has conformance checks and -k/-m deselected
    every one (the rows are then out of the session, so the results are empty); None otherwise."""
    checks = [t for t in planned if t.get("case")]
    if not checks or not all(t.get("deselected") for t in checks):
        return None
    return f"all {len(checks)} conformance checks were deselected (-k/-m)"


def nothing_ran_reason(results: Sequence[CheckResult]) -> str:
    """Why no check ran: the most common skip reason (no GPU, framework missing, deselected)."""
    reasons = [r.message for r in results if r.outcome == SKIPPED and r.message]
    if not reasons:
        return "no conformance check was collected (no case selected, or every check deselected)"
    common = max(set(reasons), key=reasons.count)
    return f"all {len(results)} conformance checks skipped, e.g. {common!r}"


def verdicts_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a conformance.json says that must not depend on scheduling (serial, ``-n 2``, ``-n 4``,
    isolation on or off): each row's verdict and cells, each test's outcome and codes."""
    rows = {
        (c["name"], c["device"]): (c["verdict"], {k: (v["cell"], sorted(v["codes"])) for k, v in c["checks"].items()})
        for c in document["cases"]
    }
    tests = {r["nodeid"]: (r["outcome"], sorted(r["codes"])) for r in document["results"]}
    return {"rows": rows, "tests": tests}
