"""The pytest plugin: options and their validation, --fd-model loading errors, markers, import
cost, and the GPU-per-xdist-worker ledger (its logic on CPU, including worker replacement)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fd_conformance import matrix_keys
from fd_conformance.cases import ModelCase, coerce_cases, load_spec, select_cases
from fd_conformance.errors import UsageError
from fd_conformance.frameworks import FRAMEWORKS
from fd_conformance.plugin import options, xdist
from fd_conformance.plugin.gpus import (
    MAX_WORKERS_PER_GPU,
    WORKER_GPU_BYTES,
    WORKERINPUT_KEY,
    GpuLedger,
    auto_worker_count,
    physical_gpu_ids,
    pin_worker_gpu,
)
from fd_conformance.plugin.usage import REQUESTED_KEY

pytest_plugins = ["pytester"]

CASES_SOURCE = textwrap.dedent(
    """
    from fd_conformance.cases import ModelCase

    def _factory(runtime):
        raise AssertionError("never built in these tests")

    GOOD = ModelCase(name="good", runtime="torch", factory=_factory, capture_sizes=(2, 1))
    OTHER = ModelCase(name="other", runtime="torch", factory=_factory, capture_sizes=(1,))
    SAME_NAME = ModelCase(name="good", runtime="paddle", factory=_factory, capture_sizes=(1,))
    PADDLE = ModelCase(name="pd", runtime="paddle", factory=_factory, capture_sizes=(1,))
    MUTANT = ModelCase(name="mut", runtime="torch", factory=_factory, capture_sizes=(1,), expected_findings=frozenset({"FDC301"}))
    LIST = [GOOD, OTHER]
    EMPTY = []
    NOT_A_CASE = 42
    MIXED = [GOOD, "x"]

    def factory():
        return [GOOD, OTHER]

    def raising_factory():
        raise RuntimeError("weights missing")

    def returns_callable():
        return factory
    """
)


@pytest.fixture
def cases_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_cases.py"
    path.write_text(CASES_SOURCE)
    return path


# --- case loading: every way a spec can be wrong is one line naming the fix ----------------------


@pytest.mark.parametrize(
    ("attr", "names"),
    [("GOOD", ["good"]), ("LIST", ["good", "other"]), ("factory", ["good", "other"])],
)
def test_spec_resolves_case_list_or_factory(cases_file: Path, attr: str, names: list[str]) -> None:
    assert [c.name for c in load_spec(f"{cases_file}:{attr}")] == names


def test_spec_by_module_name(cases_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(cases_file.parent))
    assert [c.name for c in load_spec("my_cases:LIST")] == ["good", "other"]


@pytest.mark.parametrize(
    ("spec", "problem", "fix"),
    [
        ("no_such_pkg_fdc.models:CASES", "module 'no_such_pkg_fdc.models' not found", "check the spelling"),
        ("{file}:MISSING", "has no attribute 'MISSING'", "check the name after the colon"),
        ("{file}:raising_factory", "the factory raised RuntimeError: weights missing", "without raising"),
        ("{file}:NOT_A_CASE", "expected a ModelCase, a list of them or a factory, got int", "ModelCase"),
        ("{file}:MIXED", "expected ModelCase items, got str", "ModelCase"),
        ("{file}:EMPTY", "names no cases", "at least one"),
        ("{file}:returns_callable", "returned another callable", "return a ModelCase"),
        ("no-colon-here", "is not module:attr", "e.g. mypkg.cases:all_cases"),
        ("/nonexistent/models.py:X", "not found", "existing .py file"),
    ],
)
def test_bad_spec_is_one_line_usage_error(cases_file: Path, spec: str, problem: str, fix: str) -> None:
    spec = spec.format(file=cases_file)
    with pytest.raises(UsageError) as info:
        load_spec(spec)
    message = str(info.value)
    assert "\n" not in message
    assert problem in info.value.problem
    assert fix in info.value.fix
    assert message.startswith(f"--fd-model {spec!r}")


def test_module_importing_a_missing_dependency_names_the_dependency(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "needs_dep.py").write_text("import no_such_dependency_fdc\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="no_such_dependency_fdc") as info:
        load_spec("needs_dep:X")
    assert "install what that module imports" in info.value.fix


def test_coerce_rejects_a_class(cases_file: Path) -> None:
    with pytest.raises(UsageError, match="names ModelCase, a class: a Subject factory, not a case"):
        coerce_cases(ModelCase, "origin")


def test_coerce_points_a_subject_factory_at_cases() -> None:
    """Issue 24.16: `--model file.py:build` (the factory that takes the runtime) must say to point
    --model at CASES, not report the TypeError of calling it without one."""

    def build(runtime: object) -> object:
        return runtime

    with pytest.raises(UsageError, match="names build, a function that takes arguments") as info:
        coerce_cases(build, "--model 'm.py:build'")
    assert "point --model at the module's CASES" in info.value.fix


def test_select_filters_runtime_mutants_and_duplicates(cases_file: Path) -> None:
    spec = f"{cases_file}:"
    assert [c.name for c in select_cases([spec + "LIST", spec + "PADDLE"], runtime="paddle")] == ["pd"]
    assert [c.name for c in select_cases([spec + "LIST", spec + "PADDLE"], installed_runtimes=("torch",))] == ["good", "other"]
    # An explicitly named mutant is tested like any model.
    assert [c.name for c in select_cases([spec + "MUTANT"])] == ["mut"]
    with pytest.raises(UsageError, match="two different cases are named 'good'"):
        select_cases([spec + "GOOD", spec + "SAME_NAME"])


def test_bundled_cases_exclude_mutants_unless_asked() -> None:
    good = select_cases([], installed_runtimes=FRAMEWORKS)
    assert good and not any(c.is_mutant for c in good)
    everything = select_cases([], include_mutants=True, installed_runtimes=FRAMEWORKS)
    assert any(c.is_mutant for c in everything)
    assert {c.name for c in good} < {c.name for c in everything}


# --- option validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("5", 5), ("12", 12)])
def test_cycles_valid(value: str, expected: int) -> None:
    assert options.validate_cycles(value) == expected


@pytest.mark.parametrize(
    ("value", "message"), [("x", "is not an integer"), ("2", "is below 3"), ("1", "is below 3"), ("-3", "is below 3")]
)
def test_cycles_invalid_names_the_option(value: str, message: str) -> None:
    with pytest.raises(pytest.UsageError, match=f"--fd-cycles .*{message}.*fix:"):
        options.validate_cycles(value)


def test_runtime_invalid_names_the_option() -> None:
    with pytest.raises(pytest.UsageError, match="--fd-runtime 'jax' is not one of auto, torch, paddle; fix"):
        options.validate_runtime("jax")
    assert options.validate_runtime("auto") == "auto"
    assert options.validate_runtime("torch") == "torch"


def test_report_dir_must_not_be_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "f"
    afile.write_text("")
    with pytest.raises(pytest.UsageError, match="--fd-report .* is an existing file; fix"):
        options.validate_report_dir(str(afile))
    assert options.validate_report_dir(str(tmp_path / "new")) == str(tmp_path / "new")


def test_option_help_is_in_named_constants(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    out = result.stdout.str()
    for option in ("--fd-model", "--fd-runtime", "--fd-cycles", "--fd-report", "--fd-include-mutants"):
        assert option in out
    assert "zero-argument factory" in out  # from FD_MODEL_HELP


# --- in a real pytest session -----------------------------------------------------------------------


def test_bad_fd_model_in_pytest_is_one_line_without_traceback(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest("--fd-model", "no_such_pkg_fdc:CASES")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert errors == [
        "ERROR: --fd-model 'no_such_pkg_fdc:CASES': module 'no_such_pkg_fdc' not found; fix: check the spelling, "
        "install the package, or run from the directory that contains it (it must be on sys.path)"
    ]
    assert "Traceback" not in result.stdout.str() + "\n".join(result.errlines)


@pytest.mark.parametrize(("option", "value"), [("--fd-cycles", "0"), ("--fd-runtime", "jax")])
def test_bad_option_value_in_pytest_is_usage_error(pytester: pytest.Pytester, option: str, value: str) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any(line.startswith(f"ERROR: {option} ") for line in result.errlines)


def test_markers_are_clean_under_strict_markers(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            pass

        @pytest.mark.conformance("protocol")
        def test_check():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers", "-rs", "--fd-isolate=off")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*no GPU*"])


# --- GPU per xdist worker -------------------------------------------------------------------------------


def test_physical_ids_follow_cuda_visible_devices() -> None:
    assert physical_gpu_ids(2, "3,5") == ["3", "5"]
    assert physical_gpu_ids(2, None) == ["0", "1"]
    assert physical_gpu_ids(0, None) == []
    assert physical_gpu_ids(1, "GPU-abc, GPU-def") == ["GPU-abc"]


def test_ledger_survives_worker_replacement() -> None:
    ledger = GpuLedger(["0", "1"])
    assert [ledger.claim(w) for w in ("gw0", "gw1")] == ["0", "1"]
    ledger.release("gw1")  # gw1 crashed; xdist replaces it with a NEW id
    # "gw2" modulo 2 would be GPU 0, which live gw0 still holds; the ledger gives the freed GPU.
    assert ledger.claim("gw2") == "1"
    assert ledger.holders == {"gw0": "0", "gw2": "1"}
    assert ledger.claim("gw2") == "1"  # idempotent per worker


def test_ledger_oversubscribed_spreads_load_and_no_gpu_gives_none() -> None:
    ledger = GpuLedger(["0", "1"])
    assert [ledger.claim(f"gw{i}") for i in range(4)] == ["0", "1", "0", "1"]
    assert GpuLedger([]).claim("gw0") is None


def test_auto_workers_share_a_gpu_within_memory_and_cores() -> None:
    h200 = 139 << 30
    assert auto_worker_count(16, [h200]) == MAX_WORKERS_PER_GPU  # tiny models: 8 workers on one GPU
    assert auto_worker_count(4, [h200]) == 2  # half the cores: each worker drives an isolation worker
    assert auto_worker_count(64, [h200, h200]) == 2 * MAX_WORKERS_PER_GPU  # spread over both GPUs
    assert auto_worker_count(16, [3 * WORKER_GPU_BYTES]) == 3  # a busy GPU holds fewer
    assert auto_worker_count(16, [1 << 20]) == 1  # a full GPU still gets one worker, never zero
    assert auto_worker_count(1, [h200]) == 1


def fake_nvidia_smi(tmp_path: Path, free_mib: list[int]) -> str:
    """A real executable named nvidia-smi printing per-GPU free MiB, first on PATH."""
    exe = tmp_path / "bin" / "nvidia-smi"
    exe.parent.mkdir()
    exe.write_text("#!/bin/sh\n" + "".join(f"echo {m}\n" for m in free_mib))
    exe.chmod(0o755)
    return f"{exe.parent}{os.pathsep}{os.environ['PATH']}"


def test_n_auto_starts_workers_per_gpu(pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-n auto` through the real xdist: the plugin's hook decides the count from GPU memory."""
    free = 3 * WORKER_GPU_BYTES
    monkeypatch.setenv("PATH", fake_nvidia_smi(tmp_path, [free >> 20]))
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "1")
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    here = auto_worker_count(os.cpu_count() or 1, [free])  # 1 on a 2-core CI machine, 3 on a GPU host
    pytester.makepyfile("def test_one():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "auto", "-p", "no:cacheprovider", "--fd-device=auto")
    result.stdout.fnmatch_lines([f"*created: {here}/{here} worker*"])
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert xdist.pytest_xdist_auto_num_workers(asking_config()) == 3
    # A session that does not ask for the kit (issue 36.6): xdist sizes its `-n auto` itself.
    assert xdist.pytest_xdist_auto_num_workers(asking_config(asks=False)) is None
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")  # the user's setting wins
    assert xdist.pytest_xdist_auto_num_workers(asking_config()) is None
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS")
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "0")  # no GPU: xdist's own count (the cores)
    assert xdist.pytest_xdist_auto_num_workers(asking_config()) is None


def asking_config(asks: bool = True) -> Any:
    """A stand-in controller config whose session asks for the kit (plugin.usage) or not."""
    stash = pytest.Stash()
    stash[REQUESTED_KEY] = asks
    return SimpleNamespace(stash=stash)


def test_worker_pins_its_gpu_before_frameworks() -> None:
    env: dict[str, str] = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert pin_worker_gpu({WORKERINPUT_KEY: "1"}, env) == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert pin_worker_gpu(None, env) is None and pin_worker_gpu({}, env) is None


def test_controller_hooks_assign_and_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "1")  # one visible device
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    config = asking_config()

    def node(worker: str) -> SimpleNamespace:
        return SimpleNamespace(config=config, gateway=SimpleNamespace(id=worker), workerinput={})

    first = node("gw0")
    xdist.pytest_configure_node(first)
    assert first.workerinput[WORKERINPUT_KEY] == "7"
    xdist.pytest_testnodedown(first, error="crashed")
    assert config.stash[xdist.LEDGER_KEY].holders == {}
    replacement = node("gw1")
    xdist.pytest_configure_node(replacement)
    assert replacement.workerinput[WORKERINPUT_KEY] == "7"


def test_no_gpu_leaves_workerinput_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "0")
    worker = SimpleNamespace(config=asking_config(), gateway=SimpleNamespace(id="gw0"), workerinput={})
    xdist.pytest_configure_node(worker)
    assert WORKERINPUT_KEY not in worker.workerinput


def test_a_session_not_asking_for_the_kit_keeps_every_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36.6: a project's own `pytest -n 4` on a GPU host is not pinned one GPU per worker."""
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "1")
    worker = SimpleNamespace(config=asking_config(asks=False), gateway=SimpleNamespace(id="gw0"), workerinput={})
    xdist.pytest_configure_node(worker)
    assert worker.workerinput == {}


# --- case_properties: one source of the matrix keys ----------------------------------------------

MATRIX_TEST = """
import pytest

@pytest.mark.conformance("clear")
def test_clear_check(fd_case, fd_device):
    pass

def test_unrelated():
    pass
"""


def test_case_properties_are_the_matrix_keys(pytester: pytest.Pytester, cases_file: Path) -> None:
    pytester.makepyfile(test_m=MATRIX_TEST)
    items, _ = pytester.inline_genitems(f"--fd-model={cases_file}:MUTANT", "--fd-device=cpu")
    by_name = {item.name: item for item in items}
    assert matrix_keys.case_properties(by_name["test_clear_check[mut-cpu]"]) == [
        ("fd_case", "mut"),
        ("fd_device", "cpu"),
        ("fd_check", "clear"),
        ("fd_expected", "FDC301"),
    ]
    assert matrix_keys.case_properties(by_name["test_unrelated"]) == []


def test_isolation_uses_the_plugins_case_properties() -> None:
    """The isolation parent's HANG/crash reports must carry exactly the plugin's keys."""
    from fd_conformance.isolation import plugin as isolation_plugin

    assert isolation_plugin.case_properties is matrix_keys.case_properties
    assert not hasattr(isolation_plugin, "_case_properties")


# --- --fd-cases-file -------------------------------------------------------------------------------


def _selection(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "selection.txt"
    path.write_text(text)
    return path


def test_cases_file_keeps_only_named_cases(pytester: pytest.Pytester, cases_file: Path, tmp_path: Path) -> None:
    pytester.makepyfile(test_m=MATRIX_TEST)
    selection = _selection(tmp_path, "# from fd-conformance changed\nother\n")
    items, _ = pytester.inline_genitems(f"--fd-model={cases_file}:LIST", f"--fd-cases-file={selection}", "--fd-device=all")
    assert sorted(i.name for i in items if i.name.startswith("test_clear")) == [
        "test_clear_check[other-cpu]",
        "test_clear_check[other-cuda]",
    ]


def test_empty_cases_file_is_nothing_to_certify(pytester: pytest.Pytester, cases_file: Path, tmp_path: Path) -> None:
    pytester.makepyfile(test_m=MATRIX_TEST)
    selection = _selection(tmp_path, "# no model changed\n\n")
    report = tmp_path / "report"
    result = pytester.runpytest(
        f"--fd-model={cases_file}:LIST", "--fd-cases-file", str(selection), f"--fd-report={report}", "-rs"
    )
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"*nothing to certify: --fd-cases-file {selection} selects no case*"])
    import json

    assert json.loads((report / "conformance.json").read_text())["cases"] == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "nope\n",
            "ERROR: --fd-cases-file {file} names unknown case(s) 'nope'; fix: regenerate it with `fd-conformance changed` or use one of: good, other",
        ),
        (
            "good other\n",
            "ERROR: cases file {file} line 1: 'good other' is not one case name; fix: write one case name per line (comments start with #)",
        ),
    ],
)
def test_bad_cases_file_is_one_line_usage_error(
    pytester: pytest.Pytester, cases_file: Path, tmp_path: Path, text: str, message: str
) -> None:
    pytester.makepyfile(test_m=MATRIX_TEST)
    selection = _selection(tmp_path, text)
    result = pytester.runpytest(f"--fd-model={cases_file}:LIST", f"--fd-cases-file={selection}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert [line for line in result.errlines if line.strip()] == [message.format(file=selection)]


def test_missing_cases_file_is_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(test_m=MATRIX_TEST)
    result = pytester.runpytest(f"--fd-cases-file={tmp_path / 'missing.txt'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any(line.startswith("ERROR: cannot read cases file") and "fix:" in line for line in result.errlines)


def test_selection_is_matched_before_the_runtime_filter(cases_file: Path) -> None:
    """A named case whose framework is not installed here is not run, but it is not "unknown" either."""
    spec = f"{cases_file}:"
    chosen = select_cases([spec + "LIST", spec + "PADDLE"], installed_runtimes=("torch",), selection=["pd", "other"])
    assert [c.name for c in chosen] == ["other"]
    with pytest.raises(UsageError, match=r"FILE names unknown case\(s\) 'mut'"):
        select_cases([spec + "LIST"], selection=["mut"], selection_source="FILE")


# --- --fd-device ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "gpu", "rows"),
    [
        ("all", "0", ("cpu", "cuda")),
        ("auto", "0", ("cpu",)),
        ("auto", "1", ("cuda",)),
        ("cpu", "1", ("cpu",)),
        ("cuda", "0", ("cuda",)),
    ],
)
def test_device_rows(monkeypatch: pytest.MonkeyPatch, value: str, gpu: str, rows: tuple[str, ...]) -> None:
    monkeypatch.setenv("FD_CONFORMANCE_GPU", gpu)
    assert options.resolve_devices(value) == rows


def test_device_option_parametrizes_only_those_rows(
    pytester: pytest.Pytester, cases_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FD_CONFORMANCE_GPU", "0")
    pytester.makepyfile(test_m=MATRIX_TEST)
    items, _ = pytester.inline_genitems(f"--fd-model={cases_file}:GOOD", "--fd-device=auto")
    assert sorted(i.name for i in items) == ["test_clear_check[good-cpu]", "test_unrelated"]
    result = pytester.runpytest("--fd-device=gpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert any(line.startswith("ERROR: --fd-device 'gpu' is not one of all, auto, cpu, cuda; fix") for line in result.errlines)


def test_runtime_not_installed_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import fd_conformance.runtime as runtimes

    monkeypatch.setattr(runtimes, "installed_runtimes", lambda: ["torch"])
    with pytest.raises(
        pytest.UsageError, match=r"--fd-runtime 'paddle' is not installed; fix: pip install 'fd-conformance\[paddle\]'"
    ):
        options.validate_runtime("paddle")


# --- review fixes: hashing, stable module names, empty entry points, laziness, subject checks -----


def test_model_case_hashes_despite_dict_tolerances(cases_file: Path) -> None:
    (good,) = load_spec(f"{cases_file}:GOOD")
    assert isinstance(good.tolerances, dict)
    twin = dataclasses.replace(good)  # equal, distinct object
    assert twin == good and hash(twin) == hash(good) and len({good, twin}) == 1


def test_file_spec_module_name_is_stable_across_processes(cases_file: Path) -> None:
    """hash() of a str is salted per process; workers must derive the same module name."""
    import hashlib

    load_spec(f"{cases_file}:GOOD")
    digest = hashlib.sha256(str(cases_file.resolve()).encode("utf-8")).hexdigest()[:16]
    assert f"_fd_conformance_user_my_cases_{digest}" in sys.modules


def test_entry_point_naming_no_case_is_allowed(cases_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kit's own `reference` entry point returns [] without torch/paddle; an explicit spec may not."""
    from importlib.metadata import EntryPoint

    from fd_conformance.cases import loading as case_loading

    monkeypatch.syspath_prepend(str(cases_file.parent))
    empty = EntryPoint(name="empty", value="my_cases:EMPTY", group=case_loading.ENTRY_POINT_GROUP)
    monkeypatch.setattr(case_loading, "entry_points", lambda group: [empty])
    assert case_loading.installed_cases() == []
    assert select_cases([]) == []
    with pytest.raises(UsageError, match="names no cases"):
        load_spec("my_cases:EMPTY")


def test_plain_pytest_session_does_not_import_the_runtime_stack(pytester: pytest.Pytester) -> None:
    """Every pytest session loads the plugin (pytest11): one that certifies nothing must not pay
    for the runtime adapters. (The isolation watchdog and process machinery are the isolation plugin's to keep lazy.)"""
    pytester.makepyfile(
        test_cost="""
        import sys

        def test_nothing_heavy_loaded():
            heavy = {"fd_conformance.runtime", "fd_conformance.isolation.watchdog", "fd_conformance.isolation.process", "multiprocessing", "torch", "paddle"}
            assert not heavy & set(sys.modules), sorted(heavy & set(sys.modules))
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fd-isolate=off")
    result.assert_outcomes(passed=1)


SUBJECT_CASES = """
from fd_conformance.cases import ModelCase

RESET = []

class FakeGraph:
    owner = "main"
    label = "main:1"
    def reset(self):
        RESET.append(self.label)

class HalfSubject:
    runtime = wrapper = draft = None
    def make_inputs(self, n, seed=0): return n

class FullRunner:
    use_cudagraph = draft_model_use_cudagraph = True
    def capture_model(self): pass
    def clear_parameters(self): pass
    def update_parameters(self, weights): pass

class FullSubject(HalfSubject):
    runner = FullRunner()
    def forward(self, inputs): return {}
    def eager_forward(self, inputs): return {}
    def new_weights(self, seed): return {}
    def graphs(self): return [FakeGraph()]

HALF = ModelCase(name="half", runtime="torch", factory=lambda rt: HalfSubject(), capture_sizes=(1,))
FULL = ModelCase(name="full", runtime="torch", factory=lambda rt: FullSubject(), capture_sizes=(1,))
"""

SUBJECT_TESTS = """
import subject_cases

def test_a(fd_subject):
    pass

def test_b_after_a(fd_subject):
    assert subject_cases.RESET == ["main:1"], subject_cases.RESET
"""


def test_fd_subject_names_missing_members_and_releases_graphs(pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    pytester.makepyfile(subject_cases=SUBJECT_CASES, test_subject=SUBJECT_TESTS)
    half = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--fd-isolate=off", "--fd-device=cpu", "--fd-model=subject_cases:HALF", "-k", "test_a"
    )
    half.assert_outcomes(errors=1)
    half.stdout.fnmatch_lines(
        # graphs() is optional: a subject without it is certified in native mode
        ["*half: the factory returned a HalfSubject without runner, forward, eager_forward, new_weights; fix:*"]
    )
    full = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--fd-isolate=off", "--fd-device=cpu", "--fd-model=subject_cases:FULL", "-p", "no:randomly"
    )
    full.assert_outcomes(passed=2)  # test_b sees the graph test_a's subject left reset by teardown


def test_framework_free_checks_are_collected_first() -> None:
    """C6 needs no runtime: its items run before any model build, so their results come first."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "--collect-only", "-q", "-p", "no:cacheprovider", "-k", "cpu"],
        capture_output=True, text=True, cwd="/",
    )  # fmt: skip
    ids = [line for line in proc.stdout.splitlines() if "::" in line]
    config = [i for i, node in enumerate(ids) if "test_config.py::" in node]
    assert config and config == list(range(len(config))), ids[: len(config) + 2]
    rest = [node for node in ids if "test_config.py::" not in node]
    files = [node.split("::")[0] for node in rest]
    assert rest and files == sorted(files), files  # the others keep pytest's (file) order


def test_a_failed_checks_subject_does_not_outlive_its_teardown() -> None:
    """pytest keeps a failed test's traceback in sys.last_traceback until the next test's call, and
    its frames hold the subject: release_subject forgets it, or a failed check's model (graphs,
    pools, kept outputs) lives on into the next check's setup in the same worker."""
    import weakref

    from _helpers import torch_cpu_runtime

    from fd_conformance.plugin.fixtures import release_subject

    class Subject:
        def graphs(self) -> list[Any]:
            return []

    def failing_check(subject: Subject) -> None:
        raise AssertionError("a contract violation")

    subject = Subject()
    alive = weakref.ref(subject)
    try:
        failing_check(subject)
    except AssertionError as error:  # what pytest_runtest_call does with a failure
        sys.last_type, sys.last_value, sys.last_traceback = type(error), error, error.__traceback__
    release_subject(subject, torch_cpu_runtime())
    del subject
    assert alive() is None
    assert sys.last_traceback is None
