"""The package layout is architecture: these tests keep it from rotting back.

The layering, the absence of import circles, where torch, paddle and argparse may be imported:
those are import-linter contracts in pyproject.toml ``[tool.importlinter]``, checked here by the
real ``lint-imports``, and proven able to fail on a copy of the kit with one violation per contract.
What import-linter cannot say (an import at module level versus inside a function) is checked here,
and that no module grows past :data:`MAX_MODULE_LINES` (one responsibility per module).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from fd_conformance.frameworks import FRAMEWORKS

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "fd_conformance"

#: Issue 39: a module past this many lines holds more than one responsibility; split it along them.
MAX_MODULE_LINES = 500
# One violation per contract, each written into a copy of the kit: (contract name, module, source).
VIOLATIONS = (
    ("The kit's rooms are layered", "runtime/_reads_up.py", "import fd_conformance.spelling\n"),
    ("No import circle", "lint/_circle_a.py", "from fd_conformance.lint import _circle_b\n"),
    ("No import circle", "lint/_circle_b.py", "from fd_conformance.lint import _circle_a\n"),
    ("torch and paddle are imported by runtime/ only", "plugin/_uses_torch.py", "import torch\n"),
    (
        "The finding families and their registry never reach a runtime adapter",
        "codes/_adapter.py",
        "import fd_conformance.runtime.base\n",
    ),
    ("argparse is imported by cli/ only", "report/_args.py", "import argparse\n"),
)


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the real ``lint-imports`` (the dev extra installs it) on the project in ``cwd``."""
    exe = shutil.which("lint-imports") or str(Path(sysconfig.get_path("scripts")) / "lint-imports")
    if not Path(exe).exists():
        pytest.fail("lint-imports is not installed: pip install -e '.[dev]'")
    # The copy in cwd must shadow the installed (editable) kit: put it first on the path.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([exe, "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_import_contracts_hold() -> None:
    run = lint_imports(REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_each_contract_catches_its_violation(tmp_path: Path) -> None:
    shutil.copytree(ROOT, tmp_path / "fd_conformance", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for _, module, source in VIOLATIONS:
        (tmp_path / "fd_conformance" / module).write_text(source, encoding="utf-8")
    run = lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    for contract, module, _ in VIOLATIONS:
        status = next(line for line in run.stdout.splitlines() if line.startswith(contract))
        assert "BROKEN" in status, status
        assert Path(module).stem in run.stdout, f"{module} not named in the report"
    assert f"{len({c for c, _, _ in VIOLATIONS})} broken" in run.stdout


def module_level_imports(tree: ast.Module) -> set[str]:
    """Top-level package names imported when the module is imported: statements at module level
    and in module-level ``if``/``try`` blocks, ``TYPE_CHECKING`` blocks left out."""
    found: set[str] = set()
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            found.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition(".")[0])
        elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
            pending.extend([*node.body, *node.orelse])
        elif isinstance(node, ast.Try):
            pending.extend([*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)])
    return found


def framework_imports_at_module_level(root: Path) -> list[str]:
    """Modules outside runtime/ that import a framework when they are imported (the contract allows
    named lazy imports outside runtime/; none may run at import time)."""
    return sorted(
        f"{path.relative_to(root.parent)}: {name}"
        for path in root.rglob("*.py")
        if "runtime" not in path.relative_to(root).parts[:1]
        for name in module_level_imports(ast.parse(path.read_text(encoding="utf-8")))
        if name in FRAMEWORKS
    )


def test_no_framework_import_at_module_level_outside_runtime() -> None:
    assert framework_imports_at_module_level(ROOT) == []


def test_a_module_level_framework_import_is_caught(tmp_path: Path) -> None:
    (tmp_path / "kit" / "suite").mkdir(parents=True)
    (tmp_path / "kit" / "runtime").mkdir()
    (tmp_path / "kit" / "runtime" / "torch.py").write_text("import torch\n")  # allowed: an adapter
    (tmp_path / "kit" / "suite" / "lazy.py").write_text("def f():\n    import torch\n")  # allowed: lazy
    (tmp_path / "kit" / "suite" / "eager.py").write_text("try:\n    import paddle.distributed\nexcept ImportError:\n    pass\n")
    assert framework_imports_at_module_level(tmp_path / "kit") == [f"kit{os.sep}suite{os.sep}eager.py: paddle"]


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {str(path.relative_to(REPO)): len(path.read_text(encoding="utf-8").splitlines()) for path in ROOT.rglob("*.py")}
    assert {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}
