"""The import graph of a repository, read with :mod:`ast` (nothing is imported).

Why our own and not an import-graph library: a case must depend only on what its factory can
reach, so the graph keeps, per module, the import-time imports apart from each top-level
function's lazy ones, and which functions and module-level tables a function names; it is built
from the files git lists (a checkout whose packages are not installed and whose modules import
paddle at import time), and deleted modules are matched by name.

Imports inside function bodies count (reference factories import their model lazily). For
the factory's own module only the import-time imports plus those of the factory function and
the same-module functions it names are followed, so one ``cases.py`` holding many factories
does not make every case depend on every model.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from fd_conformance.changed.git import GitFailed, git, split_z
from fd_conformance.errors import UsageError


# --------------------------------------------------------------------------- the import graph
def _module_names(rel: PurePosixPath, is_package_dir: Mapping[PurePosixPath, bool]) -> set[str]:
    """Dotted names a repo file is importable as.

    Two guesses, both kept: from the topmost directory of its ``__init__.py`` chain (a ``src/``
    layout or a package nested in a monorepo), and from the repository root (namespace packages).
    """
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts:
        return set()
    names = {".".join(parts)}
    # Walk up while the parent directory is a regular package.
    directory = rel.parent
    start = len(directory.parts)
    while start > 0 and is_package_dir.get(PurePosixPath(*directory.parts[:start]), False):
        start -= 1
    names.add(".".join(parts[start:]) if parts[start:] else ".".join(parts))
    return {name for name in names if name and all(part.isidentifier() for part in name.split("."))}


@dataclass
class _ModuleSource:
    """What one repo module imports: at import time, and per top-level function (lazily)."""

    path: str
    is_package: bool
    import_time: set[str] = field(default_factory=set)
    by_function: dict[str, set[str]] = field(default_factory=dict)
    names_used: dict[str, set[str]] = field(default_factory=dict)  # function -> names it reads
    # Module-level data a factory may dispatch through (``BUILDERS = {"glm": partial(_glm, 4)}``):
    # bound name -> names its assignments read, so a reached table leads to the functions it holds.
    assigned: dict[str, set[str]] = field(default_factory=dict)
    # Names bound at module level by anything else (for-loop targets, augmented assignments,
    # ``with ... as``): what they hold is not read here, so reaching one follows the whole module.
    opaque: set[str] = field(default_factory=set)


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str | None:
    """Absolute base module of ``from X import ...`` (relative levels resolved); None if bogus."""
    if node.level == 0:
        return node.module
    package = module.split(".") if is_package else module.split(".")[:-1]
    if node.level - 1 > len(package):
        return None
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, node.module] if node.module else package) or None


def _imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    """Candidate modules a statement loads: each dotted prefix (packages' ``__init__`` run too),
    and for ``from X import y`` also ``X.y`` in case ``y`` is a submodule."""
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [alias.name for alias in node.names]
    else:
        base = _resolve_from(module, is_package, node)
        if base is None:
            return set()
        targets = [base] + [f"{base}.{alias.name}" for alias in node.names if alias.name != "*"]
    found: set[str] = set()
    for target in targets:
        parts = target.split(".")
        found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
    return found


def _scan_module(module: str, path: str, is_package: bool, tree: ast.Module) -> _ModuleSource:
    source = _ModuleSource(path=path, is_package=is_package)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            imports: set[str] = set()
            used: set[str] = set()
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    imports |= _imported_names(module, is_package, inner)
                elif isinstance(inner, ast.Name):
                    used.add(inner.id)
            # Decorators and defaults run at import time; the body only when called.
            for expr in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
                for inner in ast.walk(expr) if expr is not None else ():
                    if isinstance(inner, ast.Name):
                        used.add(inner.id)
            source.by_function[node.name] = imports
            source.names_used[node.name] = used
        else:
            # Class bodies and module statements execute at import time, and so do methods'
            # imports as far as this analysis cares (a method is reached through its class).
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    source.import_time |= _imported_names(module, is_package, inner)
            _scan_binding(source, node)
    return source


def _base_name(target: ast.expr) -> str | None:
    """``X`` of ``X``, ``X[k]``, ``X.attr``: the module-level name an assignment fills."""
    while isinstance(target, (ast.Subscript, ast.Attribute, ast.Starred)):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _scan_binding(source: _ModuleSource, node: ast.stmt) -> None:
    """Record which names a module-level assignment reads, per name it binds."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        read = {inner.id for inner in ast.walk(node.value) if isinstance(inner, ast.Name)} if node.value else set()
        for target in targets:
            for part in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                name = _base_name(part)
                if name is not None:
                    source.assigned.setdefault(name, set()).update(read)
    elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith, ast.If, ast.Try)):
        # Bindings whose value this analysis does not trace: reaching them is conservative.
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Name, ast.Subscript, ast.Attribute)) and isinstance(inner.ctx, ast.Store):
                name = _base_name(inner)  # ``TABLE[k] = fn`` in a loop fills TABLE
                if name is not None:
                    source.opaque.add(name)


@dataclass
class ImportGraph:
    """Repo modules (dotted name -> repo-relative path) and the modules each one imports."""

    root: Path
    modules: dict[str, _ModuleSource]
    unparsable: list[str]

    def module_of_path(self, rel: str) -> set[str]:
        return {name for name, src in self.modules.items() if src.path == rel}

    def imports_of(self, name: str, functions: frozenset[str] | None) -> set[str]:
        """Every module name ``name`` imports (repo or not); ``functions`` narrows the lazy ones."""
        src = self.modules[name]
        deps = set(src.import_time)
        for function in src.by_function if functions is None else functions:
            deps |= src.by_function.get(function, set())
        return deps

    def _edges(self, name: str, functions: frozenset[str] | None) -> set[str]:
        return {dep for dep in self.imports_of(name, functions) if dep in self.modules and dep != name}

    def closure(self, start: str, functions: frozenset[str] | None = None) -> set[str]:
        """``start`` and every repo module it imports transitively; ``functions`` narrows only
        ``start`` itself to import-time imports plus those functions' lazy imports."""
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
        parts = start.split(".")
        parents = {".".join(parts[:i]) for i in range(1, len(parts))} & self.modules.keys()
        seen = {start, *parents}
        todo: list[tuple[str, frozenset[str] | None]] = [(start, functions), *((p, None) for p in parents)]
        while todo:
            name, scope = todo.pop()
            for dep in self._edges(name, scope):
                if dep not in seen:
                    seen.add(dep)
                    todo.append((dep, None))
        return seen

    def reachable_functions(self, module: str, entry: str) -> frozenset[str] | None:
        """Top-level functions of ``module`` that ``entry`` reaches by name; None when ``entry``
        is not a top-level function there (then the whole module is followed)."""
        src = self.modules.get(module)
        if src is None or entry not in src.by_function:
            return None
        reached = {entry}
        seen = {entry}
        todo = [entry]
        while todo:
            current = todo.pop()
            # A function reads names; a module-level table (``BUILDERS = {"glm": _glm}``) reads
            # the names its assignments hold: follow both, so dispatch through data is followed.
            used = src.names_used[current] if current in src.by_function else src.assigned.get(current, set())
            for name in used - seen:
                if name in src.opaque:
                    return None  # bound by code this analysis does not trace: follow the module
                if name in src.by_function or name in src.assigned:
                    seen.add(name)
                    todo.append(name)
                    if name in src.by_function:
                        reached.add(name)
        return frozenset(reached)


def build_import_graph(repo: str | Path, files: Iterable[str] | None = None) -> ImportGraph:
    """Parse every tracked-or-untracked, non-ignored ``.py`` file of ``repo`` (never imports them)."""
    root = Path(repo).resolve()
    if files is None:
        try:
            listed = git(root, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.py")
        except GitFailed:
            raise UsageError(
                f"{root} is not inside a git work tree", "run in the model repository's checkout or pass --repo"
            ) from None
        files = split_z(listed)
    rels = sorted({PurePosixPath(f) for f in files if f.endswith(".py") and (root / f).is_file()})
    is_package_dir: dict[PurePosixPath, bool] = {rel.parent: True for rel in rels if rel.name == "__init__.py"}
    modules: dict[str, _ModuleSource] = {}
    unparsable: list[str] = []
    for rel in rels:
        try:
            tree = ast.parse((root / rel).read_bytes(), filename=str(rel))
        except (SyntaxError, ValueError, OSError):
            unparsable.append(str(rel))
            continue
        is_package = rel.name == "__init__.py"
        for name in _module_names(rel, is_package_dir):
            # First file wins for a contested name: sorted paths make that deterministic.
            modules.setdefault(name, _scan_module(name, str(rel), is_package, tree))
    return ImportGraph(root, modules, unparsable)
