"""The static linter: each rule fires on its mutant fixture and stays quiet on the good twin,
the FastDeploy defect tree is caught code by code, and the CLI, formats, config and --fix behave."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, UsageError
from fd_conformance.findings import RULES
from fd_conformance.lint import (
    CANONICAL,
    LEGACY,
    LINT_CODES,
    LintConfig,
    fix_paths,
    fix_source,
    lint_paths,
    load_config,
    near_miss,
)

jsonschema = pytest.importorskip("jsonschema")  # absent on the GPU host image

FIXTURES = Path(__file__).parent / "fixtures" / "lint"
RULES_DIR = FIXTURES / "rules"
REPO = Path(__file__).resolve().parent.parent
DEFAULTS = LintConfig()
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


# --------------------------------------------------------------------------- every rule: mutant + good twin
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


def test_near_miss_distance() -> None:
    assert near_miss("clear_graph_opt_backed") == CANONICAL
    assert near_miss("clear_grpah_opt_backnd") == LEGACY
    assert near_miss("clear_gph_opt_backend") == CANONICAL  # two deletions
    assert near_miss("clear_g_opt_backend") is None  # four deletions
    assert near_miss(CANONICAL) is None and near_miss(LEGACY) is None
    assert near_miss("clear_cudagraph_piecewise_backend") is None
    assert near_miss("clr_grph_opt_backnd") is None  # distance 4


# --------------------------------------------------------------------------- the FastDeploy defects
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


def test_reference_models_package_is_clean() -> None:
    package = REPO / "models" / "fd_reference_models"
    assert package.is_dir(), f"{package} is missing: the reference zoo moved, point this test at it"
    result = lint_paths([package], root=REPO)
    assert [f.format() for f in result.findings if f.is_error] == []


# --------------------------------------------------------------------------- suppression
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


# --------------------------------------------------------------------------- config
def test_pyproject_table_configures_names(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""
        [tool.fd-conformance]
        other-component = 1  # keys outside .lint belong to other parts of the kit
        [tool.fd-conformance.lint]
        wrapper-patterns = ["*Wrapper"]
        release-calls = ["free_all"]
        severity = { FDC002 = "error" }
    """)
    )
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "class LlamaForCausalLM: pass\n"
        "class MyWrapper: pass\n"
        "def teardown(m):\n    m.free_all()\n    m.clear_grpah_opt_backend()\n"
    )
    config = load_config(pkg)
    assert config.source == str(tmp_path / "pyproject.toml")
    result = lint_paths([pkg], config, root=tmp_path)
    got = {(f.code, f.location.line, f.severity.value) for f in result.findings}
    assert got == {("FDC001", 2, "error"), ("FDC101", 5, "error"), ("FDC002", 5, "error")}


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ('wrapper-patern = ["x"]', "unknown lint setting 'wrapper-patern'"),
        ('release-calls = "clear_parameters"', "must be a list of non-empty strings"),
        ("severity = { FDC999 = 'error' }", "unknown lint code 'FDC999'"),
        ("severity = { FDC002 = 'fatal' }", "severity for FDC002"),
    ],
)
def test_bad_config_is_a_usage_error_naming_key_and_file(
    tmp_path: Path, table: str, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "lint.toml"
    cfg.write_text(table + "\n")
    with pytest.raises(UsageError) as err:
        load_config(config_file=cfg)
    assert needle in str(err.value) and str(cfg) in str(err.value)
    assert main(["lint", "--config", str(cfg), str(RULES_DIR / "fdc002_good.py")]) == EXIT_USAGE
    err_text = capsys.readouterr().err
    assert err_text.count("\n") == 1 and needle in err_text


def test_bad_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", "/nonexistent/models"]) == EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err


def test_exclude_globs_skip_paths(tmp_path: Path) -> None:
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "m.py").write_text("class XForCausalLM: pass\n")
    cfg = LintConfig(exclude=("gen/*",))
    assert lint_paths([tmp_path], cfg, root=tmp_path).files_scanned == 0


# --------------------------------------------------------------------------- CLI and formats
def test_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lint", str(RULES_DIR / "fdc002_bad.py")]) == EXIT_OK  # warnings only
    assert main(["lint", str(RULES_DIR / "fdc101_bad.py")]) == EXIT_VIOLATIONS
    assert main(["lint", str(RULES_DIR / "fdc100_bad.py"), str(RULES_DIR / "fdc102_bad.py")]) == EXIT_VIOLATIONS
    out = capsys.readouterr().out
    assert "FDC100" in out and "FDC102" in out  # a syntax error does not stop the other files


def test_text_format(capsys: pytest.CaptureFixture[str]) -> None:
    main(["lint", str(RULES_DIR / "fdc101_bad.py")])
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("tests/fixtures/lint/rules/fdc101_bad.py:4:29: FDC101 ") or ":4:29: FDC101 " in first


def test_json_format(capsys: pytest.CaptureFixture[str]) -> None:
    main(["lint", "--format", "json", str(RULES_DIR / "fdc102_bad.py")])
    data = json.loads(capsys.readouterr().out)
    assert data["files_scanned"] == 1 and data["summary"] == {"errors": 2, "warnings": 0}
    assert [(f["code"], f["line"], f["col"]) for f in data["findings"]] == [("FDC102", 6, 37), ("FDC102", 13, 30)]


# The parts of the SARIF 2.1.0 schema GitHub code scanning relies on (the full schema is not
# available offline); additionalProperties stay open as in the real schema.
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "rules"],
                                "properties": {
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id", "shortDescription", "helpUri"],
                                            "properties": {
                                                "shortDescription": {"type": "object", "required": ["text"]},
                                                "helpUri": {"type": "string", "pattern": "^https?://"},
                                            },
                                        },
                                    }
                                },
                            }
                        },
                    },
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["ruleId", "level", "message", "locations"],
                            "properties": {
                                "level": {"enum": ["none", "note", "warning", "error"]},
                                "message": {"type": "object", "required": ["text"]},
                                "locations": {
                                    "type": "array",
                                    "minItems": 1,
                                    "items": {
                                        "type": "object",
                                        "required": ["physicalLocation"],
                                        "properties": {
                                            "physicalLocation": {
                                                "type": "object",
                                                "required": ["artifactLocation", "region"],
                                                "properties": {
                                                    "artifactLocation": {
                                                        "type": "object",
                                                        "required": ["uri"],
                                                        "properties": {"uri": {"type": "string", "not": {"pattern": "^/"}}},
                                                    },
                                                    "region": {
                                                        "type": "object",
                                                        "required": ["startLine", "startColumn"],
                                                        "properties": {
                                                            "startLine": {"type": "integer", "minimum": 1},
                                                            "startColumn": {"type": "integer", "minimum": 1},
                                                        },
                                                    },
                                                },
                                            }
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def test_sarif_format(tmp_path: Path) -> None:
    out = tmp_path / "lint.sarif"
    rc = main(["lint", "--format", "sarif", "-o", str(out), *map(str, fastdeploy_tree(FASTDEPLOY_DEFECTS))])
    assert rc == EXIT_VIOLATIONS
    sarif = json.loads(out.read_text())
    jsonschema.validate(sarif, SARIF_SUBSET)
    run = sarif["runs"][0]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    for res in run["results"]:
        assert rule_ids[res["ruleIndex"]] == res["ruleId"]
    levels = Counter((r["ruleId"], r["level"]) for r in run["results"])
    assert levels[("FDC101", "error")] == 1 and levels[("FDC002", "warning")] >= 1
    # A structurally broken document must fail the same validation (the check can fail).
    del run["results"][0]["locations"][0]["physicalLocation"]["region"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(sarif, SARIF_SUBSET)


def test_github_annotations(capsys: pytest.CaptureFixture[str]) -> None:
    main(["lint", "--format", "github", str(RULES_DIR / "fdc002_bad.py"), str(RULES_DIR / "fdc101_bad.py")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("::warning file=tests/fixtures/lint/rules/fdc002_bad.py,line=2,col=5,title=FDC002::")
    assert any(line.startswith("::error file=") and "title=FDC101::" in line for line in lines)


# --------------------------------------------------------------------------- --fix
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


def test_configured_helpers_catch_the_reference_mutants(tmp_path: Path) -> None:
    """Cross-check with the runtime side: the reference runner's order mutants, linted with the
    repository's helper names configured, are caught statically; the good runner is clean."""
    mutants = REPO / "models" / "fd_reference_models" / "runner_mutants.py"
    runner = REPO / "fd_conformance" / "engine" / "runner.py"  # the runner body (the reference one re-exports it)
    assert mutants.is_file() and runner.is_file(), "the reference runner or its mutants moved: point this test at them"
    assert "def clear_parameters" in runner.read_text(), f"{runner} holds no clear_parameters to lint"
    cfg = tmp_path / "lint.toml"
    cfg.write_text(
        'graph-clear-calls = ["clear_graphs_of", "_clear_graphs"]\n'
        'release-calls = ["_release_weights", "_shutdown_group", "clear_parameters"]\n'
    )
    config = load_config(config_file=cfg)
    assert [f.format() for f in lint_paths([runner], config, root=REPO).findings if f.is_error] == []
    assert {"FDC101", "FDC102"} <= {f.code for f in lint_paths([mutants], config, root=REPO).findings}


def test_helper_call_with_draft_argument_is_guard_checked(tmp_path: Path) -> None:
    src = tmp_path / "r.py"
    src.write_text("def clear(self):\n    if self.use_cudagraph:\n        clear_graphs_of(self.draft)\n")
    cfg = LintConfig(graph_clear_calls=("clear_graphs_of",))
    assert codes_at(src, cfg) == [("FDC102", 3)]
    assert codes_at(src) == []  # not a graph-clear call unless configured


# --------------------------------------------------------------------------- given files + project context
def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))


def _found(result: object) -> set[tuple[str, str, int]]:
    return {(f.code, f.location.path or "", f.location.line or 0) for f in result.findings}  # type: ignore[attr-defined]


def test_wrapper_found_through_a_base_in_an_unchanged_file(tmp_path: Path) -> None:
    """Discovery through bases: Leaf matches no pattern and is a wrapper only because Mid (in an
    unchanged file) descends from ModelForCausalLM. Mid's own FDC001 is not the given file's."""
    _write(
        tmp_path,
        {
            "pyproject.toml": "",
            "pkg/mid.py": "class Mid(ModelForCausalLM):\n    def forward(self): ...\n",
            "pkg/leaf.py": "from pkg.mid import Mid\n\nclass Leaf(Mid):\n    pass\n",
        },
    )
    result = lint_paths([tmp_path / "pkg" / "leaf.py"], DEFAULTS, root=tmp_path)
    assert _found(result) == {("FDC001", "pkg/leaf.py", 3)}
    assert result.context_files_parsed == 1
    alone = lint_paths([tmp_path / "pkg" / "leaf.py"], DEFAULTS, root=tmp_path, use_context=False)
    assert _found(alone) == set()  # judged alone, Leaf is not even recognised as a wrapper


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
    _write(tmp_path, files)
    good = lint_paths([tmp_path / "pkg" / "llama.py"], DEFAULTS, root=tmp_path)
    assert _found(good) == set() and good.context_files_parsed == 2  # base.py and docs.py, not the 30 others
    bad = lint_paths([tmp_path / "pkg" / "qwen.py"], DEFAULTS, root=tmp_path)
    assert _found(bad) == {("FDC001", "pkg/qwen.py", 1)} and bad.context_files_parsed == 1


def test_a_string_that_looks_like_a_base_lends_no_clear_method(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            ".git/HEAD": "",
            "docs.py": 'EXAMPLE = """\nclass Base:\n    def clear_graph_opt_backend(self): ...\n"""\n',
            "llama.py": "class LlamaForCausalLM(Base):\n    pass\n",
        },
    )
    assert _found(lint_paths([tmp_path / "llama.py"], DEFAULTS, root=tmp_path)) == {("FDC001", "llama.py", 1)}


def test_local_definition_wins_over_the_context(tmp_path: Path) -> None:
    # The module's own Base (no clear) is the one Python binds; another file's Base must not hide the defect.
    _write(
        tmp_path,
        {
            "pyproject.toml": "",
            "base.py": "class Base:\n    def clear_graph_opt_backend(self): ...\n",
            "llama.py": "class Base:\n    pass\n\n\nclass LlamaForCausalLM(Base):\n    pass\n",
        },
    )
    result = lint_paths([tmp_path / "llama.py"], DEFAULTS, root=tmp_path)
    assert _found(result) == {("FDC001", "llama.py", 5)} and result.context_files_parsed == 0


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
    _write(
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
    _write(
        tmp_path,
        {
            "pyproject.toml": "",
            "base.py": "class B:\n    def clear_graph_opt_backend(self): ...\n",
            "pkg/llama.py": "class LlamaForCausalLM(B):\n    pass\n",
        },
    )
    result = lint_paths([tmp_path / "pkg"], DEFAULTS, root=tmp_path)
    assert _found(result) == {("FDC001", "pkg/llama.py", 1)} and result.context_files_parsed == 0


# --------------------------------------------------------------------------- speed paths keep the answers
def test_class_inside_a_function_without_rule_names_is_still_found(tmp_path: Path) -> None:
    """The walk skips function bodies with no rule name; a class statement inside must stop the skip."""
    src = tmp_path / "factory.py"
    src.write_text("def make(cfg):\n    x = cfg.size\n\n    class DynForCausalLM:\n        pass\n\n    return DynForCausalLM\n")
    assert codes_at(src) == [("FDC001", 4)]
    src.write_text(src.read_text().replace("        pass", "        def clear_graph_opt_backend(self): ..."))
    assert codes_at(src) == []


def test_parallel_scan_matches_serial(tmp_path: Path) -> None:
    sources = [p.read_text() for p in sorted(RULES_DIR.glob("*.py"))]
    for i in range(420):  # above MIN_PARALLEL_FILES
        (tmp_path / f"m{i:03d}.py").write_text(sources[i % len(sources)])
    serial = lint_paths([tmp_path], DEFAULTS, root=tmp_path, jobs=1)
    parallel = lint_paths([tmp_path], DEFAULTS, root=tmp_path, jobs=2)
    assert serial.files_scanned == parallel.files_scanned == 420
    assert [f.format() for f in parallel.findings] == [f.format() for f in serial.findings]
    assert {f.code for f in serial.findings} >= {"FDC001", "FDC002", "FDC100", "FDC101", "FDC102"}


def test_no_fork_while_other_threads_run() -> None:
    import threading

    from fd_conformance.lint.pool import _fork_context

    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert _fork_context() is None  # a fork now could copy a held lock into the child
    finally:
        stop.set()
        worker.join()


def test_bad_jobs_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["lint", "--jobs", "-1", str(RULES_DIR / "fdc002_good.py")])
    assert exc.value.code == EXIT_USAGE and "--jobs must be a whole number" in capsys.readouterr().err


# --------------------------------------------------------------------------- review regressions
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


def test_exclude_applies_to_explicitly_named_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 4: pre-commit names the changed file; the configured exclude must still hold."""
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "m.py").write_text("class XForCausalLM: pass\n")
    (tmp_path / "keep.py").write_text("class YForCausalLM: pass\n")
    cfg = LintConfig(exclude=("gen/*",))
    named = lint_paths([tmp_path / "gen" / "m.py", tmp_path / "keep.py"], cfg, root=tmp_path, use_context=False)
    assert named.files_scanned == 1 and _found(named) == {("FDC001", "keep.py", 1)}
    # This repository's own hook: mutants.py is excluded in pyproject.toml, named or not.
    assert (REPO / "models" / "fd_reference_models" / "mutants.py").is_file(), (
        "the reference mutants moved: point this test at them"
    )
    monkeypatch.chdir(REPO)
    assert main(["lint", "models/fd_reference_models/mutants.py"]) == EXIT_OK
    assert main(["lint", "models/fd_reference_models"]) == EXIT_OK


def test_subclass_named_like_its_base_inherits_the_clear(tmp_path: Path) -> None:
    """Item 5: class XForCausalLM(a.XForCausalLM) was taken for a cycle and reported."""
    _write(
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
    assert _found(whole) == {("FDC001", "bare.py", 1), ("FDC001", "c.py", 4)}  # good twin: b.py clean
    # Pre-commit mode: only b.py given, its base lives in an unchanged file of the project.
    alone = lint_paths([tmp_path / "b.py"], DEFAULTS, root=tmp_path)
    assert _found(alone) == set() and alone.context_files_parsed == 1
    assert _found(lint_paths([tmp_path / "c.py"], DEFAULTS, root=tmp_path)) == {("FDC001", "c.py", 4)}


def test_real_inheritance_cycle_terminates(tmp_path: Path) -> None:
    _write(tmp_path, {"m.py": "class AForCausalLM(BForCausalLM):\n    pass\n\n\nclass BForCausalLM(AForCausalLM):\n    pass\n"})
    assert _found(lint_paths([tmp_path], DEFAULTS, root=tmp_path)) == {("FDC001", "m.py", 1), ("FDC001", "m.py", 5)}


# \x0c (form feed, PEP 8's page break), \x1c and \u2028 are line breaks to str.splitlines, not to ast.
ODD_BREAKS = (
    "x = 1\n\x0c\ns = 'a\x1cb\u2028c'\nobj.clear_grpah_opt_backend()  # noqa: FDC002\n\u00e9 = obj.clear_grpah_opt_backend()\n"
)


def test_noqa_and_columns_survive_splitlines_only_breaks(tmp_path: Path) -> None:
    """Item 6: every line after a form feed was off by one: noqa missed, columns from other text."""
    src = tmp_path / "m.py"
    src.write_text(ODD_BREAKS, encoding="utf-8")
    found = [(f.code, f.location.line, f.location.col) for f in lint_paths([src], DEFAULTS, root=tmp_path).findings]
    assert found == [("FDC002", 5, 9)]


def test_fix_edits_the_right_line_after_a_form_feed() -> None:
    source = "\x0c\nclass A:\n    def clear_grpah_opt_backend(self):\n        return 1\n"
    fixed = fix_source(source)
    namespace: dict[str, object] = {}
    exec(compile(fixed, "<fixed>", "exec"), namespace)
    cls = namespace["A"]
    assert cls.clear_graph_opt_backend is cls.clear_grpah_opt_backend  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"\xef\xbb\xbfclass A:\n    def clear_grpah_opt_backend(self): ...\n", "utf-8-sig"),
        (b"# -*- coding: latin-1 -*-\nS = '\xe9'\nclass A:\n    def clear_grpah_opt_backend(self): ...\n", "latin-1"),
    ],
)
def test_bom_and_coding_cookie_are_read_as_python_reads_them(tmp_path: Path, data: bytes, encoding: str) -> None:
    """Item 7: both were reported FDC100 (cannot parse / cannot read); --fix keeps the encoding."""
    src = tmp_path / "m.py"
    src.write_bytes(data)
    line = data.decode(encoding).count("\n")
    assert codes_at(src) == [("FDC002", line)]
    assert fix_paths([src], DEFAULTS, root=tmp_path) == [src]
    fixed = src.read_bytes()
    assert fixed.startswith(data[:3]) and fixed.decode(encoding).count(CANONICAL) == 2
    assert codes_at(src) == []


def test_unknown_coding_cookie_is_fdc100(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_bytes(b"# -*- coding: no-such-codec -*-\nx = 1\n")
    assert codes_at(src) == [("FDC100", 1)]


def test_private_helpers_spelled_right_are_not_near_misses(tmp_path: Path) -> None:
    """Item 8: _clear_graph_opt_backend (a helper) was an error-level FDC004."""
    for name in (f"_{CANONICAL}", f"__{CANONICAL}", f"_{LEGACY}", f"{CANONICAL}_"):
        assert near_miss(name) is None, name
    assert near_miss("clear_graph_opt_backendd") == CANONICAL  # a real typo still is one
    src = tmp_path / "m.py"
    src.write_text(f"class R:\n    def _{CANONICAL}(self):\n        self.x._{CANONICAL}()\n")
    assert codes_at(src) == []


def test_lint_config_imports_on_python_310_with_tomli(tmp_path: Path) -> None:
    """Item 9: ``import tomllib`` failed on 3.10; simulated here (3.10's tomllib is absent, tomli
    is the same parser) in a fresh interpreter, then a real config is loaded through it."""
    import subprocess
    import sys
    import tomllib

    (tmp_path / "pyproject.toml").write_text('[tool.fd-conformance.lint]\nrelease-calls = ["free_all"]\n')
    code = (
        "import sys, tomllib\n"
        "sys.modules['tomli'] = tomllib\n"
        "sys.modules['tomllib'] = None\n"  # import tomllib now raises ImportError
        "sys.version_info = (3, 10, 14, 'final', 0)\n"
        "from pathlib import Path\n"
        "from fd_conformance.lint.config import load_config\n"
        f"print(load_config(Path({str(tmp_path)!r})).release_calls)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "free_all" in proc.stdout, proc.stderr
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "tomli>=1.1; python_version<'3.11'" in deps


def test_sarif_uri_for_files_outside_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 22: an absolute path came out with uriBaseId %SRCROOT% and no percent-encoding."""
    work = tmp_path / "work"
    (work / "my models").mkdir(parents=True)
    inside = work / "my models" / "m.py"
    outside_dir = tmp_path / "other dir"
    outside_dir.mkdir()
    outside = outside_dir / "m.py"
    for src in (inside, outside):
        src.write_text("class XForCausalLM:\n    pass\n")
    monkeypatch.chdir(work)
    out = tmp_path / "lint.sarif"
    assert main(["lint", "--no-context", "--format", "sarif", "-o", str(out), str(inside), str(outside)]) == 1
    sarif = json.loads(out.read_text())
    jsonschema.validate(sarif, SARIF_SUBSET)
    locations = sorted(
        (r["locations"][0]["physicalLocation"]["artifactLocation"] for r in sarif["runs"][0]["results"]),
        key=lambda loc: loc["uri"],
    )
    assert locations == [
        {"uri": outside.as_uri()},  # file:///.../other%20dir/m.py, no base
        {"uri": "my%20models/m.py", "uriBaseId": "%SRCROOT%"},
    ]
    assert "%20" in outside.as_uri()


def test_fdc102_message_shows_the_call_as_written(tmp_path: Path) -> None:
    """Item 29: a helper call was printed as a method call on its argument."""
    src = tmp_path / "r.py"
    src.write_text(
        "def clear(self):\n    if self.use_cudagraph:\n        clear_graphs_of(self.draft)\n"
        "    if self.use_cudagraph:\n        self.proposer.model.clear_graph_opt_backend()\n"
    )
    cfg = LintConfig(graph_clear_calls=("clear_graphs_of", CANONICAL))
    messages = [f.message for f in lint_paths([src], cfg, root=tmp_path).findings]
    assert len(messages) == 2
    assert "(clear_graphs_of(self.draft))" in messages[0]
    assert f"(self.proposer.model.{CANONICAL}())" in messages[1]


# --------------------------------------------------------------------------- issue 13: FDC102 reachability
# An engine the kit never saw: draft at self.spec_worker.net, main switch enable_graphs, the
# draft's spec_graphs. "*graphs" as the main pattern also matches spec_graphs: a draft flag never
# counts as the main one.
REACHABILITY = FIXTURES / "reachability"
SPEC_ENGINE = LintConfig(draft_receivers=("spec_worker",), main_flags=("*graphs",), draft_flags=("spec_graphs",))


def test_fdc102_flags_draft_clears_reachable_only_under_the_main_flag() -> None:
    """Defect 6: nested ifs, and-chains, elif, early return/raise, a local alias, a short-circuit,
    an assert and a proposer's self.model were all missed (the old rule only asked whether an
    enclosing if mentioned a draft flag), and the early-return shapes were invisible to it."""
    found = codes_at(REACHABILITY / "spec_engine_bad.py", SPEC_ENGINE)
    assert found == [("FDC102", line) for line in (13, 18, 24, 31, 37, 43, 48, 51, 60, 66)]


def test_fdc102_quiet_when_the_draft_clear_runs_with_the_main_flag_off() -> None:
    """Draft flag only, unguarded, an else/elif that clears the draft too, a clear before the
    main-flag return, either flag, unrelated returns, loop continue, a caught raise, a nested
    function, the main model under its own flag, a proposer's handle on the main model."""
    assert codes_at(REACHABILITY / "spec_engine_good.py", SPEC_ENGINE) == []


def test_fdc102_message_says_which_value_of_the_main_flag_the_clear_needs() -> None:
    result = lint_paths([REACHABILITY / "spec_engine_bad.py"], SPEC_ENGINE, root=REPO)
    by_line = {f.location.line: f for f in result.findings}
    assert "only when the main model's flag enable_graphs is on" in by_line[13].message
    assert "only when the main model's flag enable_graphs is off" in by_line[43].message
    assert by_line[13].location.obj == "SpecEngine.release_nested"
    assert by_line[60].location.obj == "EagleProposer.drop_graphs"


def test_fdc102_nested_fix_shape_with_default_names(tmp_path: Path) -> None:
    """The upstream hang fix's shape, default flag names: the draft's own flag is tested, but
    inside the main one. Its twin with the draft block beside the main one is clean."""
    src = tmp_path / "runner.py"
    src.write_text(
        textwrap.dedent("""\
        class Worker:
            def drop_weights(self, rank):
                if self.graph_cfg.use_cudagraph:
                    self.net.clear_graph_opt_backend()
                    if self.spec_on and self.graph_cfg.draft_model_use_cudagraph:
                        self.drafter.net.clear_graph_opt_backend()
                self.weights.clear_parameters(rank)
        """)
    )
    assert codes_at(src) == [("FDC102", 6)]
    src.write_text(
        src.read_text()
        .replace("            if self.spec_on and", "        if self.spec_on and")
        .replace("                self.drafter", "            self.drafter")
    )
    assert "\n        if self.spec_on" in src.read_text()
    assert codes_at(src) == []


def test_fdc102_ignores_unreachable_draft_clears(tmp_path: Path) -> None:
    src = tmp_path / "r.py"
    src.write_text("def f(self):\n    return\n    if self.use_cudagraph:\n        self.draft.clear_graph_opt_backend()\n")
    assert codes_at(src) == []


def test_reachability_solver_budget_answers_satisfiable() -> None:
    from fd_conformance.lint import guard as g

    a, b = ("v", "a"), ("v", "b")
    assert g.satisfiable(g.f_and(a, g.f_not(b))) and not g.satisfiable(g.f_and(a, g.f_not(a)))
    many = g.f_and(*(g.f_or(("v", f"x{i}"), ("v", f"y{i}")) for i in range(40)), g.FALSE)
    assert many is g.FALSE  # constants fold before any search
    huge = g.f_and(*(g.f_or(("v", f"x{i}"), ("v", f"y{i}")) for i in range(40)), ("v", "z"), g.f_not(("v", "z")))
    assert g.satisfiable(huge)  # past the budget: "satisfiable", i.e. no finding rather than a guess


# --------------------------------------------------------------------------- issue 13: FDC001 discovery
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


def test_fastdeploy_defect_tree_still_caught_with_new_discovery() -> None:
    """The shipped FastDeploy-shaped fixture keeps its three codes, and its MTPProposer and
    Glm4MTPModel (inner model, decorated) stay unreported."""
    result = lint_paths(fastdeploy_tree(FASTDEPLOY_DEFECTS), DEFAULTS, root=FIXTURES)
    assert {f.code for f in result.findings if f.is_error} == {"FDC001", "FDC101", "FDC102"}
    assert not any(f.location.obj in ("MTPProposer", "Glm4MTPModel") for f in result.findings)


# --------------------------------------------------------------------------- issue 13: bench/lint_fastdeploy.py
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
