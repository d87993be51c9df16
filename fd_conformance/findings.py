"""Findings: the one result type every check in the kit returns.

Protocol checks, the static linter, lifecycle rules, suite checks and config rules all
speak in findings, so reports, exit codes and suppression work the same everywhere.
Codes are stable: CI configs and ``# noqa`` comments refer to them, so never renumber.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fd_conformance.codes import ENTRIES, Doc, Rule, Severity


@dataclass(frozen=True)
class Location:
    """Where a finding points: a source position, or an object/event when there is no file."""

    path: str | None = None
    line: int | None = None
    col: int | None = None
    obj: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            parts = [self.path]
            if self.line is not None:
                parts.append(str(self.line))
                if self.col is not None:
                    parts.append(str(self.col))
            where = ":".join(parts)
            return f"{where} ({self.obj})" if self.obj else where
        return self.obj or "<unknown>"


@dataclass(frozen=True)
class EventRef:
    """The lifecycle event a finding is about, for the picture of the check that made it: the
    event's number on its runtime's bus (None until the check's verdict stamps it) and the graph
    the finding names ("" when none)."""

    seq: int | None = None
    graph: str = ""


@dataclass(frozen=True)
class Finding:
    """One violation (or warning) of the graph-opt contract. ``event`` stays in the process that
    made it (never in :meth:`to_dict`): the check's lifecycle trace carries what it points at."""

    code: str
    severity: Severity
    message: str
    hint: str
    location: Location = Location()
    event: EventRef | None = field(default=None, compare=False)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def format(self) -> str:
        """``where: CODE message (hint)`` -- one line, as compilers and linters print."""
        return f"{self.location}: {self.code} {self.message} (fix: {self.hint})"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        del data["event"]
        return data


#: The registry: every finding code the kit raises -> its entry (:mod:`fd_conformance.codes`).
RULES: dict[str, Rule] = {}


def register_rule(rule: Rule) -> Rule:
    """Declare a code once; raising an undeclared code is a bug caught by the kit's tests."""
    existing = RULES.get(rule.code)
    if existing is not None and existing != rule:
        raise ValueError(f"finding code {rule.code} registered twice with different meanings")
    RULES[rule.code] = rule
    return rule


for _rule in ENTRIES:
    register_rule(_rule)


def fix_hint(code: str, **fields: object) -> str:
    """The registry's fix hint for ``code``, its ``{fields}`` filled: the one text a finding of the
    code carries as its fix (and a :class:`~fd_conformance.errors.UsageError` naming the code)."""
    rule = _rule_of(code)
    missing = [name for name in rule.hint_fields if name not in fields]
    if missing:
        raise KeyError(f"finding code {code}'s hint needs {', '.join(missing)}; pass them to make_finding()")
    return rule.hint.format_map(fields)


def make_finding(code: str, message: str, location: Location = Location(), **fields: object) -> Finding:
    """Build a finding whose severity and fix hint come from the registry (one source of truth);
    ``fields`` fill the hint's ``{placeholders}`` (``make_finding("FDC101", msg, loc, clear=..., release=...)``)."""
    if not isinstance(location, Location):  # the old (code, message, hint, location) order: say so loudly
        raise TypeError(f"make_finding({code!r}, ...): location must be a Location; the hint now comes from the registry")
    return Finding(code, _rule_of(code).severity, message, fix_hint(code, **fields), location)


def _rule_of(code: str) -> Rule:
    try:
        return RULES[code]
    except KeyError:
        raise KeyError(f"finding code {code} is not registered; add its entry to fd_conformance/codes/") from None


def rules_markdown() -> str:
    """The finding-code table for the README (a test keeps the README in sync with this)."""
    lines = ["| code | severity | raised by | meaning |", "|---|---|---|---|"]
    for rule in sorted(RULES.values(), key=lambda r: r.code):
        lines.append(f"| [{rule.code}]({CODES_DOC}#{rule.code.lower()}) | {rule.severity.value} | {rule.where} | {rule.title} |")
    return "\n".join(lines)


#: The generated page of every code (``python -m fd_conformance.findings --pages``; a test keeps it in sync).
CODES_DOC = "docs/codes.md"


def rule_page(rule: Rule) -> str:
    """One code's page, ruff-style: what it does, why it is bad, an example, what to use instead,
    the fix (the registry's hint), and where it comes from. What ``fd-conformance explain`` prints."""
    indent = "    "
    bad = "\n".join(indent + line for line in rule.doc.bad.splitlines())
    good = "\n".join(indent + line for line in rule.doc.good.splitlines())
    return "\n".join(
        [
            f"## {rule.code}",
            "",
            f"**{rule.title}** ({rule.severity.value}; raised by {rule.where})",
            "",
            "### What it does",
            rule.doc.what,
            "",
            "### Why is this bad?",
            rule.doc.why,
            "",
            "### Example",
            bad,
            "",
            "### Use instead",
            good,
            "",
            "### Fix",
            rule.hint_shown(),
            "",
            "### Where",
            "Detected by " + ", ".join(f"`{d}`" for d in rule.detectors) + ".",
            *(["Also reported by " + ", ".join(f"`{m}`" for m in rule.emitted_by) + "."] if rule.emitted_by else []),
            "Tripped by " + ", ".join(f"`{t}`" for t in rule.trips) + "; not by " + ", ".join(f"`{c}`" for c in rule.clean) + ".",
        ]
    )


def codes_markdown() -> str:
    """Every code's page, in code order: the content of :data:`CODES_DOC`."""
    head = "# Finding codes\n\nGenerated from `fd_conformance/codes/` (`python -m fd_conformance.findings --pages`).\n"
    return head + "".join(f"\n{rule_page(rule)}\n" for rule in sorted(RULES.values(), key=lambda r: r.code))


__all__ = [
    "CODES_DOC",
    "RULES",
    "Doc",
    "Finding",
    "Location",
    "Rule",
    "Severity",
    "codes_markdown",
    "fix_hint",
    "make_finding",
    "register_rule",
    "rule_page",
    "rules_markdown",
]


if __name__ == "__main__":  # pragma: no cover - `python -m fd_conformance.findings [--pages]` prints the table
    import sys

    print(codes_markdown() if "--pages" in sys.argv else rules_markdown(), end="\n" if "--pages" not in sys.argv else "")
