"""The GitHub workflows and the pre-commit hook are code: parse them and check their structure."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), f"{path.name}: not a mapping"
    # YAML 1.1 reads the bare key `on` as boolean True; GitHub reads it as "on".
    if True in data:
        data["on"] = data.pop(True)
    return data


def test_there_are_the_three_workflows() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu.yml", "conformance.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_structure(path: Path) -> None:
    wf = load(path)
    assert {"name", "on", "jobs"} <= wf.keys(), f"{path.name}: missing top-level keys"
    for job_id, job in wf["jobs"].items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", job_id), f"{path.name}: bad job id {job_id}"
        assert "runs-on" in job, f"{path.name}:{job_id}: no runs-on"
        assert job.get("steps"), f"{path.name}:{job_id}: no steps"
        for need in job.get("needs", []) if isinstance(job.get("needs"), list) else [job.get("needs")] * ("needs" in job):
            assert need in wf["jobs"], f"{path.name}:{job_id}: needs unknown job {need}"
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), f"{path.name}:{job_id}: a step needs exactly one of uses/run"
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w./-]+@[\w.-]+", step["uses"]), f"unpinned action {step['uses']}"


def test_gpu_workflow_runs_gpu_tests_one_worker_per_gpu() -> None:
    wf = load(ROOT / ".github/workflows/gpu.yml")
    (job,) = wf["jobs"].values()
    assert "gpu" in job["runs-on"] and "self-hosted" in job["runs-on"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "pytest -m gpu -n" in runs


def test_reusable_workflow_is_callable_and_uses_kit_commands() -> None:
    wf = load(ROOT / ".github/workflows/conformance.yml")
    assert "workflow_call" in wf["on"]
    inputs = wf["on"]["workflow_call"]["inputs"]
    for name, spec in inputs.items():
        assert spec["type"] in {"string", "boolean", "number"}, name
    used = {m for m in re.findall(r"inputs\.([\w-]+)", (ROOT / ".github/workflows/conformance.yml").read_text())}
    assert used <= inputs.keys(), f"undeclared inputs used: {used - inputs.keys()}"
    text = (ROOT / ".github/workflows/conformance.yml").read_text()
    assert "upload-sarif" in text and "--format sarif" in text
    # every fd-conformance subcommand the workflows call must exist in the CLI
    from fd_conformance.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for path in WORKFLOWS:
        for command in re.findall(r"fd-conformance (\w+)", path.read_text()):
            assert command in sub.choices, f"{path.name} calls `fd-conformance {command}`, which does not exist"


def test_ci_workflow_runs_the_ci_entry_point() -> None:
    wf = load(ROOT / ".github/workflows/ci.yml")
    runs = [s.get("run", "") for job in wf["jobs"].values() for s in job["steps"]]
    assert any("bash .ci/run" in r for r in runs)


def check_workflows(*paths: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema against GitHub's own workflow schema (SchemaStore's github-workflow.json,
    vendored by check-jsonschema)."""
    exe = shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is not installed: pip install -e '.[dev]'"
    argv = [exe, "--builtin-schema", "vendor.github-workflows", *map(str, paths)]
    return subprocess.run(argv, capture_output=True, text=True)


def test_workflows_match_githubs_schema() -> None:
    """Structure checks above are ours; this is GitHub's schema: a misspelt key or a wrong type
    fails here, not on the first push."""
    proc = check_workflows(*WORKFLOWS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_schema_check_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The check above can fail: a job with a misspelt runs-on key is rejected."""
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  a:\n    run-on: ubuntu-latest\n    steps:\n      - run: echo\n")
    proc = check_workflows(broken)
    assert proc.returncode == 1, proc.stdout + proc.stderr


def test_reusable_workflow_shards_then_merges_and_the_merge_gates() -> None:
    """issue 38: `shards` input -> a matrix job per shard uploading its report dir -> one merge job."""
    wf = load(ROOT / ".github/workflows/conformance.yml")
    assert wf["on"]["workflow_call"]["inputs"]["shards"] == {
        **wf["on"]["workflow_call"]["inputs"]["shards"],
        "type": "number",
        "default": 1,
    }
    jobs = wf["jobs"]
    suites, merge = jobs["suites"], jobs["merge"]
    assert "${{ fromJSON(needs.select.outputs.shards) }}" == suites["strategy"]["matrix"]["shard"]
    assert suites["strategy"]["fail-fast"] is False  # one shard's failure must not cancel the others
    run = next(s["run"] for s in suites["steps"] if "fd-conformance run" in s.get("run", ""))
    assert "--shard ${{ matrix.shard }}/${{ inputs.shards }}" in run
    upload = next(s for s in suites["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["with"]["name"] == "conformance-shard-${{ matrix.shard }}" and upload["if"] == "always()"
    assert set(merge["needs"]) == {"select", "suites"} and merge["if"].startswith("always()")
    download = next(s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact"))
    assert download["with"]["pattern"] == "conformance-shard-*"
    gate = next(s["run"] for s in merge["steps"] if "fd-conformance merge" in s.get("run", ""))
    assert "||" not in gate  # the merge's exit code is the workflow's verdict
