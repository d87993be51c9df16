"""The shape of one finding code's registry entry: what detects it, its fix, what trips it, its doc.

Why a record of its own: a code is one concept with four parts (detector, fix hint, a bad/good
fixture or mutant, a doc). Kept together, ``fd-conformance explain``, the README's table, SARIF's
rule metadata and the findings a check emits all read the same text, and a test can refuse a
code that lacks a part. This module imports nothing from the kit, so the registry
(:mod:`fd_conformance.findings`) can sit on top of it without an import circle.
"""

from __future__ import annotations

import enum
import string
from dataclasses import dataclass


class Severity(str, enum.Enum):
    """How a finding gates CI: errors fail the run, warnings are reported only."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Doc:
    """A code's page, in ruff's order: what the check finds, why it matters, a bad and a good
    example. The fix is the rule's ``hint`` (one source), not repeated here."""

    what: str
    why: str
    bad: str
    good: str


@dataclass(frozen=True)
class Rule:
    """One finding code, all four parts.

    ``detectors``: dotted names of the functions that find it (``module.function`` or
    ``module.Class.method``); ``hint``: the fix every finding of the code carries, a
    :meth:`str.format` template whose ``{fields}`` the emitting site fills; ``trips``: fixtures or
    mutants that must raise it (a model case name, or a repository path with an optional
    ``::Name`` inside it); ``clean``: their correct twins, which must not; ``emitted_by``: the
    modules, besides the detectors' own, whose code names this code (they relay or re-judge its
    findings, or act on them): with the detectors, every module allowed to use the code
    (:func:`fd_conformance.codes.index.emitting_modules`; a test refuses any other).
    """

    code: str
    severity: Severity
    title: str
    detectors: tuple[str, ...]
    hint: str
    trips: tuple[str, ...]
    doc: Doc
    clean: tuple[str, ...] = ()
    emitted_by: tuple[str, ...] = ()

    @property
    def hint_fields(self) -> tuple[str, ...]:
        """The ``{fields}`` the hint template needs from the site that emits the code."""
        return tuple(name for _, name, _, _ in string.Formatter().parse(self.hint) if name)

    @property
    def where(self) -> str:
        """Which parts of the kit raise it, short (the README table's "raised by" column):
        ``lint: check_fdc101_release_before_clear``, ``lifecycle``, ``config``..."""
        parts: list[str] = []
        for dotted in self.detectors:
            label = _family_label(dotted)
            if label not in parts:
                parts.append(label)
        return ", ".join(parts)

    def hint_shown(self) -> str:
        """The hint as a reader sees it outside a finding: ``{cls}`` shown as ``<cls>``."""
        return self.hint.format_map({name: f"<{name}>" for name in self.hint_fields})


#: The kit package (second dotted component) -> the short name the README table uses for it.
_FAMILIES = {
    "protocol": "protocol",
    "lint": "lint",
    "lifecycle": "lifecycle",
    "suite": "suite",
    "config_rules": "config",
    "isolation": "isolation",
    "distributed": "tp",
}


def _family_label(dotted: str) -> str:
    parts = dotted.split(".")
    family = _FAMILIES.get(parts[1], parts[1]) if len(parts) > 1 else dotted
    if family == "lint":
        return f"lint: {parts[-1]}"
    return family
