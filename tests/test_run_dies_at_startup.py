"""Issue 51 item 13: a `run` whose pytest dies before collecting says what happened, and what a
model module prints at import is shown, as in a one-process pytest session.

Real `fd-conformance run` subprocesses. A cause the run can name is a refused run (exit 2, one
line, --out as it was), as a model import that raises always was; any other early death keeps its
incomplete report (exit 3), whose reason says the suites were never collected.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_usage_errors import TINY, _earlier_runs, _tree
from test_run_cli import EXTERNAL_MODEL_SOURCE, model_dir, run_cli

from fd_conformance.cli.outdir import LOG_NAME
from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE

__all__ = ["model_dir"]  # the fixture, shared with test_run_cli

EXITS = "import sys\n\nsys.exit(3)\n"
MARKER = "printed-by-the-model-at-import"


def run_as_installed(cwd: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`fd-conformance run` as the console script starts it from a user's shell: the cwd is not on
    the command's own sys.path (``python -m`` would put it there: a ./pytest.py would break the
    command itself), and output is buffered (a host with PYTHONUNBUFFERED would hide a missing flush)."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "FD_CONFORMANCE_GPU": "0", **(env_extra or {})}
    command = [sys.executable, "-I", "-m", "fd_conformance.cli", "run", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.parametrize(
    ("files", "args", "env", "message"),
    [
        (
            {"leaves.py": EXITS},
            ["--model", "leaves.py:CASE"],
            {},
            "--model 'leaves.py:CASE': importing 'leaves.py' called sys.exit(3)",
        ),
        (
            {"author_models/leaves.py": EXITS},
            ["--model", "author_models.leaves:CASE"],
            {},
            "--model 'author_models.leaves:CASE': importing 'author_models.leaves' called sys.exit(3)",
        ),
        ({"pytest.py": "raise ImportError('not pytest')\n"}, ["--model", TINY], {}, "pytest.py would be imported as 'pytest'"),
        (
            {},
            ["--model", TINY],
            {"PYTEST_ADDOPTS": "-p no_such_plugin_fdc"},
            'pytest could not start: ImportError: Error importing plugin "no_such_plugin_fdc"',
        ),
    ],
    ids=["sys-exit-file-spec", "sys-exit-module-spec", "pytest-py-in-cwd", "addopts-missing-plugin"],
)
def test_a_session_that_cannot_start_is_a_refused_run_naming_why(
    model_dir: Path, files: dict[str, str], args: list[str], env: dict[str, str], message: str
) -> None:
    """Each read `INTERRUPTED (pytest exited N)` (exit 3) after moving the last report aside."""
    for name, text in files.items():
        (model_dir / name).write_text(text)
    out = model_dir / "r"
    before = _earlier_runs(out)
    proc = run_as_installed(model_dir, *args, "--device", "cpu", "--out", str(out), env_extra=env)
    assert proc.returncode == EXIT_USAGE, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert message in line and "; fix: " in line, line
    assert "INTERRUPTED" not in proc.stdout
    assert _tree(out) == before


def test_an_early_death_it_cannot_name_says_the_suites_were_never_collected(model_dir: Path) -> None:
    """os._exit at import: no traceback to name, so an incomplete report (exit 3) whose reason, in
    conformance.json and the verdict line, says the session never got to collect."""
    (model_dir / "gone.py").write_text("import os\n\nos._exit(3)\n")
    out = model_dir / "r"
    proc = run_cli(model_dir, "--model", "gone.py:CASE", "--device", "cpu", "--out", str(out))
    assert proc.returncode == EXIT_INCOMPLETE, proc.stdout + proc.stderr
    reason = json.loads((out / "conformance.json").read_text())["run"]["reason"]
    assert reason == "pytest exited 3 before collecting the suites"
    assert f"({reason})" in proc.stdout


@pytest.mark.parametrize("verbose", [True, False], ids=["run-v", "pytest-s"])
def test_what_a_model_prints_at_import_is_shown_once(model_dir: Path, verbose: bool) -> None:
    """The model is imported in the isolation worker, whose output went only to its own log, deleted
    with it: `run -v` streams the print, `run -- -s` (any run) keeps it in pytest.log."""
    (model_dir / "author_models" / "chatty.py").write_text(f"print({MARKER!r})\n{EXTERNAL_MODEL_SOURCE}")
    out = model_dir / "r"
    extra = ["-v"] if verbose else ["--", "-s"]
    proc = run_as_installed(model_dir, "--model", "author_models.chatty:CASE", "--device", "cpu", "--out", str(out), *extra)
    assert proc.returncode == EXIT_OK, proc.stdout + proc.stderr
    shown = proc.stdout if verbose else (out / LOG_NAME).read_text()
    assert shown.count(MARKER) == 1, shown
