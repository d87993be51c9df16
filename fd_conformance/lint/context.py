"""Class context for linting a few files out of a larger tree (pre-commit passes only changed files).

Why: FDC001 follows class hierarchies across files. When only ``llama.py`` changed, its wrapper's
base class (and the clear method it inherits) lives in an unchanged file that pre-commit does not
pass; judged on the changed file alone the wrapper looks bare (a false FDC001), and a class that
is a wrapper only through an unchanged base is missed (a false negative).

How: the surrounding project (nearest ``pyproject.toml`` or ``.git`` above the files, or the
directory given with ``--context``) is indexed once by a text pre-filter: the names after
``class`` at the start of a line, found with one regular expression per file (C speed, no AST).
Only files that may define a base name the given files leave unresolved are parsed, and only
the bases of classes that could be reported are followed, round by round up the hierarchy.
Findings of those files are dropped: they only lend their classes.

Resolution is local-first: a base defined in a given file (or in a file already loaded) is not
searched for again elsewhere, as Python's own name lookup prefers the module's definition.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from fd_conformance.lint.config import LintConfig
from fd_conformance.lint.facts import ClassInfo, FileScan
from fd_conformance.lint.files import display_path, iter_python_files, matches
from fd_conformance.lint.scan import read_and_scan

#: Files that mark a project root when walking up from the linted files.
ROOT_MARKERS = ("pyproject.toml", ".git")
# A superset of real class statements: strings that look like one only cost an extra parse (the
# AST decides). ``class`` cannot follow ``;`` or a one-line compound header, so line starts suffice.
_CLASS_NAME = re.compile(r"^[ \t]*class[ \t]+(\w+)", re.MULTILINE)


def find_project_root(files: Sequence[Path], cwd: Path | None = None) -> Path | None:
    """Nearest directory at or above the files' common parent holding a root marker; else the
    working directory when it contains them all (pre-commit runs from the repository root)."""
    if not files:
        return None
    resolved = [f.resolve() for f in files]
    common = Path(os.path.commonpath([f.parent for f in resolved]))
    for directory in (common, *common.parents):
        if any((directory / marker).exists() for marker in ROOT_MARKERS):
            return directory
    here = (cwd or Path.cwd()).resolve()
    if all(here == f or here in f.parents for f in resolved):
        return here
    return None


class ClassIndex:
    """Class name -> files of the context tree that may define it; built on first use."""

    def __init__(self, context: Path, config: LintConfig, root: Path, skip: Iterable[Path]) -> None:
        self.context = context
        self.config = config
        self.root = root
        self.skip = {p.resolve() for p in skip}
        self._files: dict[str, list[Path]] | None = None
        self.files_indexed = 0

    def files_defining(self, name: str) -> list[Path]:
        if self._files is None:
            self._files = self._build()
        return self._files.get(name, [])

    def _build(self) -> dict[str, list[Path]]:
        index: dict[str, list[Path]] = {}
        for file in iter_python_files([self.context], self.config, self.root):
            if file.resolve() in self.skip:
                continue
            try:
                text = file.read_bytes().decode("utf-8", "replace")
            except OSError:
                continue  # unreadable context files lend nothing; they are not being linted
            self.files_indexed += 1
            if "class" not in text:
                continue
            for name in set(_CLASS_NAME.findall(text)):
                index.setdefault(name, []).append(file)
        return index


def _reportable(info: ClassInfo, config: LintConfig) -> bool:
    """Could FDC001 ever name this class? (Abstract, wrapper-base and excluded classes: never.)"""
    return not (info.abstract or info.name in config.wrapper_bases or matches(info.name, config.exclude_classes))


def _locally_provides(info: ClassInfo, by_name: dict[str, list[ClassInfo]], seen: set[int]) -> bool:
    """True when the class clears graphs through classes already known: nothing outside can change
    that (more definitions only add), so its unresolved bases need no search. ``seen`` holds class
    identities: a class named like its base (``class X(a.X)``) is not its own ancestor."""
    if info.provides_clear:
        return True
    for base in info.bases:
        for candidate in by_name.get(base, ()):
            if id(candidate) not in seen:
                seen.add(id(candidate))
                if _locally_provides(candidate, by_name, seen):
                    return True
    return False


def _resolved(name: str, by_name: dict[str, list[ClassInfo]]) -> bool:
    """Is a definition of ``name`` known that can be the base? One that lists its own name among
    its bases (``class X(a.X)``) is a subclass of the real one, which lives elsewhere."""
    return any(name not in info.bases for info in by_name.get(name, ()))


def resolve_context(
    scans: Sequence[FileScan], files: Sequence[Path], config: LintConfig, root: Path, context: Path
) -> tuple[list[FileScan], ClassIndex]:
    """Scans of the context files that define the given files' unresolved ancestors (transitively)."""
    index = ClassIndex(context, config, root, files)
    by_name: dict[str, list[ClassInfo]] = {}
    for scan in scans:
        for info in scan.classes:
            by_name.setdefault(info.name, []).append(info)
    roots = [
        info
        for scan in scans
        for info in scan.classes
        if _reportable(info, config) and not _locally_provides(info, by_name, {id(info)})
    ]
    loaded: list[FileScan] = []
    loaded_paths: set[Path] = set()
    visited: set[str] = set()
    frontier = [base for info in roots for base in info.bases]
    while frontier:
        name = frontier.pop()
        if name in visited:
            continue
        visited.add(name)
        if not _resolved(name, by_name):  # unresolved here: parse the files that may define it
            for file in index.files_defining(name):
                if file not in loaded_paths:
                    loaded_paths.add(file)
                    scan = read_and_scan(file, display_path(file, root), config)
                    loaded.append(scan)
                    for info in scan.classes:
                        by_name.setdefault(info.name, []).append(info)
        for info in by_name.get(name, ()):  # climb: known or just found, its bases matter too
            frontier.extend(info.bases)
    return loaded, index
