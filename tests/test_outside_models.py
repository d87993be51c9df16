"""Models the kit never saw (tests/fixtures/outside_models: another author's naming, graph cache,
owner labels and flags), certified the way a user certifies them, through ``--fd-model``.

The good model must be certified and each variant caught with exactly its codes, and the
verdict of every test must be the same serially and under ``-n 2`` / ``-n 4``: xdist runs
another order in each worker, which once made the isolation worker keep module setup for an
item that never came to it ("previous item was not torn down properly").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fd_conformance.report import verdicts_of

OUTSIDE = Path(__file__).resolve().parent / "fixtures" / "outside_models"
ACME = f"{OUTSIDE / 'acme_lm.py'}:CASES"


def start(out: Path, device: str, workers: int) -> subprocess.Popen[str]:
    """One session over the outside cases with the suites' default isolation, started."""
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        f"--fd-model={ACME}", "--fd-cycles=3", f"--fd-report={out}", f"--fd-device={device}",
    ]  # fmt: skip
    if workers:
        cmd += ["-n", str(workers)]
    env = {**os.environ, **({"FD_CONFORMANCE_GPU": "0"} if device == "cpu" else {})}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc: subprocess.Popen[str], out: Path) -> dict[str, Any]:
    """The session's output and conformance.json, once it ends (killed past 900 s, as
    subprocess.run's timeout would: a hung session must not outlive the test)."""
    try:
        stdout, stderr = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    path = out / "conformance.json"
    assert path.exists(), stdout[-3000:] + stderr[-2000:]
    return {"stdout": stdout, "doc": json.loads(path.read_text())}


def certify(out: Path, device: str, workers: int) -> dict[str, Any]:
    return finish(start(out, device, workers), out)


def assert_judged_right(document: dict[str, Any]) -> None:
    from fd_conformance.cases import load_spec

    rows = {c["name"]: c for c in document["cases"]}
    for case in load_spec(ACME):
        row = rows[case.name]
        if case.is_mutant:  # named explicitly, a variant is judged like any model: "violations"
            assert row["verdict"] == "violations", (case.name, row["checks"])
            assert set(row["observed_findings"]) == set(case.expected_findings), case.name
        else:
            assert row["verdict"] == "certified", (case.name, row["checks"])


@pytest.fixture(scope="module")
def cpu_sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    return {n: certify(tmp_path_factory.mktemp(f"acme-n{n}"), "cpu", n) for n in (0, 2, 4)}


def test_outside_models_are_judged_right_serially(cpu_sessions: dict[int, dict[str, Any]]) -> None:
    """An MTP draft labelling its graphs "mtp" is certified (graphs belong to the model object that
    holds them, not to a label); a draft clear that is skipped while its flag is off is FDC203."""
    assert_judged_right(cpu_sessions[0]["doc"])


@pytest.mark.parametrize("workers", [2, 4])
def test_verdicts_do_not_depend_on_xdist(cpu_sessions: dict[int, dict[str, Any]], workers: int) -> None:
    serial, parallel = verdicts_of(cpu_sessions[0]["doc"]), verdicts_of(cpu_sessions[workers]["doc"])
    assert parallel == serial
    assert "not torn down properly" not in cpu_sessions[workers]["stdout"]


@pytest.mark.gpu
def test_outside_models_on_real_graphs_serial_and_n4(tmp_path: Path) -> None:
    """On the device: the same judgement on real CUDA graphs, and -n 4 on ONE GPU agrees with serial."""
    # Side by side (the GPU host has the cores; each waits for its imports, not for the other):
    # what the test compares is each session's own verdicts, not their timing.
    started = {name: start(tmp_path / name, "cuda", workers) for name, workers in (("serial", 0), ("n4", 4))}
    serial, parallel = (finish(proc, tmp_path / name) for name, proc in started.items())
    assert all(c["graphs"] == "real" for c in serial["doc"]["cases"]), serial["doc"]["cases"]
    assert_judged_right(serial["doc"])
    assert verdicts_of(parallel["doc"]) == verdicts_of(serial["doc"])
