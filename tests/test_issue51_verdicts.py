"""Issue 51 items 4 and 14: a mutant that cannot be judged here neither fails nor passes the run;
a clear that raises is FDC303 in every cell it explains, never a bare exception.

Item 4 is judged from documents built out of results (no GPU needed to reproduce it); item 14 from
a real ``fd-conformance run`` over an Acme draft whose clear raises.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_verdict import _result  # the certificate tests' result builder

from fd_conformance import report
from fd_conformance.errors import EXIT_OK, EXIT_VIOLATIONS, UsageError
from fd_conformance.verdict import NOT_JUDGED

REPO = Path(__file__).resolve().parents[1]
OUTSIDE = REPO / "tests" / "fixtures" / "outside_models"
CHECKS = ("capture_replay", "clear", "protocol", "teardown_order", "weight_cycle")
NATIVE_ON_CPU = "Skipped: native CUDA graphs need a GPU"  # what every check of a native row says on a cpu device


GOOD = [_result("good", check, "passed") for check in CHECKS]


def _mutant(message: str, ran: str = "") -> list[report.CheckResult]:
    """A mutant expecting FDC302 whose config check skipped for its own reason and whose other checks
    skipped with ``message``, but ``ran``, which passed (it ran and did not find the code)."""
    rows = [_result("leaky", "config", "skipped", "Skipped: leaky declares no config_postprocessor", expected=("FDC302",))]
    return rows + [_result("leaky", c, "passed" if c == ran else "skipped", message, expected=("FDC302",)) for c in CHECKS]


def _verdict(document: dict[str, Any], name: str) -> str:
    return str(next(c["verdict"] for c in document["cases"] if c["name"] == name))


@pytest.mark.parametrize(
    "message",
    [
        NATIVE_ON_CPU,
        "Skipped: no GPU: no /dev/nvidiaN device on this machine",
        f"Skipped: {NOT_JUDGED}: what graph(s) G#1 captured",
    ],
    ids=["native-on-cpu", "cuda-row-without-gpu", "not-judged"],
)
def test_a_mutant_that_cannot_be_judged_here_is_not_run_and_does_not_fail_the_run(message: str) -> None:
    """Issue 51.4: a GPU-only mutant on a CPU host was MISSED, and that alone made the run exit 1;
    the docs exempt a mutant whose framework or GPU is absent here (and one nothing could be read of)."""
    document = report.build_document(GOOD + _mutant(message), expect_mutants=True)
    assert _verdict(document, "leaky") == report.NOT_RUN
    assert _verdict(document, "good") == report.CERTIFIED
    assert document["exit_code"] == EXIT_OK


def test_a_mutant_whose_check_ran_and_missed_its_codes_is_still_missed() -> None:
    """A check that ran and did not find the mutant's code is a miss, whatever the others skipped for."""
    document = report.build_document(GOOD + _mutant(NATIVE_ON_CPU, ran="clear"), expect_mutants=True)
    assert _verdict(document, "leaky") == report.MISSED
    assert document["exit_code"] == EXIT_VIOLATIONS


def test_a_model_that_ran_nothing_still_fails_the_run() -> None:
    """The exemption is a mutant's: a model row not run next to a certified one is still exit 1."""
    model = [_result("native-model", check, "skipped", NATIVE_ON_CPU) for check in CHECKS]
    document = report.build_document(GOOD + model, expect_mutants=True)
    assert _verdict(document, "native-model") == report.NOT_RUN
    assert document["exit_code"] == EXIT_VIOLATIONS


def _unavailable(message: str) -> bool:
    return report.verdicts.unavailable_here(_result("m", "clear", "skipped", f"Skipped: {message}"))


def test_every_skip_for_a_missing_device_is_read_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The markers are texts made elsewhere (devices, the torch runtime): each source is pinned here,
    so a reworded skip fails this test instead of turning GPU-only mutants into misses again."""
    from fd_conformance import devices

    monkeypatch.setenv(devices.FORCE_ENV, "0")
    assert _unavailable(str(devices.no_gpu_reason()))
    monkeypatch.delenv(devices.FORCE_ENV)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert _unavailable(str(devices.no_gpu_reason()))

    torch = pytest.importorskip("torch")
    from fd_conformance.runtime import torch as torch_runtime

    assert _unavailable(str(torch_runtime.TorchRuntime("cpu").native_graphs_unavailable()))
    if not torch.cuda.is_available():
        with pytest.raises(UsageError) as err:
            torch_runtime.create("cuda")
        assert _unavailable(str(err.value))
    assert not _unavailable("config rules are device-independent: checked once, on the cpu row")


# --- item 14: a draft whose clear raises ---------------------------------------------------------


@pytest.fixture(scope="module")
def draft_clear_raises(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """conformance.json of one CPU run over acme_draft_clear_raises.py (its output on failure)."""
    out = tmp_path_factory.mktemp("draft-clear-raises") / "r"
    # This checkout's kit first: the subprocess must judge with the code under test, wherever pip points.
    path = os.pathsep.join([str(REPO), str(OUTSIDE), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0", "PYTHONPATH": path}
    spec = f"{OUTSIDE / 'acme_draft_clear_raises.py'}:CASES"
    cmd = [
        sys.executable,
        "-m",
        "fd_conformance.cli",
        "run",
        f"--model={spec}",
        f"--out={out}",
        "--device=cpu",
        "-n",
        "0",
        "--cycles=3",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=out.parent, timeout=600)
    assert proc.returncode == EXIT_VIOLATIONS, proc.stdout[-3000:] + proc.stderr[-2000:]
    document: dict[str, Any] = json.loads((out / "conformance.json").read_text())
    return document


@pytest.mark.parametrize(
    "check",
    [
        "clear",
        "teardown_order",
        "weight_cycle",
    ],
)
def test_every_cell_a_raising_clear_fails_carries_fdc303(draft_clear_raises: dict[str, Any], check: str) -> None:
    """Issue 51.14: the clear and teardown checks called the raising clear bare, so their cells
    showed "FAIL RuntimeError: ..." with no code; each failing test must carry FDC303, naming the clear."""
    (row,) = draft_clear_raises["cases"]
    assert row["checks"][check]["cell"] == "FAIL FDC303"
    failed = [r for r in draft_clear_raises["results"] if r["check"] == check and r["outcome"] == "failed"]
    assert failed
    for result in failed:
        assert result["codes"] == ["FDC303"], result["message"]
        assert "draft wrapper MTPClearRaises.clear_graph_opt_backend()" in result["message"]
