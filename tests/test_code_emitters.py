"""The registry declares every module that names a finding code, and drives the kit's code lists.

A module under fd_conformance/ that puts a code in a string (``make_finding("FDC303", ...)``, a
``{"FDC201", "FDC202"}`` filter, a ``"FDC303 (shared: ...)"`` table cell) must be one the registry
declares for that code: a detector's module or one of the rule's ``emitted_by``. Prose that only
mentions a code mid-sentence, docstrings and comments are not uses.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from fd_conformance.codes.index import detected_in, emitting_modules
from fd_conformance.findings import RULES

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "fd_conformance"
#: A string that is a code, or starts with one (a label such as ``"FDC303 (shared: x.py:1)"``).
_CODE_USE = re.compile(r"^(FDC\d{3})\b")


def code_uses(source: str) -> Iterator[tuple[str, int]]:
    """(code, line) of every string in ``source`` that is or starts with a finding code, bare string
    statements (docstrings) left out."""
    tree = ast.parse(source)
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            match = _CODE_USE.match(node.value)
            if match:
                yield match.group(1), node.lineno


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_uses() -> dict[str, set[str]]:
    """Module -> the codes its strings use, for every module of the kit but the registry itself."""
    uses: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "codes":
            continue
        for code, _ in code_uses(path.read_text(encoding="utf-8")):
            uses.setdefault(_module_name(path), set()).add(code)
    return uses


def _declared() -> dict[str, set[str]]:
    """Module -> the codes the registry allows it to name."""
    declared: dict[str, set[str]] = {}
    for code, rule in RULES.items():
        for module in emitting_modules(rule):
            declared.setdefault(module, set()).add(code)
    return declared


def test_every_code_a_module_uses_is_declared_for_it() -> None:
    declared = _declared()
    undeclared = sorted(
        f"{module} uses {code}" for module, codes in _package_uses().items() for code in codes - declared.get(module, set())
    )
    assert undeclared == [], (
        "declare these in the code's registry entry (fd_conformance/codes/, its detectors or emitted_by): "
        + "; ".join(undeclared)
    )


@pytest.mark.parametrize("code", sorted(c for c in RULES if RULES[c].emitted_by))
def test_declared_emitters_exist_and_use_their_code(code: str) -> None:
    """A declaration is not stale: each ``emitted_by`` module exists and names the code."""
    uses = _package_uses()
    for module in RULES[code].emitted_by:
        path = REPO.joinpath(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), f"{code}: no module {module}"
        assert code in uses.get(module, set()), f"{code}: {module} no longer names it; drop it from emitted_by"


def test_the_scan_sees_uses_and_skips_prose() -> None:
    source = (
        '"""Module doc naming FDC999."""\n'
        'make_finding("FDC998", "m")\n'
        'CELL = f"FDC997 ({where})"\n'
        'HELP = "a code, e.g. FDC996"\n'
        "def f():\n"
        '    """FDC995 in a docstring."""\n'
        '    return {"FDC994", "FDC993"}\n'
    )
    assert sorted(code_uses(source)) == [("FDC993", 7), ("FDC994", 7), ("FDC997", 3), ("FDC998", 2)]


# --------------------------------------------------------------------------- dispatch read from the registry
def test_lint_codes_are_the_registry_codes_with_a_lint_rule() -> None:
    from fd_conformance.lint import LINT_CODES

    with_lint_rule = [c for c, r in RULES.items() if any(d.startswith("fd_conformance.lint.rules.") for d in r.detectors)]
    assert list(LINT_CODES) == with_lint_rule and len(LINT_CODES) >= 6


def test_config_checks_are_the_functions_the_registry_names() -> None:
    from fd_conformance import config_rules

    assert list(config_rules.CONFIG_CHECKS) == [c for c in RULES if c.startswith("FDC4")]
    for code, check in config_rules.CONFIG_CHECKS.items():
        assert f"fd_conformance.config_rules.{check.__name__}" in RULES[code].detectors, code


def test_protocol_checks_are_the_functions_the_registry_names() -> None:
    """check_protocol runs its own order (each check assumes the ones before it); the functions
    it runs are exactly the registry's protocol detectors, one per code."""
    from fd_conformance.protocol.checks import CHECKS

    run = {check.__name__ for check, _ in CHECKS}
    named = {name for names in detected_in("fd_conformance.protocol.checks").values() for name in names}
    assert run == named and len(run) == len(CHECKS)
