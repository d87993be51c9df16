"""``fd-conformance lint --fix``: rename the legacy clear spelling without breaking old callers.

Both spellings are 23 characters, so a rename is a same-width token swap: columns, formatting
and comments stay untouched. Each renamed *definition* gets an alias line right after its body
(``clear_grpah_opt_backend = clear_graph_opt_backend``) so code outside the tree that still
calls the old name keeps working. Calls are renamed only when the scanned paths define the
method themselves (otherwise the callee is third-party code that may only have the old name).
A second run finds nothing to do (idempotent). ``# noqa: FDC002`` lines are left alone.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Sequence
from pathlib import Path

from fd_conformance.lint import _noqa_map, iter_python_files
from fd_conformance.lint_config import CANONICAL, LEGACY, LintConfig

ALIAS_COMMENT = "# legacy alias kept by fd-conformance lint --fix"


def fix_source(source: str, rename_calls: bool) -> str:
    """Return ``source`` with legacy definitions (plus alias) and, optionally, calls renamed."""
    if LEGACY not in source:
        return source
    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, tokenize.TokenError):
        return source  # FDC100 reports it; never rewrite what we cannot parse
    suppressed = {line for line, codes in _noqa_map(source).items() if "FDC002" in codes}
    defs = {
        node.lineno: node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == LEGACY
    }
    has_canonical = _scopes_defining_canonical(tree)
    lines = source.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    renames: list[tuple[int, int]] = []
    aliases: list[tuple[int, str]] = []  # (insert after this 1-based line, text)
    significant = [t for t in tokens if t.type not in (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE,
                                                        tokenize.INDENT, tokenize.DEDENT)]
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
        elif nxt == "(" and rename_calls:
            renames.append(tok.start)
    if not renames:
        return source
    for row, col in renames:
        line = lines[row - 1]
        lines[row - 1] = line[:col] + CANONICAL + line[col + len(LEGACY):]
    for after, text in sorted(aliases, reverse=True):
        if after == len(lines) and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline
        lines.insert(after, text)
    return "".join(lines)


def _scopes_defining_canonical(tree: ast.Module) -> set[int]:
    """ids of legacy defs whose class/module body already defines the canonical name."""
    blocked: set[int] = set()
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.Module, ast.ClassDef)):
            continue
        body = scope.body
        names = {n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        if CANONICAL in names:
            blocked.update(id(n) for n in body
                           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == LEGACY)
    return blocked


def fix_paths(paths: Sequence[str | Path], config: LintConfig, root: Path | None = None) -> list[Path]:
    """Rewrite files in place; returns the files that changed."""
    root = (root or Path.cwd()).resolve()
    files = list(iter_python_files([Path(p) for p in paths], config, root))
    sources: dict[Path, str] = {}
    for file in files:
        try:
            sources[file] = file.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # the lint pass reports it as FDC100
    defined_here = any(f"def {LEGACY}" in s or f"def {CANONICAL}" in s for s in sources.values())
    changed: list[Path] = []
    for file, source in sources.items():
        fixed = fix_source(source, rename_calls=defined_here)
        if fixed != source:
            file.write_bytes(fixed.encode("utf-8"))
            changed.append(file)
    return changed
