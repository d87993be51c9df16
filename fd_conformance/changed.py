"""``fd-conformance changed``: which model cases a change can affect, so CI certifies only those.

Why static: a model PR in FastDeploy touches one model file, yet its modules import paddle and
custom ops at import time, so "import and see" is neither cheap nor possible on a CPU runner.
The import graph is read with :mod:`ast` from the repository's ``.py`` files (nothing is
imported) and a case is selected when the file its factory lives in, or any repository module
that file imports transitively, changed between ``git merge-base BASE HEAD`` and HEAD.

Imports inside function bodies count (reference factories import their model lazily). For
the factory's own module only the import-time imports plus those of the factory function and
the same-module functions it names are followed, so one ``cases.py`` holding many factories
does not make every case depend on every model. A change to the module file itself, to a
package ``__init__`` on the way, to the kit, or to packaging files selects conservatively.

The selection file is one case name per line, ``#`` comments allowed; :func:`read_selection`
reads it back for ``fd-conformance run --cases-file``.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import functools
import inspect
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from fd_conformance.cases import ModelCase
from fd_conformance.errors import EXIT_OK, UsageError

BASE_HELP = "revision the change is measured against (the PR's target, e.g. origin/main); the diff starts at merge-base(BASE, HEAD)"
HEAD_HELP = "revision that holds the change (default: HEAD)"
REPO_HELP = "git work tree whose files and import graph are read (default: current directory)"
OUTPUT_HELP = "write the selection to FILE instead of stdout (the file `fd-conformance run --cases-file` reads)"
FORMAT_HELP = "lines: one case name per line; json: cases with the changed files that selected them"
WORKTREE_HELP = "also count uncommitted and untracked changes in the work tree (local use before committing)"
MODEL_HELP = "case spec module:attr or file.py:attr (repeatable; default: installed `fd_conformance.cases` entry points)"
ALL_IF_HELP = "glob (repo-relative, fnmatch) whose change selects every case (repeatable; adds to the defaults)"
MUTANTS_HELP = "also consider the installed mutant cases (the kit's own CI)"

FORMATS = ("lines", "json")
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
_GIT_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- the selection file
def read_selection(path: str | Path) -> list[str]:
    """Case names from a selection file: one per line, ``#`` starts a comment, blanks ignored.

    Duplicates are dropped (first kept) because a hand-edited file often repeats a name, and
    running a case twice would only double the CI time.
    """
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(
            f"cannot read cases file {source}: {err.strerror}",
            "pass the file `fd-conformance changed --output FILE` wrote",
        ) from None
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        name = raw.split("#", 1)[0].strip()
        if not name:
            continue
        if len(name.split()) != 1:
            raise UsageError(
                f"cases file {source} line {number}: {name!r} is not one case name",
                "write one case name per line (comments start with #)",
            )
        if name not in names:
            names.append(name)
    return names


def apply_selection(cases: Sequence[ModelCase], names: Sequence[str], source: str) -> list[ModelCase]:
    """The cases ``names`` selects, in the given case order; an unknown name is a usage error.

    Unknown names are errors, not skips: a typo or a renamed case would otherwise certify
    nothing and still pass CI.
    """
    by_name = {case.name: case for case in cases}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        known = ", ".join(sorted(by_name)) or "none"
        raise UsageError(
            f"{source} names unknown case(s) {', '.join(map(repr, unknown))}",
            f"regenerate it with `fd-conformance changed` or use one of: {known}",
        )
    wanted = set(names)
    return [case for case in cases if case.name in wanted]


# --------------------------------------------------------------------------- git
def _git(repo: Path, *args: str) -> str:
    """Run git in ``repo``; every failure becomes a one-line UsageError naming the command."""
    try:
        proc = subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, timeout=_GIT_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise UsageError("git is not installed or not on PATH", "install git; `changed` reads the diff with it") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"`git {' '.join(args)}` took over {_GIT_TIMEOUT_S:.0f}s in {repo}", "check the repository") from None
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["no output"])[0]
        raise _GitFailed(detail)
    return proc.stdout


class _GitFailed(Exception):
    """A git command exited non-zero; callers turn it into a UsageError that says which input."""


def _commit(repo: Path, rev: str, option: str) -> str:
    """``rev`` as a full commit id, or a UsageError saying how to make it resolvable."""
    if not rev or rev.startswith("-"):
        raise UsageError(f"{option} {rev!r} is not a revision", f"pass a branch, tag or commit to {option}")
    try:
        return _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except _GitFailed:
        raise UsageError(
            f"{option} {rev!r} is not a commit in {repo}",
            "fetch it first (in GitHub Actions: actions/checkout with fetch-depth: 0) or pass an existing branch, tag or commit",
        ) from None


def _check_work_tree(repo: Path) -> Path:
    if not repo.is_dir():
        raise UsageError(f"--repo {repo} is not a directory", "pass the model repository's checkout")
    try:
        top = _git(repo, "rev-parse", "--show-toplevel").strip()
    except _GitFailed:
        raise UsageError(f"{repo} is not inside a git work tree", "run in the model repository's checkout or pass --repo") from None
    return Path(top)


def _split_z(text: str) -> list[str]:
    return [item for item in text.split("\0") if item]


def changed_files(repo: str | Path, base: str, head: str = "HEAD", *, include_worktree: bool = False) -> list[str]:
    """Repo-relative POSIX paths changed since ``merge-base(base, head)``.

    Renames are listed as delete + add (``--no-renames``) so both the old and the new path can
    select cases; with ``include_worktree`` uncommitted and untracked files count too.
    """
    root = _check_work_tree(Path(repo))
    base_id = _commit(root, base, "--base")
    head_id = _commit(root, head, "--head")
    try:
        merge_base = _git(root, "merge-base", base_id, head_id).strip()
    except _GitFailed:
        raise UsageError(
            f"--base {base!r} and --head {head!r} share no history (no merge base)",
            "fetch the full history (actions/checkout fetch-depth: 0) or pass a base on the same branch history",
        ) from None
    paths = set(_split_z(_git(root, "diff", "--name-only", "--no-renames", "-z", merge_base, head_id, "--")))
    if include_worktree:
        paths.update(_split_z(_git(root, "diff", "--name-only", "--no-renames", "-z", merge_base, "--")))
        paths.update(_split_z(_git(root, "ls-files", "--others", "--exclude-standard", "-z")))
    return sorted(paths)


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
            listed = _git(root, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.py")
        except _GitFailed:
            raise UsageError(f"{root} is not inside a git work tree", "run in the model repository's checkout or pass --repo") from None
        files = _split_z(listed)
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


# --------------------------------------------------------------------------- cases -> files
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


# --------------------------------------------------------------------------- CLI
def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fd-conformance changed`` (called by :func:`fd_conformance.cli.build_parser`)."""
    parser = subparsers.add_parser(
        "changed", help="list the model cases a git change can affect", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--base", required=True, metavar="REV", help=BASE_HELP)
    parser.add_argument("--head", default="HEAD", metavar="REV", help=HEAD_HELP)
    parser.add_argument("--repo", type=Path, default=Path("."), metavar="DIR", help=REPO_HELP)
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help=OUTPUT_HELP)
    parser.add_argument("--format", choices=FORMATS, default="lines", help=FORMAT_HELP)
    parser.add_argument("--include-worktree", action="store_true", help=WORKTREE_HELP)
    # --model as `fd-conformance run` spells it; --fd-model as the pytest plugin does.
    parser.add_argument("--model", "--fd-model", dest="fd_model", action="append", default=[], metavar="SPEC", help=MODEL_HELP)
    parser.add_argument("--all-if", action="append", default=[], metavar="GLOB", help=ALL_IF_HELP)
    parser.add_argument("--include-mutants", action="store_true", help=MUTANTS_HELP)
    parser.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    """args -> exit code 0 (an empty selection is a success: nothing to certify); UsageError -> 2."""
    from fd_conformance.case_loading import select_cases

    repo = _check_work_tree(args.repo)
    changed = changed_files(repo, args.base, args.head, include_worktree=args.include_worktree)
    # Specs given as relative file paths are relative to where the user stands, not --repo.
    cases = select_cases(args.fd_model, runtime="auto", include_mutants=args.include_mutants)
    graph = build_import_graph(repo)
    selection = select_changed(cases, changed, graph, all_if=(*DEFAULT_ALL_IF, *args.all_if))
    if args.format == "json":
        text = json.dumps(selection.to_dict(), indent=2) + "\n"
    else:
        text = "".join(f"{name}\n" for name in selection.cases)
    print(
        f"fd-conformance changed: {len(changed)} changed file(s), {len(selection.cases)} of {len(cases)} case(s) selected"
        + (f" (all: {selection.all_because} changed)" if selection.all_because else ""),
        file=sys.stderr,
    )
    if args.output is not None:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write {args.output}: {err.strerror}", "pass a writable path to --output") from None
    else:
        sys.stdout.write(text)
    return EXIT_OK
