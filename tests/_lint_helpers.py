"""Shared by the tests/test_lint_*.py files: the lint fixtures' paths and small helpers."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

from fd_conformance.lint import LintConfig, lint_paths

FIXTURES = Path(__file__).parent / "fixtures" / "lint"


RULES_DIR = FIXTURES / "rules"


REPO = Path(__file__).resolve().parent.parent


DEFAULTS = LintConfig()


REACHABILITY = FIXTURES / "reachability"


# An engine the kit never saw: draft at self.spec_worker.net, main switch enable_graphs, the
# draft's spec_graphs. "*graphs" as the main pattern also matches spec_graphs: a draft flag never
# counts as the main one. The reachability fixtures are linted with it.
SPEC_ENGINE = LintConfig(draft_receivers=("spec_worker",), main_flags=("*graphs",), draft_flags=("spec_graphs",))


# The FastDeploy-shaped fixture: files the defect and its fix share live once in fastdeploy_common/;
# each variant holds only what differs and is linted together with the common tree.
FASTDEPLOY_COMMON = FIXTURES / "fastdeploy_common"


FASTDEPLOY_DEFECTS = FIXTURES / "fastdeploy_defects"


FASTDEPLOY_FIXED = FIXTURES / "fastdeploy_fixed"


def fastdeploy_tree(variant: Path) -> list[Path]:
    """The lint arguments for one FastDeploy variant: the shared files plus the variant's own."""
    return [FASTDEPLOY_COMMON, variant]


def assemble_fastdeploy_tree(variant: Path, dest: Path) -> Path:
    """One merged copy of common + variant, for callers that need a single directory (--fix, context)."""
    shutil.copytree(FASTDEPLOY_COMMON, dest)
    shutil.copytree(variant, dest, dirs_exist_ok=True)
    return dest


def codes_at(path: Path, config: LintConfig = DEFAULTS) -> list[tuple[str, int]]:
    return [(f.code, f.location.line or 0) for f in lint_paths([path], config, root=REPO).findings]


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write each relative path's (dedented) text under ``root``."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


def found_in(result: object) -> set[tuple[str, str, int]]:
    """(code, path, line) of every finding of a lint result."""
    return {(f.code, f.location.path or "", f.location.line or 0) for f in result.findings}  # type: ignore[attr-defined]
