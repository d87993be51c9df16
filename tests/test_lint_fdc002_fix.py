"""FDC002 (the legacy spelling) and ``--fix``: the rename keeps an alias, is idempotent, respects noqa,
and renames calls per callee, never calls into code outside the tree."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _lint_helpers import DEFAULTS, FASTDEPLOY_FIXED, RULES_DIR, assemble_fastdeploy_tree

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_OK, EXIT_USAGE
from fd_conformance.lint import CANONICAL, LEGACY, fix_paths, fix_source, lint_paths

LEGACY_MODULE = '''\
class InnerModel:
    def clear_grpah_opt_backend(self, fd_config=None):
        self.cleared = getattr(self, "cleared", 0) + 1


class TinyForCausalLM:
    def __init__(self):
        self.model = InnerModel()
        self.fd_config = None

    # keep this comment
    def clear_grpah_opt_backend(self):
        """Delegate to the inner model."""
        self.model.clear_grpah_opt_backend(fd_config=self.fd_config)  # trailing comment

    def other(self):
        return "clear_grpah_opt_backend"  # a string is not a call
'''


def test_fix_renames_keeps_alias_and_is_idempotent(tmp_path: Path) -> None:
    # --fix-calls: InnerModel is in the same file and renamed too, so renaming the call is safe.
    src = tmp_path / "tiny.py"
    src.write_text(LEGACY_MODULE)
    assert fix_paths([tmp_path], DEFAULTS, root=tmp_path, rename_calls=True) == [src]
    fixed = src.read_text()
    assert fixed.count(f"def {CANONICAL}") == 2 and f"def {LEGACY}" not in fixed
    assert "self.model.clear_graph_opt_backend(fd_config=self.fd_config)  # trailing comment" in fixed
    assert "# keep this comment" in fixed and 'return "clear_grpah_opt_backend"' in fixed
    # Old and new callers reach the same method on the real, executed class.
    namespace: dict[str, object] = {}
    exec(compile(fixed, str(src), "exec"), namespace)
    model = namespace["TinyForCausalLM"]()  # type: ignore[operator]
    model.clear_grpah_opt_backend()
    model.clear_graph_opt_backend()
    assert model.model.cleared == 2
    assert type(model).clear_grpah_opt_backend is type(model).clear_graph_opt_backend
    # The fixed file has no legacy finding left, and a second run changes nothing.
    assert [f.code for f in lint_paths([src], DEFAULTS, root=tmp_path).findings] == []
    assert fix_paths([tmp_path], DEFAULTS, root=tmp_path, rename_calls=True) == []
    assert src.read_text() == fixed


def test_fix_leaves_calls_into_code_outside_the_tree(tmp_path: Path) -> None:
    caller = "def teardown(runner):\n    runner.proposer.model.clear_grpah_opt_backend()\n"
    assert fix_source(caller) == fix_source(caller, rename_calls=False) == caller
    assert CANONICAL in fix_source(caller, rename_calls=True)


def test_fix_respects_noqa_and_existing_canonical() -> None:
    both = "class A:\n    def clear_graph_opt_backend(self): ...\n    def clear_grpah_opt_backend(self): ...\n"
    assert fix_source(both, rename_calls=True) == both
    kept = "x.clear_grpah_opt_backend()  # noqa: FDC002\n"
    assert fix_source(kept, rename_calls=True) == kept


def test_fix_on_fastdeploy_tree_clears_every_legacy_warning(tmp_path: Path) -> None:
    # The merged tree holds every callee (GraphOptWrapper too), so --fix-calls is safe here.
    tree = assemble_fastdeploy_tree(FASTDEPLOY_FIXED, tmp_path / "fd")
    assert main(["lint", "--fix", "--fix-calls", str(tree)]) == EXIT_OK
    assert lint_paths([tree], DEFAULTS, root=tmp_path).findings == []


# Each test below failed before its fix; the item numbers are the review's.
OUTSIDE_CALLEE = '''\
class GraphOptWrapper:
    """Lives outside the --fix pass and only has the legacy name (FastDeploy's decorator.py)."""

    def clear_grpah_opt_backend(self, fd_config=None):
        self.cleared = getattr(self, "cleared", 0) + 1
'''


WRAPPER_CALLING_OUT = """\
from callee import GraphOptWrapper


class TinyForCausalLM:
    def __init__(self):
        self.model = GraphOptWrapper()
        self.fd_config = None

    def clear_grpah_opt_backend(self):
        self.model.clear_grpah_opt_backend(fd_config=self.fd_config)

    def reset(self):
        self.clear_grpah_opt_backend()
        return super().__repr__()
"""


def test_fix_renames_calls_per_callee_not_per_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 2: the tree defines the method, yet self.model's class is outside it with the legacy
    name only; renaming that call raised AttributeError. The fixed code is imported and run."""
    (tmp_path / "callee.py").write_text(OUTSIDE_CALLEE)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    src = pkg / "wrapper.py"
    src.write_text(WRAPPER_CALLING_OUT)
    assert main(["lint", "--fix", str(pkg)]) == EXIT_OK
    fixed = src.read_text()
    assert "self.model.clear_grpah_opt_backend(fd_config=self.fd_config)" in fixed  # other receiver: kept
    assert f"        self.{CANONICAL}()\n" in fixed  # self call in the renamed class: renamed
    monkeypatch.syspath_prepend(str(tmp_path))
    namespace: dict[str, object] = {}
    exec(compile(fixed, str(src), "exec"), namespace)
    model = namespace["TinyForCausalLM"]()  # type: ignore[operator]
    model.clear_graph_opt_backend()
    model.reset()
    model.clear_grpah_opt_backend()
    assert model.model.cleared == 3


def test_fix_leaves_self_calls_in_classes_it_did_not_rename() -> None:
    # Sub inherits the legacy def from a base this file does not define: its self/super calls stay.
    sub = (
        "class Sub(Base):\n    def go(self):\n        self.clear_grpah_opt_backend()\n        super().clear_grpah_opt_backend()\n"
    )
    assert fix_source(sub) == sub


def test_fix_on_fastdeploy_fixed_variant_keeps_calls_into_graph_opt_wrapper(tmp_path: Path) -> None:
    """Item 2 as reported: --fix on the fixed variant alone (GraphOptWrapper is not in it)."""
    tree = shutil.copytree(FASTDEPLOY_FIXED, tmp_path / "fixed")
    assert main(["lint", "--fix", str(tree)]) == EXIT_OK
    wrapper = (tree / "fastdeploy/model_executor/models/qwen3_vl/qwen3_vl.py").read_text()
    assert f"def {CANONICAL}(self):" in wrapper
    assert f"self.model.{LEGACY}(fd_config=self.fd_config)" in wrapper


def test_fix_calls_without_fix_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "--fix-calls", str(RULES_DIR / "fdc002_good.py")]) == EXIT_USAGE
    assert "--fix-calls" in capsys.readouterr().err


@pytest.mark.parametrize(
    "bad_args",
    [
        ["--context", "{tmp}", "--no-context"],
        ["--context", "{tmp}/missing-dir"],
        ["{tmp}/missing.py"],
        ["-o", "{tmp}"],
    ],
)
def test_fix_writes_nothing_when_the_command_line_is_rejected(tmp_path: Path, bad_args: list[str]) -> None:
    """Item 3: the usage error came after --fix had already rewritten the file."""
    src = tmp_path / "x.py"
    src.write_text(LEGACY_MODULE)
    args = [a.format(tmp=tmp_path) for a in bad_args]
    assert main(["lint", "--fix", *args, str(src)]) == EXIT_USAGE
    assert src.read_text() == LEGACY_MODULE


def test_fix_edits_the_right_line_after_a_form_feed() -> None:
    source = "\x0c\nclass A:\n    def clear_grpah_opt_backend(self):\n        return 1\n"
    fixed = fix_source(source)
    namespace: dict[str, object] = {}
    exec(compile(fixed, "<fixed>", "exec"), namespace)
    cls = namespace["A"]
    assert cls.clear_graph_opt_backend is cls.clear_grpah_opt_backend  # type: ignore[attr-defined]
