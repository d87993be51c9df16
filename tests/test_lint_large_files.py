"""Issue 51 item 18: a very large file neither exhausts memory nor keeps Ctrl-C waiting.

Real ``fd-conformance lint`` processes: the size limit is lowered through the config (the default
2 MiB would need files too big for a test), and the Ctrl-C test stops the parsing worker so the
run cannot finish by itself; no assertion reads a clock, pytest-timeout is the only guard.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fd_conformance.errors import EXIT_SIGINT, EXIT_VIOLATIONS
from fd_conformance.lint.pool import CHILD_PARSE_BYTES, MIN_PARALLEL_FILES

LINT = [sys.executable, "-m", "fd_conformance.cli", "lint"]
WRAPPER = "class {name}ForCausalLM:\n    pass\n"  # FDC001 (error): a wrapper with no clear method
FILLER = "def f{i}(a, b):\n    return a + b * {i}\n\n\n"


def _generated(path: Path, least_bytes: int, name: str) -> Path:
    """A file of ``least_bytes`` or more, as generated code is: one defect, then filler."""
    parts, size, i = [WRAPPER.format(name=name)], 0, 0
    while size < least_bytes:
        parts.append(FILLER.format(i=i))
        size += len(parts[-1])
        i += 1
    path.write_text("".join(parts))
    return path


def test_a_file_above_max_file_bytes_is_skipped_with_one_notice(tmp_path: Path) -> None:
    """Named or walked, the file is never parsed: one line names it and the limit, the other files
    are linted and decide the exit code (the big file's own defect is not reported)."""
    (tmp_path / "lint.toml").write_text("max-file-bytes = 2000\n")
    (tmp_path / "pkg").mkdir()
    big = _generated(tmp_path / "pkg" / "generated_pb2.py", 5000, "Big")
    (tmp_path / "pkg" / "model.py").write_text(WRAPPER.format(name="Small"))
    for paths in ([str(big), str(tmp_path / "pkg" / "model.py")], [str(tmp_path / "pkg")]):
        proc = subprocess.run(
            [*LINT, "--config", str(tmp_path / "lint.toml"), "--format", "json", "--no-context", *paths],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == EXIT_VIOLATIONS, proc.stderr
        report = json.loads(proc.stdout)
        assert report["files_scanned"] == 1
        assert [(f["code"], f["path"]) for f in report["findings"]] == [("FDC001", "pkg/model.py")]
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"fd-conformance lint: note: skipped {big}: ")
        assert f"{big.stat().st_size} bytes, above max-file-bytes = 2000" in line and "raise max-file-bytes" in line


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path("/proc", entry, "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry))
    return found


@pytest.fixture
def session() -> Iterator[list[subprocess.Popen[str]]]:
    """Started lint processes, each in a session of its own; killed with their workers at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the workers in /proc")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("shape", ["one-large-file", "many-files"])
def test_ctrl_c_ends_lint_while_a_worker_is_mid_parse(tmp_path: Path, session: list[subprocess.Popen[str]], shape: str) -> None:
    """The workers are stopped (SIGSTOP) before Ctrl-C: a run that waited for its parses, or parsed in
    its own process (deaf to signals until ast.parse returns), would never end; the fixed one kills
    the workers and exits 130 with its one interrupted line."""
    if shape == "one-large-file":
        paths = [str(_generated(tmp_path / "big.py", CHILD_PARSE_BYTES, "Big"))]
    else:
        tree = tmp_path / "tree"
        tree.mkdir()
        for i in range(MIN_PARALLEL_FILES):
            _generated(tree / f"m{i}.py", 20_000, f"M{i}")
        paths = [str(tree)]
    proc = subprocess.Popen(
        [*LINT, "--no-context", "-j", "2", *paths],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    session.append(proc)
    workers: list[int] = []
    while not workers:
        assert proc.poll() is None, f"lint ended (exit {proc.returncode}) without parsing in a worker"
        workers = _children(proc.pid)
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate()
    assert proc.returncode == EXIT_SIGINT, err
    assert err.strip().splitlines() == ["fd-conformance lint: interrupted"]
