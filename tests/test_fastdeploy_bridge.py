"""`fd-conformance fastdeploy`: the engine bridge on our own FastDeploy-shaped fixture tree.

tests/fixtures/fastdeploy_bridge/base is a clean tree we wrote (no FastDeploy code, no
[fastdeploy] extra needed); each defect is one variant file or one text edit of it. Every rule
the bridge reports is shown firing on a bad tree and silent on the good one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fd_conformance.cli import fastdeploy as bridge_cli
from fd_conformance.errors import EXIT_INCOMPLETE, EXIT_OK, EXIT_USAGE, EXIT_VIOLATIONS, UsageError
from fd_conformance.fastdeploy import checkout as checkout_module
from fd_conformance.fastdeploy import wrappers_bridge
from fd_conformance.fastdeploy.checkout import (
    EXIT_MISSING_DEPENDENCY,
    Checkout,
    CompiledOpCalled,
    CompiledOpsShim,
    MissingDependency,
    MissingModuleStandIn,
    StandInReached,
    import_environment,
    import_module,
    locate,
    pypi_name,
)
from fd_conformance.fastdeploy.config_bridge import check_checkout_config
from fd_conformance.fastdeploy.models_bridge import check_models
from fd_conformance.fastdeploy.runner_bridge import Combo, RunnerReport, check_runner
from fd_conformance.fastdeploy.wrappers_bridge import WrapperRow, WrappersReport, check_wrappers

FIXTURE = Path(__file__).parent / "fixtures" / "fastdeploy_bridge"
VARIANTS = FIXTURE / "variants"
RUNNER = "fastdeploy/worker/gpu_model_runner.py"
MODELS = "fastdeploy/model_executor/models"
CONFIG = "fastdeploy/config.py"
EXAMPLES = 40

# Text edits of the fixture's config module, one defect each: (old, new, the code it must raise).
CPU_CACHE_RULE = ("        self._cpu_cache_rule()\n", "")  # seed 004: the guard is missing
CONFIG_DEFECTS = {
    "FDC401": CPU_CACHE_RULE,
    "FDC402": (
        "    return sorted({-(-s // multiple) * multiple for s in sizes if s > 0}, reverse=True)",
        "    return [-(-s // multiple) * multiple for s in sizes if s > 0]",
    ),
    "FDC403": ('        step = spec.num_speculative_tokens + 1 if spec.method == "mtp" else 1', "        step = 1"),
    "FDC404": ("            g.graph_opt_level = 0\n", "            pass\n"),
    "FDC405": ("        tp = par.tensor_parallel_size if par.use_sequence_parallel_moe else 1", "        tp = 1"),
}


def make_tree(
    tmp_path: Path,
    *,
    runner: str | None = None,
    models: tuple[str, ...] = (),
    config_edit: tuple[str, str] | None = None,
    init: str | None = None,
    extra: dict[str, str] | None = None,
    edits: tuple[tuple[str, str, str], ...] = (),
) -> Path:
    """The base tree copied to tmp_path, with variant files put in place (``extra``: variant ->
    its path in the tree, packages made as needed)."""
    root = tmp_path / "tree"
    shutil.copytree(FIXTURE / "base", root)
    for name, where in (extra or {}).items():
        target = root / where
        for parent in target.relative_to(root).parents:
            if parent != Path(".") and not (root / parent / "__init__.py").exists():
                (root / parent).mkdir(exist_ok=True)
                (root / parent / "__init__.py").write_text("")
        shutil.copy(VARIANTS / name, target)
    if runner:
        shutil.copy(VARIANTS / runner, root / RUNNER)
    for name in models:
        shutil.copy(VARIANTS / name, root / MODELS / name)
    if init:
        shutil.copy(VARIANTS / init, root / "fastdeploy" / "__init__.py")
    for where, old, new in ((CONFIG, *config_edit),) if config_edit else ():
        edits = ((where, old, new), *edits)
    for where, old, new in edits:
        path = root / where
        text = path.read_text(encoding="utf-8")
        assert old in text, f"fixture {where} changed: update the test's edit"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return root


def runner_of(root: Path) -> RunnerReport:
    checkout = locate(root)
    with import_environment(checkout):
        return check_runner(checkout)


def codes_by_combo(report: RunnerReport, method: str) -> dict[Combo, set[str]]:
    return {row.combo: {f.code for f in row.findings} for row in report.rows if row.method == method and row.findings}


@pytest.fixture(autouse=True)
def _no_fastdeploy_left() -> Iterator[None]:
    yield
    assert not [m for m in sys.modules if m.split(".")[0] == "fastdeploy"], "the bridge left fastdeploy imported"


# --------------------------------------------------------------------------- checkout
def test_locate_accepts_the_root_or_the_package_dir(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    assert locate(root) == Checkout(root.resolve())
    assert locate(root / "fastdeploy") == Checkout(root.resolve())


@pytest.mark.parametrize("what", ["absent", "file", "empty", "bare-git"])
def test_locate_names_a_bad_checkout_and_the_fix(tmp_path: Path, what: str) -> None:
    path = tmp_path / "x"
    if what == "file":
        path.write_text("")
    elif what in ("empty", "bare-git"):
        path.mkdir()
        if what == "bare-git":
            (path / "HEAD").write_text("ref: refs/heads/develop\n")
            (path / "objects").mkdir()
    with pytest.raises(UsageError) as err:
        locate(path)
    message = str(err.value)
    assert str(path) in message and "fix: pass the root of a FastDeploy clone" in message
    assert "\n" not in message
    assert ("git archive" in message) is (what == "bare-git")


def test_cli_bad_path_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fd_conformance.cli import main

    assert main(["fastdeploy", str(tmp_path / "nope")]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "does not exist" in err and "fix:" in err


ABSENT = "fd_conformance_fixture_absent_package"
VIDEO = {"video_utils.py": "fastdeploy/input/video_utils.py"}
# The fixed runner importing the media helpers it never calls, and one whose teardown calls them.
IMPORTS_VIDEO = (
    (RUNNER, "from fastdeploy.spec_decode", "from fastdeploy.input.video_utils import read_frames\nfrom fastdeploy.spec_decode"),
)
USES_VIDEO = (
    *IMPORTS_VIDEO,
    (
        RUNNER,
        "    def clear_parameters(self, pid):\n",
        "    def clear_parameters(self, pid):\n        read_frames('last_request.mp4', 1)\n",
    ),
)
DECODER = "fd_conformance_fixture_video_decoder"


def test_missing_package_of_the_documented_install_is_one_line_naming_it_and_exit_6(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package the [fastdeploy] extra lists is never stood in: its absence means the install
    was not done (the fixture's absent package plays one of the extra's here)."""
    monkeypatch.setattr(checkout_module, "REQUIRED_MODULES", checkout_module.REQUIRED_MODULES | {ABSENT})
    root = make_tree(tmp_path, init="init_missing_dependency.py")
    assert bridge_cli.run(bridge_cli_args(root)) == EXIT_MISSING_DEPENDENCY == MissingDependency.exit_code
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"'{ABSENT}'" in err and 'pip install "fd-conformance[fastdeploy]"' in err


def test_an_import_no_check_runs_is_a_named_stand_in_and_the_tables_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26.1: a release branch's runner imports video decoders (decord, moviepy) its
    teardown never calls; the bridge stands in for them, lists them, and certifies the tree."""
    root = make_tree(tmp_path, extra=VIDEO, edits=IMPORTS_VIDEO, init="init_missing_dependency.py")
    assert bridge_cli.run(bridge_cli_args(root, "--only", "runner")) == EXIT_OK
    out = capsys.readouterr().out
    assert "## Stand-ins" in out
    assert f"- {ABSENT} (pip: {ABSENT}) for fastdeploy/__init__.py:3" in out  # the package root's own import
    assert f"- {DECODER} (pip: {DECODER}) for fastdeploy/input/video_utils.py:4" in out
    assert "REACHED" not in out and "optional_codec" not in out  # a guarded import keeps its fallback


def test_stand_in_environment_keeps_guarded_fallbacks_and_is_undone(tmp_path: Path) -> None:
    checkout = locate(make_tree(tmp_path, extra=VIDEO, edits=IMPORTS_VIDEO))
    with import_environment(checkout) as env:
        video = import_module("fastdeploy.input.video_utils", checkout)
        assert video.HAS_CODEC is False  # FastDeploy's own `except ImportError` fallback ran
        assert [r.module for r in env.stand_ins] == [DECODER]
        assert isinstance(sys.modules[DECODER], MissingModuleStandIn)
        with pytest.raises(StandInReached, match=f"{DECODER}.Sampler"):
            video.FrameSampler()  # a class built on a stood-in base: made only at run time
        with pytest.raises(StandInReached, match=DECODER):
            video.read_frames("x.mp4", 1)
        assert env.reached() == env.stand_ins
    assert DECODER not in sys.modules and f"{DECODER}.editor" not in sys.modules


def test_a_stand_in_the_checks_reach_stops_with_exit_6_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The teardown body decodes a video: the decoder is truly needed, so no verdict is given
    on stand-ins; one line names the module, the FastDeploy line that imported it, and the fix."""
    root = make_tree(tmp_path, extra=VIDEO, edits=USES_VIDEO)
    assert bridge_cli.run(bridge_cli_args(root, "--only", "runner")) == EXIT_MISSING_DEPENDENCY
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and "| ok |" not in captured.out
    assert f"from '{DECODER}', imported by fastdeploy/input/video_utils.py:4" in err
    assert f"fix: pip install {DECODER}" in err


def test_compiled_ops_are_shimmed_and_loud_when_called(tmp_path: Path) -> None:
    checkout = locate(make_tree(tmp_path))
    with import_environment(checkout) as env:
        module = import_module("fastdeploy.worker.gpu_model_runner", checkout)
        assert isinstance(sys.modules["fastdeploy.model_executor.ops.gpu"], CompiledOpsShim)
        assert env.ops.imported == ["share_external_data"]
        with pytest.raises(CompiledOpCalled, match="share_external_data"):
            module.share_external_data()
    assert "fastdeploy.model_executor.ops.gpu" not in sys.modules


def test_fastdeploy_logs_go_to_a_temp_dir_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FastDeploy's loggers write FD_LOG_DIR (default ./log) at import: the bridge must leave the
    user's directory clean, and respect a directory the user chose."""
    checkout = locate(make_tree(tmp_path))
    monkeypatch.delenv("FD_LOG_DIR", raising=False)
    with import_environment(checkout):
        logs = Path(os.environ["FD_LOG_DIR"])
        assert logs.is_dir() and logs != Path("log")
        (logs / "config.log").write_text("what FastDeploy would write")
    assert "FD_LOG_DIR" not in os.environ and not logs.exists()
    monkeypatch.setenv("FD_LOG_DIR", str(tmp_path / "mine"))
    with import_environment(checkout):
        assert os.environ["FD_LOG_DIR"] == str(tmp_path / "mine")
    assert os.environ["FD_LOG_DIR"] == str(tmp_path / "mine")


# --------------------------------------------------------------------------- config (C6)
@pytest.mark.parametrize("code", sorted(CONFIG_DEFECTS))
def test_config_rule_fires_on_its_defect_and_not_on_the_clean_tree(tmp_path: Path, code: str) -> None:
    for edit, expect_violation in ((None, False), (CONFIG_DEFECTS[code], True)):
        where = tmp_path / ("bad" if edit else "good")
        checkout = locate(make_tree(where, config_edit=edit))
        with import_environment(checkout):
            report = check_checkout_config(checkout, max_examples=EXAMPLES, codes=[code])
        assert report.error is None and report.built > 0
        (row,) = report.rows
        assert (row.minimal is not None) is expect_violation, (code, edit, row)


def test_seed_004_minimal_config_is_a_cpu_cache_with_prefill_graphs(tmp_path: Path) -> None:
    checkout = locate(make_tree(tmp_path, config_edit=CPU_CACHE_RULE))
    with import_environment(checkout):
        report = check_checkout_config(checkout, max_examples=EXAMPLES, codes=["FDC401"])
    (row,) = report.rows
    assert row.minimal is not None and "cudagraph_only_prefill=True" in row.minimal and "num_cpu_blocks=1" in row.minimal
    assert "num_cpu_blocks=1" in row.message


def test_config_platform_is_patched_only_while_building(tmp_path: Path) -> None:
    checkout = locate(make_tree(tmp_path, config_edit=CPU_CACHE_RULE))
    with import_environment(checkout):
        check_checkout_config(checkout, max_examples=5, codes=["FDC401"])
        config = import_module("fastdeploy.config", checkout)
        assert config.current_platform.is_cuda() is False  # the fixture's own host platform is back


# --------------------------------------------------------------------------- protocol on model classes
def test_models_clean_tree_has_no_protocol_error(tmp_path: Path) -> None:
    checkout = locate(make_tree(tmp_path))
    with import_environment(checkout):
        report = check_models(checkout)
    rows = {r.name: r for r in report.rows}
    # decorator- and base-class-registered
    assert set(rows) == {"TinyDenseForCausalLM", "TinyMoeForCausalLM", "TinyMTPForCausalLM"}
    assert [f.code for f in rows["TinyDenseForCausalLM"].findings] == ["FDC002"]  # legacy spelling: a warning
    assert report.violations == 0 and not report.import_failures


def test_models_missing_clear_is_fdc001_and_a_broken_module_is_its_own_row(tmp_path: Path) -> None:
    checkout = locate(make_tree(tmp_path, models=("model_without_clear.py", "model_broken_import.py")))
    with import_environment(checkout):
        report = check_models(checkout)
    rows = {r.name: r for r in report.rows}
    assert [f.code for f in rows["TinyVisionForConditionalGeneration"].findings] == ["FDC001"]
    assert {"TinyDenseForCausalLM", "TinyMTPForCausalLM"} <= set(rows)  # the others were still checked
    (failed,) = report.import_failures
    assert failed.endswith("model_broken_import") and "model_executor.layers" in report.import_failures[failed]
    assert report.violations == 1


# --------------------------------------------------------------------------- runner teardown (C3)
def test_runner_fixed_tree_is_clean_in_every_combination(tmp_path: Path) -> None:
    report = runner_of(make_tree(tmp_path))
    assert report.error is None and len(report.rows) == 2 * 2 * 3 * 2
    assert [(r.combo, r.method, r.findings, r.error) for r in report.rows if r.findings or r.error] == []


def test_runner_seed_000_hang_draft_cleared_after_release(tmp_path: Path) -> None:
    report = runner_of(make_tree(tmp_path, runner="runner_release_first.py"))
    found = codes_by_combo(report, "clear_parameters")
    assert found == {Combo(main, True, "mtp"): {"FDC201", "FDC202"} for main in (True, False)}
    row = next(r for r in report.rows if r.combo == Combo(True, True, "mtp") and r.method == "clear_parameters")
    assert row.calls.index("dynamic_weight_manager.clear_parameters()") < row.calls.index("draft.clear_graph_opt_backend()")
    assert all("owner draft" in f.message for f in row.findings)
    assert codes_by_combo(report, "update_parameters") == {}  # the draft was cleared late, but cleared


def test_runner_nested_guard_leaks_draft_graphs_with_main_graphs_off(tmp_path: Path) -> None:
    report = runner_of(make_tree(tmp_path, runner="runner_nested_guard.py"))
    leak = Combo(False, True, "mtp")
    assert codes_by_combo(report, "clear_parameters") == {leak: {"FDC201", "FDC202", "FDC203"}}
    assert codes_by_combo(report, "update_parameters") == {leak: {"FDC204"}}  # the stale draft graph replays


def test_every_door_of_the_runner_is_driven_and_judged_by_its_contract(tmp_path: Path) -> None:
    """Issue 50: sleep/wakeup per tag set and update_weights are rows of their own, each on fresh
    stand-ins. The draft's graphs survive sleep(weight): released under, alive after, then replayed
    stale after wakeup; clear/update_parameters of the same runner stay clean (no finding leaks from
    one door to another); update_weights keeps its graphs by contract (no FDC203) and is clean."""
    report = runner_of(make_tree(tmp_path, runner="runner_sleep_without_draft.py"))
    assert report.error is None and not [r for r in report.rows if r.error]
    doors = list(dict.fromkeys(r.method for r in report.rows))
    assert doors == [
        "clear_parameters",
        "update_parameters",
        "sleep(weight)",
        "wakeup(weight)",
        "sleep(kv_cache)",
        "wakeup(kv_cache)",
        "sleep(weight,kv_cache)",
        "wakeup(weight,kv_cache)",
        "update_weights",
    ]
    draft_on = {Combo(main, True, "mtp") for main in (True, False)}
    for tags in ("weight", "weight,kv_cache"):
        assert codes_by_combo(report, f"sleep({tags})") == {c: {"FDC201", "FDC202", "FDC203"} for c in draft_on}
        assert codes_by_combo(report, f"wakeup({tags})") == {c: {"FDC204"} for c in draft_on}
    for clean in ("clear_parameters", "update_parameters", "sleep(kv_cache)", "wakeup(kv_cache)", "update_weights"):
        assert codes_by_combo(report, clean) == {}, clean
    row = next(r for r in report.rows if r.combo == Combo(False, True, "mtp") and r.method == "sleep(weight)")
    assert all("owner draft" in f.message for f in row.findings)


def test_runner_import_failure_is_the_tables_error_not_a_crash(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    (root / RUNNER).write_text("raise RuntimeError('fixture: broken runner module')\n", encoding="utf-8")
    report = runner_of(root)
    assert report.rows == [] and report.error and "broken runner module" in report.error


# --------------------------------------------------------------------------- the command
def bridge_cli_args(root: Path, *extra: str) -> object:
    import argparse

    parser = argparse.ArgumentParser()
    bridge_cli.add_cli(parser.add_subparsers())
    return parser.parse_args(["fastdeploy", str(root), "--max-examples", str(EXAMPLES), *extra])


def test_cli_clean_tree_prints_three_tables_and_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "bridge.json"
    assert bridge_cli.run(bridge_cli_args(make_tree(tmp_path), "--json", str(out_json))) == EXIT_OK
    out = capsys.readouterr().out
    for heading in ("## 1. Config (C6)", "## 2. Protocol", "## 3. Runner teardown", "## 4. Real wrappers"):
        assert heading in out
    assert "-> exit 0" in out
    import json

    data = json.loads(out_json.read_text())
    assert data["violations"] == 0 and len(data["runner"]["rows"]) == 24


def test_cli_seeded_tree_exits_1_naming_each_defect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path, runner="runner_release_first.py", models=("model_without_clear.py",), config_edit=CPU_CACHE_RULE)
    assert bridge_cli.run(bridge_cli_args(root)) == EXIT_VIOLATIONS
    out = capsys.readouterr().out
    assert "| FDC401 | error | VIOLATED |" in out
    assert "| TinyVisionForConditionalGeneration |" in out and "FDC001" in out
    assert "| True | True | mtp | clear_parameters | FAIL | FDC201, FDC202 |" in out.replace(" x3", "")


def test_runner_draft_rows_are_na_where_fastdeploy_has_no_draft_graph_flag(tmp_path: Path) -> None:
    """Before draft_model_use_cudagraph existed a draft never had graphs: no invented findings."""
    flag = ',\n                "draft_model_use_cudagraph": False}'
    report = runner_of(make_tree(tmp_path, runner="runner_release_first.py", config_edit=(flag, "}")))
    skipped = [r for r in report.rows if r.skipped]
    assert len(skipped) == 12 and all(r.combo.draft_model_use_cudagraph for r in skipped)
    assert [r for r in report.rows if r.findings] == []


def test_stand_ins_and_missing_packages_name_the_pypi_package() -> None:
    """Import names differ from PyPI names; the longest known prefix names the package to install."""
    assert pypi_name("opentelemetry.exporter.otlp.proto") == "opentelemetry-exporter-otlp"
    assert pypi_name("opentelemetry.trace") == "opentelemetry-api opentelemetry-sdk"
    assert pypi_name("zmq.asyncio") == "pyzmq" and pypi_name("decord") == "decord"


#: tree -> (runner variant, the backend's None guard removed, the suite's tests that fail on it)
SUITE_CASES: dict[str, tuple[str | None, bool, tuple[str, ...]]] = {
    "clean": (None, False, ()),
    "nested guard": ("runner_nested_guard.py", False, ("main=off draft=on spec=mtp", "test_runner_teardown_over_real_wrappers")),
    "shared backend": (None, True, ("test_real_wrappers_clear",)),
}


@pytest.mark.parametrize("case", SUITE_CASES)
def test_pytest_entry_point_gates_like_the_command(tmp_path: Path, case: str) -> None:
    import os

    runner, shared_backend, failing = SUITE_CASES[case]
    root = make_tree(tmp_path, runner=runner, edits=SHARED_BACKEND_RAISES if shared_backend else ())
    env = {**os.environ, "FD_CONFORMANCE_FASTDEPLOY": str(root), "FD_CONFORMANCE_FASTDEPLOY_EXAMPLES": "10"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "fd_conformance.fastdeploy.suite",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert (done.returncode == 0) is not failing, done.stdout[-3000:]
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED")]
    assert len(failed) == len(failing) and all(any(name in line for line in failed) for name in failing), done.stdout[-3000:]
    if case == "nested guard":
        assert "FDC203" in done.stdout
    if case == "shared backend":  # one line for the three wrappers, naming the backend's line
        assert "in 3 wrapper(s): TinyDenseForCausalLM" in done.stdout and "graph_optimization_backend.py:" in done.stdout


# --------------------------------------------------------------------------- --history (issue 26 item 3)
def _commit(repo: Path, message: str) -> str:
    git = ["git", "-C", str(repo), "-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid"]
    subprocess.run([*git, "add", "-A"], check=True, capture_output=True)
    subprocess.run([*git, "commit", "-q", "-m", message], check=True, capture_output=True)
    return subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def broken_history(tmp_path: Path) -> tuple[Path, list[str]]:
    """A git repository of the fixture tree: good, three unrelated edits, the nested-guard
    defect, a wrapper without a clear; each commit changes one thing."""
    repo = make_tree(tmp_path)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    shas = [_commit(repo, "good: every graph cleared before the weights go")]
    for n in range(3):
        (repo / "README.md").write_text(f"unrelated docs change {n}\n")
        shas.append(_commit(repo, f"docs only {n}"))
    shutil.copy(VARIANTS / "runner_nested_guard.py", repo / RUNNER)
    shas.append(_commit(repo, "draft clear moved under the main flag"))
    shutil.copy(VARIANTS / "model_without_clear.py", repo / MODELS / "model_without_clear.py")
    shas.append(_commit(repo, "add a VL wrapper"))
    return repo, shas


def history_cli(repo: Path, spec: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "fd_conformance.cli", "fastdeploy", str(repo), "--history", spec, *extra]
    return subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)


@pytest.mark.parametrize("mode", [(), ("--bisect",)], ids=["every-commit", "bisect"])
def test_history_names_the_first_commit_where_each_row_changed(
    broken_history: tuple[Path, list[str]], mode: tuple[str, ...]
) -> None:
    repo, shas = broken_history
    done = history_cli(repo, f"{shas[0]}..{shas[-1]}", "--only", "runner", "--only", "models", *mode)
    assert done.returncode == EXIT_VIOLATIONS, done.stdout + done.stderr  # B's own verdict
    changes = done.stdout.split("## First commit where each row changed verdict")[1]
    guard, vl = shas[4][:9], shas[5][:9]
    assert (
        f"| runner main=off draft=on spec=mtp clear_parameters | ok | {guard} draft clear moved under the main flag | FAIL FDC201 FDC202 FDC203 |"
        in changes
    )
    assert f"| runner main=off draft=on spec=mtp update_parameters | ok | {guard} " in changes
    assert f"| models TinyVisionForConditionalGeneration | absent | {vl} add a VL wrapper | FAIL FDC001 |" in changes
    assert changes.count("\n| ") == 3 + 1  # header + exactly the three rows that changed: nothing else moved
    assert not any(sha[:9] in changes for sha in shas[1:4])
    commits = done.stdout.split("## First commit")[0].splitlines()
    ran = [line for line in commits if line.startswith("| ") and line[2].isdigit() and "| not run |" not in line]
    assert len(ran) == (6 if not mode else 5)  # bisection never needs the first docs commit


def test_history_reports_a_tree_it_cannot_judge_as_the_run_row(broken_history: tuple[Path, list[str]]) -> None:
    repo, shas = broken_history
    (repo / "fastdeploy" / "__init__.py").unlink()  # e.g. a commit from before the package existed
    shas.append(_commit(repo, "package root removed"))
    done = history_cli(repo, f"{shas[-2]}..{shas[-1]}", "--only", "runner")
    assert done.returncode == EXIT_USAGE  # B's own code: B cannot be judged
    assert (
        "| (run) | absent | " in done.stdout
        and "package root removed | exit 2: '<tree>/tree' holds no fastdeploy/__init__.py" in done.stdout
    ), done.stdout
    assert "| runner main=off draft=on spec=mtp clear_parameters | FAIL FDC201 FDC202 FDC203 | " in done.stdout  # rows go absent


@pytest.mark.parametrize(
    "spec, problem", [("main", "is not a range A..B"), ("nope..main", "git rev-parse"), ("HEAD..HEAD~1", "has no commit after")]
)
def test_history_bad_range_is_one_line(broken_history: tuple[Path, list[str]], spec: str, problem: str) -> None:
    repo, _ = broken_history
    done = history_cli(repo, spec)
    assert done.returncode == EXIT_USAGE and problem in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


# --------------------------------------------------------------------------- real wrappers (issue 26 item 2)
def wrappers_report(root: Path) -> WrappersReport:
    checkout = locate(root)
    with import_environment(checkout):
        report = check_wrappers(checkout)
    assert report.error is None, report.error
    return report


def wrappers_of(root: Path) -> dict[str, WrapperRow]:
    return {r.name: r for r in wrappers_report(root).rows}


def test_wrappers_clean_tree_every_recorded_graph_is_cleared(tmp_path: Path) -> None:
    rows = wrappers_of(make_tree(tmp_path))
    assert {n: (r.verdict, r.findings) for n, r in rows.items()} == {
        "TinyDenseForCausalLM": ("ok", []),
        "TinyMoeForCausalLM": ("ok", []),
        "TinyMTPForCausalLM": ("ok", []),
    }
    assert rows["TinyDenseForCausalLM"].backends == ["model"] and rows["TinyDenseForCausalLM"].graphs > 0
    assert all(r.cleared_before_capture and r.before_capture is None for r in rows.values())


def test_wrapper_whose_clear_misses_the_vision_tower_is_fdc203_naming_it(tmp_path: Path) -> None:
    """Issue 26.2: the class passes the protocol; its real clear leaves the vision tower's graphs."""
    root = make_tree(tmp_path, models=("model_vl_clears_language_only.py", "model_vl_clears_every_tower.py"))
    rows = wrappers_of(root)
    bad, good = rows["TinyVLForConditionalGeneration"], rows["TinyOmniForConditionalGeneration"]
    assert bad.verdict == "FAIL" and {f.code for f in bad.findings} == {"FDC203"}
    assert all("owner visual" in f.message for f in bad.findings) and len(bad.findings) == bad.graphs // 2
    assert sorted(bad.backends) == ["language_model", "visual"]
    assert (good.verdict, good.findings, sorted(good.backends)) == ("ok", [], ["towers.image", "towers.text"])
    checkout = locate(root)
    with import_environment(checkout):  # and the protocol table, by class, sees nothing wrong with it
        protocol = {r.name: r for r in check_models(checkout).rows}
    assert not protocol["TinyVLForConditionalGeneration"].is_error


def test_wrapper_delegating_with_the_wrong_argument_is_fdc303(tmp_path: Path) -> None:
    """Its clear raises always: after capture on its own row, before capture as a group of one
    at its own line (no other wrapper reaches that line)."""
    report = wrappers_report(make_tree(tmp_path, models=("model_clear_wrong_argument.py",)))
    row = {r.name: r for r in report.rows}["TinyStrictForCausalLM"]
    assert row.verdict == "FAIL" and {f.code for f in row.findings} == {"FDC303"}
    assert "after capture raised AttributeError" in row.findings[0].message
    assert "model_clear_wrong_argument.py:" in row.findings[0].message
    [group] = report.shared_raises
    assert group.wrappers == ["TinyStrictForCausalLM"] and group.at.startswith(f"{MODELS}/model_clear_wrong_argument.py:")
    assert group.cell().startswith("FDC303 (at: model_clear_wrong_argument.py:") and report.violations == 2


BACKEND = "fastdeploy/model_executor/graph_optimization/graph_optimization_backend.py"
# The develop shape: the backend's clear dereferences the piecewise backend made on the first forward.
SHARED_BACKEND_RAISES = (
    (
        BACKEND,
        "        if self.cudagraph_piecewise_backend is not None:\n            self.cudagraph_piecewise_backend.clear_graph()",
        "        self.cudagraph_piecewise_backend.clear_graph()",
    ),
)


def test_a_shared_backend_raising_before_capture_is_one_grouped_finding(tmp_path: Path) -> None:
    """The develop shape: every wrapper's clear reaches one backend line that dereferences the
    piecewise backend made on the first forward. One finding naming the line, the exception, the
    fix and the wrappers; each row's own verdict is its clear after capture. A wrapper whose own
    clear raises only after capture keeps its own row finding."""
    root = make_tree(tmp_path, models=("model_clear_raises_after_capture.py",), edits=SHARED_BACKEND_RAISES)
    report = wrappers_report(root)
    rows = {r.name: r for r in report.rows}
    [group] = report.shared_raises
    assert group.wrappers == ["TinyDenseForCausalLM", "TinyMTPForCausalLM", "TinyMoeForCausalLM"]
    assert group.at.startswith(f"{BACKEND}:") and group.raised.startswith("AttributeError: 'NoneType'")
    assert group.cell() == f"FDC303 (shared: graph_optimization_backend.py:{group.at.rsplit(':')[-1]}, see below)"
    message = group.finding().message
    assert f"at {group.at} in 3 wrapper(s): TinyDenseForCausalLM, TinyMTPForCausalLM" in message and "eagerly" in message
    for name in group.wrappers:  # their clear after capture reaches every graph: their own verdict is ok
        assert (rows[name].verdict, rows[name].findings, rows[name].graphs > 0) == ("ok", [], True)
    hasty = rows["TinyHastyForCausalLM"]
    assert hasty.before_capture is None and hasty.cleared_before_capture
    assert hasty.verdict == "FAIL" and [f.code for f in hasty.findings] == ["FDC303"]
    assert "after capture raised RuntimeError" in hasty.findings[0].message
    assert report.violations == 2  # the shared raise once, the hasty wrapper once


def test_cli_prints_the_shared_raise_once_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_tree(tmp_path, models=("model_clear_raises_after_capture.py",), edits=SHARED_BACKEND_RAISES)
    out_json = tmp_path / "bridge.json"
    assert bridge_cli.run(bridge_cli_args(root, "--only", "wrappers", "--json", str(out_json))) == EXIT_VIOLATIONS
    out = capsys.readouterr().out
    assert "after capture 3 ok, 1 violate, 0 not checked" in out
    assert "before any capture: 1 raise(s), each counted once by where it is raised, reached by 3 wrapper(s)" in out
    assert out.count("| FDC303 (shared: graph_optimization_backend.py:") == 3
    assert "| TinyHastyForCausalLM | ok | FAIL | FDC303 |" in out
    assert out.count("(shared) graph_optimization_backend.py:") == 1
    assert "2 table row(s) with violations" in out
    import json

    data = json.loads(out_json.read_text())["wrappers"]
    [shared] = data["shared_raises"]
    assert shared["code"] == "FDC303" and shared["at"].startswith(BACKEND) and len(shared["wrappers"]) == 3
    assert {r["name"]: r["before_capture"] for r in data["rows"]} == {
        "TinyDenseForCausalLM": "FDC303",
        "TinyHastyForCausalLM": None,
        "TinyMTPForCausalLM": "FDC303",
        "TinyMoeForCausalLM": "FDC303",
    }
    from fd_conformance.fastdeploy.history import row_verdicts

    assert row_verdicts({"wrappers": data})[f"wrappers before capture {BACKEND}"] == "FAIL FDC303"


def test_wrapper_without_clear_or_needing_arguments_is_judged_without_building(tmp_path: Path) -> None:
    root = make_tree(tmp_path, models=("model_without_clear.py",))
    (root / MODELS / "needs_args.py").write_text(
        "from fastdeploy.model_executor.models.model_base import ModelForCasualLM\n\n\n"
        "class NeedsArgsForCausalLM(ModelForCasualLM):\n"
        "    def __init__(self, fd_config):\n"
        "        raise RuntimeError('must not be built')\n\n"
        "    def clear_graph_opt_backend(self, fd_config):\n"
        "        pass\n"
    )
    rows = wrappers_of(root)
    assert [f.code for f in rows["TinyVisionForConditionalGeneration"].findings] == ["FDC001"]
    assert [f.code for f in rows["NeedsArgsForCausalLM"].findings] == ["FDC005"]
    assert rows["NeedsArgsForCausalLM"].verdict == "FAIL"


def test_a_wrapper_that_does_not_build_is_a_row_saying_why_never_a_pass(tmp_path: Path) -> None:
    root = make_tree(tmp_path)
    edit = (
        "        self.model = TinyMTPModel(fd_config=fd_config)\n",
        "        self.model = TinyMTPModel(fd_config=fd_config.vision_config)\n",
    )
    path = root / MODELS / "tiny_mtp.py"
    path.write_text(path.read_text().replace(*edit))
    row = wrappers_of(root)["TinyMTPForCausalLM"]
    assert row.verdict == "not built" and "AttributeError" in row.reason and "tiny_mtp.py:" in row.reason
    args = bridge_cli_args(root, "--only", "wrappers")
    assert bridge_cli.run(args) == EXIT_INCOMPLETE  # nothing failed, but not everything was checked


# --------------------------------------------------------------------------- the tiny config (MoE, VL, MTP shapes)
QWEN3_VL = {"qwen3_vl_moe.py": f"{MODELS}/qwen3_vl/qwen3_vl_moe.py"}


def test_a_vl_moe_wrapper_builds_from_its_familys_config_and_its_missed_tower_is_fdc203(tmp_path: Path) -> None:
    """The family's dialect (one vision activation), the checkout's PretrainedConfig for the
    nested configs and the routing-replay sub-config make it build; its clear misses ``visual``."""
    row = wrappers_of(make_tree(tmp_path, extra=QWEN3_VL))["TinyQwen3VLMoeForConditionalGeneration"]
    assert row.verdict == "FAIL" and sorted(row.backends) == ["model", "visual"], row
    assert {f.code for f in row.findings} == {"FDC203"} and all("owner visual" in f.message for f in row.findings)


def test_without_the_family_dialect_the_vl_wrapper_is_a_not_built_row_naming_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(wrappers_bridge.FAMILY_FIELDS, "qwen3_vl")
    row = wrappers_of(make_tree(tmp_path, extra=QWEN3_VL))["TinyQwen3VLMoeForConditionalGeneration"]
    assert row.verdict == "not built" and row.findings == []
    assert "KeyError" in row.reason and "'silu'" in row.reason and "qwen3_vl_moe.py:" in row.reason


def test_tiny_config_families_and_nested_configs() -> None:
    """Ernie VL's experts come in text/image pairs, Qwen3-VL's vision activation is its own; the
    nested configs are made by the checkout's class when it has one; families come from bases too."""
    plain = wrappers_bridge.tiny_model_config()
    assert plain.moe_num_experts == 2 and plain.vision_config.hidden_act == "silu"
    assert plain.n_routed_experts == plain.num_experts == 2 and plain.kv_lora_rank > 0 and plain.num_nextn_predict_layers == 1
    ernie = wrappers_bridge.tiny_model_config(("ernie4_5_vl",))
    assert ernie.moe_num_experts == [2, 2] and ernie.moe_intermediate_size == [16, 16]
    wrapped = wrappers_bridge.tiny_model_config(("qwen3_vl",), wrap=lambda values: ("made", values))
    assert wrapped.vision_config == ("made", {**wrappers_bridge.TINY_VISION, "hidden_act": "gelu_pytorch_tanh"})
    assert wrapped.pretrained_config == ("made", wrappers_bridge.TINY_PRETRAINED)

    base = type("Qwen3VLForConditionalGeneration", (), {"__module__": "fastdeploy.model_executor.models.qwen3_vl.qwen3_vl"})
    sub = type("Qwen3VLMoeForConditionalGeneration", (base,), {"__module__": "fastdeploy.model_executor.models.moe"})
    assert wrappers_bridge.families_of(sub) == ("qwen3_vl",)
    assert wrappers_bridge.families_of(type("Dense", (), {"__module__": "fastdeploy.model_executor.models.qwen3"})) == ()
