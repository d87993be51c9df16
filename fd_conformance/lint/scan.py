"""The one pass over a file: an AST walk that collects everything the rules need, and runs them.

Why one pass: FastDeploy trees hold thousands of files, and the linter must stay above 500
files/s for a pre-commit hook; each file is parsed once with :mod:`ast` (never imported), and a
``str.find`` pre-filter marks the few lines where any rule could fire so the walk skips the rest.
The rules themselves live in :mod:`.rules`, one named function per code.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Sequence
from pathlib import Path

from fd_conformance.findings import Finding, Location
from fd_conformance.lint.config import LintConfig
from fd_conformance.lint.door_ir import reads_draft_flag, summarize_class
from fd_conformance.lint.facts import Branches, Call, ClassInfo, FileScan
from fd_conformance.lint.files import noqa_map, read_source, source_lines
from fd_conformance.lint.rules import (
    check_fdc002_legacy_spelling,
    check_fdc004_near_miss,
    check_fdc100_cannot_parse,
    check_fdc100_cannot_read,
    check_fdc101_release_before_clear,
    check_fdc102_draft_clear_under_main_flag,
)
from fd_conformance.spelling import CANONICAL, LEGACY

_ABSTRACT_BASES = frozenset({"ABC", "Protocol"})
# ``class`` can only begin a line's statement (never after ``;`` or a one-line compound header).
_CLASS_STATEMENT = re.compile(r"^[ \t]*class\b", re.MULTILINE)
# Expressions and simple statements cannot hold a class or def, so when none of their lines is
# "hot" (see _hot_lines) the walk may skip them whole; compound statements are always entered.
_GATED = (
    ast.expr,
    ast.Expr,
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Return,
    ast.Raise,
    ast.Assert,
    ast.Delete,
    ast.Import,
    ast.ImportFrom,
)


# --------------------------------------------------------------------------- text pre-filter
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


def _any_within(lines: list[int], first: int, last: int) -> bool:
    """Does the sorted ``lines`` hold a line in ``first..last``? (bisect: O(log n))."""
    i = bisect.bisect_left(lines, first)
    return i < len(lines) and lines[i] <= last


def _dotted_tail(node: ast.expr) -> str | None:
    """Last name of ``a.b.c`` / ``c`` / ``c(...)`` / ``c[...]``: how decorators and bases are matched."""
    while isinstance(node, (ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


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

    def _check_spelling(self, name: str, what: str, line: int, col: int, obj: str | None) -> None:
        finding: Finding | None = check_fdc002_legacy_spelling(name, what, line, col, obj, self._loc) or check_fdc004_near_miss(
            name, what, line, col, obj, self._loc
        )
        if finding is not None:
            self.scan.findings.append(finding)

    # -- walk
    def run(self, tree: ast.Module, source: str) -> FileScan:
        self.hot = _hot_lines(source, self.release | self.clear)
        self.class_lines = _class_lines(source)
        self._body(tree.body, None, None, ())
        self.scan.names_draft_flag = reads_draft_flag(source, self.cfg)
        return self.scan

    def _hot(self, node: ast.expr | ast.stmt) -> bool:
        return _any_within(self.hot, node.lineno, node.end_lineno or node.lineno)

    def _body(self, stmts: Sequence[ast.AST], cls: ClassInfo | None, calls: list[Call] | None, branches: Branches) -> None:
        for node in stmts:
            self._node(node, cls, calls, branches)

    def _node(self, node: ast.AST, cls: ClassInfo | None, calls: list[Call] | None, branches: Branches) -> None:
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

    def _function(
        self, node: ast.FunctionDef | ast.AsyncFunctionDef, cls: ClassInfo | None, calls: list[Call] | None, branches: Branches
    ) -> None:
        owner = f"{cls.name}.{node.name}" if cls else node.name
        self._check_spelling(node.name, f"definition of {owner}", node.lineno, node.col_offset, owner)
        for expr in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
            if expr is not None:
                self._node(expr, cls, calls, branches)
        end = node.end_lineno or node.lineno
        if not _any_within(self.hot, node.lineno, end) and not _any_within(self.class_lines, node.lineno, end):
            return  # no rule name and no class inside: nothing to find in the body (most methods)
        own_calls: list[Call] = []
        self._body(node.body, None, own_calls, ())
        # FDC101 sorts own_calls by position first; FDC102 then sees them in source order.
        self.scan.findings.extend(check_fdc101_release_before_clear(own_calls, owner, self._loc))
        self.scan.findings.extend(check_fdc102_draft_clear_under_main_flag(node, own_calls, cls, owner, self.cfg, self._loc))

    def _class(self, node: ast.ClassDef, calls: list[Call] | None, branches: Branches) -> None:
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
        if _any_within(self.hot, node.lineno, node.end_lineno or node.lineno):
            self.scan.doors.append(
                summarize_class(node, self.path, self.cfg, lambda ln, off: self._loc(ln, off).col or 1)
            )  # FDC103, joined across files in run
        for expr in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            self._node(expr, None, calls, branches)
        self._body(node.body, info, None, ())

    def _call(self, node: ast.Call, calls: list[Call] | None, branches: Branches) -> None:
        func = node.func
        helper = False
        receiver: ast.expr | None
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
            calls.append(Call("clear", name, line, col, branches, node, receiver, helper))
        elif name in self.release:
            calls.append(Call("release", name, line, col, branches))


def scan_source(source: str, path: str, config: LintConfig) -> FileScan:
    """Scan one file's text (never imported). A syntax error becomes an FDC100 finding."""
    lines = source_lines(source)
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as err:
        scan = FileScan(path)
        scan.findings.append(check_fdc100_cannot_parse(path, err))
        return scan
    scan = _Scanner(path, lines, config).run(tree, source)
    scan.noqa = noqa_map(source)
    return scan


def read_and_scan(file: Path, shown: str, config: LintConfig) -> FileScan:
    """Read one file (its declared encoding, UTF-8 by default) and scan it; an unreadable file
    becomes an FDC100 finding."""
    try:
        source, _ = read_source(file)
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError) as err:
        scan = FileScan(shown)
        scan.findings.append(check_fdc100_cannot_read(shown, err))
        return scan
    return scan_source(source, shown, config)
