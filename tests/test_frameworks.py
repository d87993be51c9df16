"""fd_conformance/frameworks.py is the one list of frameworks: tied here to the adapters that exist."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from fd_conformance.devices import framework_versions
from fd_conformance.frameworks import BY_NAME, FRAMEWORKS, SUPPORTED
from fd_conformance.runtime import get_runtime

KIT = Path(__file__).resolve().parents[1]


def adapters_under(root: Path, package: str) -> dict[str, str]:
    """Adapter module -> the runtime name its Runtime class declares, for every module under
    ``root/package`` with a top-level ``create()`` (what get_runtime calls). Read from the source,
    so no framework is imported."""
    found: dict[str, str] = {}
    for path in sorted((root / package.replace(".", "/")).glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not any(isinstance(node, ast.FunctionDef) and node.name == "create" for node in tree.body):
            continue
        names = [
            statement.value.value
            for node in tree.body
            if isinstance(node, ast.ClassDef)
            for statement in node.body
            if isinstance(statement, ast.Assign)
            and [getattr(t, "id", None) for t in statement.targets] == ["name"]
            and isinstance(statement.value, ast.Constant)
        ]
        found[f"{package}.{path.stem}"] = names[0] if names else ""
    return found


def listed_adapters() -> dict[str, str]:
    return {framework.adapter: framework.name for framework in SUPPORTED}


def test_every_adapter_is_listed_and_every_listed_framework_has_its_adapter() -> None:
    assert adapters_under(KIT, "fd_conformance.runtime") == listed_adapters()


def test_an_adapter_missing_from_the_list_is_caught(tmp_path: Path) -> None:
    runtime = tmp_path / "fd_conformance" / "runtime"
    runtime.mkdir(parents=True)
    for framework in SUPPORTED:
        source = f'class R:\n    name = "{framework.name}"\n\n\ndef create(device):\n    return R()\n'
        (runtime / f"{framework.adapter.rpartition('.')[2]}.py").write_text(source)
    assert adapters_under(tmp_path, "fd_conformance.runtime") == listed_adapters()
    (runtime / "jax.py").write_text('class R:\n    name = "jax"\n\n\ndef create(device):\n    return R()\n')
    assert adapters_under(tmp_path, "fd_conformance.runtime") != listed_adapters()


def test_the_list_is_consistent() -> None:
    assert FRAMEWORKS == tuple(BY_NAME) == ("torch", "paddle")  # auto-detection tries torch first
    assert all(framework.distributions for framework in SUPPORTED)


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_each_installed_framework_builds_its_adapter_and_reports_its_version(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed here")
    assert get_runtime(name, "cpu").name == name
    assert framework_versions()[name] is not None  # one of its distributions is installed


# --- importing a framework before the first model check (runtime.import_in_background) ----------
# Whether a framework still works on the main thread after another thread imported it: what
# Framework.imports_off_main_thread must say. Paddle's importing thread keeps dynamic-graph mode and
# leaves every other thread in static mode; torch's grad mode and default dtype are the same on
# every thread.
STILL_USABLE_ON_MAIN = {
    "torch": "import torch; print(torch.is_grad_enabled() and torch.get_default_dtype() is torch.float32 and float(torch.ones(2).sum()) == 2.0)",
    "paddle": "import paddle; print(paddle.in_dynamic_mode())",
}
IMPORT_ON_A_THREAD = "import threading; t = threading.Thread(target=__import__, args=({name!r},)); t.start(); t.join()\n"


@pytest.mark.parametrize("name", FRAMEWORKS)
def test_a_framework_is_imported_off_the_main_thread_only_where_the_main_thread_can_still_use_it(name: str) -> None:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed here")
    code = IMPORT_ON_A_THREAD.format(name=name) + STILL_USABLE_ON_MAIN[name]
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    usable = proc.stdout.strip().splitlines()[-1] == "True"
    assert BY_NAME[name].imports_off_main_thread is usable, f"{name}: main thread usable after a thread imported it: {usable}"


def test_import_in_background_imports_only_what_may_be_imported_off_the_main_thread() -> None:
    code = (
        "import sys, threading\n"
        "from fd_conformance.runtime import import_in_background\n"
        "import_in_background(['torch', 'paddle', 'no-such-framework'])\n"
        "for t in threading.enumerate():\n"
        "    if t.name == 'fd-conformance-import': t.join()\n"
        "print(sorted(m for m in ('torch', 'paddle', 'fd_conformance.runtime.torch') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "['fd_conformance.runtime.torch', 'torch']"
