"""How a suite check hands its findings to the plugin: one :class:`CheckVerdict` per test.

The check adds what it observed; :meth:`CheckVerdict.conclude` fails the test with one line per
error finding. The plugin reads the same object from the item's stash to put the finding codes
into the report, the matrix and the JUnit properties, so the codes never have to be parsed back
out of a failure message.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fd_conformance.findings import EventRef, Finding

# How a check that could not see what a graph captured ends: skipped with this reason, which makes
# its row "not-judged" (report/verdicts.py), never certified.
NOT_JUDGED = "not judged"


@dataclass
class CheckVerdict:
    """Findings of one check on one case; errors fail the test, warnings are only reported.
    ``unknown_graphs`` names the graphs whose captured weights the runtime could not read;
    ``clock`` gives the number of the check's latest lifecycle event (None: none yet), stamped on a
    finding that does not say which event it is about, so the check's picture marks the step it
    was found after (a graph alive after a clear: the clear's end)."""

    check: str
    findings: list[Finding] = field(default_factory=list)
    unknown_graphs: Callable[[], list[str]] = list
    clock: Callable[[], int | None] = lambda: None

    def add(self, finding: Finding) -> None:
        if finding.event is None or finding.event.seq is None:
            graph = finding.event.graph if finding.event is not None else ""
            finding = dataclasses.replace(finding, event=EventRef(self.clock(), graph))
        self.findings.append(finding)

    def extend(self, findings: Iterable[Finding]) -> None:
        for finding in findings:
            self.add(finding)

    @property
    def error_codes(self) -> list[str]:
        return sorted({f.code for f in self.findings if f.is_error})

    def failure_message(self) -> str:
        errors = [f for f in self.findings if f.is_error]
        lines = [f"{self.check}: {len(errors)} contract violation(s): {', '.join(self.error_codes)}"]
        lines.extend(f"  {f.format()}" for f in errors)
        return "\n".join(lines)

    def conclude(self) -> None:
        """Fail the running test when any error finding was recorded; else, when a graph's captured
        weights were unknown, skip it as not judged (a pass would certify what nobody saw)."""
        import pytest

        if self.error_codes:
            pytest.fail(self.failure_message(), pytrace=False)
        unknown = self.unknown_graphs()
        if unknown:
            pytest.skip(
                f"{NOT_JUDGED}: what graph(s) {', '.join(unknown[:3])} captured could not be read on this torch "
                "(fix: run on a torch the kit reads compiled graphs of, see docs: native mode)"
            )
