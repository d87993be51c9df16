"""The docs' tutorials are run VERBATIM. "From zero to certified" (docs/tutorials/zero-to-certified.md):
its python blocks (each after a ``<!-- file: tiny_lm.py -->`` mark) become ``tiny_lm.py``, its
certify command (``<!-- run: certify -->``) runs on it through the real kit on CPU, and the row
must be certified. The same module with the wrapper's clear method deleted must NOT be certified,
so a tutorial that stopped exercising the contract (or a kit that stopped checking it) fails here.
The native tutorial's two files (docs/tutorials/native.md: the author's model, which imports
nothing from the kit, and the glue) run the same way: certified as written, and not certified with
the weights freed before the graphs are dropped. (The marks are checked by tests/test_docs.py.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorials" / "zero-to-certified.md"
NATIVE_TUTORIAL = ROOT / "docs" / "tutorials" / "native.md"
MODULE_MARKER = "<!-- file: tiny_lm.py -->"
CERTIFY_MARKER = "<!-- run: certify -->"
CONSOLE_SCRIPT = "fd-conformance"  # [project.scripts] fd-conformance = "fd_conformance.cli:main"
CLEAR_METHOD = re.compile(
    r"\n    def clear_graph_opt_backend\(self\) -> None:\n        self\.model\.clear_graph_opt_backend\(\)\n"
)


def fenced_after(marker: str, language: str, page: Path = TUTORIAL) -> list[str]:
    """Every ``language`` block that directly follows ``marker``, verbatim, in page order."""
    return re.findall(re.escape(marker) + r"\n```" + language + r"\n(.*?)```", page.read_text(encoding="utf-8"), re.S)


def tutorial_module() -> str:
    blocks = fenced_after(MODULE_MARKER, "python")
    assert len(blocks) >= 5, f"expected the tutorial's 5 code steps as marked python blocks, found {len(blocks)}"
    return "\n\n".join(blocks)


def command_after(marker: str, page: Path = TUTORIAL) -> list[str]:
    """The one command line of the bash block after ``marker``, split as a shell would."""
    (block,) = fenced_after(marker, "bash", page)
    (line,) = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    return shlex.split(line)


def certify_command() -> list[str]:
    argv = command_after(CERTIFY_MARKER)
    assert argv[0] == CONSOLE_SCRIPT, argv
    # The console script and ``python -m fd_conformance.cli`` are one entry point; the module form
    # runs THIS checkout's kit whatever is installed on PATH.
    return [sys.executable, "-m", "fd_conformance.cli", *argv[1:]]


def certify(directory: Path, source: str) -> dict[str, Any]:
    """Write ``tiny_lm.py`` into ``directory`` and run the tutorial's command there, on CPU."""
    directory.mkdir()
    (directory / "tiny_lm.py").write_text(source)
    env = {
        **os.environ,
        "FD_CONFORMANCE_GPU": "0",  # CPU rows (host-emulated graphs) on any machine
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    return run_in(directory, certify_command(), env)


def run_in(directory: Path, cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run a certify command in ``directory``; its process, its one row and its output's tail."""
    proc = subprocess.run(cmd, cwd=directory, env=env, capture_output=True, text=True, timeout=600)
    report = directory / "fd-conformance-report" / "conformance.json"  # run's default --out
    assert report.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = json.loads(report.read_text())["cases"]
    return {"proc": proc, "row": row, "log": proc.stdout[-3000:] + proc.stderr[-3000:]}


def test_tutorial_uses_only_the_public_kit() -> None:
    source = tutorial_module()
    assert "fd_reference_models" not in source, "the tutorial must build on fd_conformance.engine, not the reference zoo"
    assert "from fd_conformance.engine import" in source
    compile(source, "tiny_lm.py", "exec")


def test_tutorial_model_is_certified(tmp_path: Path) -> None:
    result = certify(tmp_path / "good", tutorial_module())
    row = result["row"]
    assert result["proc"].returncode == 0, result["log"]
    assert row["name"] == "tiny-lm" and row["verdict"] == "certified", (row, result["log"])
    assert row["observed_findings"] == [], row
    assert "fd-conformance: PASS" in result["proc"].stdout, result["log"]


def test_tutorial_model_without_its_clear_method_is_not_certified(tmp_path: Path) -> None:
    broken, removed = CLEAR_METHOD.subn("\n", tutorial_module())
    assert removed == 1, "the tutorial's wrapper no longer has the clear method this test deletes"
    result = certify(tmp_path / "broken", broken)
    row = result["row"]
    assert result["proc"].returncode == 1, result["log"]
    assert row["verdict"] != "certified", row
    assert "FDC001" in row["observed_findings"], (row, result["log"])


RUNNER_WITH_DRAFT = "WeightCycleRunner(runtime, self.wrapper, self.draft)"


def test_tutorial_runner_that_never_hears_of_the_draft_is_not_certified(tmp_path: Path) -> None:
    """The draft is the tutorial's point: a runner given only the main model leaves the draft's
    graphs alive across the weight release, and the row must say so, naming the runner."""
    source = tutorial_module()
    assert source.count(RUNNER_WITH_DRAFT) == 1, "the tutorial's subject no longer hands the runner its draft"
    result = certify(tmp_path / "forgets-draft", source.replace(RUNNER_WITH_DRAFT, "WeightCycleRunner(runtime, self.wrapper)"))
    row = result["row"]
    assert result["proc"].returncode == 1 and row["verdict"] == "violations", result["log"]
    assert {"FDC201", "FDC203"} <= set(row["observed_findings"]), (row["observed_findings"], result["log"])


# --- the native section: the author's model file and the glue, certified as written ---------------

NATIVE_FILES = ("plain_lm.py", "plain_lm_cases.py")
NATIVE_CERTIFY_MARKER = "<!-- run: certify-native -->"
TESTS_DIR = Path(__file__).resolve().parent  # native_double.py: the CPU stand-in for torch.cuda.CUDAGraph
CLEAR_IN_ORDER = (
    "        self.model.clear_graph_opt_backend()  # graphs first,\n"
    "        for param in self.model.parameters():\n"
    "            param.untyped_storage().resize_(0)  # then the weights they read\n"
)
CLEAR_WEIGHTS_FIRST = (
    "        for param in self.model.parameters():\n"
    "            param.untyped_storage().resize_(0)\n"
    "        self.model.clear_graph_opt_backend()\n"
)


def native_files() -> dict[str, str]:
    files = {}
    for name in NATIVE_FILES:
        (block,) = fenced_after(f"<!-- file: {name} -->", "python", NATIVE_TUTORIAL)
        files[name] = block
    return files


def certify_native(directory: Path, files: dict[str, str], on_gpu: bool, double: bool = True) -> dict[str, Any]:
    """Write the two files into ``directory`` and run the section's command there: on a GPU as
    written, else through the CPU double of the graph class (``-p native_double``, in-process)
    unless ``double`` is off (the command as a reader without a GPU would run it)."""
    directory.mkdir()
    for name, source in files.items():
        (directory / name).write_text(source)
    argv = command_after(NATIVE_CERTIFY_MARKER, NATIVE_TUTORIAL)
    assert argv[0] == "PYTHONPATH=." and argv[1] == CONSOLE_SCRIPT, argv  # the glue imports plain_lm from there
    cmd = [sys.executable, "-m", "fd_conformance.cli", *argv[2:]]
    path = [str(directory), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ}
    if not on_gpu:
        env["FD_CONFORMANCE_GPU"] = "0"
    if not on_gpu and double:
        cmd += ["--", "-p", "native_double", "--fd-isolate=off"]  # the double patches its own process
        path.insert(1, str(TESTS_DIR))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, path))
    return run_in(directory, cmd, env)


def weights_freed_first(files: dict[str, str]) -> dict[str, str]:
    model = files["plain_lm.py"]
    assert model.count(CLEAR_IN_ORDER) == 1, "the native model's clear_parameters no longer reads as this test swaps it"
    return {**files, "plain_lm.py": model.replace(CLEAR_IN_ORDER, CLEAR_WEIGHTS_FIRST)}


def test_native_model_file_imports_nothing_from_the_kit() -> None:
    files = native_files()
    assert "fd_conformance" not in files["plain_lm.py"], "the native section's point: the model file is the author's alone"
    assert 'graphs="native"' in files["plain_lm_cases.py"]
    for name, source in files.items():
        compile(source, name, "exec")


@pytest.mark.parametrize("on_gpu", [pytest.param(False, id="cpu-double"), pytest.param(True, id="cuda", marks=pytest.mark.gpu)])
def test_native_tutorial_model_is_certified_and_its_misordered_clear_is_not(tmp_path: Path, on_gpu: bool) -> None:
    files = native_files()
    good = certify_native(tmp_path / "good", files, on_gpu)
    row = good["row"]
    assert good["proc"].returncode == 0, good["log"]
    assert (row["name"], row["verdict"], row["observed_findings"]) == ("plain-lm", "certified", []), (row, good["log"])
    assert row["graphs"] == ("real" if on_gpu else "host-emulated"), row
    bad = certify_native(tmp_path / "weights-first", weights_freed_first(files), on_gpu)
    row = bad["row"]
    assert bad["proc"].returncode == 1 and row["verdict"] == "violations", bad["log"]
    assert row["observed_findings"] == ["FDC201"], (row, bad["log"])
    # where the tutorial says it shows: the graphs alive when the weights go, in both lifecycle checks
    assert [check for check, cell in sorted(row["checks"].items()) if cell["codes"]] == ["teardown_order", "weight_cycle"], row


def test_native_tutorial_without_a_gpu_certifies_nothing_and_says_why(tmp_path: Path) -> None:
    """As the tutorial says: no CUDA graph to observe, every check skips with the reason, exit 4."""
    result = certify_native(tmp_path / "no-gpu", native_files(), on_gpu=False, double=False)
    assert result["proc"].returncode == 4, result["log"]
    assert result["row"]["verdict"] != "certified", result["row"]
    assert "native CUDA graphs need a GPU" in result["proc"].stderr, result["log"]
