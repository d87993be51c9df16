"""The how-to guides' and the README's examples, run as the pages write them.

Each test writes a page's ``<!-- file: NAME -->`` blocks into a temporary directory and runs the
page's ``<!-- run: ID -->`` command there (tests/test_docs.py: the marks, and which test runs
each). On CPU in CI (host-emulated graphs); the ``gpu``-marked variants run the same commands on
real graphs. Each test also checks what its page says the command shows.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest
from test_docs import README, ROOT, Ran, blocks, page_command, page_files, run_command, write_files

from fd_conformance.devices import visible_gpu_count

pytest.importorskip("torch")

needs_two_gpus = pytest.mark.skipif(visible_gpu_count() < 2, reason="needs 2 GPUs (one rank per GPU, NCCL)")


def certify(page: str, run_id: str, directory: Path, files: dict[str, str], *, gpu: bool = False) -> Ran:
    write_files(directory, files)
    return run_command(page_command(page, run_id), directory, gpu=gpu)


def assert_certified(ran: Ran, name: str, *, gpu: bool = False) -> None:
    row = ran.row
    assert ran.proc.returncode == 0, ran.log
    assert (row["name"], row["verdict"], row["observed_findings"]) == (name, "certified", []), (row, ran.log)
    assert row["graphs"] == ("real" if gpu else "host-emulated"), row
    assert "fd-conformance: PASS" in ran.proc.stdout, ran.log


def codes_by_check(ran: Ran) -> dict[str, set[str]]:
    return {check: set(cell["codes"]) for check, cell in ran.row["checks"].items() if cell["codes"]}


def edited(files: dict[str, str], name: str, old: str, new: str) -> dict[str, str]:
    """``files`` with one exact edit to ``name``: the edit a page tells the reader to make."""
    assert files[name].count(old) == 1, f"{name} no longer holds {old!r} once, as the page's edit assumes"
    return {**files, name: files[name].replace(old, new)}


# --------------------------------------------------------------------------- README
def test_readme_example_is_certified(tmp_path: Path) -> None:
    ran = certify(README, "certify", tmp_path, page_files(README))
    assert_certified(ran, "my-lm", gpu=False)


@pytest.mark.gpu
def test_readme_example_is_certified_on_a_gpu(tmp_path: Path) -> None:
    """how-to/gpu-host.md's command -- the README's, on a GPU (one session for both pages): the
    row is my-lm [cuda, real]."""
    ran = certify("how-to/gpu-host.md", "certify-gpu", tmp_path, page_files(README), gpu=True)
    assert_certified(ran, "my-lm", gpu=True)
    assert ran.row["device"] == "cuda", ran.row


@pytest.mark.parametrize("gpu", [pytest.param(False, id="cpu"), pytest.param(True, id="cuda", marks=pytest.mark.gpu)])
def test_gpu_only_session_certifies_real_graphs_or_nothing(tmp_path: Path, gpu: bool) -> None:
    """The page's `pytest ... -m gpu`: real graphs on a GPU; on a machine without one, exit 4."""
    write_files(tmp_path, page_files(README))
    ran = run_command(page_command("how-to/gpu-host.md", "pytest-gpu"), tmp_path, gpu=gpu)
    assert ran.proc.returncode == (0 if gpu else 4), ran.log


# --------------------------------------------------------------------------- failed certificate
BROKEN_CLEAR_OLD = (
    "    def clear_graph_opt_backend(self):  # the method this kit exists for\n        self.model.clear_graph_opt_backend()\n"
)


def test_failed_certificate_walkthrough(tmp_path: Path) -> None:
    page = "how-to/failed-certificate.md"
    (edit,) = [b.body for b in blocks(page) if b.kind == "not-run" and b.language == "python"]
    files = edited(page_files(README), "my_lm.py", BROKEN_CLEAR_OLD, edit)
    ran = certify(page, "certify-broken", tmp_path, files)
    assert ran.proc.returncode == 1 and ran.row["verdict"] == "violations", ran.log
    # the matrix the page shows: clear FDC203; teardown_order and weight_cycle FDC201, FDC202, FDC203
    assert codes_by_check(ran) == {
        "clear": {"FDC203"},
        "teardown_order": {"FDC201", "FDC202", "FDC203"},
        "weight_cycle": {"FDC201", "FDC202", "FDC203"},
    }, ran.log
    certificate = (tmp_path / "fd-conformance-report" / "certificate.md").read_text()
    for section in ("## Summary", "## Findings by code", "## Skipped, and why", "**FDC203** (error", "graph 'main:4'"):
        assert section in certificate, f"the page describes {section!r}, the certificate lacks it"
    assert "in `my-lm` [cpu] clear, `my-lm` [cpu] teardown_order, `my-lm` [cpu] weight_cycle" in certificate
    explain = run_command(page_command(page, "explain"), tmp_path)
    assert explain.proc.returncode == 0 and "### Fix" in explain.proc.stdout, explain.log
    report = run_command(page_command(page, "report"), tmp_path)
    assert report.proc.returncode == 1 and "violations" in report.proc.stdout, report.log
    # Replay it: the certificate lists the reproducer the page runs; it fails with the run's code
    assert "## Reproducers" in certificate and "`repro/my-lm-cpu-clear_releases_graphs_and_memory.py`" in certificate
    replay = run_command(page_command(page, "replay"), tmp_path)
    assert replay.proc.returncode == 1 and "fd-conformance replay: FAIL FDC203\n" in replay.proc.stdout, replay.log
    # Fix it: the README's own file, delegating again; the reproducer passes, --last-failed certifies the row
    write_files(tmp_path, page_files(README))
    fixed = run_command(page_command(page, "replay"), tmp_path)
    assert fixed.proc.returncode == 0 and "fd-conformance replay: PASS\n" in fixed.proc.stdout, fixed.log
    again = run_command(page_command(page, "last-failed"), tmp_path)
    assert again.proc.returncode == 0 and again.row["verdict"] == "certified", again.log
    assert "--last-failed: re-running the 1 row(s) that did not pass: my-lm [cpu]" in again.proc.stdout


# --------------------------------------------------------------------------- MTP draft
MTP = "how-to/mtp-draft.md"


@pytest.mark.parametrize("gpu", [pytest.param(False, id="cpu"), pytest.param(True, id="cuda", marks=pytest.mark.gpu)])
def test_mtp_draft_model_is_certified(tmp_path: Path, gpu: bool) -> None:
    ran = certify(MTP, "certify", tmp_path, page_files(MTP), gpu=gpu)
    assert_certified(ran, "my-lm-mtp", gpu=gpu)
    for check in ("clear[whatever_the_flags-draftOff]", "teardown_order[mainOff-draftOn]", "-draftSwitchedOff]"):
        # the page: these run (and pass) because the case has a draft
        assert re.search(r"PASS +my-lm-mtp \[\w+\] \S*" + re.escape(check), ran.proc.stdout), (check, ran.log)


def certify_mtp_edited(tmp_path: Path, old: str, new: str) -> Ran:
    """The MTP page's command on its file with one of the edits its "When it fails" table lists."""
    return certify(MTP, "certify", tmp_path, edited(page_files(MTP), "mtp_lm.py", old, new))


def test_mtp_runner_that_never_hears_of_the_draft_is_caught(tmp_path: Path) -> None:
    ran = certify_mtp_edited(
        tmp_path, "WeightCycleRunner(runtime, self.wrapper, self.draft)", "WeightCycleRunner(runtime, self.wrapper)"
    )
    assert ran.proc.returncode == 1 and ran.row["verdict"] == "violations", ran.log
    found = codes_by_check(ran)
    assert "FDC306" in found.get("capture_replay", set()) and "FDC306" in found.get("teardown_order", set()), found
    assert {"FDC201", "FDC203"} <= found.get("weight_cycle", set()), found
    assert "draft graph flag on, but no draft graph exists after WeightCycleRunner.capture_model()" in ran.proc.stdout, ran.log


def test_mtp_draft_without_its_own_sizes_owes_every_main_size(tmp_path: Path) -> None:
    ran = certify_mtp_edited(
        tmp_path, "        draft_capture_sizes=DRAFT_SIZES,  # left out, the draft owes a graph at every main size\n", ""
    )
    assert ran.proc.returncode == 1, ran.log
    assert ran.row["observed_findings"] == ["FDC306"] and codes_by_check(ran) == {"capture_replay": {"FDC306"}}, ran.log


# --------------------------------------------------------------------------- multimodal, Paddle
@pytest.mark.parametrize("gpu", [pytest.param(False, id="cpu"), pytest.param(True, id="cuda", marks=pytest.mark.gpu)])
def test_multimodal_model_is_certified(tmp_path: Path, gpu: bool) -> None:
    page = "how-to/multimodal.md"
    assert_certified(certify(page, "certify", tmp_path, page_files(page), gpu=gpu), "my-vl", gpu=gpu)


@pytest.mark.parametrize("gpu", [pytest.param(False, id="cpu"), pytest.param(True, id="cuda", marks=pytest.mark.gpu)])
def test_paddle_model_is_certified(tmp_path: Path, gpu: bool) -> None:
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("paddle is not installed (pip install -e '.[paddle]')")
    page = "how-to/paddle.md"
    assert_certified(certify(page, "certify", tmp_path, page_files(page), gpu=gpu), "tiny-paddle-lm", gpu=gpu)


# --------------------------------------------------------------------------- tensor parallelism
TP = "how-to/tensor-parallel.md"


def test_tensor_parallel_check_passes_at_tp2(tmp_path: Path) -> None:
    write_files(tmp_path, page_files(TP))
    ran = run_command(page_command(TP, "pytest"), tmp_path, env={"PYTEST_ADDOPTS": "-p no:cacheprovider"})
    assert ran.proc.returncode == 0 and "1 passed" in ran.proc.stdout, ran.log


@pytest.mark.gpu
@needs_two_gpus
def test_tensor_parallel_check_passes_at_tp2_on_two_gpus(tmp_path: Path) -> None:
    files = edited(page_files(TP), "test_tp_lm.py", 'DistributedWorld(2, device="cpu")', 'DistributedWorld(2, device="cuda")')
    write_files(tmp_path, files)
    ran = run_command(page_command(TP, "pytest"), tmp_path, gpu=True, env={"PYTEST_ADDOPTS": "-p no:cacheprovider"})
    assert ran.proc.returncode == 0 and "1 passed" in ran.proc.stdout, ran.log


# --------------------------------------------------------------------------- CI gating
def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def test_changed_selects_the_edited_case_and_run_certifies_it(tmp_path: Path) -> None:
    """A model repository with the README's cases, its main on an `origin` remote, a branch that
    edits the model: `changed --base origin/main` selects my-lm, and `run --cases-file` certifies it."""
    page = "how-to/ci-gating.md"
    origin, repo = tmp_path / "origin.git", tmp_path / "repo"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_files(repo, page_files(README))
    (repo / "NOTES.md").write_text("a model repository\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "model")
    git(repo, "remote", "add", "origin", str(origin))
    git(repo, "push", "-q", "origin", "main")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "NOTES.md").write_text("unrelated\n")
    git(repo, "commit", "-q", "-am", "docs only")
    unrelated = run_command(page_command(page, "changed"), repo)
    assert unrelated.proc.returncode == 0 and (repo / "selection.txt").read_text().split() == [], unrelated.log
    model = (repo / "my_lm.py").read_text()
    (repo / "my_lm.py").write_text(model.replace("SIZES = (4, 2, 1)", "SIZES = (8, 4, 2, 1)"))
    git(repo, "commit", "-q", "-am", "capture 8 tokens too")
    selected = run_command(page_command(page, "changed"), repo)
    assert selected.proc.returncode == 0, selected.log
    assert [ln for ln in (repo / "selection.txt").read_text().splitlines() if ln and not ln.startswith("#")] == ["my-lm"]
    assert_certified(run_command(page_command(page, "certify-selection"), repo), "my-lm")


# --------------------------------------------------------------------------- lint
LINT = "how-to/lint.md"


def test_lint_finds_the_misordered_teardown(tmp_path: Path) -> None:
    files = page_files(LINT)
    write_files(tmp_path, {"gpu_model_runner.py": files["gpu_model_runner.py"]})
    ran = run_command(page_command(LINT, "lint-runner"), tmp_path)
    assert ran.proc.returncode == 1, ran.log
    assert "gpu_model_runner.py:4:29: FDC101 GPUModelRunner.clear_parameters: graphs cleared by" in ran.proc.stdout, ran.log
    lines = files["gpu_model_runner.py"].splitlines(keepends=True)
    lines[2], lines[3] = lines[3], lines[2]  # "Swap the two lines and it exits 0"
    (tmp_path / "gpu_model_runner.py").write_text("".join(lines))
    fixed = run_command(page_command(LINT, "lint-runner"), tmp_path)
    assert fixed.proc.returncode == 0 and "FDC101" not in fixed.proc.stdout, fixed.log


def test_lint_fix_renames_the_legacy_spelling(tmp_path: Path) -> None:
    write_files(tmp_path, {"my_model.py": page_files(LINT)["my_model.py"]})
    ran = run_command(page_command(LINT, "lint-fix"), tmp_path)
    assert ran.proc.returncode == 0, ran.log
    fixed = (tmp_path / "my_model.py").read_text()
    assert "    def clear_graph_opt_backend(self):" in fixed
    assert re.search(r"^    clear_grpah_opt_backend = clear_graph_opt_backend\b", fixed, re.M), fixed
    assert "self.model.clear_grpah_opt_backend()" in fixed  # calls on other receivers stay
    again = run_command(page_command(LINT, "lint-fix"), tmp_path)
    assert again.proc.returncode == 0 and (tmp_path / "my_model.py").read_text() == fixed  # a second run changes nothing


# --------------------------------------------------------------------------- FastDeploy
FASTDEPLOY = "how-to/fastdeploy-checkout.md"
FIXTURE_TREE = ROOT / "tests" / "fixtures" / "fastdeploy_bridge" / "base"
READERS_CHECKOUT = "~/src/FastDeploy"


def fastdeploy_command(run_id: str) -> str:
    command = page_command(FASTDEPLOY, run_id)
    assert READERS_CHECKOUT in command, command
    return command.replace(READERS_CHECKOUT, str(FIXTURE_TREE))


@pytest.fixture
def paddle_installed() -> None:
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("the FastDeploy bridge imports paddle (pip install -e '.[paddle]')")


@pytest.mark.usefixtures("paddle_installed")
def test_fastdeploy_commands_on_the_fixture_tree(tmp_path: Path) -> None:
    ran = run_command(fastdeploy_command("fastdeploy"), tmp_path)
    assert ran.proc.returncode == 0, ran.log
    for table in ("## 1.", "## 2.", "## 3.", "## 4.", "## 5."):
        assert table in ran.proc.stdout, (table, ran.log)
    one = run_command(fastdeploy_command("fastdeploy-runner"), tmp_path)
    assert one.proc.returncode == 0 and (tmp_path / "bridge.json").is_file(), one.log
    assert "## 3." in one.proc.stdout and "## 1." not in one.proc.stdout, one.log


@pytest.mark.usefixtures("paddle_installed")
def test_fastdeploy_through_pytest(tmp_path: Path) -> None:
    ran = run_command(fastdeploy_command("fastdeploy-pytest"), tmp_path, env={"PYTEST_ADDOPTS": "-p no:cacheprovider"})
    summary = [line for line in ran.proc.stdout.splitlines() if " passed" in line]
    assert ran.proc.returncode == 0 and summary and "skipped" not in summary[-1], ran.log  # the variable reached it


# --------------------------------------------------------------------------- hangs
def test_hang_is_reported_and_the_session_goes_on(tmp_path: Path) -> None:
    page = "how-to/debug-a-hang.md"
    write_files(tmp_path, page_files(page))
    ran = run_command(page_command(page, "pytest-hang"), tmp_path, env={"PYTEST_ADDOPTS": "-p no:cacheprovider"})
    out = ran.proc.stdout
    assert ran.proc.returncode == 1 and "1 failed, 1 passed" in out, ran.log
    assert "FDC501 test_hang_demo.py::test_weight_sync_that_never_returns hung: no result within 5s" in out, ran.log
    assert re.search(r'stuck at File ".*test_hang_demo\.py", line 11 in test_weight_sync_that_never_returns', out), ran.log
    assert "last event: waiting for rank 1 in all_reduce" in out, ran.log
