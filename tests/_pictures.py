"""One session of every bundled mutant and the docs' good twins, traced (scripts/code_pictures.py),
shared by the picture tests and the Mermaid render test (both in the xdist group "lifecycle_pictures",
so one worker runs it once, for the first module that asks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "code_pictures.py"
PICTURES = ROOT / "docs" / "reference" / "pictures"


_RUNS: list[dict[str, Any]] = []  # the one run of this process (both modules share it)


def pictures_session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The pictures the script draws now, and the report of its session ({"pictures", "document",
    "log"}): run once per process, for whichever module asks first."""
    if _RUNS:
        return _RUNS[0]
    tmp = tmp_path_factory.mktemp("code-pictures")
    cmd = [sys.executable, str(SCRIPT), "--out", str(tmp / "pictures"), "--report", str(tmp / "report"), "--all-mutants"]
    env = {**os.environ, "FD_CONFORMANCE_GPU": "0"}
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1200, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    document = json.loads((tmp / "report" / "conformance.json").read_text(encoding="utf-8"))
    _RUNS.append({"pictures": tmp / "pictures", "document": document, "log": done.stdout[-2000:]})
    return _RUNS[0]
