"""Static linter: graph-lifecycle defects found in model source trees without importing them.

Why static: FastDeploy's model and runner modules import paddle and custom CUDA ops at import
time, so a CI job without a GPU cannot even import them; yet the three defects this kit exists
for (a wrapper with no clear method, draft graphs destroyed after the weights they captured,
draft clearing gated by the main model's flag) are all visible in the source. Each file is
parsed once with :mod:`ast`; one recursive pass collects everything the rules need.

Rules: FDC001 wrapper without a clear method, FDC002 legacy spelling, FDC004 near-miss
spelling, FDC101 release before graph clear, FDC102 draft clear under the main flag only,
FDC100 file could not be parsed. See :mod:`fd_conformance.lint_config` for the names.
"""

from __future__ import annotations

import argparse
import ast
import bisect
import contextlib
import dataclasses
import fnmatch
import functools
import gc
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fd_conformance.errors import EXIT_OK, EXIT_VIOLATIONS, UsageError
from fd_conformance.findings import Finding, Location, make_finding
from fd_conformance.lint_config import CANONICAL, LEGACY, LintConfig, load_config

if TYPE_CHECKING:
    from multiprocessing.context import BaseContext

#: Below this many files a process pool costs more (start-up, pickling) than it saves.
MIN_PARALLEL_FILES = 400
FORMAT_HELP = "output format: text (path:line:col: CODE message), json, sarif (2.1.0), github (workflow annotations)"
CONFIG_HELP = "TOML file with lint settings (default: [tool.fd-conformance.lint] of the nearest pyproject.toml)"
FIX_HELP = ("rewrite legacy clear_grpah_opt_backend definitions to the canonical name, keeping an alias, and "
            "self.clear_grpah_opt_backend() calls in the classes so renamed")
FIX_CALLS_HELP = ("with --fix: also rename calls on other receivers (self.model.clear_grpah_opt_backend()); only "
                  "safe when every callee has the canonical name, which a static pass cannot check")
OUTPUT_HELP = "write the report to FILE instead of stdout (e.g. a .sarif file for upload)"
CONTEXT_HELP = ("project root in which base classes of the given files are looked up (default: nearest "
                "pyproject.toml or .git above them); findings are still reported for the given files only")
NO_CONTEXT_HELP = "judge the given files on their own: no base-class lookup in the surrounding tree"
JOBS_HELP = f"worker processes for parsing (0 = one per CPU, the default; used from {MIN_PARALLEL_FILES} files)"

FORMATS = ("text", "json", "sarif", "github")
SKIP_DIRS = frozenset({"__pycache__", "node_modules"})
# Only "# noqa: FDCxxx" suppresses: a bare "# noqa" is usually aimed at another linter, and these
# rules guard against hangs and leaks, so silencing them must be deliberate and named.
_NOQA = re.compile(r"#\s*noqa\s*:\s*(?P<codes>FDC\d{3}(?:\s*,\s*FDC\d{3})*)", re.IGNORECASE)
_ABSTRACT_BASES = frozenset({"ABC", "Protocol"})
# ``class`` can only begin a line's statement (never after ``;`` or a one-line compound header).
_CLASS_STATEMENT = re.compile(r"^[ \t]*class\b", re.MULTILINE)
# Expressions and simple statements cannot hold a class or def, so when none of their lines is
# "hot" (see _hot_lines) the walk may skip them whole; compound statements are always entered.
_GATED = (ast.expr, ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Raise,
          ast.Assert, ast.Delete, ast.Import, ast.ImportFrom)


# --------------------------------------------------------------------------- scan results
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
    defines_clear: bool = False  # a def of either spelling: lets --fix know calls can be renamed
    noqa: dict[int, frozenset[str]] = field(default_factory=dict)


@dataclass
class LintResult:
    """All findings of one run, sorted by location, and how many files were read."""

    findings: list[Finding]
    files_scanned: int
    context_files_parsed: int = 0  # files outside the given ones parsed for their classes only

    @property
    def exit_code(self) -> int:
        return EXIT_VIOLATIONS if any(f.is_error for f in self.findings) else EXIT_OK


@dataclass(frozen=True)
class _Call:
    kind: str  # "release" | "clear"
    name: str
    line: int
    col: int
    branches: tuple[tuple[int, int], ...]  # (id(If node), 0 body / 1 orelse): exclusive paths
    # For a graph clear: the call and its receiver (FDC102 picks the draft ones after the walk).
    node: ast.Call | None = field(default=None, compare=False)
    receiver: ast.expr | None = field(default=None, compare=False)
    helper: bool = False


# --------------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=65536)
def near_miss(name: str) -> str | None:
    """The clear spelling ``name`` is a typo of (edit distance 1..2), or None. Cached: names repeat.

    Leading/trailing underscores are ignored for the exact-match test: ``_clear_graph_opt_backend``
    is a private helper spelled right, not a typo (same rule as :mod:`fd_conformance.protocol`).
    """
    if abs(len(name) - len(CANONICAL)) > 2 or name.strip("_") in (CANONICAL, LEGACY):
        return None
    for target in (CANONICAL, LEGACY):
        if _within_two(name, target):
            return target
    return None


def _within_two(a: str, b: str) -> bool:
    """Levenshtein(a, b) <= 2, row by row with an early exit once every cell exceeds 2."""
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) > 2:
            return False
        prev = cur
    return prev[-1] <= 2


def _dotted_tail(node: ast.expr) -> str | None:
    """Last name of ``a.b.c`` / ``c`` / ``c(...)`` / ``c[...]``: how decorators and bases are matched."""
    while isinstance(node, (ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _receiver_names(node: ast.expr) -> Iterator[str]:
    """Every name along a receiver chain: ``self.proposer.model`` -> model, proposer, self."""
    while True:
        if isinstance(node, ast.Attribute):
            yield node.attr
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            yield node.id
            return
        else:
            return


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


# Two edits leave at least one of three pieces of a spelling intact (pigeonhole), so a line that
# contains none of these pieces cannot hold the legacy spelling or a near-miss of either one.
_SPELLING_PIECES = ("clear_g", "raph_opt", "rpah_opt", "_backend")


def _hot_lines(source: str, names: frozenset[str]) -> list[int]:
    """Sorted line numbers where a rule could fire, found with ``str.find`` (C speed) so the AST
    walk can skip every expression on other lines: this is what keeps the linter above 500 files/s.
    Substring hits are a superset of the real names, which only makes a few more lines "hot"."""
    positions: list[int] = []
    for needle in (*_SPELLING_PIECES, *names):
        pos = source.find(needle)
        while pos != -1:
            positions.append(pos)
            pos = source.find(needle, pos + 1)
    return _line_numbers(source, positions)


def _class_lines(source: str) -> list[int]:
    """Sorted lines that may start a class statement: a function body without one (and without a
    hot line) holds nothing the rules need, so the walk skips it whole."""
    if "class" not in source:
        return []
    return _line_numbers(source, [m.start() for m in _CLASS_STATEMENT.finditer(source)])


def _line_numbers(source: str, positions: list[int]) -> list[int]:
    """1-based, deduplicated line numbers of character offsets."""
    positions.sort()
    lines: list[int] = []
    line, prev = 1, 0
    for pos in positions:  # ascending: count the newlines in between
        line += source.count("\n", prev, pos)
        prev = pos
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def source_lines(source: str) -> list[str]:
    """Lines numbered as ast numbers them. ``str.splitlines`` also breaks at \\x0c, \\x1c-\\x1e,
    \\x85, \\u2028 and \\u2029, which Python's tokenizer treats as ordinary characters, so every
    line after one would be off by one (noqa on the wrong line, columns from the wrong text)."""
    return source.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _noqa_map(source: str) -> dict[int, frozenset[str]]:
    result: dict[int, frozenset[str]] = {}
    if "noqa" not in source and "NOQA" not in source:
        return result
    for lineno, line in enumerate(source_lines(source), 1):
        m = _NOQA.search(line)
        if m:
            result[lineno] = frozenset(c.strip().upper() for c in m.group("codes").split(","))
    return result


# --------------------------------------------------------------------------- the one pass
class _Scanner:
    """Recursive walk with the context the rules need: enclosing class, function calls, if-branches."""

    def __init__(self, path: str, lines: list[str], config: LintConfig) -> None:
        self.path = path
        self.lines = lines
        self.cfg = config
        self.release = frozenset(config.release_calls)
        self.clear = config.all_graph_clear_calls
        self.scan = FileScan(path)
        self.hot: list[int] = []
        self.class_lines: list[int] = []

    # -- findings
    def _loc(self, line: int, col_offset: int, obj: str | None = None) -> Location:
        # ast columns are UTF-8 byte offsets; reports (and SARIF) want 1-based characters.
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = len(text.encode("utf-8")[:col_offset].decode("utf-8", "replace")) + 1
        return Location(path=self.path, line=line, col=col, obj=obj)

    def _add(self, code: str, message: str, hint: str, loc: Location) -> None:
        self.scan.findings.append(make_finding(code, message, hint, loc))

    def _check_spelling(self, name: str, what: str, line: int, col: int, obj: str | None) -> None:
        if name == LEGACY:
            self._add(
                "FDC002",
                f"legacy spelling {LEGACY} in {what}",
                f"rename to {CANONICAL} (fd-conformance lint --fix keeps a {LEGACY} alias)",
                self._loc(line, col, obj),
            )
        else:
            target = near_miss(name)
            if target is not None:
                self._add(
                    "FDC004",
                    f"{name} in {what} is a near-miss of {target}; the engine will not find it",
                    f"spell it {CANONICAL}",
                    self._loc(line, col, obj),
                )

    # -- walk
    def run(self, tree: ast.Module, source: str) -> FileScan:
        self.hot = _hot_lines(source, self.release | self.clear)
        self.class_lines = _class_lines(source)
        self._body(tree.body, None, None, ())
        return self.scan

    def _hot(self, node: ast.expr | ast.stmt) -> bool:
        return _any_within(self.hot, node.lineno, node.end_lineno or node.lineno)

    def _body(self, stmts: Sequence[ast.AST], cls: ClassInfo | None, calls: list[_Call] | None,
              branches: tuple[tuple[int, int], ...]) -> None:
        for node in stmts:
            self._node(node, cls, calls, branches)

    def _node(self, node: ast.AST, cls: ClassInfo | None, calls: list[_Call] | None,
              branches: tuple[tuple[int, int], ...]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(node, cls, calls, branches)
        elif isinstance(node, ast.ClassDef):
            self._class(node, calls, branches)
        elif isinstance(node, ast.If):
            self._node(node.test, cls, calls, branches)
            self._body(node.body, cls, calls, (*branches, (id(node), 0)))
            self._body(node.orelse, cls, calls, (*branches, (id(node), 1)))
        elif isinstance(node, ast.Lambda):
            self._node(node.body, None, [], ())  # its own scope: not ordered with the enclosing body
        elif isinstance(node, _GATED) and not self._hot(node):
            return  # no name any rule looks at on these lines: skip the subtree (most of a file)
        else:
            if isinstance(node, ast.Call):
                self._call(node, calls, branches)
            for child in ast.iter_child_nodes(node):
                self._node(child, cls, calls, branches)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, cls: ClassInfo | None,
                  calls: list[_Call] | None, branches: tuple[tuple[int, int], ...]) -> None:
        owner = f"{cls.name}.{node.name}" if cls else node.name
        self._check_spelling(node.name, f"definition of {owner}", node.lineno, node.col_offset, owner)
        if node.name in (CANONICAL, LEGACY):
            self.scan.defines_clear = True
        for expr in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
            if expr is not None:
                self._node(expr, cls, calls, branches)
        end = node.end_lineno or node.lineno
        if not _any_within(self.hot, node.lineno, end) and not _any_within(self.class_lines, node.lineno, end):
            return  # no rule name and no class inside: nothing to find in the body (most methods)
        own_calls: list[_Call] = []
        self._body(node.body, None, own_calls, ())
        self._order_rule(own_calls, owner)
        drafts = [c for c in own_calls if c.receiver is not None and self._is_draft(c.receiver, cls)]
        if drafts:
            self._guard_rule(node, drafts, owner)

    def _class(self, node: ast.ClassDef, calls: list[_Call] | None, branches: tuple[tuple[int, int], ...]) -> None:
        bases = tuple(b for b in (_dotted_tail(e) for e in node.bases) if b)
        decorators = {_dotted_tail(d) for d in node.decorator_list}
        member_names: set[str] = set()
        abstract = bool(_ABSTRACT_BASES.intersection(bases)) or any(
            k.arg == "metaclass" and _dotted_tail(k.value) == "ABCMeta" for k in node.keywords
        )
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                member_names.add(stmt.name)
                if any(_dotted_tail(d) == "abstractmethod" for d in stmt.decorator_list):
                    abstract = True
            elif isinstance(stmt, ast.Assign):
                member_names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                member_names.add(stmt.target.id)
        info = ClassInfo(
            name=node.name,
            path=self.path,
            line=node.lineno,
            col=self._loc(node.lineno, node.col_offset).col or 1,
            bases=bases,
            registered=bool(decorators.intersection(self.cfg.register_decorators)),
            provides_clear=bool(member_names.intersection((CANONICAL, LEGACY)))
            or bool(decorators.intersection(self.cfg.graph_opt_decorators)),
            abstract=abstract,
        )
        self.scan.classes.append(info)
        for expr in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            self._node(expr, None, calls, branches)
        self._body(node.body, info, None, ())

    def _call(self, node: ast.Call, calls: list[_Call] | None, branches: tuple[tuple[int, int], ...]) -> None:
        func = node.func
        helper = False
        if isinstance(func, ast.Attribute):
            name, receiver = func.attr, func.value
            # Point at the method name, where --fix edits and where a reader looks.
            line, col = func.end_lineno or node.lineno, (func.end_col_offset or 0) - len(name)
        elif isinstance(func, ast.Name):
            # A helper like clear_graphs_of(self.draft) clears graphs of its first argument.
            receiver = node.args[0] if node.args else None
            name, line, col = func.id, func.lineno, func.col_offset
            helper = True
        else:
            return
        self._check_spelling(name, "call", line, col, None)
        if calls is None:
            return
        if name in self.clear:
            calls.append(_Call("clear", name, line, col, branches, node, receiver, helper))
        elif name in self.release:
            calls.append(_Call("release", name, line, col, branches))

    # -- FDC101
    def _order_rule(self, calls: list[_Call], owner: str) -> None:
        """Source order within one function approximates execution order (see README).

        Calls in different branches of the same ``if`` never both run, so they are not ordered.
        """
        calls.sort(key=lambda c: (c.line, c.col))
        releases: list[_Call] = []
        for call in calls:
            if call.kind == "release":
                releases.append(call)
                continue
            for rel in releases:
                if not _exclusive(rel.branches, call.branches):
                    self._add(
                        "FDC101",
                        f"{owner}: graphs cleared by {call.name}() after {rel.name}() at line {rel.line} "
                        "released weights or shut down communication (a live graph can hang the teardown)",
                        f"move the {call.name}() call before {rel.name}()",
                        self._loc(call.line, call.col, owner),
                    )
                    break

    # -- FDC102
    def _is_draft(self, receiver: ast.expr, cls: ClassInfo | None) -> bool:
        """Does this receiver hold a draft model? A draft-named attribute anywhere along it
        (``self.proposer.model``), or, inside a draft owner (``MTPProposer``), an attribute of
        ``self`` that is not named as the main model's (``self.model`` there is the draft)."""
        chain = list(_receiver_names(receiver))
        if any(_matches(n, self.cfg.draft_receivers) for n in chain):
            return True
        return (cls is not None and len(chain) > 1 and chain[-1] == "self"
                and _matches(cls.name, self.cfg.draft_owner_classes)
                and not any("main" in n for n in chain))

    def _guard_rule(self, func: ast.FunctionDef | ast.AsyncFunctionDef, drafts: list[_Call], owner: str) -> None:
        """Report draft clears that run only with the main flag on (or only with it off), when no
        other draft clear of the function covers the other value (see :mod:`lint_guard`)."""
        from fd_conformance.lint_guard import main_flag_dependence

        by_node = {id(c.node): c for c in drafts}
        nodes = [c.node for c in drafts if c.node is not None]
        dependent, flag = main_flag_dependence(func.body, nodes, self.cfg.main_flags, self.cfg.draft_flags)
        for node, needs_on in dependent:
            call = by_node[id(node)]
            shown = _call_as_written(node, call.helper)
            if needs_on:
                message = (f"draft graphs ({shown}) are cleared only when the main model's flag {flag} is on; "
                           "with it off and the draft's graphs on they leak")
            else:
                message = (f"draft graphs ({shown}) are cleared only when the main model's flag {flag} is off "
                           "(with it on, the path exits or branches away first); with both on they leak")
            draft_flag = self.cfg.draft_flags[0] if self.cfg.draft_flags else "its own flag"
            self._add(
                "FDC102", message,
                f"guard the draft clear by the draft's own flag (e.g. {draft_flag}) alone, outside the main one",
                self._loc(call.line, call.col, owner),
            )


def _call_as_written(call: ast.Call, helper: bool) -> str:
    """The clear call as the source spells it, for messages: ``self.draft.clear()`` for a method,
    ``clear_graphs_of(self.draft)`` for a helper (its first argument is the receiver); other
    arguments are elided, since only the receiver matters to the rule."""
    if helper:
        more = ", ..." if len(call.args) + len(call.keywords) > 1 else ""
        return f"{ast.unparse(call.func)}({ast.unparse(call.args[0])}{more})"
    return f"{ast.unparse(call.func)}()"


def _any_within(lines: list[int], first: int, last: int) -> bool:
    """Does the sorted ``lines`` hold a line in ``first..last``? (bisect: O(log n))."""
    i = bisect.bisect_left(lines, first)
    return i < len(lines) and lines[i] <= last


def _exclusive(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    branch_of = dict(a)
    return any(node in branch_of and branch_of[node] != side for node, side in b)


# --------------------------------------------------------------------------- files and runs
def scan_source(source: str, path: str, config: LintConfig) -> FileScan:
    """Scan one file's text (never imported). A syntax error becomes an FDC100 finding."""
    lines = source_lines(source)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as err:
        line = getattr(err, "lineno", None) or 1
        scan = FileScan(path)
        scan.findings.append(make_finding(
            "FDC100", f"cannot parse: {getattr(err, 'msg', None) or err}",
            "fix the syntax error; the file's rules were not checked",
            Location(path=path, line=line, col=max(getattr(err, "offset", None) or 1, 1)),
        ))
        return scan
    scan = _Scanner(path, lines, config).run(tree, source)
    scan.noqa = _noqa_map(source)
    return scan


def iter_python_files(paths: Sequence[Path], config: LintConfig, root: Path) -> Iterator[Path]:
    """Given files as-is; directories walked for ``*.py`` (hidden and cache dirs skipped), sorted.

    ``exclude`` applies to named files too (ruff's force-exclude): pre-commit names each changed
    file, and a deliberately defective file must not fail the hook that its directory run skips.
    """
    for path in paths:
        require_exists(path)
        if path.is_file():
            if not config.exclude or not _matches(_display(path, root), config.exclude):
                yield path
            continue
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS
                                 and not d.endswith(".egg-info"))
            for filename in sorted(filenames):
                if filename.endswith(".py"):
                    full = Path(dirpath, filename)
                    if not config.exclude or not _matches(_display(full, root), config.exclude):
                        yield full


def require_exists(path: Path) -> None:
    """UsageError for a lint argument that names nothing (a typo must not lint zero files quietly)."""
    if not path.exists():
        raise UsageError(f"path {path} does not exist", "pass existing files or directories to fd-conformance lint")


def display_path(path: Path, root: Path) -> str:
    """Path as reports print it: relative to the root when inside it, POSIX separators."""
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


_display = display_path  # the name lint_fix and older callers use


def read_source(file: Path) -> tuple[str, str]:
    """(text, encoding) of a Python file, decoded as Python would: a UTF-8 BOM or a PEP 263
    ``coding`` cookie decides (``utf-8-sig`` when there is a BOM, so writing back keeps it).
    Raises OSError, SyntaxError (bad cookie) or UnicodeDecodeError."""
    data = file.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data.decode(encoding), encoding


def read_and_scan(file: Path, shown: str, config: LintConfig) -> FileScan:
    """Read one file (its declared encoding, UTF-8 by default) and scan it; an unreadable file
    becomes an FDC100 finding."""
    try:
        source, _ = read_source(file)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as err:
        scan = FileScan(shown)
        scan.findings.append(make_finding("FDC100", f"cannot read: {err}", "make the file readable text in UTF-8 or its declared coding",
                                          Location(path=shown, line=1, col=1)))
        return scan
    return scan_source(source, shown, config)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing allocates millions of AST nodes that die with their file; the cyclic collector
    re-traversing the growing result lists meanwhile costs ~10-15% and frees nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _scan_batch(batch: Sequence[tuple[str, str]], config: LintConfig) -> list[FileScan]:
    """One worker's share (top level so a spawned/forkserver worker can unpickle it)."""
    with _gc_paused():
        return [read_and_scan(Path(file), shown, config) for file, shown in batch]


def default_jobs() -> int:
    """CPUs this process may run on (affinity-aware: a CI container often gets fewer than the host)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _fork_context() -> BaseContext | None:
    """A fork context when forking is safe here, else None (then the scan runs serially).

    Only fork: spawn and forkserver re-run the caller's ``__main__`` in each worker, which breaks
    (or re-executes) any script that calls the linter without an ``if __name__ == "__main__"``
    guard. Fork is unsafe only with other threads alive (one may hold a lock the child needs).
    """
    import multiprocessing  # lazily: a pre-commit run on a few files never needs it
    import threading

    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return None
    return multiprocessing.get_context("fork")


def scan_paths(paths: Sequence[str | Path], config: LintConfig, root: Path | None = None,
               jobs: int = 1) -> list[FileScan]:
    """Parse every file once; the per-file scans feed both the rules and ``--fix``.

    ``jobs`` > 1 parses in that many worker processes when there are at least
    :data:`MIN_PARALLEL_FILES` files (ast.parse holds the GIL, so threads would not help);
    results keep the serial order, so the report is identical.
    """
    root = (root or Path.cwd()).resolve()
    work = [(str(file), display_path(file, root)) for file in iter_python_files([Path(p) for p in paths], config, root)]
    jobs = min(jobs, len(work) // (MIN_PARALLEL_FILES // 2) or 1)
    context = _fork_context() if jobs > 1 and len(work) >= MIN_PARALLEL_FILES else None
    if context is None:
        return _scan_batch(work, config)
    # Several batches per worker even out files of uneven size; contiguous slices keep the order.
    size = -(-len(work) // (jobs * 4))
    batches = [work[i:i + size] for i in range(0, len(work), size)]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return [scan for part in pool.map(_scan_batch, batches, [config] * len(batches)) for scan in part]


def _wrapper_findings(scans: Sequence[FileScan], config: LintConfig,
                      context: Sequence[FileScan] = ()) -> Iterator[tuple[FileScan, Finding]]:
    """FDC001 needs every class of the tree: bases and inherited clears resolve across files.

    ``context`` scans only lend their classes (as bases); only classes of ``scans`` are reported.
    """
    by_name: dict[str, list[ClassInfo]] = {}
    owner: dict[int, FileScan] = {}
    for scan in scans:
        for info in scan.classes:
            by_name.setdefault(info.name, []).append(info)
            owner[id(info)] = scan
    for scan in context:
        for info in scan.classes:
            by_name.setdefault(info.name, []).append(info)
    wrapper_bases = frozenset(config.wrapper_bases)
    # Keyed by class identity, not name: ``class XForCausalLM(a.XForCausalLM)`` names its own
    # name as a base, and the base is the *other* definition, which must still be searched.
    memo: dict[int, tuple[bool, bool]] = {}

    def lineage(info: ClassInfo, visiting: frozenset[int]) -> tuple[bool, bool, bool]:
        """(provides clear, descends from a wrapper base, complete), own or through scanned
        ancestors. ``complete`` is False when a cycle cut the search short: such a partial
        answer is not memoized, so it cannot stand in for the full one later."""
        if id(info) in memo:
            return (*memo[id(info)], True)
        provides, descends, complete = info.provides_clear, False, True
        inside = visiting | {id(info)}
        for base in info.bases:
            descends |= base in wrapper_bases
            # Same-named classes in several files: any of them may be the one imported, so union
            # them; only a class already on the path (a cycle, or the class itself) is skipped.
            for candidate in by_name.get(base, ()):
                if candidate is info:
                    continue  # a class is never its own base: skipping it loses nothing
                if id(candidate) in visiting:
                    complete = False  # a real cycle through other classes: cut it here
                    continue
                p, d, c = lineage(candidate, inside)
                provides, descends, complete = provides | p, descends | d, complete and c
        if complete:
            memo[id(info)] = (provides, descends)
        return provides, descends, complete

    for name, infos in by_name.items():
        for info in infos:
            if id(info) not in owner:
                continue  # a context class: lends inheritance, is not being linted
            if info.abstract or name in wrapper_bases or _matches(name, config.exclude_classes):
                continue
            provides, descends, _ = lineage(info, frozenset())
            if provides:
                continue
            if info.registered or descends or _named_wrapper(info, config):
                yield owner[id(info)], make_finding(
                    "FDC001",
                    f"model wrapper {name} has no {CANONICAL}() (nor legacy {LEGACY}), own or inherited; "
                    "the engine cannot destroy its graphs",
                    f"add `def {CANONICAL}(self): self.model.{CANONICAL}(fd_config=self.fd_config)`",
                    Location(path=info.path, line=info.line, col=info.col, obj=name),
                )


#: Framework roots every module derives from: a base so named says nothing about being a block.
_FRAMEWORK_ROOTS = frozenset({"Layer", "Module", "Cell", "object"})


def _named_wrapper(info: ClassInfo, config: LintConfig) -> bool:
    """The name route: a wrapper pattern matches and the class is no building block (its name
    matches ``block_patterns``, or a direct base other than the framework roots ``block_bases``)."""
    if not _matches(info.name, config.wrapper_patterns) or _matches(info.name, config.block_patterns):
        return False
    return not any(b not in _FRAMEWORK_ROOTS and _matches(b, config.block_bases) for b in info.bases)


def collect_findings(scans: Sequence[FileScan], config: LintConfig,
                     context: Sequence[FileScan] = ()) -> list[Finding]:
    """Cross-file rule, suppression, severity overrides, stable order (``context``: see above)."""
    pending = [(scan, f) for scan in scans for f in scan.findings]
    pending.extend(_wrapper_findings(scans, config, context))
    findings: list[Finding] = []
    for scan, finding in pending:
        if finding.code in scan.noqa.get(finding.location.line or 0, ()):
            continue
        override = config.severity.get(finding.code)
        if override is not None and override is not finding.severity:
            finding = dataclasses.replace(finding, severity=override)
        findings.append(finding)
    findings.sort(key=lambda f: (f.location.path or "", f.location.line or 0, f.location.col or 0, f.code))
    return findings


def lint_paths(paths: Sequence[str | Path], config: LintConfig | None = None, root: Path | None = None, *,
               context: Path | None = None, use_context: bool = True, jobs: int = 1) -> LintResult:
    """Lint files and directories; ``config`` defaults to the nearest pyproject.toml's settings.

    When files are named one by one (pre-commit passes only the changed ones), base classes they
    leave unresolved are looked up in ``context`` (default: the project root above them, see
    :func:`fd_conformance.lint_context.find_project_root`); findings are reported for the given
    paths only. Directory-only runs are self-contained, as before. ``jobs``: worker processes for
    large trees, 0 = one per available CPU, 1 = serial (the default for library callers).
    """
    if not paths:
        raise UsageError("no paths to lint", "pass one or more files or directories")
    if context is not None and not context.is_dir():
        raise UsageError(f"context {context} is not a directory", "pass the project root to --context")
    cfg = config if config is not None else load_config(Path(paths[0]))
    scans = scan_paths(paths, cfg, root, jobs=jobs or default_jobs())
    files = [Path(p) for p in paths if Path(p).is_file()]
    context_scans: list[FileScan] = []
    if use_context and (files or context is not None):
        from fd_conformance.lint_context import find_project_root, resolve_context

        tree = context or find_project_root(files or [Path(p) for p in paths])
        if tree is not None:
            display_root = (root or Path.cwd()).resolve()
            given = list(iter_python_files([Path(p) for p in paths], cfg, display_root))
            context_scans, _ = resolve_context(scans, given, cfg, display_root, tree)
    return LintResult(collect_findings(scans, cfg, context_scans), len(scans), len(context_scans))


# --------------------------------------------------------------------------- CLI
def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``fd-conformance lint`` (called by :func:`fd_conformance.cli.build_parser`)."""
    parser = subparsers.add_parser("lint", help="static graph-lifecycle checks over model source trees",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="files or directories to lint")
    parser.add_argument("--format", choices=FORMATS, default="text", help=FORMAT_HELP)
    parser.add_argument("--config", type=Path, default=None, metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--fix", action="store_true", help=FIX_HELP)
    parser.add_argument("--fix-calls", action="store_true", help=FIX_CALLS_HELP)
    parser.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help=OUTPUT_HELP)
    parser.add_argument("--context", type=Path, default=None, metavar="DIR", help=CONTEXT_HELP)
    parser.add_argument("--no-context", action="store_true", help=NO_CONTEXT_HELP)
    parser.add_argument("-j", "--jobs", type=_jobs_value, default=0, metavar="N", help=JOBS_HELP)
    parser.set_defaults(func=run_cli)


def _jobs_value(text: str) -> int:
    """argparse type for --jobs: a count >= 0, with an error that says how to fix it."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"--jobs must be a whole number >= 0 (0 = one per CPU), got {text!r}")
    return value


def run_cli(args: argparse.Namespace) -> int:
    """args -> exit code: 0 clean (warnings allowed), 1 error-level findings; UsageError -> 2 upstream."""
    from fd_conformance.lint_output import render

    # Every usage error must surface before --fix touches a file: a rejected command line that
    # rewrote sources anyway leaves the user with edits they never confirmed.
    config = load_config(Path(args.paths[0]), args.config)
    if args.context is not None and args.no_context:
        raise UsageError("--context and --no-context contradict each other", "pass only one of them")
    if args.context is not None and not args.context.is_dir():
        raise UsageError(f"context {args.context} is not a directory", "pass the project root to --context")
    for path in args.paths:
        require_exists(Path(path))
    if args.fix_calls and not args.fix:
        raise UsageError("--fix-calls only extends --fix", "add --fix, or drop --fix-calls")
    if args.output is not None and args.output.is_dir():
        raise UsageError(f"cannot write {args.output}: it is a directory", "pass a file path to --output")
    if args.fix:
        from fd_conformance.lint_fix import fix_paths

        for changed in fix_paths(args.paths, config, rename_calls=args.fix_calls):
            print(f"fixed {changed}", file=sys.stderr)
    result = lint_paths(args.paths, config, context=args.context, use_context=not args.no_context, jobs=args.jobs)
    text = render(result, args.format)
    if args.output is not None:
        try:
            args.output.write_text(text, encoding="utf-8")
        except OSError as err:
            raise UsageError(f"cannot write {args.output}: {err.strerror}", "pass a writable path to --output") from None
    elif text:
        sys.stdout.write(text)
    return result.exit_code
