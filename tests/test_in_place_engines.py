"""Issue 50, part 2: engines that keep their CUDA graphs across a weight update, judged by the
``in_place`` contract (tests/fixtures/in_place: a vLLM-style reload, an SGLang-style
update_weights_from_tensor with a fused QKV weight, FastDeploy's update_weights into a weight-only
quantised model), each good engine beside two one-defect variants.

The good engines are certified with no finding (no FDC203 for the graphs they keep on purpose);
every variant draws its codes, FDC204 naming the captured tensor the update replaced and the step
that replaced it. On CPU the host double refuses a replay over moved storage (FDC204 and FDC304);
a re-created derived tensor is found from the model (the double re-runs the step, so only a GPU
serves the old values: FDC304 there too, checked by the gpu test). Serial and -n give the same rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "in_place"
STYLES = ("vllm_style.py", "sglang_style.py", "fastdeploy_update_weights.py")
#: What a GPU adds: the replay after the update serves the old weights.
GPU_ONLY = frozenset({"FDC304"})


def session(out: Path, device: str, workers: int) -> dict[str, Any]:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q",
        *(f"--fd-model={FIXTURES / style}:CASES" for style in STYLES),
        "--fd-cycles=3", f"--fd-report={out}", f"--fd-device={device}",
    ]  # fmt: skip
    if workers:
        cmd += ["-n", str(workers)]
    env = {**os.environ, **({"FD_CONFORMANCE_GPU": "0"} if device == "cpu" else {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    path = out / "conformance.json"
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return {"doc": json.loads(path.read_text()), "certificate": (out / "certificate.md").read_text(encoding="utf-8")}


def cases() -> list[Any]:
    from fd_conformance.cases import load_spec

    return [case for style in STYLES for case in load_spec(f"{FIXTURES / style}:CASES")]


def assert_judged_right(document: dict[str, Any], real_graphs: bool) -> None:
    rows = {c["name"]: c for c in document["cases"]}
    assert len(rows) == 9 and all(r["contract"] == "in_place" for r in rows.values()), sorted(rows)
    for case in cases():
        row = rows[case.name]
        if not case.expected_findings:
            assert row["verdict"] == "certified", (case.name, row["checks"])
            continue
        expected = set(case.expected_findings) if real_graphs else set(case.expected_findings) - GPU_ONLY
        assert row["verdict"] == "violations", (case.name, row["checks"])
        assert expected <= set(row["observed_findings"]) <= set(case.expected_findings), (case.name, row["observed_findings"])
        assert row["checks"]["weight_cycle"]["cell"].startswith("FAIL"), (case.name, row["checks"])
    replaced = [f["message"] for r in document["results"] if r["case"] == "sglang-style-cat-fused-qkv" for f in r["findings"]]
    assert any("captured main:model.attn.qkv_proj.weight" in m and "update_weights() replaced it" in m for m in replaced), (
        replaced
    )


@pytest.fixture(scope="module")
def cpu_sessions(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    return {n: session(tmp_path_factory.mktemp(f"in-place-n{n}"), "cpu", n) for n in (0, 2)}


def test_engines_that_keep_their_graphs_are_judged_by_the_in_place_contract(cpu_sessions: dict[int, dict[str, Any]]) -> None:
    assert_judged_right(cpu_sessions[0]["doc"], real_graphs=False)
    assert "| `vllm-style` (in_place) |" in cpu_sessions[0]["certificate"]  # which contract judged the row


def test_in_place_verdicts_do_not_depend_on_xdist(cpu_sessions: dict[int, dict[str, Any]]) -> None:
    serial = {c["name"]: (c["verdict"], c["observed_findings"]) for c in cpu_sessions[0]["doc"]["cases"]}
    parallel = {c["name"]: (c["verdict"], c["observed_findings"]) for c in cpu_sessions[2]["doc"]["cases"]}
    assert parallel == serial


def test_the_recapture_contract_still_judges_an_in_place_engine_as_before(tmp_path: Path) -> None:
    """The contract is the case's to declare: the good vLLM-style engine declared "recapture" has no
    clear_parameters door, and the kit says so up front instead of judging it by the wrong contract."""
    import dataclasses

    from fd_conformance.cases import load_spec
    from fd_conformance.plugin.fixtures import missing_subject_members
    from fd_conformance.runtime import get_runtime

    good = load_spec(f"{FIXTURES / 'vllm_style.py'}:CASES")[0]
    recapture = dataclasses.replace(good, weight_update="recapture")
    subject = good.factory(get_runtime("torch", "cpu"))
    assert missing_subject_members(subject, recapture.weight_update) == ["runner.clear_parameters", "runner.update_parameters"]
    assert missing_subject_members(subject, good.weight_update) == []


@pytest.mark.gpu
def test_in_place_engines_on_real_graphs(tmp_path: Path) -> None:
    """On the device: the variants' replays after the update serve the old weights (FDC304 as well)."""
    doc = session(tmp_path / "cuda", "cuda", 0)["doc"]
    assert all(c["graphs"] == "real" for c in doc["cases"]), doc["cases"]
    assert_judged_right(doc, real_graphs=True)
