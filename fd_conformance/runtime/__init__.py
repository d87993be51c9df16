"""Runtime adapters. ``get_runtime()`` picks one by name or auto-detects; frameworks load lazily."""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections.abc import Iterable

from fd_conformance.errors import UsageError
from fd_conformance.frameworks import BY_NAME, FRAMEWORKS
from fd_conformance.runtime.base import RUNTIME_DEVICES, Runtime, announce_runtime


def installed_runtimes() -> list[str]:
    """Frameworks importable here, without importing them."""
    return [name for name in FRAMEWORKS if importlib.util.find_spec(name) is not None]


def get_runtime(name: str = "auto", device: str = "auto") -> Runtime:
    """Build the adapter for ``name`` ("torch", "paddle", "auto") on ``device``.

    ``device="auto"`` means CUDA when the framework sees a GPU, else CPU with host-emulated
    graphs (a test double for the kit's own CI, reported as such).
    """
    if device not in RUNTIME_DEVICES:
        raise UsageError(f"unknown device {device!r}", f"use one of {', '.join(RUNTIME_DEVICES)}")
    if name == "auto":
        available = installed_runtimes()
        if not available:
            raise UsageError(
                "no runtime installed (neither torch nor paddle can be imported)",
                "pip install 'fd-conformance[torch]' or 'fd-conformance[paddle]'",
            )
        name = available[0]
    if name not in BY_NAME:
        raise UsageError(f"unknown runtime {name!r}", f"use one of {', '.join(FRAMEWORKS)} or auto")
    if importlib.util.find_spec(name) is None:
        raise UsageError(f"runtime {name!r} is not installed", f"pip install 'fd-conformance[{name}]'")
    module = importlib.import_module(BY_NAME[name].adapter)
    runtime: Runtime = module.create(device)
    announce_runtime(runtime.events)  # e.g. an isolation worker streams them; nobody subscribed elsewhere
    return runtime


def import_in_background(frameworks: Iterable[str]) -> None:
    """Import these frameworks' adapters (so the frameworks) on a daemon thread, and return;
    only those that may be imported off the checks' thread (``Framework.imports_off_main_thread``).

    An isolation worker starts it once it knows that its cases build models: torch's import
    (2.7-3.5 s in a fresh interpreter on a GPU host) then runs while its parent collects and the
    framework-free checks run, not inside the first model check. A framework that fails to import
    is left to the check that needs it: the module whose import failed is not left in
    ``sys.modules``, so that check's own import runs it again and raises where it always did.
    """
    wanted = set(frameworks)
    adapters = [
        BY_NAME[name].adapter for name in installed_runtimes() if name in wanted and BY_NAME[name].imports_off_main_thread
    ]
    if adapters:
        threading.Thread(target=_import_quietly, args=(adapters,), name="fd-conformance-import", daemon=True).start()


def _import_quietly(modules: list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - raised again, where it counts, by the check's own import
            return
