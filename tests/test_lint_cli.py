"""``fd-conformance lint``: config (pyproject table, bad values), paths and excludes, exit codes,
the output formats (text, JSON, SARIF, GitHub annotations) and parallel scanning."""

from __future__ import annotations

import json
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from _lint_helpers import DEFAULTS, FASTDEPLOY_DEFECTS, REPO, RULES_DIR, fastdeploy_tree, found_in

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, UsageError
from fd_conformance.lint import LintConfig, lint_paths, load_config

jsonschema = pytest.importorskip("jsonschema")  # absent on the GPU host image


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
        ("max-file-bytes = 0", "must be a whole number >= 1, got 0"),
        ("max-file-bytes = true", "must be a whole number >= 1, got True"),
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


def test_exclude_applies_to_explicitly_named_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 4: pre-commit names the changed file; the configured exclude must still hold."""
    (tmp_path / "gen").mkdir()
    (tmp_path / "gen" / "m.py").write_text("class XForCausalLM: pass\n")
    (tmp_path / "keep.py").write_text("class YForCausalLM: pass\n")
    cfg = LintConfig(exclude=("gen/*",))
    named = lint_paths([tmp_path / "gen" / "m.py", tmp_path / "keep.py"], cfg, root=tmp_path, use_context=False)
    assert named.files_scanned == 1 and found_in(named) == {("FDC001", "keep.py", 1)}
    # This repository's own hook: mutants.py is excluded in pyproject.toml, named or not.
    assert (REPO / "models" / "fd_reference_models" / "mutants.py").is_file(), (
        "the reference mutants moved: point this test at them"
    )
    monkeypatch.chdir(REPO)
    assert main(["lint", "models/fd_reference_models/mutants.py"]) == EXIT_OK
    assert main(["lint", "models/fd_reference_models"]) == EXIT_OK


@pytest.mark.skipif(sys.version_info < (3, 11), reason="simulates 3.10 from 3.11's tomllib; on 3.10 the real import path runs")
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


def test_unreadable_py_entries_are_noticed_and_the_rest_is_linted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36 e: a `*.py` symlink loop (and a dangling one) beside the linted file, in the context
    tree or the linted directory, is skipped with a one-line notice; the real findings are reported.
    Named on the command line, such a link is a one-line usage error, not a traceback."""
    (tmp_path / "pyproject.toml").write_text("")  # the project root: its tree is the context
    model = tmp_path / "model.py"
    # An FDC101 defect, and a wrapper whose base is looked up in the context tree (its walk meets the links).
    model.write_text((RULES_DIR / "fdc101_bad.py").read_text() + "\n\nclass QwenForCausalLM(QwenBase):\n    pass\n")
    (tmp_path / "loop.py").symlink_to("loop.py")
    (tmp_path / "dangling.py").symlink_to("nowhere.py")
    for target in (model, tmp_path):
        assert main(["lint", str(target)]) == EXIT_VIOLATIONS
        captured = capsys.readouterr()
        assert "FDC101" in captured.out
        notes = captured.err.strip().splitlines()
        assert sorted(notes) == [
            f"fd-conformance lint: note: skipped {tmp_path / 'dangling.py'}: a dangling symlink",
            f"fd-conformance lint: note: skipped {tmp_path / 'loop.py'}: a symlink loop",
        ], captured.err
    assert main(["lint", str(tmp_path / "loop.py")]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "loop.py is a dangling symlink or a symlink loop; fix:" in line
