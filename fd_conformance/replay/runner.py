"""A reproducer's run: one check of one row, called directly in this process.

The case is loaded from the spec(s) the run used, the check's fixtures are built by the same
builders the kit's pytest fixtures use (:mod:`fd_conformance.plugin.fixtures`: the runtime, the
subject and its release), and the check function is called with them and its parametrize values.
pytest is imported as a library only, for the outcome exceptions a check ends with: no session,
no kit plugin, no isolation worker stands between the author's debugger and the model.

Exit status: 0 the check passed, 1 it failed (an error finding, a failure, an exception; a hang
too: faulthandler prints every thread's stack and exits 1), 4 it skipped (it cannot be judged
here, e.g. a cuda row without a GPU: neither the defect nor its fix is shown), 2 the reproducer
itself is wrong (the case or check no longer exists). A crash dies as the run's worker died.
"""

from __future__ import annotations

import contextlib
import faulthandler
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TextIO

import pytest

from fd_conformance.errors import EXIT_NOTHING_CERTIFIED, EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, UsageError
from fd_conformance.isolation.plugin import DEFAULT_TIMEOUT_S, check_deadline
from fd_conformance.plugin.fixtures import case_runtime, case_subject, unknown_graphs_of
from fd_conformance.plugin.options import DEFAULT_CYCLES, DEVICES_KEY
from fd_conformance.replay.target import CheckTarget, resolve_check
from fd_conformance.verdict import CheckVerdict

if TYPE_CHECKING:
    from fd_conformance.cases import ModelCase

PREFIX = "fd-conformance replay"
CYCLES_FIXTURE = "fd_cycles"
NAMES_SHOWN = 8  # case names a "no such case" error lists


def replay(
    *,
    specs: Sequence[str] = (),
    case: str,
    device: str,
    nodeid: str,
    cycles: int = DEFAULT_CYCLES,
    include_mutants: bool = False,
    timeout: float | None = None,
) -> int:
    """Run the check ``nodeid`` names on ``case`` (loaded from ``specs``, or the installed cases,
    as the run loaded it) on ``device``; print its findings and return the exit status (module
    docstring). ``timeout``: seconds before a hang is called (the run's watchdog deadline)."""
    if not faulthandler.is_enabled():  # a crash prints where it happened, as the run's crash report did
        faulthandler.enable(file=_stderr())
    try:
        target = resolve_check(nodeid, device)
        unknown = [name for name in target.arguments if name not in target.params and name not in FIXTURES]
        if unknown:
            raise UsageError(
                f"{nodeid} takes {', '.join(unknown)}, which a reproducer does not build",
                "run it through `fd-conformance run` instead",
            )
        say(f"loading case {case!r} from {', '.join(specs) or 'the installed cases'}")
        model_case = load_case(specs, case, include_mutants)
    except UsageError as err:
        print(f"{PREFIX}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    if timeout is None:
        timeout = check_deadline(DEFAULT_TIMEOUT_S, cycles if CYCLES_FIXTURE in target.arguments else None)
    say(f"{case} [{device}] {target.check}: {nodeid}")
    # Armed once the imports are done, as the run's watchdog starts once its worker is ready.
    faulthandler.dump_traceback_later(timeout, exit=True, file=_stderr())
    try:
        outcome = run_target(target, model_case, device, cycles, timeout)
    finally:
        faulthandler.cancel_dump_traceback_later()
    print(f"{PREFIX}: {outcome.line}", flush=True)
    return outcome.code


def _stderr() -> TextIO:
    """The process's own stderr, where faulthandler can write (a caller's replacement may have no fileno)."""
    return sys.__stderr__ if sys.__stderr__ is not None else sys.stderr


def say(text: str) -> None:
    """A step, on stderr, flushed: the last one printed before a hang's stacks is where it hung."""
    print(f"{PREFIX}: {text}", file=sys.stderr, flush=True)


def load_case(specs: Sequence[str], name: str, include_mutants: bool) -> ModelCase:
    """The case named ``name`` among those the run's specs (and flags) give."""
    from fd_conformance.cases import select_cases  # every known framework: a missing one skips, as in the run

    cases = select_cases(list(specs), include_mutants=include_mutants)
    for found in cases:
        if found.name == name:
            return found
    where = ", ".join(specs) or "the installed cases" + (" and mutants" if include_mutants else "")
    names = ", ".join(c.name for c in cases[:NAMES_SHOWN]) + (f" ... ({len(cases)} in all)" if len(cases) > NAMES_SHOWN else "")
    raise UsageError(f"{where} give(s) no case {name!r}", f"pass case= one of: {names or 'none'}")


@dataclass
class Outcome:
    code: int
    line: str  # the last line printed: PASS, FAIL CODES, SKIP reason


class Row:
    """The fixture values of one replayed check, built on demand by the kit's own builders and
    released, as the fixtures release them, when ``stack`` closes."""

    def __init__(self, case: ModelCase, device: str, cycles: int, check: str, stack: contextlib.ExitStack) -> None:
        self.case, self.device, self.cycles, self.check, self.stack = case, device, cycles, check, stack
        self.values: dict[str, Any] = {}

    def value(self, name: str) -> Any:
        if name not in self.values:
            self.values[name] = FIXTURES[name](self)
        return self.values[name]

    def runtime(self) -> Any:
        say(f"building the {self.case.runtime} runtime on {self.device}")
        return case_runtime(self.case, self.device)

    def subject(self) -> Any:
        runtime = self.value("fd_runtime")
        say(f"building the subject ({self.case.name}'s factory)")
        return self.stack.enter_context(case_subject(self.case, runtime))

    def verdict(self) -> CheckVerdict:
        def unknown() -> list[str]:
            subject = self.values.get("fd_subject")
            read = unknown_graphs_of(subject) if subject is not None else None
            return read() if read is not None else []

        return CheckVerdict(self.check, unknown_graphs=unknown)

    def request(self) -> Any:
        """What a check reads of pytest's request: the session's device rows, this one first
        (the config check runs on the first row only, which the failed row was)."""
        stash = pytest.Stash()
        stash[DEVICES_KEY] = (self.device,)
        return SimpleNamespace(config=SimpleNamespace(stash=stash))

    @property
    def findings(self) -> list[Any]:
        verdict = self.values.get("fd_verdict")
        return list(verdict.findings) if verdict is not None else []


#: The fixtures a suite check may take -> how a reproducer builds each (plugin/fixtures.py's builders).
FIXTURES: dict[str, Callable[[Row], Any]] = {
    "fd_case": lambda row: row.case,
    "fd_device": lambda row: row.device,
    "fd_cycles": lambda row: row.cycles,
    "fd_runtime": Row.runtime,
    "fd_subject": Row.subject,
    "fd_verdict": Row.verdict,
    "request": Row.request,
}


def run_target(target: CheckTarget, case: ModelCase, device: str, cycles: int, timeout: float) -> Outcome:
    """Build, call, release; the outcome as the run would have judged it."""
    row = Row(case, device, cycles, target.check, contextlib.ExitStack())
    try:
        with row.stack:
            kwargs = {name: target.params[name] if name in target.params else row.value(name) for name in target.arguments}
            say(f"running {target.function.__name__} (a hang past {timeout:g} s prints every thread's stack and exits 1)")
            target.function(**kwargs)
            say("releasing the subject")
    except pytest.fail.Exception as failed:
        return _failed(row.findings, failed.msg or "")
    except pytest.skip.Exception as skipped:
        return Outcome(EXIT_NOTHING_CERTIFIED, f"SKIP {skipped.msg} (not judged here: neither the defect nor its fix is shown)")
    except Exception as err:  # noqa: BLE001 - the check's own failure: the run reported it as a failed test
        traceback.print_exc()
        return _failed(row.findings, f"{type(err).__name__}: {err}")
    _print_findings(row.findings)
    warned = sorted({f.code for f in row.findings if not f.is_error})
    return Outcome(EXIT_OK, "PASS" + (f" (warn {','.join(warned)})" if warned else ""))


def _failed(findings: list[Any], message: str) -> Outcome:
    codes = sorted({f.code for f in findings if f.is_error})
    _print_findings(findings)
    if codes:
        return Outcome(EXIT_VIOLATIONS, f"FAIL {','.join(codes)}")
    print(message, flush=True)
    first = (message.strip().splitlines() or ["failed"])[0]
    return Outcome(EXIT_VIOLATIONS, f"FAIL (no finding code): {first}")


def _print_findings(findings: list[Any]) -> None:
    for finding in findings:
        print(finding.format(), flush=True)
