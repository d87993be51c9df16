"""`fd-conformance run` end to end: a model package written to a temp dir (outside the repo) is
certified through --model; a broken one fails with its finding codes; bad input exits 2."""

from __future__ import annotations

import argparse
import json
import os
import re
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
EXTERNAL_MODEL_SOURCE = """
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
"""


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    package = tmp_path / "author_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "tiny.py").write_text(EXTERNAL_MODEL_SOURCE)
    return tmp_path


def run_cli(cwd: Path, *args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0", **(env_extra or {})}
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
        # found by the child (the parent only locates the module): named as the user wrote it
        (
            ["--model", "author_models.tiny:NOPE"],
            "error: --model 'author_models.tiny:NOPE': 'author_models.tiny' has no attribute 'NOPE'",
        ),
        (
            ["--model", "author_models/tiny.py:NOPE"],
            "error: --model 'author_models/tiny.py:NOPE': 'author_models/tiny.py' has no attribute",
        ),
        (["--cycles", "2"], "--cycles 2 is below 3"),
        (["--cycles", "1000000"], "--cycles 1000000 is above 1000; fix: pass at most 1000"),  # issue 36 c
        (["--runtime", "jax"], "invalid choice: 'jax'"),
    ],
)
def test_bad_input_exits_2_with_one_line(model_dir: Path, args: list[str], message: str) -> None:
    proc = run_cli(model_dir, *args, "--out", str(model_dir / "r"))
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_spec_refused_by_the_session_leaves_the_earlier_reports_in_place(model_dir: Path) -> None:
    """A spec that fails where pytest loads it (no such attribute; the command itself only locates
    the module) is refused like any usage error: --out is left as it was (issue 51 item 10: the
    earlier reports were moved to previous/ and the CI job then uploaded no report)."""
    out = model_dir / "r"
    out.mkdir()
    _passing_document(out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    proc = run_cli(model_dir, "--model", "author_models.tiny:NOPE", "--out", str(out))
    assert proc.returncode == 2 and "has no attribute 'NOPE'" in proc.stderr, proc.stdout + proc.stderr
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_nothing_selected_certifies_nothing_exit_4(model_dir: Path) -> None:
    """Certified nothing is a failure with its reason (exit 4), not a pass; --allow-empty opts out.
    (-m gpu on a CPU host deselects every check; a --runtime naming no given case's framework is a
    usage error since issue 24 item 14.)"""
    args = ("--model", "author_models.tiny:CASE", "--device", "cpu", "--out", str(model_dir / "r"), "--", "-m", "gpu")
    proc = run_cli(model_dir, *args)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert "certified nothing: no conformance check was collected" in line and "--allow-empty" in line
    assert json.loads((model_dir / "r" / "conformance.json").read_text())["exit_code"] == 4  # issue 36 b
    assert run_cli(model_dir, *args[:-3], "--allow-empty", *args[-3:]).returncode == 0
    assert json.loads((model_dir / "r" / "conformance.json").read_text())["exit_code"] == 0


def test_default_run_covers_bundled_good_models(model_dir: Path) -> None:
    out = model_dir / "report"
    proc = run_cli(model_dir, "--out", str(out), "--device", "cpu", "--", "-k", "protocol")
    # -k leaves owed checks out: every row is incomplete (issue 24 item 1), exit 3, none certified
    assert proc.returncode == 3 and "owed check(s) deselected" in proc.stdout, proc.stdout + proc.stderr
    names = {c["name"] for c in json.loads((out / "conformance.json").read_text())["cases"]}
    assert {"torch-glm4-moe", "torch-glm4-moe-mtp", "torch-qwen3-vl"} <= names
    assert not any(name.startswith("mutant-") for name in names)


def test_pytest_command_uses_equals_forms_and_absolute_file_specs(tmp_path: Path) -> None:
    from fd_conformance.cli import build_parser
    from fd_conformance.cli.run import pytest_command

    args = build_parser().parse_args(["run", "--model", "m.py:X", "--model", "pkg.mod:Y", "-n", "2", "--include-mutants"])
    cmd = pytest_command(args, tmp_path)
    assert f"--fd-model={Path('m.py').resolve()}:X" in cmd and "--fd-model=pkg.mod:Y" in cmd
    assert f"--fd-report={tmp_path}" in cmd and "--fd-include-mutants" in cmd and cmd[-2:] == ["-n", "2"]


def test_pytest_command_drops_hypothesis_plugin_unless_asked_for(tmp_path: Path) -> None:
    """Its terminal summary imported all of Hypothesis in every process of the session, one after
    another at the end (0.5-0.9 s each); a user who passes a Hypothesis option keeps the plugin."""
    from fd_conformance.cli import build_parser
    from fd_conformance.cli.run import NO_HYPOTHESIS_PLUGIN, pytest_command

    def blocked(argv: list[str]) -> bool:
        cmd = pytest_command(build_parser().parse_args(argv), tmp_path)
        return any(cmd[i : i + 2] == list(NO_HYPOTHESIS_PLUGIN) for i in range(len(cmd)))

    assert blocked(["run"])
    assert not blocked(["run", "--", "--hypothesis-show-statistics"])


# --- --cases-file, --device auto, usage errors checked before pytest starts -----------------------


def test_cases_file_certifies_only_the_selection_on_auto_device(model_dir: Path) -> None:
    """Also from a directory without ini file and without --rootdir: the isolation worker must
    collect the suite the way the parent did (it used to report "was not collected")."""
    selection = model_dir / "selection.txt"
    selection.write_text("# written by fd-conformance changed\ntiny_external\n")
    out = model_dir / "report"
    proc = run_cli(
        model_dir,
        "--model",
        "author_models.tiny:CASE",
        "--model",
        "author_models.tiny:BROKEN",
        "--cases-file",
        "selection.txt",
        "--out",
        str(out),
        "--",
        "-k",
        "protocol",
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr  # -k: the row's other checks are owed (incomplete)
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
    _passing_document(out)  # an earlier run's report: moved to previous/, never passing for this run
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
        (
            "tiny_externall\n",
            "names unknown case(s) 'tiny_externall'; fix: regenerate it with `fd-conformance changed` or use one of: tiny_external",
        ),
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


def test_runtime_not_installed_exits_2_before_pytest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fd_conformance.runtime as runtimes
    from fd_conformance.cli import main

    monkeypatch.setattr(runtimes, "installed_runtimes", lambda: ["torch"])
    assert main(["run", "--runtime", "paddle", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--runtime paddle is not installed; fix: pip install 'fd-conformance[paddle]' or use --runtime auto" in err
    assert "\n" not in err and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("device", "gpu", "expected"), [("auto", "0", "cpu"), ("auto", "1", "cuda"), ("all", "0", "all"), ("cuda", "0", "cuda")]
)
def test_device_auto_resolves_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: str, gpu: str, expected: str
) -> None:
    from fd_conformance.cli import build_parser
    from fd_conformance.cli.run import pytest_command

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


def test_usage_error_names_the_reason_and_keeps_the_earlier_reports(model_dir: Path) -> None:
    """pytest refuses the option: one line, exit 2, and the earlier run's reports stay in --out
    byte for byte (issue 51 item 10), with no file of the refused run beside them."""
    from fd_conformance.cli.run import EMPTY_JUNIT

    out = model_dir / "report"
    out.mkdir()
    _passing_document(out)  # from an earlier, passing run
    (out / "junit.xml").write_text(EMPTY_JUNIT)
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(out), "--", "--no-such-option")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == "fd-conformance run: error: unrecognized arguments: --no-such-option"
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def _passing_document(out: Path) -> None:
    from fd_conformance.report import CheckResult, write_reports

    write_reports(
        out, [CheckResult(nodeid="s.py::test_protocol[m-cpu]", case="m", device="cpu", check="protocol", outcome="passed")]
    )


def test_pytest_failure_outside_the_matrix_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fd_conformance.cli.run import judge_session

    _passing_document(tmp_path)
    assert judge_session(0, "", tmp_path) == 0
    assert "fd-conformance: PASS" in capsys.readouterr().out
    assert judge_session(1, "E   a fixture outside the suite broke", tmp_path) == 1
    captured = capsys.readouterr()
    assert "fd-conformance: FAIL" in captured.out and "pytest reported failures outside the matrix" in captured.out
    assert "a fixture outside the suite broke" in captured.err


@pytest.mark.parametrize("returncode", [2, 3, -9])
def test_abnormal_pytest_exit_is_internal_even_with_a_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], returncode: int
) -> None:
    from fd_conformance.cli.run import judge_session

    _passing_document(tmp_path)
    assert judge_session(returncode, "INTERNALERROR> boom", tmp_path) == 3
    captured = capsys.readouterr()
    assert "PASS" not in captured.out and "INTERNALERROR> boom" in captured.err
    # The passing document the session left is rewritten: the files say what the run exits with.
    document = json.loads((tmp_path / "conformance.json").read_text())
    assert document["exit_code"] == 3 and document["run"]["status"] == "interrupted"
    assert "PASS" not in (tmp_path / "certificate.md").read_text()


def test_usage_line_prefers_the_reason_over_the_usage_banner() -> None:
    from fd_conformance.cli.run import _usage_line

    log = "ERROR: usage: __main__.py [options] [file_or_dir ...]\n__main__.py: error: unrecognized arguments: --x\n  inifile: None\n"
    assert _usage_line(log) == "unrecognized arguments: --x"
    assert (
        _usage_line("ERROR: --fd-cycles 'x' is not an integer; fix: pass e.g. --fd-cycles 5\n")
        == "--fd-cycles 'x' is not an integer; fix: pass e.g. --fd-cycles 5"
    )


def test_cli_minimum_cycles_matches_the_plugin() -> None:
    from fd_conformance.cli import run as run_cli
    from fd_conformance.plugin import options

    assert run_cli.MIN_CYCLES == options.MIN_CYCLES == 3
    assert run_cli.CHILD_SPEC_OPTION == options.FD_MODEL  # the child's word for a spec, renamed to --model


# --- issue 11: results.jsonl, progress, interruption, the lock on --out, bad inputs ---------------

import signal  # noqa: E402 - the issue-11 tests below are the ones that use it
import time  # noqa: E402

from fd_conformance.errors import EXIT_CODES, EXIT_LOCKED, EXIT_SIGINT, EXIT_SIGTERM  # noqa: E402


def _rows(document: dict[str, object]) -> dict[tuple[str, str], str]:
    return {(c["name"], c["device"]): c["verdict"] for c in document["cases"]}  # type: ignore[index, union-attr]


def _results_lines(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.startswith("{") and '"outcome"' in line)


def _ended(pid: int, within: float = 10.0) -> bool:
    """The process is gone, or a zombie waiting for a reaper (a container's init may never reap)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.1)
    return False


def _report_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fd_conformance.cli", "report", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


SLOW_MODEL_SOURCE = """
import dataclasses
import time

from author_models.tiny import CASE


def _slow_build(runtime):
    time.sleep(60)
    return CASE.factory(runtime)


SLOW = dataclasses.replace(CASE, name="tiny_slow", factory=_slow_build)
"""


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, EXIT_SIGTERM), (signal.SIGINT, EXIT_SIGINT)])
def test_interrupted_run_writes_a_partial_report_and_report_agrees(model_dir: Path, signum: int, code: int) -> None:
    """SIGTERM/SIGINT mid-run: the workers end, the partial report is marked INTERRUPTED and lists
    what did not run, exit 143/130 without a traceback, the temp dir is gone; meanwhile a second
    run on the same --out is refused (exit 5), and `report` on results.jsonl gives the same rows."""
    out = model_dir / "report"
    out.mkdir()
    _passing_document(out)  # an earlier, finished run's report
    earlier = (out / "conformance.json").read_text()
    tmp = model_dir / "tmp"
    tmp.mkdir()
    # A case whose build takes a minute, listed first: the framework-free config checks report at
    # once, then its first model check holds the run, so the signal lands mid-run however fast
    # the tiny cases are (a run of only those ends in seconds, before the test could signal).
    (model_dir / "author_models" / "slow.py").write_text(SLOW_MODEL_SOURCE)
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0", "TMPDIR": str(tmp)}
    cmd = [sys.executable, "-m", "fd_conformance.cli", "run", "--model", "author_models.slow:SLOW", "--model", "author_models.tiny:CASE",
           "--model", "author_models.tiny:BROKEN", "--out", str(out), "--device", "cpu", "--cycles", "3"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=model_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 300
    while _results_lines(results) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    second = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(out))
    assert second.returncode == EXIT_LOCKED, second.stdout + second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert (
        f"is in use by another fd-conformance run (pid {proc.pid}" in line
        and "fix: wait for it to finish, or pass another --out" in line
    )
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stdout + stderr
    assert "Traceback" not in stdout + stderr
    assert f"interrupted by {signal.Signals(signum).name}" in stderr and "did not run" in stderr
    assert f"fd-conformance: INTERRUPTED ({signal.Signals(signum).name})" in stdout
    assert not list(tmp.glob("fd-conformance-run-*")), "the run's temp dir was left behind"
    workers = {json.loads(line)["worker_pid"] for line in results.read_text().splitlines() if '"worker_pid"' in line}
    for pid in workers - {os.getpid()}:
        assert _ended(pid), f"isolation worker {pid} outlived the interrupted run"
    certificate = (out / "certificate.md").read_text()
    assert "**INTERRUPTED** (" in certificate and "## Not run" in certificate
    document = json.loads((out / "conformance.json").read_text())
    validate_document(document)
    assert document["run"]["status"] == "interrupted" and document["run"]["not_run"]
    assert "incomplete" in _rows(document).values() and "certified" not in _rows(document).values()
    assert (out / "previous" / "conformance.json").read_text() == earlier
    _assert_interrupted_junit(out / "junit.xml", document, signal.Signals(signum).name)
    # Issue 24 item 11: every temp path of the run (the isolation workers' dirs, the torch
    # FileStore, pytest's own) was under the run's temp root, which the run removed.
    assert not list(tmp.iterdir()), f"temp paths left behind: {sorted(p.name for p in tmp.iterdir())}"
    assert "moved to" in stdout
    again = _report_cli(model_dir, str(results), "--out", str(model_dir / "rebuilt"))
    assert again.returncode == 3, again.stdout + again.stderr
    assert _rows(json.loads((model_dir / "rebuilt" / "conformance.json").read_text())) == _rows(document)


def test_progress_lines_quiet_and_results_file(model_dir: Path) -> None:
    """A live line per check (case, check, outcome, elapsed, a failure's reason) when not a TTY;
    -q prints only the verdict; results.jsonl is always in --out and `report` on it agrees."""
    out = model_dir / "report"
    proc = run_cli(
        model_dir,
        "--model",
        "author_models.tiny:BROKEN",
        "--out",
        str(out),
        "--device",
        "cpu",
        "--",
        "-k",
        "protocol or clear_releases",
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    # "[i/N]": N counts the checks that will run (-k selected 2); the deselected ones the rows owe are not
    assert any(re.match(r"\[[12]/2\] PASS   tiny_external_broken \[cpu\] protocol", line) for line in lines), proc.stdout
    (failed,) = [line for line in lines if " FAIL " in line and line.startswith("[")]
    assert "tiny_external_broken [cpu] clear" in failed and failed.rstrip().endswith(")") is False or "FDC203 graph" in failed
    assert "\r" not in proc.stdout  # no bar outside a terminal
    document = json.loads((out / "conformance.json").read_text())
    assert document["cases"][0]["checks"]["clear"]["reason"].startswith("FDC203 graph")
    again = _report_cli(model_dir, str(out / "results.jsonl"))
    assert again.returncode == 1 and "FAIL FDC203" in again.stdout
    quiet = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(out), "--device", "cpu", "-q")
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert quiet.stdout.splitlines()[0].startswith("fd-conformance: PASS"), quiet.stdout


def test_progress_bar_only_on_a_terminal(tmp_path: Path) -> None:
    import io

    from fd_conformance.cli.progress import Progress, wants_bar
    from fd_conformance.isolation.results import ResultLog, new_record, plan_record

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert wants_bar(Tty(), {}) and not wants_bar(Tty(), {"CI": "true"}) and not wants_bar(io.StringIO(), {})
    path = tmp_path / "results.jsonl"
    log = ResultLog(path)
    log.append(
        plan_record([{"nodeid": "s::test_clear[c-cpu]", "case": "c", "device": "cpu", "check": "clear", "expected": []}], False)
    )
    stream = Tty()
    progress = Progress(path, stream=stream, bar=True)
    progress.poll()
    assert "0/1 checks" in stream.getvalue()
    record = new_record("s::test_clear[c-cpu]", started=0.0, pid=1)
    record.update(
        case="c", device="cpu", check="clear", outcome="failed", duration=1.25, reason="FDC203 graph 'main:4' still alive"
    )  # type: ignore[typeddict-item]
    log.append(record)
    progress.finish()
    text = stream.getvalue()
    assert "[1/1] FAIL   c [cpu] clear  1.2s  FDC203 graph 'main:4' still alive\n" in text and "\r\033[K" in text
    quiet = io.StringIO()
    Progress(path, stream=quiet, quiet=True).finish()
    assert quiet.getvalue() == ""
    from fd_conformance.cli.progress import check_label

    def label(nodeid: str, check: str) -> str:
        return check_label({"nodeid": nodeid, "case": "m", "device": "cpu", "check": check})

    assert label("test_clear.py::test_clear_before_capture_and_twice[m-cpu]", "clear") == "clear[before_capture_and_twice]"
    assert (
        label("test_teardown_order.py::test_teardown_order[m-cpu-mainOff-draftOn]", "teardown_order")
        == "teardown_order[mainOff-draftOn]"
    )
    assert label("test_protocol.py::test_protocol[m-cpu]", "protocol") == "protocol"


def test_unwritable_out_is_one_line_usage_error(model_dir: Path) -> None:
    blocker = model_dir / "a-file"
    blocker.write_text("")
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(blocker / "report"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert f"--out '{blocker / 'report'}' is not writable (Not a directory); fix: pass a directory you can write to" in line


def test_requested_cuda_rows_without_gpu_certify_nothing(model_dir: Path) -> None:
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", str(model_dir / "r"), "--device", "cuda")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "certified nothing: all 16 conformance checks skipped" in proc.stderr and "no GPU" in proc.stderr


def test_exit_codes_are_one_table_documented_in_the_docs() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "exit-codes.md").read_text()
    for code in EXIT_CODES:
        assert f"| {code} |" in page, f"exit code {code} missing from the table in docs/reference/exit-codes.md"


def test_workers_default_auto_on_cuda_serial_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuda rows share the GPU among xdist workers by default; cpu rows and -n 0 stay serial."""
    from fd_conformance.cli import run as run_cli

    parser = argparse.ArgumentParser()
    run_cli.add_cli(parser.add_subparsers())
    out = Path("/tmp/unused")

    def command(*argv: str) -> list[str]:
        return run_cli.pytest_command(parser.parse_args(["run", *argv]), out)

    monkeypatch.setenv("FD_CONFORMANCE_GPU", "1")
    assert command("--device", "cuda")[-2:] == ["-n", "auto"]
    assert "-n" not in command("--device", "cuda", "-n", "0")
    assert command("--device", "cuda", "-n", "3")[-2:] == ["-n", "3"]
    assert "-n" not in command("--device", "cpu")
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "0")
    assert "-n" not in command("--device", "cuda")  # rows that skip need no workers
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "-n", "many"])


def test_next_run_removes_the_temp_dir_of_a_sigkilled_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL runs no handler, so that run's temp dir stays: the next run removes it, and only it."""
    import tempfile

    from fd_conformance.cli.run import TEMP_PREFIX, remove_stale_temp_dirs
    from fd_conformance.tempdirs import OWNER_NAME

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    dirs = {name: tmp_path / f"{TEMP_PREFIX}{name}" for name in ("killed", "live", "older-kit")}
    for path in dirs.values():
        path.mkdir()
    (dirs["killed"] / OWNER_NAME).write_text(str(dead.pid))
    (dirs["live"] / OWNER_NAME).write_text(str(os.getpid()))
    remove_stale_temp_dirs()
    assert not dirs["killed"].exists() and dirs["live"].exists() and dirs["older-kit"].exists()


@pytest.mark.skipif(
    os.environ.get("FD_RUN_NEWCOMER") != "1", reason="slow (two full runs, ~4 min here): FD_RUN_NEWCOMER=1 runs it"
)
def test_newcomer_script_passes() -> None:
    """scripts/newcomer.sh: clone, (skip the install: this environment has it), run, SIGTERM, report."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "newcomer.sh"
    env = {**os.environ, "FD_NEWCOMER_SKIP_INSTALL": "1", "FD_CONFORMANCE_GPU": "0"}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "newcomer: OK" in proc.stdout


# --- issue 24: data and the filesystem (--out '', foreign files in --out, the interrupted junit.xml) ---


def _assert_interrupted_junit(path: Path, document: dict[str, object], signame: str) -> None:
    """The partial junit.xml agrees with conformance.json: every result that ended, every planned
    check that did not run (skipped, saying why), and an errored session case naming the signal."""
    import xml.etree.ElementTree as ET

    root = ET.parse(path).getroot()
    (suite,) = root.iter("testsuite")
    properties = {p.get("name"): p.get("value") for p in suite.find("properties") or []}
    assert properties["fd_status"] == "interrupted" and properties["fd_interrupted"] == signame
    cases = {f"{c.get('classname')}::{c.get('name')}": c for c in suite.iter("testcase")}
    results = document["results"]
    not_run = document["run"]["not_run"]  # type: ignore[index]
    assert int(suite.get("tests", "0")) == len(cases) == len(results) + len(not_run) + 1  # type: ignore[arg-type]
    session = cases["fd-conformance::session"].find("error")
    assert session is not None and f"interrupted by {signame}" in (session.get("message") or "")
    failed = {r["nodeid"] for r in results if r["outcome"] == "failed"}  # type: ignore[attr-defined, index]
    junit_failed = {n for n, c in cases.items() if c.find("failure") is not None}
    assert junit_failed == {nodeid.replace(".py::", "::", 1) for nodeid in failed}
    skipped_not_run = [c for c in cases.values() if (s := c.find("skipped")) is not None and s.get("type") == "fd.not_run"]
    assert len(skipped_not_run) == len(not_run) > 0  # type: ignore[arg-type]
    assert int(suite.get("failures", "0")) == len(failed) and suite.get("errors") == "1"


def test_empty_out_is_a_usage_error_not_the_cwd(model_dir: Path) -> None:
    """`--out "$REPORT_DIR"` with the variable unset: one line naming --out and the fix, exit 2,
    and nothing (no lock, no report, no previous/) lands in the cwd; the pytest route's
    --fd-report= is refused the same way."""
    before = sorted(p.name for p in model_dir.iterdir())
    proc = run_cli(model_dir, "--model", "author_models.tiny:CASE", "--out", "", "--device", "cpu")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line == (
        "fd-conformance run: error: --out '' is empty (an unset variable?); fix: pass a directory path, "
        "e.g. --out fd-conformance-report"
    )
    assert sorted(p.name for p in model_dir.iterdir()) == before
    pytest_route = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "--fd-report=", "-k", "protocol"],
        cwd=model_dir, capture_output=True, text=True, timeout=300, env={**os.environ, "FD_CONFORMANCE_GPU": "0"},
    )  # fmt: skip
    assert pytest_route.returncode == 4, pytest_route.stdout + pytest_route.stderr
    assert "--fd-report '' is empty (an unset variable?)" in pytest_route.stdout + pytest_route.stderr
    assert sorted(p.name for p in model_dir.iterdir()) == before


FOREIGN_JUNIT = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="jest tests"><testsuite name="ui" tests="1">'
    '<testcase classname="App" name="renders" time="0.1"/></testsuite></testsuites>\n'
)


def test_out_shared_with_another_tool_never_loses_a_file(model_dir: Path) -> None:
    """`--out .` in a CI workspace: another tool's junit.xml stops the run (exit 2, one line naming
    it) and stays byte for byte, however often the run is tried; once it is out of the way, each
    run moves the earlier run's files (all of them: they carry the kit's marks) to previous/,
    replacing the previous/ before it: three runs leave two complete reports (issue 51 item 10)."""
    from fd_conformance.cli.outdir import RUN_FILES

    ci = model_dir / "ci"
    ci.mkdir()
    (ci / "junit.xml").write_text(FOREIGN_JUNIT)
    spec = f"{model_dir / 'author_models' / 'tiny.py'}:CASE"
    args = ("--model", spec, "--out", ".", "--device", "cpu", "--", "-k", "protocol")
    for _ in range(2):
        refused = run_cli(ci, *args)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert f"--out '{ci}' holds junit.xml, which fd-conformance did not write" in line, line
        assert "fix: pass another --out" in line
        assert (ci / "junit.xml").read_text() == FOREIGN_JUNIT
        assert [p.name for p in ci.iterdir()] == ["junit.xml"]  # issue 36 f: no lock file left behind
    (ci / "junit.xml").rename(ci / "ui-junit.xml")  # the user moves it out of the way
    snapshots = []
    for attempt in range(3):
        proc = run_cli(ci, *args)
        # -k makes rows incomplete (issue 24 item 1): the verdict is not this test's point, only
        # that the run judged the session it wrote.
        assert proc.returncode == json.loads((ci / "conformance.json").read_text())["exit_code"], proc.stdout + proc.stderr
        assert ("moved to" in proc.stdout) == (attempt > 0)
        snapshots.append({name: (ci / name).read_bytes() for name in RUN_FILES})
    assert {name: (ci / "previous" / name).read_bytes() for name in RUN_FILES} == snapshots[1]
    assert sorted(p.name for p in ci.iterdir()) == sorted([*RUN_FILES, "previous", "ui-junit.xml"])
    assert (ci / "ui-junit.xml").read_text() == FOREIGN_JUNIT


def test_only_the_kits_own_files_are_recognised(tmp_path: Path) -> None:
    """kit_wrote on the kit's real writers' output (write_reports, the results log, the empty and
    the interrupted junit) versus files of the same names other tools write."""
    from fd_conformance.cli.junit import write_interrupted_junit
    from fd_conformance.cli.outdir import LOG_HEADER, keep_previous, kit_wrote
    from fd_conformance.cli.run import EMPTY_JUNIT
    from fd_conformance.errors import UsageError
    from fd_conformance.isolation.results import ResultLog, plan_record
    from fd_conformance.report import CheckResult, write_reports

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    theirs.mkdir()
    result = CheckResult(nodeid="t.py::test_protocol[m-cpu]", case="m", device="cpu", check="protocol", outcome="passed")
    document = write_reports(ours, [result])
    log = ResultLog(ours / "results.jsonl")
    log.append(plan_record([{"nodeid": result.nodeid, "case": "m", "device": "cpu", "check": "protocol", "expected": []}], False))
    log.close()
    (ours / "pytest.log").write_text(f"{LOG_HEADER}, started now\n.\n1 passed in 0.01s\n")
    (ours / "junit.xml").write_text(EMPTY_JUNIT)
    assert all(
        kit_wrote(ours / name) for name in ("conformance.json", "certificate.md", "results.jsonl", "pytest.log", "junit.xml")
    )
    write_interrupted_junit(ours / "junit.xml", document, "SIGINT")
    assert kit_wrote(ours / "junit.xml")
    foreign = {
        "conformance.json": '{"from": "another tool", "schema_version": 3}',
        "certificate.md": "# Release certificate\nsigned\n",
        "results.jsonl": '{"test": "a", "status": "ok"}\n',
        "pytest.log": "============ test session starts ============\n1 passed in 0.01s\n",
        "junit.xml": FOREIGN_JUNIT,
    }
    for name, text in foreign.items():
        (theirs / name).write_text(text)
        assert not kit_wrote(theirs / name), name
    (theirs / "results.jsonl").write_text("not json at all\n")
    assert not kit_wrote(theirs / "results.jsonl")
    # A folder named previous/ that the user keeps other things in is never renamed.
    (ours / "previous").mkdir()
    (ours / "previous" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"holds previous/notes.txt, which fd-conformance did not write"):
        keep_previous(ours)
    assert (ours / "previous" / "notes.txt").read_text() == "mine" and (ours / "conformance.json").exists()
