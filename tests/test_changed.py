"""`fd-conformance changed`: a real throwaway git repository, real commits, real import graph.

The fixture repository has two models sharing a helper (one through an intermediate layer and a
relative import), a vision module only one model imports lazily, and a ``cases.py`` holding both
factories, loaded exactly as ``--fd-model cases.py:all_cases`` loads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.cases import ModelCase, apply_selection, load_spec, read_selection
from fd_conformance.changed import build_import_graph, changed_files, select_changed
from fd_conformance.cli import main
from fd_conformance.errors import EXIT_USAGE, UsageError

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

FILES = {
    "models/__init__.py": "",
    "models/shared.py": "def norm(x):\n    return x\n",
    "models/layers.py": "from .shared import norm\n\ndef block(x):\n    return norm(x)\n",
    "models/llama.py": "from models import layers\n\ndef build():\n    return layers.block\n",
    "models/vision.py": "def encoder():\n    return None\n",
    "models/qwen.py": "def build():\n    from models.vision import encoder\n    return encoder\n",
    "cases.py": (
        "from fd_conformance.cases import ModelCase\n\n"
        "def llama(runtime):\n    from models.llama import build\n    return build()\n\n"
        "def _qwen_subject(runtime):\n    from models import qwen\n    return qwen.build()\n\n"
        "def qwen(runtime):\n    return _qwen_subject(runtime)\n\n"
        "def all_cases():\n"
        "    return [ModelCase('llama', 'torch', llama, (4,)), ModelCase('qwen', 'torch', qwen, (4,))]\n"
    ),
    "README.md": "model repo\n",
    ".gitignore": "__pycache__/\n",  # loading cases.py may write bytecode into the repo
    "docs/conf.py": "project = 'x'\n",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def write(repo: Path, rel: str, text: str) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The model repository on branch ``main``, then a ``pr`` branch checked out at the same commit."""
    root = tmp_path / "modelrepo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for rel, text in FILES.items():
        write(root, rel, text)
    commit_all(root, "base")
    git(root, "checkout", "-q", "-b", "pr")
    return root


@pytest.fixture
def cases(repo: Path) -> list[ModelCase]:
    return load_spec(f"{repo / 'cases.py'}:all_cases")


def select_after(repo: Path, cases: list[ModelCase], edits: dict[str, str | None]) -> tuple[str, ...]:
    """Commit ``edits`` on the PR branch (None deletes) and return the selected case names."""
    for rel, text in edits.items():
        if text is None:
            (repo / rel).unlink()
        else:
            write(repo, rel, text)
    commit_all(repo, "change")
    changed = changed_files(repo, "main")
    return select_changed(cases, changed, build_import_graph(repo)).cases


def test_direct_change_to_a_model_selects_only_that_case(repo: Path, cases: list[ModelCase]) -> None:
    assert select_after(repo, cases, {"models/llama.py": FILES["models/llama.py"] + "# tweak\n"}) == ("llama",)


def test_transitive_import_change_selects_the_importer(repo: Path, cases: list[ModelCase]) -> None:
    # shared <- layers (relative import) <- llama: two hops; qwen never imports shared.
    assert select_after(repo, cases, {"models/shared.py": "def norm(x):\n    return 2 * x\n"}) == ("llama",)


def test_lazy_import_in_one_factory_does_not_select_its_neighbours(repo: Path, cases: list[ModelCase]) -> None:
    # vision is imported only inside qwen's factory chain (qwen -> _qwen_subject -> models.qwen ->
    # models.vision inside a function); llama's factory lives in the same cases.py.
    assert select_after(repo, cases, {"models/vision.py": "def encoder():\n    return 1\n"}) == ("qwen",)


def test_unrelated_change_selects_nothing(repo: Path, cases: list[ModelCase]) -> None:
    assert select_after(repo, cases, {"README.md": "new text\n", "docs/conf.py": "project = 'y'\n"}) == ()


def test_change_to_the_cases_module_selects_every_case_defined_there(repo: Path, cases: list[ModelCase]) -> None:
    assert select_after(repo, cases, {"cases.py": FILES["cases.py"] + "# note\n"}) == ("llama", "qwen")


def test_package_init_on_the_import_path_selects_its_importers(repo: Path, cases: list[ModelCase]) -> None:
    assert select_after(repo, cases, {"models/__init__.py": "VERSION = 2\n"}) == ("llama", "qwen")


def test_packaging_file_selects_everything_and_says_why(repo: Path, cases: list[ModelCase]) -> None:
    write(repo, "pyproject.toml", "[project]\nname = 'm'\n")
    commit_all(repo, "packaging")
    selection = select_changed(cases, changed_files(repo, "main"), build_import_graph(repo))
    assert selection.cases == ("llama", "qwen")
    assert selection.all_because == "pyproject.toml"
    # An extra --all-if glob does the same for a repo-specific shared file.
    extra = select_changed(cases, ["docs/conf.py"], build_import_graph(repo), all_if=("docs/*",))
    assert extra.cases == ("llama", "qwen")


def test_deleted_module_still_imported_selects_the_importer(repo: Path, cases: list[ModelCase]) -> None:
    # A PR that deletes a helper but leaves an importer must still run that importer's case (it breaks).
    assert select_after(repo, cases, {"models/shared.py": None}) == ("llama",)


def test_diff_starts_at_the_merge_base_not_at_the_moving_target(repo: Path, cases: list[ModelCase]) -> None:
    # main moves on (changes qwen) after the PR branched; the PR changes only llama.
    git(repo, "checkout", "-q", "main")
    write(repo, "models/qwen.py", FILES["models/qwen.py"] + "# upstream\n")
    commit_all(repo, "upstream")
    git(repo, "checkout", "-q", "pr")
    assert select_after(repo, cases, {"models/llama.py": FILES["models/llama.py"] + "# pr\n"}) == ("llama",)


def test_worktree_changes_count_only_when_asked(repo: Path, cases: list[ModelCase]) -> None:
    write(repo, "models/vision.py", "def encoder():\n    return 3\n")  # uncommitted
    write(repo, "models/new_helper.py", "X = 1\n")  # untracked
    assert changed_files(repo, "main") == []
    assert changed_files(repo, "main", include_worktree=True) == ["models/new_helper.py", "models/vision.py"]
    graph = build_import_graph(repo)
    assert select_changed(cases, changed_files(repo, "main", include_worktree=True), graph).cases == ("qwen",)


def test_case_whose_factory_is_outside_the_repo_is_reported_not_selected(repo: Path, cases: list[ModelCase]) -> None:
    def outside(runtime: object) -> object:  # defined in this test file, not in the model repo
        return runtime

    foreign = ModelCase("foreign", "torch", outside, (4,))
    selection = select_changed([*cases, foreign], ["models/llama.py"], build_import_graph(repo))
    assert selection.cases == ("llama",)
    assert selection.unmapped == ("foreign",)


def test_src_layout_module_names_come_from_the_package_chain(tmp_path: Path) -> None:
    root = tmp_path / "r"
    for rel, text in {"src/pkg/__init__.py": "", "src/pkg/mod.py": "from pkg import util\n", "src/pkg/util.py": ""}.items():
        write(root, rel, text)
    graph = build_import_graph(root, ["src/pkg/__init__.py", "src/pkg/mod.py", "src/pkg/util.py"])
    assert graph.modules["pkg.mod"].path == "src/pkg/mod.py"
    assert graph.closure("pkg.mod") == {"pkg", "pkg.mod", "pkg.util"}


# --------------------------------------------------------------------------- CLI
def test_cli_writes_a_selection_file_that_read_selection_reads(
    repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(repo, "models/shared.py", "def norm(x):\n    return -x\n")
    commit_all(repo, "change")
    out = tmp_path / "selection.txt"
    spec = f"{repo / 'cases.py'}:all_cases"
    rc = main(["changed", "--base", "main", "--repo", str(repo), "--fd-model", spec, "--output", str(out)])
    assert rc == 0
    assert out.read_text() == "llama\n"
    assert read_selection(out) == ["llama"]
    assert "1 of 2 case(s) selected" in capsys.readouterr().err

    rc = main(["changed", "--base", "main", "--repo", str(repo), "--model", spec, "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert data["cases"] == [{"name": "llama", "because": ["models/shared.py"]}]
    assert data["changed_files"] == ["models/shared.py"]


def test_cli_empty_selection_is_an_empty_file_and_success(repo: Path, tmp_path: Path) -> None:
    write(repo, "README.md", "docs only\n")
    commit_all(repo, "docs")
    out = tmp_path / "selection.txt"
    spec = f"{repo / 'cases.py'}:all_cases"
    assert main(["changed", "--base", "main", "--repo", str(repo), "--fd-model", spec, "-o", str(out)]) == 0
    assert out.read_text() == "" and read_selection(out) == []


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--base", "no-such-branch"], "--base 'no-such-branch' is not a commit"),
        (["--base", "main", "--head", "deadbeef"], "--head 'deadbeef' is not a commit"),
        (["--base=-x"], "--base '-x' is not a revision"),  # never handed to git as an option
    ],
)
def test_bad_revision_is_a_one_line_usage_error_exit_2(repo: Path, argv: list[str], problem: str) -> None:
    # A real subprocess: the exit code and stderr are what a CI step sees.
    proc = subprocess.run(
        [sys.executable, "-m", "fd_conformance.cli", "changed", "--repo", str(repo), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == EXIT_USAGE, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0] and "fix:" in lines[0], proc.stderr


def test_not_a_git_repository_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "plain"
    bare.mkdir()
    env_ceiling = os.environ.get("GIT_CEILING_DIRECTORIES")
    os.environ["GIT_CEILING_DIRECTORIES"] = str(tmp_path)  # tmp_path may sit inside some git tree
    try:
        assert main(["changed", "--base", "main", "--repo", str(bare)]) == EXIT_USAGE
    finally:
        if env_ceiling is None:
            os.environ.pop("GIT_CEILING_DIRECTORIES")
        else:
            os.environ["GIT_CEILING_DIRECTORIES"] = env_ceiling
    assert "is not inside a git work tree" in capsys.readouterr().err


def test_unrelated_histories_are_a_usage_error(repo: Path) -> None:
    git(repo, "checkout", "-q", "--orphan", "other")
    commit_all(repo, "orphan")
    with pytest.raises(UsageError, match="no merge base"):
        changed_files(repo, "main")


# --------------------------------------------------------------------------- the selection file
def test_read_selection_skips_comments_blanks_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "sel.txt"
    path.write_text("# selected by fd-conformance changed\n\nllama\nqwen  # vision changed\nllama\n   \n")
    assert read_selection(path) == ["llama", "qwen"]


def test_read_selection_rejects_two_names_on_a_line_and_missing_files(tmp_path: Path) -> None:
    path = tmp_path / "sel.txt"
    path.write_text("llama qwen\n")
    with pytest.raises(UsageError, match=r"line 1: 'llama qwen' is not one case name"):
        read_selection(path)
    with pytest.raises(UsageError, match="cannot read cases file"):
        read_selection(tmp_path / "missing.txt")


def test_apply_selection_keeps_case_order_and_rejects_unknown_names(cases: list[ModelCase]) -> None:
    assert [c.name for c in apply_selection(cases, ["qwen", "llama"], "sel.txt")] == ["llama", "qwen"]
    with pytest.raises(UsageError, match=r"sel.txt names unknown case\(s\) 'lama'.*use one of: llama, qwen"):
        apply_selection(cases, ["lama"], "sel.txt")


REGISTRY_CASES = (
    "from functools import partial\n"
    "from fd_conformance.cases import ModelCase\n\n"
    "def _glm(runtime, layers):\n    from models.llama import build\n    return build()\n\n"
    "def _vision(runtime):\n    from models.vision import encoder\n    return encoder()\n\n"
    "BUILDERS = {'glm': partial(_glm, layers=2)}\n"
    "EXTRA: dict = {}\n"
    "EXTRA['vision'] = _vision\n\n"
    "def glm(runtime):\n    return BUILDERS['glm'](runtime)\n\n"
    "def vision(runtime):\n    return EXTRA['vision'](runtime)\n\n"
    "def all_cases():\n"
    "    return [ModelCase('glm', 'torch', glm, (4,)), ModelCase('vision-only', 'torch', vision, (4,))]\n"
)


def test_dispatch_through_a_module_level_registry_is_followed(repo: Path) -> None:
    """``BUILDERS = {"glm": partial(_glm, ...)}``: the factory reads a table, not a function; the
    functions the table holds must be followed, else a changed model selects nothing."""
    write(repo, "registry_cases.py", REGISTRY_CASES)
    commit_all(repo, "registry")
    git(repo, "branch", "-f", "main")  # the registry is part of the base
    cases = load_spec(f"{repo / 'registry_cases.py'}:all_cases")
    assert select_after(repo, cases, {"models/vision.py": "def encoder():\n    return 2\n"}) == ("vision-only",)
    # cumulative diff from the merge base: now shared.py (reached only through BUILDERS) changed too
    assert select_after(repo, cases, {"models/shared.py": "def norm(x):\n    return 3 * x\n"}) == ("glm", "vision-only")


def test_registry_filled_by_untraced_code_follows_the_whole_module(repo: Path) -> None:
    """A table filled in a loop is not read statically: conservative, every lazy import counts."""
    text = (
        "from fd_conformance.cases import ModelCase\n\n"
        "def _glm(runtime):\n    from models.llama import build\n    return build()\n\n"
        "def _unused(runtime):\n    from models.vision import encoder\n    return encoder()\n\n"
        "TABLE = {}\n"
        "for fn in (_glm,):\n    TABLE[fn.__name__] = fn\n\n"
        "def glm(runtime):\n    return TABLE['_glm'](runtime)\n\n"
        "def all_cases():\n    return [ModelCase('glm', 'torch', glm, (4,))]\n"
    )
    write(repo, "loop_cases.py", text)
    commit_all(repo, "loop registry")
    git(repo, "branch", "-f", "main")
    cases = load_spec(f"{repo / 'loop_cases.py'}:all_cases")
    assert select_after(repo, cases, {"models/vision.py": "def encoder():\n    return 2\n"}) == ("glm",)
