"""Without torch installed, every test file that needs it skips cleanly: collection has no error.

torch is made unimportable in a fresh interpreter (``sys.modules["torch"] = None`` makes ``import
torch`` raise ImportError, as on a paddle-only host); a file importing it unconditionally would be
a collection error there instead of a skip.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
BLOCKED = (
    "import sys; sys.modules['torch'] = None; import pytest; "
    "sys.exit(pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))"
)


def collect_without_torch(*paths: Path) -> subprocess.CompletedProcess[str]:
    args = [str(p) for p in paths]
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True, text=True, cwd=TESTS.parent, timeout=600)


def test_no_test_file_fails_to_collect_without_torch() -> None:
    done = collect_without_torch(TESTS)
    out = done.stdout + done.stderr
    assert "ERROR collecting" not in out and "error" not in out.splitlines()[-1], out[-3000:]


def test_the_probe_sees_an_unconditional_torch_import(tmp_path: Path) -> None:
    bad = tmp_path / "test_needs_torch.py"
    bad.write_text("import torch\n\ndef test_x():\n    assert torch\n")
    out = collect_without_torch(bad).stdout
    assert "ERROR collecting" in out
