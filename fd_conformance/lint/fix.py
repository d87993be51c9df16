"""``fd-conformance lint --fix``: rename the legacy clear spelling without breaking old callers.

Both spellings are 23 characters, so a rename is a same-width token swap: columns, formatting
and comments stay untouched. Each renamed *definition* gets an alias line right after its body
(``clear_grpah_opt_backend = clear_graph_opt_backend``) so code outside the tree that still
calls the old name keeps working.

Calls are renamed per callee, not per tree: a static pass cannot know what ``self.model`` is,
and renaming ``self.model.clear_grpah_opt_backend()`` when the inner object (e.g. FastDeploy's
``GraphOptWrapper``) only has the legacy name turns a working call into an AttributeError. So
by default only ``self.clear_grpah_opt_backend()`` inside a class whose own definition this pass
renamed is rewritten (that class now has both names). ``super().`` calls are left alone: they
reach a base class this pass may not have touched. ``--fix-calls`` (``rename_calls=True``)
renames every call, for trees where the user knows every callee has the canonical name.
A second run finds nothing to do (idempotent). ``# noqa: FDC002`` lines are left alone.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Sequence
from pathlib import Path

from fd_conformance.lint.config import LintConfig
from fd_conformance.lint.files import iter_python_files, noqa_map, read_source
from fd_conformance.spelling import CANONICAL, LEGACY

ALIAS_COMMENT = "# legacy alias kept by fd-conformance lint --fix"


def fix_source(source: str, rename_calls: bool = False) -> str:
    """Return ``source`` with legacy definitions renamed (plus alias), ``self.`` calls in the
    renamed classes renamed, and, with ``rename_calls``, every other call too."""
    if LEGACY not in source:
        return source
    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, tokenize.TokenError):
        return source  # FDC100 reports it; never rewrite what we cannot parse
    suppressed = {line for line, codes in noqa_map(source).items() if "FDC002" in codes}
    defs = {
        node.lineno: node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == LEGACY
    }
    has_canonical = _scopes_defining_canonical(tree)
    # Lines as tokenize numbers them (str.splitlines also breaks at \x0c, \u2028, ...).
    lines = io.StringIO(source).readlines()
    self_calls = _self_calls_in_renamed_classes(tree, lines, has_canonical, suppressed)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    renames: list[tuple[int, int]] = []
    aliases: list[tuple[int, str]] = []  # (insert after this 1-based line, text)
    significant = [
        t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
    ]
    for i, tok in enumerate(significant):
        if tok.type != tokenize.NAME or tok.string != LEGACY or tok.start[0] in suppressed:
            continue
        prev = significant[i - 1].string if i else ""
        nxt = significant[i + 1].string if i + 1 < len(significant) else ""
        if prev == "def":
            node = defs.get(tok.start[0])
            if node is None or id(node) in has_canonical:
                continue  # the scope already has the canonical name: renaming would shadow it
            renames.append(tok.start)
            indent = lines[node.lineno - 1][: node.col_offset]
            end = node.end_lineno or node.lineno
            aliases.append((end, f"{indent}{LEGACY} = {CANONICAL}  {ALIAS_COMMENT}{newline}"))
        elif nxt == "(" and (rename_calls or tok.start in self_calls):
            renames.append(tok.start)
    if not renames:
        return source
    for row, col in renames:
        line = lines[row - 1]
        lines[row - 1] = line[:col] + CANONICAL + line[col + len(LEGACY) :]
    for after, text in sorted(aliases, reverse=True):
        if after == len(lines) and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        lines.insert(after, text)
    return "".join(lines)


def _self_calls_in_renamed_classes(
    tree: ast.Module, lines: list[str], blocked: set[int], suppressed: set[int]
) -> set[tuple[int, int]]:
    """(row, char col) of ``self.<legacy>(...)`` name tokens inside classes whose legacy def this
    pass renames: after the rename that class has both names, so the call cannot break."""
    found: set[tuple[int, int]] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or not any(
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name == LEGACY
            and id(n) not in blocked
            and n.lineno not in suppressed
            for n in cls.body
        ):
            continue
        for node in _walk_own_scope(cls):
            func = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(func, ast.Attribute)
                and func.attr == LEGACY
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
                and func.end_lineno is not None
                and func.end_col_offset is not None
            ):
                row = func.end_lineno
                # ast columns are UTF-8 byte offsets, tokenize's are characters.
                byte_col = func.end_col_offset - len(LEGACY)
                found.add((row, len(lines[row - 1].encode("utf-8")[:byte_col].decode("utf-8", "replace"))))
    return found


def _walk_own_scope(cls: ast.ClassDef) -> list[ast.AST]:
    """Nodes of a class body, not descending into nested classes (their ``self`` is another)."""
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(cls.body)
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.ClassDef))
    return out


def _scopes_defining_canonical(tree: ast.Module) -> set[int]:
    """ids of legacy defs whose class/module body already defines the canonical name."""
    blocked: set[int] = set()
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.ClassDef)):
            continue
        body = scope.body
        names = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if CANONICAL in names:
            blocked.update(id(n) for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == LEGACY)
    return blocked


def fix_paths(
    paths: Sequence[str | Path], config: LintConfig, root: Path | None = None, *, rename_calls: bool = False
) -> list[Path]:
    """Rewrite files in place (same encoding, BOM kept); returns the files that changed.
    ``rename_calls``: also rename calls on other receivers (``--fix-calls``, see module doc)."""
    root = (root or Path.cwd()).resolve()
    changed: list[Path] = []
    for file in iter_python_files([Path(p) for p in paths], config, root):
        try:
            source, encoding = read_source(file)
        except (OSError, SyntaxError, UnicodeDecodeError, LookupError):
            continue  # the lint pass reports it as FDC100
        fixed = fix_source(source, rename_calls=rename_calls)
        if fixed != source:
            file.write_bytes(fixed.encode(encoding))
            changed.append(file)
    return changed
