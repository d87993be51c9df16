"""The linter's rule contract: every lint code has a function named in the registry, fires on its
bad fixture (tests/fixtures/lint/rules/) and stays quiet on its good twin; suppression needs the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from _lint_helpers import REPO, RULES_DIR, codes_at

from fd_conformance.findings import RULES
from fd_conformance.lint import LINT_CODES, lint_paths


@pytest.mark.parametrize(
    ("code", "expected_lines"),
    [
        ("FDC001", [11, 15, 20, 24]),
        ("FDC002", [2, 3]),
        ("FDC004", [2, 6]),
        ("FDC100", [1]),
        ("FDC101", [4, 10, 15]),
        ("FDC102", [6, 13]),
    ],
)
def test_rule_fires_on_its_mutant(code: str, expected_lines: list[int]) -> None:
    found = codes_at(RULES_DIR / f"{code.lower()}_bad.py")
    assert sorted(line for c, line in found if c == code) == expected_lines


@pytest.mark.parametrize("code", ["FDC001", "FDC002", "FDC004", "FDC101", "FDC102"])
def test_rule_quiet_on_good_twin(code: str) -> None:
    assert codes_at(RULES_DIR / f"{code.lower()}_good.py") == []


def test_every_lint_code_is_registered_and_proven_by_a_fixture() -> None:
    for code in LINT_CODES:
        assert RULES[code].where.find("lint") >= 0
        assert (RULES_DIR / f"{code.lower()}_bad.py").is_file()


def test_registry_names_each_lint_rule_function() -> None:
    """The registry's ``where`` names the function that raises the code, and it exists there."""
    import re

    from fd_conformance.lint import rules

    for code in LINT_CODES:
        named = re.findall(r"check_\w+", RULES[code].where)
        assert named and all(name.startswith(f"check_{code.lower()}_") for name in named), RULES[code].where
        assert all(callable(getattr(rules, name, None)) for name in named), named


def test_reference_models_package_is_clean() -> None:
    package = REPO / "models" / "fd_reference_models"
    assert package.is_dir(), f"{package} is missing: the reference zoo moved, point this test at it"
    result = lint_paths([package], root=REPO)
    assert [f.format() for f in result.findings if f.is_error] == []


def test_noqa_needs_the_code(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    body = "class R:\n    def f(self):\n        self.w.clear_parameters()\n        self.m.clear_graph_opt_backend()  {}\n"
    src.write_text(body.format("# noqa: FDC101"))
    assert codes_at(src) == []
    src.write_text(body.format("# noqa: FDC102, FDC101"))
    assert codes_at(src) == []
    src.write_text(body.format("# noqa"))  # bare noqa is for other linters: not ours
    assert codes_at(src) == [("FDC101", 4)]
    src.write_text(body.format("# noqa: FDC102"))
    assert codes_at(src) == [("FDC101", 4)]
