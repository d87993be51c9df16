"""What the one pass over a file records (classes, calls, findings) and what a run returns.

Plain data shared by the walker (:mod:`.scan`), the rules (:mod:`.rules`) and the report
formats (:mod:`.output`); it imports nothing of the linter but the door summaries' types, so none of
them import each other just to name a type.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from fd_conformance.errors import EXIT_OK, EXIT_VIOLATIONS
from fd_conformance.findings import Finding
from fd_conformance.lint.door_ir import ClassDoors


@dataclass
class ClassInfo:
    """What FDC001 needs about one class: its names, bases, and whether it provides clearing."""

    name: str
    path: str
    line: int
    col: int
    bases: tuple[str, ...]
    registered: bool
    provides_clear: bool  # defines either spelling (def or alias) or carries a graph-opt decorator
    abstract: bool


@dataclass
class FileScan:
    """Per-file output of the single AST pass."""

    path: str
    classes: list[ClassInfo] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    noqa: dict[int, frozenset[str]] = field(default_factory=dict)
    doors: list[ClassDoors] = field(default_factory=list)  # FDC103's per-class summaries (cross-file)
    names_draft_flag: bool = False  # FDC103: some file of the tree names a draft graph flag


@dataclass
class LintResult:
    """All findings of one run, sorted by location, and how many files were read."""

    findings: list[Finding]
    files_scanned: int
    context_files_parsed: int = 0  # files outside the given ones parsed for their classes only

    @property
    def exit_code(self) -> int:
        return EXIT_VIOLATIONS if any(f.is_error for f in self.findings) else EXIT_OK


Branches = tuple[tuple[int, int], ...]  # (id(If node), 0 body / 1 orelse): exclusive paths


@dataclass(frozen=True)
class Call:
    """A release or graph-clear call inside one function, as the order and guard rules see it."""

    kind: str  # "release" | "clear"
    name: str
    line: int
    col: int
    branches: Branches
    # For a graph clear: the call and its receiver (FDC102 picks the draft ones after the walk).
    node: ast.Call | None = field(default=None, compare=False)
    receiver: ast.expr | None = field(default=None, compare=False)
    helper: bool = False
