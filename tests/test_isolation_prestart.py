"""When a certifying session's isolation worker starts: at configure, before the parent imports
the model module, so the worker's own start and imports run beside the parent's (issue 38). And a
worker started that early never outlives a session that then refuses its arguments.

Real ``python -m pytest`` sessions over an outside-style model whose module notes, at import, which
process imported it and when; the results file says when each check's worker was spawned.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fd_conformance.isolation.results import read_results

OUTSIDE = Path(__file__).resolve().parent / "fixtures" / "outside_models"
NOTING_MODULE = """\
import os, sys, time
with open(os.environ["IMPORT_LOG"], "a", encoding="utf-8") as log:
    log.write(f"{os.getpid()} {time.time()!r}\\n")
# Both the parent and its worker import this module; each waits (boundedly) for the other, so a
# worker spawned only after the parent's import shows in the times, and one spawned at all shows here.
for _ in range(600):
    with open(os.environ["IMPORT_LOG"], encoding="utf-8") as log:
        if len({line.split()[0] for line in log}) >= 2:
            break
    time.sleep(0.1)
sys.path.insert(0, OUTSIDE)
from acme_lm import CASES
"""


def write_noting_module(directory: Path) -> None:
    (directory / "noting.py").write_text(NOTING_MODULE.replace("OUTSIDE", repr(str(OUTSIDE))))


def certify(tmp_path: Path, spec: str, *extra: str) -> tuple[subprocess.Popen[str], str, Path]:
    write_noting_module(tmp_path)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "IMPORT_LOG": str(tmp_path / "imports.log"), "TMPDIR": str(tmp_path / "tmp")}
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        f"--fd-model={spec}", f"--fd-results={results}", "--fd-device=cpu", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = proc.communicate(timeout=600)
    return proc, output, results


def test_the_worker_is_spawned_before_the_parent_imports_the_model(tmp_path: Path) -> None:
    proc, output, results = certify(tmp_path, "noting.py:CASES", "-k", "acme-lm-mtp")
    assert proc.returncode == 0, output
    imports = dict(line.split() for line in (tmp_path / "imports.log").read_text().splitlines())
    parent_import = float(imports.pop(str(proc.pid)))
    records = [r for r in read_results(results) if r.get("isolated")]
    assert records, output
    workers = {r["worker_pid"]: r["worker_spawned"] for r in records}
    assert all(spawned < parent_import for spawned in workers.values()), (workers, parent_import)
    # The worker imported the module too (it runs the checks), after it was spawned.
    assert {int(pid) for pid in imports} == set(workers), (imports, workers)


def test_a_spec_refused_after_the_early_start_leaves_no_worker_and_the_basetemp_untouched(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("an earlier session's files")
    proc, output, _ = certify(tmp_path, "noting.py:NOPE", f"--basetemp={keep}")
    assert proc.returncode == 4, output
    assert "'noting.py' has no attribute 'NOPE'" in output, output
    importers = {line.split()[0] for line in (tmp_path / "imports.log").read_text().splitlines()}
    assert str(proc.pid) in importers and len(importers) == 2, importers  # the parent and its early worker
    # That worker is gone with its directory (the parent owns both), and a session refused at
    # configure left --basetemp as it was: pytest empties it only for a session that runs.
    assert not [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("fdc-worker-")]
    assert [p.name for p in keep.iterdir()] == ["precious"]


def test_an_early_worker_puts_tmp_path_inside_the_sessions_basetemp(tmp_path: Path) -> None:
    """The worker learns the session's temp dir with its file list: an isolated test's tmp_path is
    under --basetemp, as it is in the parent."""
    test = tmp_path / "test_where.py"
    test.write_text(
        "import os, pytest\n"
        "@pytest.mark.isolated\n"
        "def test_where(tmp_path):\n"
        "    assert os.environ.get('FD_CONFORMANCE_ISOLATION_WORKER') == '1'\n"
        "    (tmp_path / 'here').write_text(str(tmp_path))\n"
    )
    write_noting_module(tmp_path)
    keep = tmp_path / "keep"
    env = {**os.environ, "IMPORT_LOG": str(tmp_path / "imports.log")}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        str(test),
        "--fd-model=noting.py:CASES",
        f"--basetemp={keep}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (written,) = keep.rglob("here")
    assert written.is_relative_to(keep / "fdc-isolation"), written
