"""Importing a part of the kit (or of the reference zoo) loads no framework or machinery it does
not need: one table, one fresh interpreter per row (in this process something else may have
imported the module first).

Why it matters: the core install pulls in no deep-learning framework, every pytest session loads
the plugin, `--help` must be instant, and the runner mutants and the Paddle case list must load on
a host with one framework or none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Isolation:
    """``run`` in a fresh interpreter leaves every module of ``absent`` unimported; ``then`` (an
    expression) holds afterwards, when the row also checks what the import gave."""

    name: str
    run: str
    absent: tuple[str, ...]
    then: str = ""


ROWS = [
    Isolation(  # from tests/test_config_rules.py
        "config-rules-and-protocol",
        "import fd_conformance.config_rules, fd_conformance.protocol",
        ("fd_reference_models", "hypothesis", "torch", "paddle"),
    ),
    Isolation(  # from tests/test_engine.py: nothing runtime-specific above fd_conformance/runtime/
        "engine",
        "import fd_conformance.engine, fd_conformance.engine.runner",
        ("torch", "paddle"),
    ),
    Isolation(  # from tests/test_fastdeploy_bridge.py
        "cli-help",
        "from fd_conformance.cli import build_parser; build_parser()",
        ("paddle", "torch", "fastdeploy", "hypothesis", "fd_conformance.fastdeploy.checkout"),
    ),
    Isolation(  # from tests/test_plugin.py
        "plugin-cases-report",
        "import fd_conformance.plugin, fd_conformance.cases, fd_conformance.report, fd_conformance.plugin.gpus",
        ("torch", "paddle", "numpy", "hypothesis"),
    ),
    Isolation(  # from tests/test_plugin.py
        "plugin-auto-runtime",
        "import fd_conformance.plugin as p; p.options.validate_runtime('auto')",
        ("fd_conformance.runtime", "fd_conformance.isolation.watchdog", "multiprocessing"),
    ),
    Isolation(  # from tests/test_mutants.py: runner mutants prove the Paddle adapter on the same defects
        "runner-mutants",
        "import fd_reference_models.runner_mutants as m",
        ("torch", "paddle", "transformers"),
        then="'DraftClearedAfterReleaseRunner' in dir(m)",
    ),
    Isolation(  # from tests/test_reference_models_paddle.py: the factories import paddle when a case is built
        "paddle-case-listing",
        "from fd_reference_models.cases import paddle_cases; cases = paddle_cases()",
        ("paddle",),
        then="('paddle-glm4-moe-mtp', 'fd_reference_models.cases', 'paddle_glm4_moe_mtp') in "
        "{(c.name, c.factory.__module__, c.factory.__name__) for c in cases}",
    ),
]


def _script(row: Isolation) -> str:
    check = f"assert {row.then}, {row.then!r}\n" if row.then else ""
    return (
        f"import sys\n{row.run}\n"
        f"loaded = sorted(m for m in {row.absent!r} if m in sys.modules)\n"
        "assert not loaded, f'loaded {loaded}'\n" + check
    )


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row.name)
def test_import_loads_nothing_it_does_not_need(row: Isolation) -> None:
    # The checkout under test, and the reference zoo beside it, whatever is installed.
    path = os.pathsep.join(filter(None, [str(REPO), str(REPO / "models"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-c", _script(row)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_loaded_module_fails_its_row() -> None:
    """The check can fail: a row whose own statement imports a module it forbids."""
    row = Isolation("self-contradiction", "import json", ("json",))
    done = subprocess.run([sys.executable, "-c", _script(row)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "loaded ['json']" in done.stderr
