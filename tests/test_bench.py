"""Every bench/ script runs in its quick mode (``--quick``, bench/_quick.py), as a real subprocess,
so none can rot unseen: bench/hang_latency.py crashed for weeks (KeyError 'nodeid') after
results.jsonl gained plan lines, because nothing ran it (issue 24 item 17).

Each script must exit as its quick mode promises and print the line that shows it went through
its work; a new script without an entry in EXPECTED fails the completeness test below. The
quick modes are CPU-only and small: the whole file costs about a minute of CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
GPU_ONLY_RC = 2  # a script that needs GPUs this host lacks says so in a line starting "needs", exit 2

# script -> (exit code on this CPU host, text its output must hold)
EXPECTED: dict[str, tuple[int, tuple[str, ...]]] = {
    "cublas_workspaces.py": (GPU_ONLY_RC, ("needs a CUDA GPU",)),
    "comm_group_cost.py": (0, ("communication group cost on cpu", "subject build (median of the rest)")),
    "fastdeploy_bridge.py": (0, ("== HEAD~2", "runner  main=on/draft=on/mtp clear: FDC201 FDC202", "runner  clean")),
    "first_result.py": (0, ("phases of the first check (torch-glm4-moe on cpu", "session in-process", "first result")),
    "hang_latency.py": (0, ("python_loop            isolation", "python_loop            signal")),
    "isolation_overhead.py": (0, ("in-process", "isolated ")),
    "kit_test_time.py": (0, ("command: python -m pytest -n 2", "top 25 by cpu:", "tests/test_lint_snapshots.py::")),
    "leak_resolution.py": (0, ("device=cpu graphs=host-emulated", "noise floor 0 B over 2 cycles x 1 models")),
    "lint_fastdeploy.py": (0, ("overall: 3 commits, TP 2, FP 0, FN 0",)),
    "lint_speed.py": (0, ("full tree (jobs=1)       files: 40", "changed files + context  files: 4")),
    "main_job_ab.py": (0, ("plan (collection done) at", "fd-conformance: ")),
    "native_hook_ab.py": (0, ("per capture, 32 modules, median of 1",)),
    "one_model_profile.py": (
        0,
        ("command: fd-conformance run --model tiny_lm.py:CASES --device cpu", "verdict: fd-conformance: "),
    ),
    "native_overhead.py": (0, ("native hooks overhead on cpu", "quill decoder (hidden 32, 8 tokens)", "serving stack")),
    # issue 25's bench (another session's work, landing beside this file): its own --quick
    "shard_merge.py": (0, ("| 3 | 0,0,0 |", "every merge gave the unsharded verdicts")),
    "suite_time.py": (0, ("-n 0: cpu (host-emulated graphs)", "config")),
    "verdict_stability.py": (0, ("| 1 | idle |", "| 2 | busy |", "every run gave the same verdicts")),
    "timeline.py": (0, ("| worker | spawned s |", "test_config.py::test_config_postprocessor[torch-glm4-moe-cpu]")),
    "xdist_speedup.py": (GPU_ONLY_RC, ("needs 2 GPUs, 0 visible",)),
    "xdist_verdicts.py": (0, ("| 0 |", "| 1 |")),
    "zygote_probe.py": (0, ("spawn x1: first replay done", "fork  x1:")),
}


def scripts() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_every_bench_script_has_a_quick_check() -> None:
    assert scripts() == sorted(EXPECTED), "a bench script without a quick-mode entry in EXPECTED (or one gone)"
    for name in scripts():
        assert "add_quick(parser)" in (BENCH / name).read_text(encoding="utf-8"), f"{name} takes no --quick"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bench_script_runs_in_quick_mode(name: str, tmp_path: Path) -> None:
    code, needles = EXPECTED[name]
    # FD_CONFORMANCE_GPU=0: the same quick run on a GPU host as on a CPU one; TMPDIR: what the
    # scripts leave behind stays in this test's own directory.
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0", "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / name), "--quick"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == code, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    for needle in needles:
        assert needle in output, f"{name} --quick did not print {needle!r}:\n{output[-4000:]}"
    if code == GPU_ONLY_RC:
        assert any(line.startswith("needs ") for line in output.splitlines()), output
