"""Find a FastDeploy tree and import it on a CPU host, with every stand-in named and reversible.

FastDeploy's Python sources import on CPU once three things are handled, and each is a
documented stand-in rather than an edit of FastDeploy's code:

* **compiled ops** -- ``fastdeploy.model_executor.ops.gpu`` loads a CUDA extension built at
  install time. :class:`CompiledOpsShim` takes its place in ``sys.modules``: any name imports as
  a function that raises :class:`CompiledOpCalled` if FastDeploy ever calls it (the bridge only
  runs teardown bodies, which call no kernel), so an op reached by accident is loud, not silent;
* **torch** -- not a FastDeploy dependency; when it is installed FastDeploy's triton glue probes
  for a GPU driver at import and fails on CPU. :func:`import_environment` makes
  ``importlib.metadata.distribution("torch")`` report it absent while FastDeploy imports;
* **PyPI packages** that ``fastdeploy/__init__.py`` drags in (the ``[fastdeploy]`` extra): a
  missing one is :class:`MissingDependency`, one line naming the package and the install command,
  exit code :data:`EXIT_MISSING_DEPENDENCY`.

* **logs** -- FastDeploy's loggers write ``./log/`` under the caller's directory at import
  (``FD_LOG_DIR``, default ``log``): unless the user set it, the environment points it at a
  temporary directory removed on exit, so certifying a tree leaves nothing in the user's cwd.

A second tree in the same process needs a clean slate: the environment removes every
``fastdeploy`` module on entry and on exit (tests import several fixture trees in turn).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fd_conformance.errors import EXIT_MISSING_DEPENDENCY, UsageError

OPS_MODULE = "fastdeploy.model_executor.ops.gpu"
HIDDEN_DISTRIBUTIONS = frozenset({"torch"})
INSTALL_FIX = 'pip install "fd-conformance[fastdeploy]"'
# Import name (or dotted prefix, longest wins) -> PyPI name where they differ (the rest install
# under their import name).
PYPI_NAMES = {
    "zmq": "pyzmq",
    "aistudio_sdk": "aistudio-sdk",
    "prometheus_client": "prometheus-client",
    "opentelemetry": "opentelemetry-api opentelemetry-sdk",
    "opentelemetry.exporter": "opentelemetry-exporter-otlp",
    "opentelemetry.instrumentation": "opentelemetry-instrumentation",
    "paddle": "paddlepaddle",
    "yaml": "pyyaml",
    "google": "protobuf",
}


class MissingDependency(UsageError):
    """A package FastDeploy imports is not installed here; the fix names what to install."""

    exit_code = EXIT_MISSING_DEPENDENCY


class CompiledOpCalled(RuntimeError):
    """FastDeploy called a compiled op through the shim: the bridge cannot run that code on CPU."""


@dataclass(frozen=True)
class Checkout:
    """A FastDeploy source tree: ``root`` holds the ``fastdeploy/`` package."""

    root: Path

    @property
    def package(self) -> Path:
        return self.root / "fastdeploy"

    def __str__(self) -> str:
        return str(self.root)


def locate(path: str | Path | None) -> Checkout:
    """The checkout at ``path`` (its root or its ``fastdeploy/`` directory), or the installed
    fastdeploy when ``path`` is None. Errors name what is missing and how to point at a tree."""
    fix = "pass the root of a FastDeploy clone (the directory that holds fastdeploy/__init__.py)"
    if path is None:
        import importlib.util

        spec = importlib.util.find_spec("fastdeploy")
        if spec is None or not spec.submodule_search_locations:
            raise UsageError("no FastDeploy checkout given and no fastdeploy package is installed", fix)
        return Checkout(Path(next(iter(spec.submodule_search_locations))).resolve().parent)
    given = Path(path).expanduser()
    if not given.exists():
        raise UsageError(f"FastDeploy checkout {str(given)!r} does not exist", fix)
    if not given.is_dir():
        raise UsageError(f"FastDeploy checkout {str(given)!r} is not a directory", fix)
    root = given.resolve()
    if root.name == "fastdeploy" and (root / "__init__.py").is_file():
        root = root.parent
    if not (root / "fastdeploy" / "__init__.py").is_file():
        hint = (
            " (a bare git directory: export a commit with `git archive COMMIT fastdeploy | tar -x -C DIR`)"
            if (root / "HEAD").is_file() and (root / "objects").is_dir()
            else ""
        )
        raise UsageError(f"{str(given)!r} holds no fastdeploy/__init__.py{hint}", fix)
    return Checkout(root)


class CompiledOpsShim(types.ModuleType):
    """Stands in for FastDeploy's compiled CUDA ops module: every name is a function that raises
    :class:`CompiledOpCalled` when called. ``calls`` lists the names FastDeploy imported."""

    def __init__(self, name: str = OPS_MODULE) -> None:
        super().__init__(name, "fd-conformance import shim for FastDeploy's compiled ops (no CUDA here)")
        self.__path__: list[str] = []  # a package: `from ...ops.gpu.sub import x` resolves through it
        self.imported: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("__"):
            raise AttributeError(name)
        self.imported.append(name)

        def compiled_op(*_args: Any, **_kwargs: Any) -> Any:
            raise CompiledOpCalled(f"FastDeploy called compiled op {name}() through fd-conformance's import shim")

        compiled_op.__name__ = compiled_op.__qualname__ = name
        setattr(self, name, compiled_op)
        return compiled_op


def _purge_fastdeploy() -> None:
    for name in [n for n in sys.modules if n == "fastdeploy" or n.startswith("fastdeploy.")]:
        del sys.modules[name]


def _hide_distributions(real: Callable[[str], Any]) -> Callable[[str], Any]:
    def distribution(name: str) -> Any:
        if name in HIDDEN_DISTRIBUTIONS:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    return distribution


LOG_DIR_ENV = "FD_LOG_DIR"  # FastDeploy's log directory (fastdeploy/envs.py), "log" under the cwd by default


@contextmanager
def import_environment(checkout: Checkout) -> Iterator[CompiledOpsShim]:
    """``checkout`` importable as ``fastdeploy`` (first on sys.path), compiled ops shimmed,
    torch hidden from distribution lookups; everything undone on exit."""
    _purge_fastdeploy()
    shim = CompiledOpsShim()
    sys.modules[OPS_MODULE] = shim
    sys.path.insert(0, str(checkout.root))
    real = importlib.metadata.distribution
    importlib.metadata.distribution = _hide_distributions(real)  # type: ignore[assignment]
    logs = None if LOG_DIR_ENV in os.environ else tempfile.mkdtemp(prefix="fd-conformance-fastdeploy-log-")
    if logs is not None:
        os.environ[LOG_DIR_ENV] = logs
    try:
        yield shim
    finally:
        if logs is not None:
            os.environ.pop(LOG_DIR_ENV, None)
            shutil.rmtree(logs, ignore_errors=True)
        importlib.metadata.distribution = real
        try:
            sys.path.remove(str(checkout.root))
        except ValueError:  # pragma: no cover - FastDeploy rewrote sys.path itself
            pass
        _purge_fastdeploy()


def import_module(name: str, checkout: Checkout) -> types.ModuleType:
    """Import ``name`` from the checkout; a missing third-party package becomes
    :class:`MissingDependency` (one line: which package, how to install it)."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        dotted = err.name or ""
        missing = dotted.split(".")[0]
        if not missing or missing == "fastdeploy":
            raise UsageError(
                f"{checkout} has no module {err.name or name!r} (FastDeploy too old or too new for the bridge?)",
                "point at a FastDeploy 2.x checkout",
            ) from err
        prefixes = [".".join(dotted.split(".")[:n]) for n in range(dotted.count(".") + 1, 0, -1)]
        package = next((PYPI_NAMES[p] for p in prefixes if p in PYPI_NAMES), missing)
        raise MissingDependency(
            f"importing {name} from {checkout} needs the Python package {package!r} (module {dotted!r}), which is not installed",
            f"{INSTALL_FIX} (or `pip install {package}`)",
        ) from err
    origin = Path(getattr(module, "__file__", "") or "")
    if name.split(".")[0] == "fastdeploy" and checkout.root not in origin.resolve().parents:
        raise UsageError(
            f"{name} was imported from {origin}, not from the checkout {checkout}",
            "uninstall the other fastdeploy or run from a clean interpreter",
        )
    return module
