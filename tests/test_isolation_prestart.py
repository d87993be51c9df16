"""When a certifying session's isolation worker starts, and who imports the model module (issue 38).

The worker is spawned at configure; it loads the cases and sends them to the parent as records,
so the parent collects without importing the model module (a framework import less per session).
The parent imports it only where it must: a test of its own calls a case's factory, or the
worker died before it could send them (the parent then loads the spec itself). A spec the
worker could not load fails with the one-line error the worker sent. And a
worker started that early never outlives a session that then refuses its arguments.

Real ``python -m pytest`` sessions over an outside-style model whose module notes, at import, which
process imported it and when; the results file says which worker ran each check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.isolation.results import read_results

OUTSIDE = Path(__file__).resolve().parent / "fixtures" / "outside_models"
NOTING_MODULE = """\
import os, sys, time
with open(os.environ["IMPORT_LOG"], "a", encoding="utf-8") as log:
    log.write(f"{os.getpid()} {time.time()!r}\\n")
sys.path.insert(0, OUTSIDE)
from acme_lm import CASES
"""


def write_noting_module(directory: Path) -> None:
    (directory / "noting.py").write_text(NOTING_MODULE.replace("OUTSIDE", repr(str(OUTSIDE))))


def certify(tmp_path: Path, spec: str, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str, Path]:
    write_noting_module(tmp_path)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "IMPORT_LOG": str(tmp_path / "imports.log"), "TMPDIR": str(tmp_path / "tmp"), **(env or {})}
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        f"--fd-model={spec}", f"--fd-results={results}", "--fd-device=cpu", *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = proc.communicate(timeout=600)
    return proc, output, results


def importers(tmp_path: Path) -> set[int]:
    return {int(line.split()[0]) for line in (tmp_path / "imports.log").read_text().splitlines()}


def test_the_parent_collects_from_its_workers_records_without_importing_the_model(tmp_path: Path) -> None:
    proc, output, results = certify(tmp_path, "noting.py:CASES", "-k", "acme-lm-mtp")
    assert proc.returncode == 0, output
    records = [r for r in read_results(results) if r.get("isolated")]
    assert records and "passed" in output, output
    assert {r["outcome"] for r in records} <= {"passed", "skipped"}, output
    # Only the worker that ran the checks imported the module; it was spawned at configure.
    assert importers(tmp_path) == {r["worker_pid"] for r in records} and proc.pid not in importers(tmp_path)


def test_a_test_that_calls_the_factory_in_the_parent_gets_the_real_case(tmp_path: Path) -> None:
    """A project's own test beside the suite, not isolated, builds the case's model in the parent:
    the case's factory there loads the real case (LoadedOnCall), and only then."""
    (tmp_path / "test_own.py").write_text(
        "import os, pickle, sys\n"
        "def test_builds_in_this_process(fd_case, fd_runtime):\n"
        "    assert os.environ.get('FD_CONFORMANCE_ISOLATION_WORKER') is None\n"
        "    noting = next(m for n, m in sys.modules.items() if n.startswith('_fd_conformance_user_noting'))\n"
        "    assert fd_case in noting.CASES and fd_case.module == 'acme_lm'  # the very case, not a copy\n"
        "    assert pickle.loads(pickle.dumps(fd_case)) == fd_case\n"
        "    subject = fd_case.factory(fd_runtime)\n"
        "    assert subject.wrapper is not None and fd_case.config_postprocessor is None\n"
    )
    proc, output, results = certify(tmp_path, "noting.py:CASES", "-k", "acme-lm-mtp", "test_own.py")
    assert proc.returncode == 0, output
    assert "test_builds_in_this_process" in {r["nodeid"].split("::")[-1].split("[")[0] for r in read_results(results)}
    workers = {r["worker_pid"] for r in read_results(results) if r.get("isolated")}
    assert importers(tmp_path) == {proc.pid, *workers}, output


def test_a_spec_refused_after_the_early_start_leaves_no_worker_and_the_basetemp_untouched(tmp_path: Path) -> None:
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "precious").write_text("an earlier session's files")
    proc, output, _ = certify(tmp_path, "noting.py:NOPE", f"--basetemp={keep}")
    assert proc.returncode == 4, output
    assert "'noting.py' has no attribute 'NOPE'" in output, output
    # The early worker failed to load it and sent its error: the parent raised it without importing
    # the module a second time (a framework import saved on every bad spec).
    assert proc.pid not in importers(tmp_path) and len(importers(tmp_path)) == 1, importers(tmp_path)
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


ODD_CASES = """\
import dataclasses, enum, os, sys, time
with open(os.environ["IMPORT_LOG"], "a", encoding="utf-8") as log:
    log.write(f"{os.getpid()} {time.time()!r}\\n")
sys.path.insert(0, OUTSIDE)
from acme_lm import GOOD
from fd_conformance.cases import ModelCase


@dataclasses.dataclass(frozen=True)
class TeamCase(ModelCase):
    team: str = "acme"


class Cap(str, enum.Enum):
    DRAFT = "draft"


SUBCLASS = [TeamCase(**{f.name: getattr(GOOD[0], f.name) for f in dataclasses.fields(GOOD[0])}, team="x")]
ENUM_FIELD = [dataclasses.replace(GOOD[0], capabilities=frozenset({Cap.DRAFT}))]
"""


@pytest.mark.parametrize("attr", ["SUBCLASS", "ENUM_FIELD"])
def test_cases_that_are_not_plain_data_are_loaded_by_the_parent(tmp_path: Path, attr: str) -> None:
    """A ModelCase subclass, or a field holding the module's own Enum, would not come back from a
    record as it was (or would import the module to unpickle): the worker sends none, the parent
    loads the cases itself, and the case is certified as it always was."""
    (tmp_path / "odd.py").write_text(ODD_CASES.replace("OUTSIDE", repr(str(OUTSIDE))))
    (tmp_path / "tmp").mkdir()
    proc, output, results = certify(tmp_path, f"odd.py:{attr}")
    assert proc.returncode == 0 and "INTERNALERROR" not in output, output
    assert {r["outcome"] for r in read_results(results)} <= {"passed", "skipped"} and "passed" in output, output
    assert proc.pid in importers(tmp_path), output


def test_a_model_module_that_marks_a_lifecycle_event_at_import_is_certified(tmp_path: Path) -> None:
    """``fd_conformance.isolation.mark()`` is public: a model module may call it at import, which in
    the worker happens while it starts. That mark reached the parent before the worker's startup
    messages and was taken for a failed start: every check errored (so since the mark existed)."""
    (tmp_path / "marking.py").write_text(
        f"import sys\nsys.path.insert(0, {str(OUTSIDE)!r})\n"
        "from fd_conformance.isolation import mark\nmark('model module imported')\nfrom acme_lm import GOOD\n"
    )
    proc, output, results = certify(tmp_path, "marking.py:GOOD")
    assert proc.returncode == 0 and "error" not in output.lower(), output
    assert {r["outcome"] for r in read_results(results)} <= {"passed", "skipped"}, output


# An outside-style model module that imports no framework (acme_lazy.py: its factory does),
# whose config post-processor notes, the first time C6 calls it, whether torch is imported or being
# imported in the worker. C6 builds no model and runs first, so only the worker's early import of
# the framework (runtime.import_in_background) can have started torch by then.
LAZY_MODULE = """\
import dataclasses, os, sys, threading
from fd_reference_models import config
sys.path.insert(0, OUTSIDE)
from acme_lazy import GOOD

def postprocess(cfg):
    if not os.path.exists(os.environ["TORCH_LOG"]):
        started = "torch" in sys.modules or any(t.name == "fd-conformance-import" for t in threading.enumerate())
        with open(os.environ["TORCH_LOG"], "w", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {started}")
    return config.postprocess(cfg)

CASES = [dataclasses.replace(GOOD[0], name="lazy-acme", checks=frozenset({"config", "protocol"}),
                             config_postprocessor=postprocess, config_builder=config.FDConfig.from_raw)]
"""


@pytest.mark.parametrize(("extra", "early"), [((), True), (("-k", "config"), False)], ids=["whole-session", "narrowed-by-k"])
def test_the_worker_imports_the_framework_while_its_first_checks_need_none(
    tmp_path: Path, extra: tuple[str, ...], early: bool
) -> None:
    """A worker whose cases build models starts importing their framework once it has sent its
    cases, so its first model check does not pay torch's import; a session narrowed by -k (which
    may leave C6 alone) imports nothing it may never use."""
    (tmp_path / "lazy.py").write_text(LAZY_MODULE.replace("OUTSIDE", repr(str(OUTSIDE))))
    log = tmp_path / "torch.log"
    proc, output, results = certify(tmp_path, "lazy.py:CASES", *extra, env={"TORCH_LOG": str(log)})
    ran = {r["check"]: r for r in read_results(results) if r.get("isolated") and r["outcome"] != "skipped"}
    assert ran["config"]["outcome"] == "passed" and ("protocol" in ran) is early, output  # -k left the row incomplete
    pid, started = log.read_text().split()
    assert int(pid) == ran["config"]["worker_pid"], output  # C6 ran in the worker...
    assert started == str(early), output  # ... and torch had started there before it, or not
