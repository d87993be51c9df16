"""The package layout is architecture: these tests keep it from rotting back.

Import edges are read from the source (module level and inside functions, ``TYPE_CHECKING``
blocks left out), so a circle closed by a function-level import counts as a circle too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "fd_conformance"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The kit's modules ``path`` imports anywhere in its body (a package import counts as its
    ``__init__``; ``from pkg import sub`` as ``pkg.sub`` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = _type_checking_lines(tree)
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name in modules and name != this}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(ROOT.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) for p in paths}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_anywhere_in_the_kit() -> None:
    # A package's __init__ re-exporting its submodules is not a circle of concerns: leave out the
    # edges from a package to its own children.
    graph = {m: {d for d in deps if not d.startswith(m + ".")} for m, deps in import_graph().items()}
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_runtime_imports_nothing_above_it() -> None:
    allowed = ("fd_conformance.runtime", "fd_conformance.errors")
    for module, deps in import_graph().items():
        if module.startswith("fd_conformance.runtime"):
            above = sorted(d for d in deps if not d.startswith(allowed) and d != "fd_conformance")
            assert above == [], f"{module} imports {above}"


def test_argparse_only_in_cli() -> None:
    users = sorted(
        module_name(p)
        for p in ROOT.rglob("*.py")
        if "import argparse" in p.read_text(encoding="utf-8") and not module_name(p).startswith("fd_conformance.cli")
    )
    assert users == []
