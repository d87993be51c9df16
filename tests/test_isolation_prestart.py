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
sys.path.insert(0, OUTSIDE)
from acme_lm import CASES
"""


def certify(tmp_path: Path, spec: str, *extra: str) -> tuple[subprocess.Popen[str], str, Path]:
    (tmp_path / "noting.py").write_text(NOTING_MODULE.replace("OUTSIDE", repr(str(OUTSIDE))))
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


def test_a_spec_refused_after_the_early_start_leaves_no_worker_behind(tmp_path: Path) -> None:
    proc, output, _ = certify(tmp_path, "noting.py:NOPE")
    assert proc.returncode == 4, output
    assert "'noting.py' has no attribute 'NOPE'" in output, output
    # The worker the session spawned at configure is gone with its directory (the parent owns both).
    assert not [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("fdc-worker-")]
    imports = (tmp_path / "imports.log").read_text().splitlines()
    assert str(proc.pid) in {line.split()[0] for line in imports}  # the parent got as far as the import
