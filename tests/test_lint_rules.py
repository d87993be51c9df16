"""The linter's rule contract: every lint code has a function named in the registry, fires on its
bad fixture and stays quiet on its good twin (both read from the registry, no list here);
suppression needs the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from _lint_helpers import REPO, codes_at

from fd_conformance.findings import RULES
from fd_conformance.lint import LINT_CODES, lint_paths


def _lint_fixtures(refs: tuple[str, ...]) -> list[str]:
    return [ref for ref in refs if ref.startswith("tests/fixtures/lint/")]


#: (code, fixture) for every lint code's tripping fixture and for its clean twin, read from the registry.
BAD = [(code, ref) for code in LINT_CODES for ref in _lint_fixtures(RULES[code].trips)]
GOOD = [(code, ref) for code in LINT_CODES for ref in _lint_fixtures(RULES[code].clean)]


# That each bad fixture raises its code is tests/test_codes.py's; at which lines and columns, with
# which message and fix: its snapshot (tests/test_lint_snapshots.py).
@pytest.mark.parametrize(("code", "fixture"), GOOD)
def test_rule_quiet_on_good_twin(code: str, fixture: str) -> None:
    """Quiet for every code, not only its own (tests/test_codes.py asks for its own)."""
    assert codes_at(REPO / fixture) == []


def test_every_lint_code_is_proven_by_a_fixture_and_its_twin() -> None:
    assert sorted({code for code, _ in BAD}) == sorted(LINT_CODES) == sorted({code for code, _ in GOOD})
    assert all((REPO / ref).is_file() for _, ref in BAD + GOOD)


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
