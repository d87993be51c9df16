"""Issue 51 items 10-12: a refused `fd-conformance run` leaves --out as it found it (the last report
stays where a CI job uploads it from), exactly one previous report is kept, input the run cannot
read is one line and exit 2, and an interrupted run's two exit codes are one documented mapping."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_run_cli import _passing_document, model_dir, run_cli

from fd_conformance.cli import main
from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_SIGINT, EXIT_SIGTERM, EXIT_USAGE

__all__ = ["model_dir"]  # the fixture, shared with test_run_cli

TINY = "author_models.tiny:CASE"
EXIT_CODES_PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "exit-codes.md"


def _tree(out: Path) -> dict[str, bytes]:
    """Every file under ``out``, hidden ones too: relative path -> content."""
    return {str(path.relative_to(out)): path.read_bytes() for path in sorted(out.rglob("*")) if path.is_file()}


def _earlier_runs(out: Path) -> dict[str, bytes]:
    """--out as two earlier runs left it: the last report, and the one before it in previous/."""
    _passing_document(out / "previous")
    _passing_document(out)
    return _tree(out)


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--model", "author_models.tiny:NOPE"], {}, "'author_models.tiny' has no attribute 'NOPE'"),
        (["--model", TINY, "--runtime", "paddle"], {}, "paddle"),  # pytest finds no paddle case (or paddle is missing)
        (["--model", TINY], {"PYTEST_ADDOPTS": "--no-such-option"}, "unrecognized arguments: --no-such-option"),
        (["--model", TINY], {"PYTEST_ADDOPTS": '"unclosed'}, "PYTEST_ADDOPTS '\"unclosed' cannot be split into arguments"),
    ],
    ids=["spec-attribute", "runtime-mismatch", "addopts-option", "addopts-quoting"],
)
def test_a_refused_run_leaves_out_as_it_was(model_dir: Path, args: list[str], env: dict[str, str], message: str) -> None:
    """Item 10: whether the command or pytest refuses the run, the last report stays in --out and
    the one before it in previous/, byte for byte (they were moved aside, and nothing written)."""
    out = model_dir / "r"
    before = _earlier_runs(out)
    proc = run_cli(model_dir, *args, "--device", "cpu", "--out", str(out), env_extra=env)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert message in line, line
    assert _tree(out) == before


def test_keep_previous_keeps_one_previous_report_or_puts_everything_back(tmp_path: Path) -> None:
    """Item 10: settled, the earlier report is the only previous one (previous-<time>/ folders piled
    up); restored, --out is as it was; a run killed before it settled leaves nothing that piles up."""
    from fd_conformance.cli.outdir import PREVIOUS_DIR, keep_previous

    out = tmp_path / "out"
    before = _earlier_runs(out)
    kept = keep_previous(out)
    assert not (out / "conformance.json").exists()
    kept.restore()
    assert _tree(out) == before
    keep_previous(out)  # killed before it settled; the next run writes its report and settles
    _passing_document(out)
    latest = {name: data for name, data in _tree(out).items() if "/" not in name}
    assert keep_previous(out).settle() == out / PREVIOUS_DIR
    assert _tree(out) == {f"{PREVIOUS_DIR}/{name}": data for name, data in latest.items()}
    assert [path.name for path in out.iterdir()] == [PREVIOUS_DIR]


def test_a_cases_file_that_is_not_utf8_is_one_line_exit_2(model_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 11: it was a UnicodeDecodeError traceback, exit 1."""
    out = model_dir / "r"
    before = _earlier_runs(out)
    selection = model_dir / "selection.txt"
    selection.write_bytes(b"tiny_external\n\xff\xfe\n")
    assert main(["run", "--cases-file", str(selection), "--out", str(out)]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"cases file {selection} is not UTF-8 text (byte 0xff at offset 14); fix: " in line, line
    assert _tree(out) == before


@pytest.mark.parametrize(
    ("name", "message"),
    [("a" * 300, "has a name of 300 bytes"), ("/".join(["b" * 200] * 21), "the reports' paths in it would pass")],
    ids=["name-max", "path-max"],
)
def test_an_out_longer_than_the_file_system_allows_is_one_line_exit_2(
    model_dir: Path, capsys: pytest.CaptureFixture[str], name: str, message: str
) -> None:
    """Item 11: ENAMETOOLONG from the first stat of --out was a traceback, exit 1; beside the last
    report or inside its --out, that report stays as it was."""
    out = model_dir / "r"
    before = _earlier_runs(out)
    for parent in (model_dir, out):
        assert main(["run", "--out", str(parent / name)]) == EXIT_USAGE
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert message in line and line.endswith("; fix: pass a shorter --out"), line
        assert _tree(out) == before


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, EXIT_SIGINT), (signal.SIGTERM, EXIT_SIGTERM)])
def test_an_interrupted_runs_two_exit_codes_are_one_documented_mapping(tmp_path: Path, signum: int, code: int) -> None:
    """Item 12: the process exits 128+signal (CI shows a cancel), conformance.json says 3 (the
    verdict of what ran, as `report` gives it later) with the signal in run.status/run.reason;
    the exit-codes page says exactly that, so a reader of the file is not left guessing."""
    from fd_conformance.cli.unfinished import report_interrupted
    from fd_conformance.isolation.results import ResultLog, plan_record

    log = ResultLog(tmp_path / "results.jsonl")
    log.append(
        plan_record([{"nodeid": "s::test_clear[c-cpu]", "case": "c", "device": "cpu", "check": "clear", "expected": []}], False)
    )
    log.close()
    assert report_interrupted(tmp_path, signum, quiet=True) == code
    document = json.loads((tmp_path / "conformance.json").read_text())
    name = signal.Signals(signum).name
    assert (document["exit_code"], document["run"]["status"], document["run"]["reason"]) == (EXIT_INCOMPLETE, "interrupted", name)
    page = EXIT_CODES_PAGE.read_text()
    assert f"| {code} |" in page
    section = page.partition("## An interrupted run")[2]
    for text in ("130 or 143", f'"exit_code": {EXIT_INCOMPLETE}', '"status": "interrupted"', f'"{name}"'):
        assert text in section, text
