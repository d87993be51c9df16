"""The bench scripts' one quick-mode convention: ``python bench/SCRIPT.py --quick``.

A benchmark that nobody runs rots: a field it reads goes away, a file it parses gains a new kind
of line, and the breakage shows only on the day someone needs the figure. So every script takes
``--quick``: the smallest run that still goes through each of its code paths, on a CPU, in
seconds, with no other argument. Its figures mean nothing. tests/test_bench.py runs every script
this way as a real subprocess in the kit's own test run. A script that cannot measure anything on
this host (it needs GPUs) says so in one line starting ``needs`` and exits 2.

Imported as a sibling module: ``python bench/x.py`` puts bench/ first on sys.path.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICK_HELP = (
    "the smallest run through every code path of this script, on a CPU in seconds, no other argument needed "
    "(tests/test_bench.py runs it so the script cannot rot); its figures mean nothing"
)
QUICK_CASE = "torch-glm4-moe"  # a bundled reference case every quick suite session narrows to
BRIDGE_FIXTURE = ROOT / "tests" / "fixtures" / "fastdeploy_bridge"
RUNNER = "fastdeploy/worker/gpu_model_runner.py"


def add_quick(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)


def quick_selection(device: str = "cpu") -> list[str]:
    """pytest arguments narrowing a suite session to one case's config check: a whole session
    (plan, results, reports; its other checks deselected) that builds no model, so it costs
    little more than the interpreter and pytest's start."""
    return ["-k", f"{QUICK_CASE}-{device} and config"]


# The FastDeploy-shaped fixture tree as a git history, one commit per state (oldest first): the
# runner variant that replaces gpu_model_runner.py (None: the clean base) and a note.
FIXTURE_HISTORY = (
    ("runner_release_first.py", "fixture: draft graphs cleared after the weight release"),
    ("runner_nested_guard.py", "fixture: draft clear nested under the main flag"),
    (None, "fixture: the clean base"),
)


def fixture_repository(dest: Path) -> Path:
    """A git repository at ``dest`` whose commits are FIXTURE_HISTORY's states of the fixture tree
    (tests/fixtures/fastdeploy_bridge): what the FastDeploy benches read in quick mode instead of
    a FastDeploy clone. Returns ``dest``; its revisions are HEAD~2, HEAD~1 and HEAD."""
    shutil.copytree(BRIDGE_FIXTURE / "base", dest)
    git = ["git", "-C", str(dest), "-c", "user.name=fd-conformance bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    base_runner = (dest / RUNNER).read_text(encoding="utf-8")
    for variant, note in FIXTURE_HISTORY:
        text = (BRIDGE_FIXTURE / "variants" / variant).read_text(encoding="utf-8") if variant else base_runner
        (dest / RUNNER).write_text(text, encoding="utf-8")
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", note], check=True)
    return dest


def fixture_revisions() -> list[tuple[str, str]]:
    """(revision, note) of each FIXTURE_HISTORY state in :func:`fixture_repository`, oldest first."""
    last = len(FIXTURE_HISTORY) - 1
    return [(f"HEAD~{last - i}" if i < last else "HEAD", note) for i, (_, note) in enumerate(FIXTURE_HISTORY)]
