"""FDC001 (wrapper without a clear method): which classes are wrappers, inheritance across files,
and the project context that lends bases to the files being linted."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _lint_helpers import DEFAULTS, FASTDEPLOY_DEFECTS, FIXTURES, assemble_fastdeploy_tree, codes_at, found_in, write_files

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS
from fd_conformance.lint import LintConfig, lint_paths, load_config


def test_wrapper_found_through_a_base_in_an_unchanged_file(tmp_path: Path) -> None:
    """Discovery through bases: Leaf matches no pattern and is a wrapper only because Mid (in an
    unchanged file) descends from ModelForCausalLM. Mid's own FDC001 is not the given file's."""
    write_files(
        tmp_path,
        {
            "pyproject.toml": "",
            "pkg/mid.py": "class Mid(ModelForCausalLM):\n    def forward(self): ...\n",
            "pkg/leaf.py": "from pkg.mid import Mid\n\nclass Leaf(Mid):\n    pass\n",
        },
    )
    result = lint_paths([tmp_path / "pkg" / "leaf.py"], DEFAULTS, root=tmp_path)
    assert found_in(result) == {("FDC001", "pkg/leaf.py", 3)}
    assert result.context_files_parsed == 1
    alone = lint_paths([tmp_path / "pkg" / "leaf.py"], DEFAULTS, root=tmp_path, use_context=False)
    assert found_in(alone) == set()  # judged alone, Leaf is not even recognised as a wrapper


def test_context_parses_only_files_that_may_define_the_missing_bases(tmp_path: Path) -> None:
    files = {f"pkg/other_{i}.py": f"class Other{i}:\n    def clear_parameters(self): ...\n" for i in range(30)}
    files.update(
        {
            "pyproject.toml": "",
            "pkg/base.py": "class Base:\n    def clear_graph_opt_backend(self): ...\n",
            # Mentions "class Base" inside a string: parsed (the text filter is a superset), lends nothing.
            "pkg/docs.py": 'EXAMPLE = """\nclass Base:\n    def clear_graph_opt_backend(self): ...\n"""\n',
            "pkg/llama.py": "class LlamaForCausalLM(Base):\n    pass\n",
            "pkg/qwen.py": "class QwenForCausalLM(Middle):\n    pass\n",
            "pkg/middle.py": 'class Middle:\n    """Not Base."""\n',
        }
    )
    write_files(tmp_path, files)
    good = lint_paths([tmp_path / "pkg" / "llama.py"], DEFAULTS, root=tmp_path)
    assert found_in(good) == set() and good.context_files_parsed == 2  # base.py and docs.py, not the 30 others
    bad = lint_paths([tmp_path / "pkg" / "qwen.py"], DEFAULTS, root=tmp_path)
    assert found_in(bad) == {("FDC001", "pkg/qwen.py", 1)} and bad.context_files_parsed == 1


def test_a_string_that_looks_like_a_base_lends_no_clear_method(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "docs.py": 'EXAMPLE = """\nclass Base:\n    def clear_graph_opt_backend(self): ...\n"""\n',
            "llama.py": "class LlamaForCausalLM(Base):\n    pass\n",
        },
    )
    assert found_in(lint_paths([tmp_path / "llama.py"], DEFAULTS, root=tmp_path)) == {("FDC001", "llama.py", 1)}


def test_local_definition_wins_over_the_context(tmp_path: Path) -> None:
    # The module's own Base (no clear) is the one Python binds; another file's Base must not hide the defect.
    write_files(
        tmp_path,
        {
            "pyproject.toml": "",
            "base.py": "class Base:\n    def clear_graph_opt_backend(self): ...\n",
            "llama.py": "class Base:\n    pass\n\n\nclass LlamaForCausalLM(Base):\n    pass\n",
        },
    )
    result = lint_paths([tmp_path / "llama.py"], DEFAULTS, root=tmp_path)
    assert found_in(result) == {("FDC001", "llama.py", 5)} and result.context_files_parsed == 0


def test_each_file_alone_reports_what_the_full_tree_reports_for_it(tmp_path: Path) -> None:
    """Pre-commit on any one file of the FastDeploy defect tree gives exactly that file's share
    of the full-tree report (the property the context lookup exists for)."""
    tree = assemble_fastdeploy_tree(FASTDEPLOY_DEFECTS, tmp_path / "fd")
    full = lint_paths([tree], DEFAULTS, root=tree)
    files = sorted(tree.rglob("*.py"))
    assert len(files) >= 8
    for file in files:
        shown = file.relative_to(tree).as_posix()
        alone = lint_paths([file], DEFAULTS, root=tree, context=tree)
        assert [f.format() for f in alone.findings] == [f.format() for f in full.findings if f.location.path == shown]


def test_explicit_context_and_its_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # No pyproject.toml/.git and run from elsewhere: only --context finds the base.
    write_files(
        tmp_path,
        {
            "m/base.py": "class B:\n    def clear_graph_opt_backend(self): ...\n",
            "m/llama.py": "class LlamaForCausalLM(B):\n    pass\n",
        },
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = str(tmp_path / "m" / "llama.py")
    assert main(["lint", target]) == EXIT_VIOLATIONS
    assert main(["lint", "--context", str(tmp_path), target]) == EXIT_OK
    capsys.readouterr()
    assert main(["lint", "--context", str(tmp_path / "missing"), target]) == EXIT_USAGE
    assert main(["lint", "--context", str(tmp_path), "--no-context", target]) == EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "is not a directory" in err[0] and "contradict" in err[1]


def test_directory_runs_stay_self_contained(tmp_path: Path) -> None:
    # A directory argument is linted as before: no lookup outside it, even with a project root above.
    write_files(
        tmp_path,
        {
            "pyproject.toml": "",
            "base.py": "class B:\n    def clear_graph_opt_backend(self): ...\n",
            "pkg/llama.py": "class LlamaForCausalLM(B):\n    pass\n",
        },
    )
    result = lint_paths([tmp_path / "pkg"], DEFAULTS, root=tmp_path)
    assert found_in(result) == {("FDC001", "pkg/llama.py", 1)} and result.context_files_parsed == 0


def test_class_inside_a_function_without_rule_names_is_still_found(tmp_path: Path) -> None:
    """The walk skips function bodies with no rule name; a class statement inside must stop the skip."""
    src = tmp_path / "factory.py"
    src.write_text("def make(cfg):\n    x = cfg.size\n\n    class DynForCausalLM:\n        pass\n\n    return DynForCausalLM\n")
    assert codes_at(src) == [("FDC001", 4)]
    src.write_text(src.read_text().replace("        pass", "        def clear_graph_opt_backend(self): ..."))
    assert codes_at(src) == []


def test_subclass_named_like_its_base_inherits_the_clear(tmp_path: Path) -> None:
    """Item 5: class XForCausalLM(a.XForCausalLM) was taken for a cycle and reported."""
    write_files(
        tmp_path,
        {
            "pyproject.toml": "",
            "a.py": "class XForCausalLM:\n    def clear_graph_opt_backend(self): ...\n",
            "b.py": "import a\n\n\nclass XForCausalLM(a.XForCausalLM):\n    pass\n",
            "bare.py": "class ZForCausalLM:\n    pass\n",
            "c.py": "import bare\n\n\nclass ZForCausalLM(bare.ZForCausalLM):\n    pass\n",
        },
    )
    whole = lint_paths([tmp_path], DEFAULTS, root=tmp_path)
    assert found_in(whole) == {("FDC001", "bare.py", 1), ("FDC001", "c.py", 4)}  # good twin: b.py clean
    # Pre-commit mode: only b.py given, its base lives in an unchanged file of the project.
    alone = lint_paths([tmp_path / "b.py"], DEFAULTS, root=tmp_path)
    assert found_in(alone) == set() and alone.context_files_parsed == 1
    assert found_in(lint_paths([tmp_path / "c.py"], DEFAULTS, root=tmp_path)) == {("FDC001", "c.py", 4)}


def test_real_inheritance_cycle_terminates(tmp_path: Path) -> None:
    write_files(
        tmp_path, {"m.py": "class AForCausalLM(BForCausalLM):\n    pass\n\n\nclass BForCausalLM(AForCausalLM):\n    pass\n"}
    )
    assert found_in(lint_paths([tmp_path], DEFAULTS, root=tmp_path)) == {("FDC001", "m.py", 1), ("FDC001", "m.py", 5)}


DISCOVERY = FIXTURES / "discovery" / "nova_models.py"


def test_discovery_takes_no_layer_block_head_or_proposer_for_a_wrapper() -> None:
    """Defect 7: *MTP* took NovaMTPLayer, NovaMTPBlock, a subclass of a layer, heads, embeddings
    and a proposer's platform variant for wrappers. The four real wrappers stay reported: by
    name, by the engine's model base, and by registration (even one named *Layer)."""
    assert codes_at(DISCOVERY) == [("FDC001", 52), ("FDC001", 58), ("FDC001", 63), ("FDC001", 67)]


def test_discovery_knobs_still_decide(tmp_path: Path) -> None:
    # Emptied block lists bring the name route back to the bare patterns (the old behaviour).
    loose = LintConfig(block_patterns=(), block_bases=(), exclude_classes=())
    assert {line for _, line in codes_at(DISCOVERY, loose)} >= {11, 16, 21, 25, 29, 33, 42}
    # wrapper-patterns still picks the wrappers by name; block-patterns applies to the name route only.
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""
        [tool.fd-conformance.lint]
        wrapper-patterns = ["*Net"]
        block-patterns = ["*SubNet"]
        block-bases = ["Conv*"]
        draft-owner-classes = ["*Speculator"]
    """)
    )
    (tmp_path / "m.py").write_text(
        "class TinyNet: pass\nclass TinySubNet: pass\nclass ConvNet(Conv2d): pass\n"
        "@register_model_class\nclass RegisteredSubNet: pass\n"
        "class Speculator:\n    def drop(self):\n        if self.use_cudagraph:\n"
        "            self.model.clear_graph_opt_backend()\n"
    )
    config = load_config(tmp_path)
    assert config.draft_owner_classes == ("*Speculator",)
    assert codes_at(tmp_path / "m.py", config) == [("FDC001", 1), ("FDC001", 5), ("FDC102", 9)]
