"""Changed files -> the model cases they can affect (the content of ``fd-conformance changed``).

A case is selected when the file its factory lives in, or any repository module that file
imports transitively (:mod:`.imports`), changed. A change to the module file itself, to a
package ``__init__`` on the way, to the kit, or to packaging files selects conservatively.
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fd_conformance.cases.contract import ModelCase
from fd_conformance.changed.imports import ImportGraph

# Files that change how every model is built or installed: a change selects every case.
# ``fd_conformance/*`` is the kit itself when the repository is the kit's own.
DEFAULT_ALL_IF = (
    "fd_conformance/*",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "constraints*.txt",
    "conftest.py",
    "*/conftest.py",
)


def _factory_function(case: ModelCase) -> object:
    """The function behind a case's factory (partials unwrapped)."""
    factory: object = case.factory
    while isinstance(factory, functools.partial):
        factory = factory.func
    return factory


def _factory_location(case: ModelCase, graph: ImportGraph) -> tuple[str | None, str | None]:
    """(repo module, top-level function name) the case's factory lives in, when in this repo.

    The file the code object came from is tried first (editable installs and ``file.py:attr``
    specs, whose module names are synthetic); the dotted module name second (a regular install
    of the same package whose sources are in the checkout).
    """
    factory = _factory_function(case)
    name = getattr(factory, "__name__", None)
    qualname = getattr(factory, "__qualname__", "")
    function = name if name and qualname == name else None  # only top-level functions narrow
    try:
        file = inspect.getsourcefile(factory)  # type: ignore[arg-type]
    except TypeError:
        file = None
    if file:
        try:
            rel = Path(file).resolve().relative_to(graph.root).as_posix()
        except ValueError:
            rel = None
        if rel is not None:
            names = graph.module_of_path(rel)
            if names:
                return sorted(names, key=len)[0], function
    module = getattr(factory, "__module__", None) or case.module
    if module in graph.modules:
        return module, function
    return None, None


@dataclass(frozen=True)
class Selection:
    """The cases a change selects, why, and what was compared (the JSON format's content)."""

    changed: tuple[str, ...]
    cases: tuple[str, ...]
    because: Mapping[str, tuple[str, ...]]  # case -> changed files that selected it
    all_because: str | None = None  # set when a global file selected everything
    unmapped: tuple[str, ...] = ()  # cases whose factory is not in this repository

    def to_dict(self) -> dict[str, object]:
        return {
            "changed_files": list(self.changed),
            "all_selected_because": self.all_because,
            "cases": [{"name": name, "because": list(self.because.get(name, ()))} for name in self.cases],
            "not_in_repository": list(self.unmapped),
        }


def select_changed(
    cases: Sequence[ModelCase],
    changed: Sequence[str],
    graph: ImportGraph,
    *,
    all_if: Sequence[str] = DEFAULT_ALL_IF,
) -> Selection:
    """Map changed repo-relative paths to the cases they can affect.

    A case whose factory is not in the repository (installed from elsewhere) is never selected
    by file changes, only by a global file: its code cannot have changed in this diff.
    """
    changed = tuple(sorted(set(changed)))
    for path in changed:
        if any(fnmatch.fnmatchcase(path, pattern) for pattern in all_if):
            names = tuple(case.name for case in cases)
            return Selection(changed, names, {n: (path,) for n in names}, all_because=path)
    # Changed modules by path, including deleted files, which the graph (built from the
    # work tree) cannot hold: their names come from the path alone.
    changed_py = [p for p in changed if p.endswith(".py")]
    changed_modules: dict[str, str] = {}
    for path in changed_py:
        for name in graph.module_of_path(path):
            changed_modules[name] = path
    for path in changed_py:
        rel = PurePosixPath(path)
        if not graph.module_of_path(path):
            parts = list(rel.with_suffix("").parts)
            for start in range(len(parts)):
                dotted = ".".join(p for p in parts[start:] if p != "__init__")
                if dotted:
                    changed_modules.setdefault(dotted, path)
    selected: list[str] = []
    because: dict[str, tuple[str, ...]] = {}
    unmapped: list[str] = []
    for case in cases:
        module, function = _factory_location(case, graph)
        if module is None:
            unmapped.append(case.name)
            continue
        scope = graph.reachable_functions(module, function) if function else None
        reach = graph.closure(module, scope)
        # Deleted modules are not graph nodes: match them against the raw import names too.
        raw = graph.imports_of(module, scope)
        for dep in reach - {module}:
            raw |= graph.imports_of(dep, None)
        hits = sorted({path for name, path in changed_modules.items() if name in reach or name in raw})
        if hits:
            selected.append(case.name)
            because[case.name] = tuple(hits)
    return Selection(changed, tuple(selected), because, None, tuple(unmapped))
