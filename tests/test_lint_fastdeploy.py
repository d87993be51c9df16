"""The FastDeploy-shaped fixture trees (the real defects, caught code by code; the fixed tree clean)
and bench/lint_fastdeploy.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _lint_helpers import DEFAULTS, FASTDEPLOY_COMMON, FASTDEPLOY_DEFECTS, FASTDEPLOY_FIXED, FIXTURES, REPO, fastdeploy_tree

from fd_conformance.errors import EXIT_OK, EXIT_VIOLATIONS
from fd_conformance.lint import lint_paths


def test_fastdeploy_defect_tree_reports_each_defect_with_its_code() -> None:
    result = lint_paths(fastdeploy_tree(FASTDEPLOY_DEFECTS), DEFAULTS, root=FIXTURES)
    errors = {(f.code, f.location.path, f.location.line) for f in result.findings if f.is_error}
    assert errors == {
        ("FDC001", "fastdeploy_defects/fastdeploy/model_executor/models/qwen3_vl/qwen3_vl.py", 19),
        ("FDC101", "fastdeploy_defects/fastdeploy/worker/gpu_model_runner.py", 17),
        ("FDC102", "fastdeploy_defects/fastdeploy/worker/gpu_model_runner_first_fix.py", 13),
    }
    assert result.exit_code == EXIT_VIOLATIONS


def test_fastdeploy_fixed_tree_has_no_error() -> None:
    result = lint_paths(fastdeploy_tree(FASTDEPLOY_FIXED), DEFAULTS, root=REPO)
    assert [f for f in result.findings if f.is_error] == []
    assert {f.code for f in result.findings} == {"FDC002"}  # the legacy spelling is still everywhere
    assert result.exit_code == EXIT_OK


def test_fastdeploy_variants_hold_only_what_differs() -> None:
    """A file in both common and a variant would be linted twice and make the merge ambiguous;
    a variant file equal to nothing in common must really differ from the other variant's."""
    common = {p.relative_to(FASTDEPLOY_COMMON) for p in FASTDEPLOY_COMMON.rglob("*.py")}
    defects = {p.relative_to(FASTDEPLOY_DEFECTS) for p in FASTDEPLOY_DEFECTS.rglob("*.py")}
    fixed = {p.relative_to(FASTDEPLOY_FIXED) for p in FASTDEPLOY_FIXED.rglob("*.py")}
    assert common and defects and fixed
    assert not common & defects and not common & fixed
    for rel in defects & fixed:
        assert (FASTDEPLOY_DEFECTS / rel).read_text() != (FASTDEPLOY_FIXED / rel).read_text(), rel


def test_fastdeploy_common_tree_holds_no_defect() -> None:
    """Every error of a variant run must come from the variant's own files, or the defect and the
    fixed runs would share it and the fixed run could never be clean."""
    result = lint_paths([FASTDEPLOY_COMMON], DEFAULTS, root=FIXTURES)
    assert result.files_scanned >= 6 and [f.format() for f in result.findings if f.is_error] == []
    assert {f.code for f in result.findings} == {"FDC002"}


def test_fastdeploy_defect_tree_still_caught_with_new_discovery() -> None:
    """The shipped FastDeploy-shaped fixture keeps its three codes, and its MTPProposer and
    Glm4MTPModel (inner model, decorated) stay unreported."""
    result = lint_paths(fastdeploy_tree(FASTDEPLOY_DEFECTS), DEFAULTS, root=FIXTURES)
    assert {f.code for f in result.findings if f.is_error} == {"FDC001", "FDC101", "FDC102"}
    assert not any(f.location.obj in ("MTPProposer", "Glm4MTPModel") for f in result.findings)


def _load_bench():
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("lint_fastdeploy", REPO / "bench" / "lint_fastdeploy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_fastdeploy_bench_skips_cleanly_without_a_checkout(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "lint_fastdeploy.py"), str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("skip:"), proc.stderr


def test_fastdeploy_bench_counts_tp_fp_fn_on_a_git_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A two-commit repository in another engine's style: the labels of each commit are matched
    by (code, file, object), the object taken from the source; a missing commit is skipped."""
    import subprocess

    bench = _load_bench()
    repo = tmp_path / "engine"
    pkg = repo / "fastdeploy" / "worker"
    pkg.mkdir(parents=True)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    runner = pkg / "runner.py"
    runner.write_text(
        "class Worker:\n    def drop(self, rank):\n        if self.use_cudagraph:\n"
        "            if self.graph_cfg.draft_model_use_cudagraph:\n"
        "                self.drafter.net.clear_graph_opt_backend()\n"
        "        self.weights.clear_parameters(rank)\n\n\nclass StrayForCausalLM:\n    pass\n"
    )
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "one"], check=True)
    path = "fastdeploy/worker/runner.py"
    bench.LABELS = (
        bench.Label("HEAD", "nested draft clear", (("FDC102", path, "Worker.drop"), ("FDC101", path, "Worker.drop"))),
        bench.Label("0123456789abcdef0123456789abcdef01234567", "absent", ()),
    )
    assert bench.main([str(repo), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    row = data["rows"][0]
    assert row["tp"] == [["FDC102", path, "Worker.drop"]]
    assert row["fp"] == [["FDC001", path, "StrayForCausalLM"]]
    assert row["fn"] == [["FDC101", path, "Worker.drop"]]
    assert data["rows"][1]["skipped"] and data["summary"]["skipped"] == 1
    assert data["summary"]["precision"] == 0.5 and data["summary"]["recall"] == 0.5
    assert bench.main([str(repo / ".git")]) == 0  # a bare git directory works too
    assert "precision 0.500, recall 0.500" in capsys.readouterr().out
