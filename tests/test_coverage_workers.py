"""The repository's coverage config counts code that runs only in child processes.

The conformance checks run inside spawned isolation workers; a worker may leave through
``os._exit`` (after a crash report) or be ``terminate()``d by the watchdog. If the coverage
config misses any of these, a model PR's diff coverage reads 0% on exactly the code the suites
exercise. So: take ``[tool.coverage.run]`` from pyproject.toml as it is, point ``source`` at a
small script, ``coverage run`` it for real, ``coverage combine``, and read the combined data
with the coverage API. Each mutant drops one setting and must lose the line it exists for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

try:
    import tomllib
except ImportError:  # Python 3.10: its predecessor, a dependency of the kit there
    import tomli as tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

coverage = pytest.importorskip("coverage")

ROOT = Path(__file__).resolve().parents[1]

WORK = """\
import multiprocessing as mp
import os
import subprocess
import sys
import time


def spawned(queue):
    queue.put("spawned")  # MARK spawn


def leaves_through_exit():
    sys.stdout.flush()  # MARK os_exit
    os._exit(0)


def terminated(ready):
    ready.set()  # MARK terminate
    while True:
        time.sleep(0.05)


if __name__ == "__main__":
    ctx = mp.get_context("spawn")  # CUDA cannot fork: the kit's workers are spawned
    queue = ctx.Queue()
    worker = ctx.Process(target=spawned, args=(queue,))
    worker.start()
    assert queue.get(timeout=60) == "spawned"
    worker.join()
    worker = ctx.Process(target=leaves_through_exit)
    worker.start()
    worker.join()
    assert worker.exitcode == 0
    ready = ctx.Event()
    worker = ctx.Process(target=terminated, args=(ready,))
    worker.start()
    assert ready.wait(60)
    worker.terminate()
    worker.join()
    subprocess.run([sys.executable, "child.py"], check=True)
    print("parent done")  # MARK parent
"""
CHILD = 'import sys\nprint("child", file=sys.stderr)  # MARK subprocess\n'


def repo_coverage_run() -> dict[str, Any]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["coverage"]["run"]
    assert isinstance(table, dict)
    return dict(table)


def to_toml(table: Mapping[str, Any]) -> str:
    """A [tool.coverage.run] table of strings, bools and string lists (JSON strings are TOML strings)."""
    lines = ["[tool.coverage.run]"]
    for key, value in table.items():
        lines.append(f"{key} = {str(value).lower() if isinstance(value, bool) else json.dumps(value)}")
    return "\n".join(lines) + "\n"


def marks(text: str) -> dict[str, int]:
    return {line.split("# MARK ")[1].strip(): n for n, line in enumerate(text.splitlines(), 1) if "# MARK " in line}


def measured_lines(tmp_path: Path, run_table: Mapping[str, Any]) -> dict[str, set[int]]:
    """Run WORK under ``coverage run`` with ``run_table``, combine, return marker -> measured lines."""
    (tmp_path / "work.py").write_text(WORK)
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "pyproject.toml").write_text(to_toml({**run_table, "source": [str(tmp_path)]}))
    # An outer coverage run (tox -e cov) must not leak its settings into this one.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    for argv in (["run", "work.py"], ["combine", "-q"]):
        proc = subprocess.run(
            [sys.executable, "-m", "coverage", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    data = coverage.CoverageData(basename=str(tmp_path / ".coverage"))
    data.read()
    return {name: set(data.lines(str(tmp_path / name)) or ()) for name in ("work.py", "child.py")}


def covered_marks(tmp_path: Path, run_table: Mapping[str, Any]) -> set[str]:
    lines = measured_lines(tmp_path, run_table)
    found = {m for m, n in marks(WORK).items() if n in lines["work.py"]}
    found |= {m for m, n in marks(CHILD).items() if n in lines["child.py"]}
    return found


ALL_MARKS = {"parent", "spawn", "os_exit", "terminate", "subprocess"}


def test_repo_config_measures_every_kind_of_worker(tmp_path: Path) -> None:
    assert covered_marks(tmp_path, repo_coverage_run()) == ALL_MARKS


def _without(table: dict[str, Any], key: str, *values: str) -> dict[str, Any]:
    edited = dict(table)
    if values:
        edited[key] = [v for v in edited.get(key, []) if v not in values]
    else:
        edited[key] = False
    return edited


@pytest.mark.parametrize(
    ("key", "values", "lost"),
    [
        ("patch", ("subprocess",), "subprocess"),  # a plain subprocess is not measured
        ("patch", ("_exit",), "os_exit"),  # a worker leaving through os._exit saves nothing
        ("sigterm", (), "terminate"),  # a terminate()d worker saves nothing
    ],
    ids=["no-subprocess-patch", "no-_exit-patch", "no-sigterm"],
)
def test_each_setting_is_what_saves_its_worker(tmp_path: Path, key: str, values: tuple[str, ...], lost: str) -> None:
    """Mutants of the config: dropping one setting loses exactly the line only it measures."""
    table = repo_coverage_run()
    assert covered_marks(tmp_path, _without(table, key, *values)) == ALL_MARKS - {lost}


def test_spawned_workers_are_lost_without_child_measurement(tmp_path: Path) -> None:
    # patch=subprocess and concurrency=multiprocessing each cover spawn children on coverage 7.17;
    # with neither, a line run only in a spawned worker is not measured.
    table = _without(_without(repo_coverage_run(), "patch", "subprocess"), "concurrency", "multiprocessing")
    assert "spawn" not in covered_marks(tmp_path, table)
