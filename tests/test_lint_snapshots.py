"""Every lint fixture's whole output (code, severity, file:line:col and object, message, fix hint)
against its snapshot file, as ruff checks its fixtures: a reworded message or hint, a moved
column or a lost object name fails here, not only a changed line number.

The snapshot of ``tests/fixtures/lint/<dir>/<name>.py`` is ``tests/snapshots/lint/<dir>/<name>.txt``;
a fixture tree linted as one (the FastDeploy-shaped ones) has one file for the tree. After an
intended change, regenerate them and review the diff before committing:

    FDC_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_lint_snapshots.py
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from _lint_helpers import (
    DEFAULTS,
    FASTDEPLOY_COMMON,
    FASTDEPLOY_DEFECTS,
    FASTDEPLOY_FIXED,
    FIXTURES,
    REACHABILITY,
    RULES_DIR,
    SPEC_ENGINE,
    fastdeploy_tree,
)

from fd_conformance.findings import Finding
from fd_conformance.lint import LintConfig, lint_paths

SNAPSHOTS = Path(__file__).parent / "snapshots" / "lint"
UPDATE_ENV = "FDC_UPDATE_SNAPSHOTS"
HEADER = f"# fd-conformance lint output; regenerate: {UPDATE_ENV}=1 python -m pytest tests/test_lint_snapshots.py\n"


@dataclass(frozen=True)
class Fixture:
    """What one snapshot records: these paths linted together under ``config``."""

    name: str
    paths: tuple[Path, ...]
    config: LintConfig = DEFAULTS

    @property
    def snapshot(self) -> Path:
        return SNAPSHOTS / f"{self.name}.txt"


def _one_file_fixtures() -> list[Fixture]:
    files = sorted([*RULES_DIR.glob("*.py"), *(FIXTURES / "discovery").glob("*.py")])
    found = [Fixture(str(p.relative_to(FIXTURES).with_suffix("")), (p,)) for p in files]
    found += [Fixture(str(p.relative_to(FIXTURES).with_suffix("")), (p,), SPEC_ENGINE) for p in sorted(REACHABILITY.glob("*.py"))]
    return found


FIXTURE_SET = [
    *_one_file_fixtures(),
    Fixture("fastdeploy_common", (FASTDEPLOY_COMMON,)),
    Fixture("fastdeploy_defects", tuple(fastdeploy_tree(FASTDEPLOY_DEFECTS))),
    Fixture("fastdeploy_fixed", tuple(fastdeploy_tree(FASTDEPLOY_FIXED))),
]


def render(findings: list[Finding]) -> str:
    """The snapshot text: one block per finding, in the linter's order (path, line, column, code)."""
    blocks = [f"{f.location}: {f.code} [{f.severity.value}]\n  {f.message}\n  fix: {f.hint}\n" for f in findings]
    return HEADER + ("".join(blocks) if blocks else "# no findings\n")


def lint_output(fixture: Fixture) -> str:
    return render(lint_paths(list(fixture.paths), fixture.config, root=FIXTURES).findings)


@pytest.mark.parametrize("fixture", FIXTURE_SET, ids=lambda f: f.name)
def test_lint_output_matches_its_snapshot(fixture: Fixture) -> None:
    got = lint_output(fixture)
    if os.environ.get(UPDATE_ENV) == "1":
        fixture.snapshot.parent.mkdir(parents=True, exist_ok=True)
        if not fixture.snapshot.is_file() or fixture.snapshot.read_text(encoding="utf-8") != got:
            fixture.snapshot.write_text(got, encoding="utf-8")
        return
    assert fixture.snapshot.is_file(), f"no snapshot for {fixture.name}: run {UPDATE_ENV}=1 python -m pytest {__file__}"
    assert got == fixture.snapshot.read_text(encoding="utf-8"), (
        f"lint output of {fixture.name} differs from {fixture.snapshot.relative_to(SNAPSHOTS.parents[1])}; if the "
        f"change is intended, regenerate with {UPDATE_ENV}=1 and review the diff"
    )


def test_every_fixture_has_a_snapshot_and_every_snapshot_a_fixture() -> None:
    covered = {
        file for fixture in FIXTURE_SET for path in fixture.paths for file in (path.rglob("*.py") if path.is_dir() else [path])
    }
    assert set(FIXTURES.rglob("*.py")) == covered, "a lint fixture without a snapshot case: add it to FIXTURE_SET"
    assert {p for p in SNAPSHOTS.rglob("*.txt")} == {f.snapshot for f in FIXTURE_SET}, "a snapshot no fixture makes"


def test_a_changed_message_fails_the_comparison() -> None:
    """The check above can fail: the same findings with one word of one message, or of one hint, changed differ."""
    fixture = next(f for f in FIXTURE_SET if f.name == "rules/fdc101_bad")
    first, *rest = lint_paths(list(fixture.paths), fixture.config, root=FIXTURES).findings
    message = dataclasses.replace(first, message=first.message.replace("graphs", "graph", 1))
    hint = dataclasses.replace(first, hint=first.hint.replace("move", "put", 1))
    snapshot = fixture.snapshot.read_text(encoding="utf-8")
    assert render([first, *rest]) == snapshot
    assert render([message, *rest]) != snapshot and render([hint, *rest]) != snapshot
