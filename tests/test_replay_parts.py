"""Reproducers' parts (issue 52, "Replay"), each on its own: a node id resolved to its check, the
file's name, the certificate's list, the repro/ folder in --out, --last-failed's rows and the
plugin's --fd-row. tests/test_replay.py runs the whole thing through real runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.errors import EXIT_USAGE, UsageError

ENV = {**os.environ, "FD_CONFORMANCE_GPU": "0"}


def test_last_failed_when_every_row_passed_runs_every_row(tmp_path: Path) -> None:
    from fd_conformance.cli.last_failed import announce, failed_rows, row_arguments

    rows = [{"name": "good", "device": "cpu", "verdict": "certified"}, {"name": "mutant", "device": "cpu", "verdict": "caught"}]
    document = {"schema_version": 1, "environment": {"kit_version": "x"}, "cases": rows}
    (tmp_path / "conformance.json").write_text(json.dumps(document))
    assert failed_rows(tmp_path) == [] and row_arguments([]) == []
    assert "passed: running every row" in announce([], tmp_path)
    rows.append({"name": "bad", "device": "cuda", "verdict": "not-judged"})
    (tmp_path / "conformance.json").write_text(json.dumps(document))
    assert row_arguments(failed_rows(tmp_path)) == ["--fd-row=bad@cuda"]


def test_a_malformed_row_option_is_one_pytest_usage_line() -> None:
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "--fd-row=nodevice"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--fd-row 'nodevice' is not CASE@DEVICE" in proc.stderr


# --------------------------------------------------------------------------- resolving a check
def _suite_checks() -> list[tuple[str, str]]:
    import importlib
    import pkgutil

    import fd_conformance.suite as suite

    found = []
    for info in pkgutil.iter_modules(suite.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"fd_conformance.suite.{info.name}")
            found += [
                (f"{info.name}.py", name) for name in dir(module) if name.startswith("test_") and callable(getattr(module, name))
            ]
    return found


@pytest.mark.parametrize(("file", "function"), _suite_checks())
def test_every_suite_check_resolves_and_takes_only_what_a_reproducer_builds(file: str, function: str) -> None:
    from fd_conformance.replay.runner import FIXTURES
    from fd_conformance.replay.target import parametrizations, resolve_check

    module = sys.modules[f"fd_conformance.suite.{file.removesuffix('.py')}"]
    choices = list(parametrizations(getattr(module, function)))
    assert choices
    for ids, values in choices:
        nodeid = f"{file}::{function}[my-model-x-cpu{'-' + ids if ids else ''}]"
        target = resolve_check(nodeid, "cpu")
        assert target.function is getattr(module, function) and target.params == values
        assert [a for a in target.arguments if a not in FIXTURES and a not in values] == []


def test_parametrize_ids_are_matched_whole_not_split_on_dashes() -> None:
    from fd_conformance.replay.target import resolve_check

    target = resolve_check("test_teardown_order.py::test_teardown_order[a-b-cuda-mainOff-draftOn]", "cuda")
    assert (target.check, target.params) == ("teardown_order", {"use_cudagraph": False, "draft_model_use_cudagraph": True})
    switched = resolve_check("test_clear.py::test_clear_whatever_the_flags[m-cpu-bothOff]", "cpu")
    assert switched.params == {"switched_off": ("use_cudagraph", "draft_model_use_cudagraph")}
    with pytest.raises(UsageError, match="names no cuda row"):  # the row's device is part of the id
        resolve_check("test_clear.py::test_clear_whatever_the_flags[m-cpu-bothOff]", "cuda")


def test_a_reproducer_of_what_is_gone_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fd_conformance.replay import replay

    (tmp_path / "m.py").write_text(
        "from fd_conformance.cases import ModelCase\n\nCASES = [ModelCase('only-one', 'torch', lambda runtime: None, (1,))]\n"
    )
    spec = f"{tmp_path / 'm.py'}:CASES"
    assert replay(specs=[spec], case="renamed", device="cpu", nodeid="test_protocol.py::test_protocol[renamed-cpu]") == EXIT_USAGE
    assert "give(s) no case 'renamed'" in capsys.readouterr().err
    assert replay(specs=[spec], case="only-one", device="cpu", nodeid="my_test.py::test_x[only-one-cpu]") == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is no check of the shipped suites" in line and "fix:" in line


def test_reproducer_names_are_file_names() -> None:
    from fd_conformance.replay.script import file_name

    assert (
        file_name("m", "cpu", "test_clear.py::test_clear_whatever_the_flags[m-cpu-mainOff]")
        == "m-cpu-clear_whatever_the_flags-mainOff.py"
    )
    assert file_name("m", "cuda", "x/test_a.py::test_b[odd id/ü-cuda]") == "m-cuda-b-odd_id__-cuda.py"
    long = file_name("m" * 200, "cpu", f"test_a.py::test_b[{'m' * 200}-cpu]")
    assert len(long) <= 153 and long.endswith(".py")


def test_a_repro_folder_of_the_users_is_never_moved(tmp_path: Path) -> None:
    """--out may be a directory the user shares: a repro/ of theirs stops the run (exit 2 naming it)
    before anything moves; the kit's own (every file a reproducer) moves to previous/ with the reports."""
    from fd_conformance.cli.outdir import keep_previous, kit_wrote
    from fd_conformance.replay.script import Reproduction, script_text
    from fd_conformance.report import CheckResult, write_reports

    write_reports(
        tmp_path, [CheckResult(nodeid="t.py::test_protocol[m-cpu]", case="m", device="cpu", check="protocol", outcome="passed")]
    )
    (tmp_path / "repro").mkdir()
    (tmp_path / "repro" / "debug_me.py").write_text("print('mine')\n")
    assert not kit_wrote(tmp_path / "repro")
    with pytest.raises(UsageError, match=r"holds repro, which fd-conformance did not write"):
        keep_previous(tmp_path)
    assert (tmp_path / "repro" / "debug_me.py").read_text() == "print('mine')\n"
    (tmp_path / "repro" / "debug_me.py").unlink()
    ours = Reproduction("m", "cpu", "test_protocol.py::test_protocol[m-cpu]", "protocol", codes=["FDC001"])
    (tmp_path / "repro" / "m-cpu-protocol.py").write_text(script_text(ours, "repro/m-cpu-protocol.py"))
    assert kit_wrote(tmp_path / "repro")
    keep_previous(tmp_path).settle()
    assert [p.name for p in (tmp_path / "previous" / "repro").iterdir()] == ["m-cpu-protocol.py"]
    assert not (tmp_path / "repro").exists()


def test_the_certificate_lists_each_reproducer_and_folds_past_a_few(tmp_path: Path) -> None:
    """One line per check that found a defect; a test that is no shipped suite check (passed after
    ``--``) gets none, and the list says why; past five the rest is folded."""
    from fd_conformance.cli.reproducers import SHOWN, run_facts, write_reproducers
    from fd_conformance.report import CheckResult, write_reports

    def failed(nodeid: str, code: str) -> CheckResult:
        return CheckResult(
            nodeid=nodeid, case="m", device="cpu", check="clear", outcome="failed", codes=[code], message=f"{code} x"
        )

    flips = ["mainOff", "draftOff", "bothOff"]
    results = [failed(f"test_clear.py::test_clear_whatever_the_flags[m-cpu-{flip}]", "FDC203") for flip in flips]
    results += [
        failed(f"test_teardown_order.py::test_teardown_order[m-cpu-main{a}-draft{b}]", "FDC201")
        for a in ("On", "Off")
        for b in ("On", "Off")
    ]
    results.append(failed("tests/test_mine.py::test_own[m-cpu]", "FDC203"))
    write_reports(tmp_path, results)
    listed = write_reproducers(tmp_path, run_facts(["m.py:CASES"], False, 5, str(tmp_path)), quiet=True)
    assert len(listed) == 8 and len(list((tmp_path / "repro").iterdir())) == 7
    section = (tmp_path / "certificate.md").read_text().split("## Reproducers", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("- ")]
    assert lines[0] == "- `repro/m-cpu-clear_whatever_the_flags-mainOff.py`: `m` [cpu] clear FDC203"
    assert "- `m` [cpu] clear (FDC203): no reproducer: not a check of the shipped suites" in lines
    assert section.index(f"<details><summary>{len(lines) - SHOWN} more</summary>") > section.index(lines[SHOWN - 1])
