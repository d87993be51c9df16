"""Issue 51.2: `fd-conformance run ... | head` (and `report`, `explain`) died with a BrokenPipeError
traceback and exit 1 (the violations code), and `run` left no certificate, conformance.json or
junit.xml in --out. A reader that closes stdout early must change neither the reports nor the exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.errors import EXIT_OK

CASES = """
from fd_reference_models.cases import all_cases

CASES = [case for case in all_cases() if case.name == "torch-glm4-moe"]
"""
REPORTS = ("certificate.md", "conformance.json", "junit.xml", "results.jsonl")
ENV = {**os.environ, "FD_CONFORMANCE_GPU": "0", "CI": "1"}


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "fd_conformance.cli", *args]


def run_args(out: Path, *extra: str) -> list[str]:
    """The cheapest run that certifies (exit 0) and writes every report: one reference case, cpu rows."""
    return cli("run", "--model", "cases.py:CASES", "--out", str(out), "--device", "cpu", "-n", "0", "--cycles", "3", *extra)


def into_closed_pipe(cmd: list[str], cwd: Path, lines: int) -> tuple[int, str]:
    """Run ``cmd`` with its stdout a pipe whose reader takes ``lines`` lines (0: none) and closes it,
    as `| head` does; (exit code, stderr)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    for _ in range(lines):
        proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode(errors="replace")
    return proc.wait(timeout=300), stderr


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cwd with the cases file, and the run's --out as it is written with stdout read to the end."""
    cwd = tmp_path_factory.mktemp("closed-stdout")
    (cwd / "cases.py").write_text(CASES)
    plain = subprocess.run(run_args(cwd / "plain"), cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)
    assert plain.returncode == EXIT_OK, plain.stdout[-2000:] + plain.stderr[-2000:]
    return cwd


@pytest.mark.parametrize("verbose", [(), ("-v",)], ids=["progress", "verbose"])
def test_run_into_a_closed_pipe_writes_every_report_and_keeps_its_exit_code(certified: Path, verbose: tuple[str, ...]) -> None:
    """The progress lines (or, with -v, pytest's own output) after the first hit the closed pipe;
    the run goes on, writes every report and exits as the run read to the end did."""
    out = certified / f"piped{'-'.join(verbose)}"
    code, stderr = into_closed_pipe(run_args(out, *verbose), certified, lines=1)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == EXIT_OK, stderr
    assert all((out / name).is_file() for name in REPORTS), sorted(p.name for p in out.iterdir())
    assert "**PASS**" in (out / "certificate.md").read_text()


@pytest.mark.parametrize("command", [("explain",), ("explain", "FDC201"), ("report", "plain")], ids=" ".join)
def test_a_reader_gone_before_the_first_line_changes_no_exit_code(certified: Path, command: tuple[str, ...]) -> None:
    """Closed before anything is written, so every write of the command meets a closed pipe."""
    plain = subprocess.run(cli(*command), cwd=certified, env=ENV, capture_output=True, text=True, timeout=300)
    assert plain.stdout, plain.stderr  # the command does print: the closed pipe is met
    code, stderr = into_closed_pipe(cli(*command), certified, lines=0)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert code == plain.returncode == EXIT_OK, stderr
