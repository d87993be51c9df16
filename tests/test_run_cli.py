"""`fd-conformance run` end to end: a model package written to a temp dir (outside the repo) is
certified through --model; a broken one fails with its finding codes; bad input exits 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.report import load_schema


def validate_document(document: object) -> None:
    """Schema check; jsonschema is a dev extra the GPU host may lack, so only this step skips."""
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(document, load_schema())

# A model author's package: a tiny torch model, FastDeploy-shaped (undecorated wrapper delegating
# clear to an inner model decorated with support_graph_optimization), its runner and subject.
EXTERNAL_MODEL_SOURCE = '''
import torch

from fd_conformance.cases import ModelCase
from fd_reference_models.graph_opt import GraphOptConfig, init_graph_opt, support_graph_optimization

HIDDEN = 8
SIZES = (4, 2, 1)


@support_graph_optimization
class TinyInner(torch.nn.Module):
    def __init__(self, runtime, config):
        super().__init__()
        init_graph_opt(self, runtime, config, owner="main")
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)

    def graph_groups(self):
        return ()

    def new_static_inputs(self, size):
        return {"x": torch.zeros(size, HIDDEN)}

    def forward(self, x):
        return torch.tanh(self.proj(x))


class TinyForCausalLM(torch.nn.Module):
    def __init__(self, runtime, config):
        super().__init__()
        self.model = TinyInner(runtime, config)

    def forward(self, x):
        return self.model(x=x)

    def clear_graph_opt_backend(self):
        self.model.clear_graph_opt_backend()


class TinyRunner:
    def __init__(self, runtime, wrapper, config):
        self.runtime, self.wrapper, self.config = runtime, wrapper, config
        self.use_cudagraph = True
        self.draft_model_use_cudagraph = False

    def capture_model(self):
        if not self.use_cudagraph:
            return
        for size in self.config.capture_sizes:
            for _ in range(self.config.warmup_runs + 1):
                self.wrapper(torch.zeros(size, HIDDEN))

    def clear_parameters(self):
        if self.use_cudagraph:
            self.wrapper.clear_graph_opt_backend()
        for name, param in self.wrapper.named_parameters():
            self.runtime.release_parameter(param, name)

    def update_parameters(self, weights):
        for name, param in self.wrapper.named_parameters():
            self.runtime.restore_parameter(param, weights[name], name)
        self.capture_model()


class TinySubject:
    def __init__(self, runtime):
        self.runtime = runtime
        config = GraphOptConfig(capture_sizes=SIZES)
        torch.manual_seed(0)
        self.wrapper = TinyForCausalLM(runtime, config)
        self.draft = None
        self.runner = TinyRunner(runtime, self.wrapper, config)

    def make_inputs(self, num_tokens, seed=0):
        return torch.randn(num_tokens, HIDDEN, generator=torch.Generator().manual_seed(seed))

    def forward(self, inputs):
        with torch.no_grad():
            return {"logits": self.wrapper(inputs)}

    def eager_forward(self, inputs):
        with torch.no_grad():
            return {"logits": type(self.wrapper.model).eager_forward(self.wrapper.model, x=inputs)}

    def new_weights(self, seed):
        gen = torch.Generator().manual_seed(seed)
        return {name: torch.randn(p.shape, generator=gen) for name, p in self.wrapper.named_parameters()}

    def graphs(self):
        return self.wrapper.model.graphs()


CASE = ModelCase(name="tiny_external", runtime="torch", factory=TinySubject, capture_sizes=SIZES)

class ForgetsToClear(TinyForCausalLM):
    def clear_graph_opt_backend(self):
        pass  # defect: the engine's clear never reaches the inner model's graphs


class BrokenSubject(TinySubject):
    def __init__(self, runtime):
        super().__init__(runtime)
        state = self.wrapper.state_dict()
        self.wrapper = ForgetsToClear(runtime, self.runner.config)
        self.wrapper.load_state_dict(state)
        self.runner.wrapper = self.wrapper


BROKEN = ModelCase(name="tiny_external_broken", runtime="torch", factory=BrokenSubject, capture_sizes=SIZES)
'''


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    package = tmp_path / "author_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tiny.py").write_text(EXTERNAL_MODEL_SOURCE)
    return tmp_path


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0"}
    return subprocess.run(
        [sys.executable, "-m", "fd_conformance.cli", "run", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


# The user's own pytest setup, hostile to a certification: an addopts deselecting all but one
# check, and a conftest that would break (or skew) any session it is loaded into.
HOSTILE_INI = "[pytest]\naddopts = -k protocol\n"
HOSTILE_CONFTEST = "raise RuntimeError('the user conftest must not reach a certification')\n"


def test_external_model_is_certified(model_dir: Path) -> None:
    """From a directory with a hostile pytest.ini and conftest.py: `run` uses the kit's own ini and
    no foreign conftest, so every check runs (the ini's -k would leave only protocol)."""
    (model_dir / "pytest.ini").write_text(HOSTILE_INI)
    (model_dir / "conftest.py").write_text(HOSTILE_CONFTEST)
    out = model_dir / "report"
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(out), "--cycles", "3", "--device", "cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny_external [cpu, host-emulated]" in proc.stdout and "fd-conformance: PASS" in proc.stdout
    document = json.loads((out / "conformance.json").read_text())
    validate_document(document)
    (row,) = document["cases"]
    assert row["verdict"] == "certified" and row["graphs"] == "host-emulated"
    assert set(row["checks"]) == {"protocol", "capture_replay", "clear", "teardown_order", "weight_cycle", "config"}
    certificate = (out / "certificate.md").read_text()
    assert "# fd-conformance certificate" in certificate and "**PASS**" in certificate
    assert "torch 2." in certificate and "host-emulated" in certificate
    junit = (out / "junit.xml").read_text()
    assert 'name="fd_case" value="tiny_external"' in junit


def test_broken_external_model_fails_with_codes(model_dir: Path) -> None:
    out = model_dir / "report"
    proc = run_cli(model_dir, "--model", "author_models/tiny.py:BROKEN", "--out", str(out), "--cycles", "3", "--device", "cpu")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    document = json.loads((out / "conformance.json").read_text())
    (row,) = document["cases"]
    assert row["verdict"] == "violations"
    assert row["checks"]["clear"]["cell"] == "FAIL FDC203"
    assert "FDC201" in row["checks"]["teardown_order"]["codes"]
    assert "**FAIL**" in (out / "certificate.md").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "author_models.nope:CASE"], "--model 'author_models.nope:CASE': module 'author_models.nope' not found"),
        (["--model", "author_models.tiny:NOPE"], "has no attribute 'NOPE'"),
        (["--cycles", "2"], "--cycles 2 is below 3"),
        (["--runtime", "jax"], "invalid choice: 'jax'"),
    ],
)
def test_bad_input_exits_2_with_one_line(model_dir: Path, args: list[str], message: str) -> None:
    proc = run_cli(model_dir, *args, "--out", str(model_dir / "r"))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_nothing_selected_is_a_usage_error(model_dir: Path) -> None:
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--runtime", "paddle", "--out", str(model_dir / "r"))
    assert proc.returncode == 2
    assert "no conformance check ran" in proc.stderr


def test_default_run_covers_bundled_good_models(model_dir: Path) -> None:
    out = model_dir / "report"
    proc = run_cli(model_dir, "--out", str(out), "--device", "cpu", "--", "-k", "protocol")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {c["name"] for c in json.loads((out / "conformance.json").read_text())["cases"]}
    assert {"torch-glm4-moe", "torch-glm4-moe-mtp", "torch-qwen3-vl"} <= names
    assert not any(name.startswith("mutant-") for name in names)


def test_pytest_command_uses_equals_forms_and_absolute_file_specs(tmp_path: Path) -> None:
    from fd_conformance.cli import build_parser
    from fd_conformance.run_cli import pytest_command

    args = build_parser().parse_args(["run", "--model", "m.py:X", "--model", "pkg.mod:Y", "-n", "2", "--include-mutants"])
    cmd = pytest_command(args, tmp_path)
    assert f"--fd-model={Path('m.py').resolve()}:X" in cmd and "--fd-model=pkg.mod:Y" in cmd
    assert f"--fd-report={tmp_path}" in cmd and "--fd-include-mutants" in cmd and cmd[-2:] == ["-n", "2"]


# --- --cases-file, --device auto, usage errors checked before pytest starts -----------------------


def test_cases_file_certifies_only_the_selection_on_auto_device(model_dir: Path) -> None:
    """Also from a directory without ini file and without --rootdir: the isolation worker must
    collect the suite the way the parent did (it used to report "was not collected")."""
    selection = model_dir / "selection.txt"
    selection.write_text("# written by fd-conformance changed\ntiny_external\n")
    out = model_dir / "report"
    proc = run_cli(
        model_dir, "--model", "author_models.tiny:CASE", "--model", "author_models.tiny:BROKEN",
        "--cases-file", "selection.txt", "--out", str(out), "--", "-k", "protocol",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = json.loads((out / "conformance.json").read_text())
    validate_document(document)
    # auto on a machine without GPU: cpu rows only, no "cuda n/a not-run" row; graphs named.
    assert [(c["name"], c["device"], c["graphs"]) for c in document["cases"]] == [("tiny_external", "cpu", "host-emulated")]
    assert document["results"][0]["outcome"] == "passed"
    assert "host-emulated" in (out / "certificate.md").read_text()


def test_empty_cases_file_is_nothing_to_certify(model_dir: Path) -> None:
    selection = model_dir / "selection.txt"
    selection.write_text("# no model changed\n")
    out = model_dir / "report"
    (out).mkdir()
    (out / "conformance.json").write_text("{}")  # stale: must be replaced
    proc = run_cli(model_dir, "--cases-file", str(selection), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"nothing to certify: {selection} selects no case" in proc.stdout
    document = json.loads((out / "conformance.json").read_text())
    validate_document(document)
    assert document["cases"] == [] and document["exit_code"] == 0
    assert "Nothing to certify" in (out / "certificate.md").read_text()
    assert 'tests="0"' in (out / "junit.xml").read_text()
    assert not (out / "pytest.log").exists()  # decided without starting pytest


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read cases file"),
        ("tiny_externall\n", "names unknown case(s) 'tiny_externall'; fix: regenerate it with `fd-conformance changed` or use one of: tiny_external"),
        ("two names\n", "line 1: 'two names' is not one case name"),
    ],
)
def test_bad_cases_file_exits_2_with_one_line(model_dir: Path, content: str | None, message: str) -> None:
    selection = model_dir / "selection.txt"
    if content is not None:
        selection.write_text(content)
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--cases-file", str(selection), "--out", str(model_dir / "r"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert message in line and "fix:" in line


def test_runtime_not_installed_exits_2_before_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import fd_conformance.runtime as runtimes
    from fd_conformance.cli import main

    monkeypatch.setattr(runtimes, "installed_runtimes", lambda: ["torch"])
    assert main(["run", "--runtime", "paddle", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--runtime paddle is not installed; fix: pip install 'fd-conformance[paddle]' or use --runtime auto" in err
    assert "\n" not in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize(("device", "gpu", "expected"), [("auto", "0", "cpu"), ("auto", "1", "cuda"), ("all", "0", "all"), ("cuda", "0", "cuda")])
def test_device_auto_resolves_on_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, gpu: str, expected: str) -> None:
    from fd_conformance.cli import build_parser
    from fd_conformance.run_cli import pytest_command

    monkeypatch.setenv("FD_CONFORMANCE_GPU", gpu)
    cmd = pytest_command(build_parser().parse_args(["run", "--device", device]), tmp_path)
    assert f"--fd-device={expected}" in cmd
    assert not any(arg.startswith("--rootdir") for arg in cmd)
    assert "gpu" not in cmd and "not gpu" not in cmd  # rows come from --fd-device, leaving -m to the user
    assert build_parser().parse_args(["run"]).device == "auto"


# --- pytest's own exit code, stale reports, usage-error lines ---------------------------------------

INTERNAL_ERROR_PLUGIN = """
def pytest_runtest_logfinish(nodeid, location):
    raise RuntimeError("plugin exploded mid-session")
"""


def test_internal_error_mid_session_is_never_a_pass(model_dir: Path) -> None:
    """An INTERNALERROR after the first test: conformance.json holds the finished part (and says
    exit 0), but pytest exited 3, so `run` must exit EXIT_INTERNAL with the log tail, not PASS."""
    (model_dir / "boom_plugin.py").write_text(INTERNAL_ERROR_PLUGIN)
    out = model_dir / "report"
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(out), "--device", "cpu",
                   "--", "-p", "boom_plugin", "-k", "protocol")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "fd-conformance: PASS" not in proc.stdout
    assert "pytest exited 3" in proc.stderr and "plugin exploded mid-session" in proc.stderr


def test_usage_error_names_the_reason_and_removes_stale_reports(model_dir: Path) -> None:
    out = model_dir / "report"
    out.mkdir()
    for name in ("conformance.json", "certificate.md", "junit.xml"):
        (out / name).write_text("stale: from an earlier, passing run")
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(out), "--", "--no-such-option")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == "fd-conformance run: error: unrecognized arguments: --no-such-option"
    assert not any((out / name).exists() for name in ("conformance.json", "certificate.md", "junit.xml"))


def _passing_document(out: Path) -> None:
    from fd_conformance.report import CheckResult, write_reports

    write_reports(out, [CheckResult(nodeid="s.py::test_protocol[m-cpu]", case="m", device="cpu", check="protocol", outcome="passed")])


def test_pytest_failure_outside_the_matrix_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fd_conformance.run_cli import judge_session

    _passing_document(tmp_path)
    assert judge_session(0, "", tmp_path) == 0
    assert "fd-conformance: PASS" in capsys.readouterr().out
    assert judge_session(1, "E   a fixture outside the suite broke", tmp_path) == 1
    captured = capsys.readouterr()
    assert "fd-conformance: FAIL" in captured.out and "pytest reported failures outside the matrix" in captured.out
    assert "a fixture outside the suite broke" in captured.err


@pytest.mark.parametrize("returncode", [2, 3, -9])
def test_abnormal_pytest_exit_is_internal_even_with_a_document(tmp_path: Path, capsys: pytest.CaptureFixture[str], returncode: int) -> None:
    from fd_conformance.run_cli import judge_session

    _passing_document(tmp_path)
    assert judge_session(returncode, "INTERNALERROR> boom", tmp_path) == 3
    captured = capsys.readouterr()
    assert "PASS" not in captured.out and "INTERNALERROR> boom" in captured.err


def test_usage_line_prefers_the_reason_over_the_usage_banner() -> None:
    from fd_conformance.run_cli import _usage_line

    log = "ERROR: usage: __main__.py [options] [file_or_dir ...]\n__main__.py: error: unrecognized arguments: --x\n  inifile: None\n"
    assert _usage_line(log) == "unrecognized arguments: --x"
    assert _usage_line("ERROR: --fd-cycles 'x' is not an integer; fix: pass e.g. --fd-cycles 5\n") == "--fd-cycles 'x' is not an integer; fix: pass e.g. --fd-cycles 5"


def test_cli_minimum_cycles_matches_the_plugin() -> None:
    from fd_conformance import plugin, run_cli

    assert run_cli.MIN_CYCLES == plugin.MIN_CYCLES == 3
