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
* **PyPI packages** that ``fastdeploy/__init__.py`` drags in (the ``[fastdeploy]`` extra,
  :data:`REQUIRED_MODULES`): a missing one means the documented install was not done, so it is
  :class:`MissingDependency`, one line naming the package and the install command, exit code
  :data:`EXIT_MISSING_DEPENDENCY`;
* **every other import that fails** (``decord`` and ``moviepy`` pulled by the video readers the
  runner's imports reach, exporters of optional telemetry, GPU-only Paddle submodules): a branch
  imports far more than the teardown bodies ever run, and which packages differs per branch. An
  import that would abort FastDeploy's import becomes a :class:`MissingModuleStandIn`, listed
  (:attr:`Environment.stand_ins`) with the FastDeploy line that imported it. Only imports that
  would have aborted are stood in: FastDeploy's own ``try: import x / except ImportError``
  fallbacks still see the package missing. Using a stand-in for real -- calling what it holds
  once the import is over, testing its truth, iterating, comparing -- raises
  :class:`StandInReached`, a :class:`MissingDependency` naming the package (exit 6): then the
  checks need it and it must be installed.

* **logs** -- FastDeploy's loggers write ``./log/`` under the caller's directory at import
  (``FD_LOG_DIR``, default ``log``): unless the user set it, the environment points it at a
  temporary directory removed on exit, so certifying a tree leaves nothing in the user's cwd.

A second tree in the same process needs a clean slate: the environment removes every
``fastdeploy`` module on entry and on exit (tests import several fixture trees in turn).

This module finds the tree and puts the stand-ins in place; the stand-ins themselves, and the
errors they raise, are :mod:`.stand_ins`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fd_conformance.errors import EXIT_MISSING_DEPENDENCY, UsageError  # noqa: F401 - the first re-exported: tests read it here
from fd_conformance.fastdeploy.stand_ins import (  # noqa: F401 - CompiledOpCalled, MissingModuleStandIn, StandInReached re-exported: tests read them here
    OPS_MODULE,
    CompiledOpCalled,
    CompiledOpsShim,
    MissingDependency,
    MissingModuleStandIn,
    StandInFinder,
    StandInReached,
    StandInRecord,
    pypi_name,
)

HIDDEN_DISTRIBUTIONS = frozenset({"torch"})
INSTALL_FIX = 'pip install "fd-conformance[fastdeploy]"'
#: Import names of the ``[fastdeploy]`` extra's packages (pyproject.toml): the documented install.
#: One of these missing entirely is exit 6; a missing submodule of an installed one (a GPU-only
#: Paddle module, an OpenTelemetry exporter) is stood in like any other import.
REQUIRED_MODULES = frozenset(
    {
        "paddle",
        "paddleformers",
        "requests",
        "fastapi",
        "uvicorn",
        "aiohttp",
        "msgspec",
        "redis",
        "crcmod",
        "opentelemetry",
        "zmq",
        "prometheus_client",
        "partial_json_parser",
        "openai",
        "aistudio_sdk",
        "triton",
        "pynvml",
    }
)
#: More stand-ins than this for one import means something is wrong with the tree, not a package.
MAX_STAND_INS = 64


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


@dataclass
class Environment:
    """What :func:`import_environment` put in place: the compiled-ops shim, the modules stood in
    (in the order FastDeploy needed them) and whether an import is running now."""

    checkout: Checkout
    ops: CompiledOpsShim
    stand_ins: list[StandInRecord] = field(default_factory=list)
    importing: int = 0

    def record_for(self, name: str) -> StandInRecord | None:
        return next((r for r in self.stand_ins if name == r.module or name.startswith(r.module + ".")), None)

    def stand_in(self, module: str, imported_by: str) -> StandInRecord:
        record = StandInRecord(module, imported_by)
        self.stand_ins.append(record)
        return record

    def where(self, err: BaseException) -> str:
        """The checkout's innermost line in ``err``'s traceback (``fastdeploy/x.py:12``)."""
        found = ""
        for frame in traceback_frames(err):
            path = Path(frame.filename)
            if self.checkout.root in path.parents:
                found = f"{path.relative_to(self.checkout.root)}:{frame.lineno}"
        return found

    def reached(self) -> list[StandInRecord]:
        return [r for r in self.stand_ins if r.reached]


def traceback_frames(err: BaseException) -> list[Any]:
    import traceback

    return list(traceback.extract_tb(err.__traceback__)) if err.__traceback__ else []


_ACTIVE: list[Environment] = []  # the environment in force (one at a time; a list so tests can nest safely)


def active_environment() -> Environment | None:
    return _ACTIVE[-1] if _ACTIVE else None


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
def import_environment(checkout: Checkout) -> Iterator[Environment]:
    """``checkout`` importable as ``fastdeploy`` (first on sys.path), compiled ops shimmed,
    missing imports stood in by :func:`import_module`, torch hidden from distribution lookups;
    everything undone on exit."""
    _purge_fastdeploy()
    shim = CompiledOpsShim()
    env = Environment(checkout, shim)
    finder = StandInFinder(env)
    sys.meta_path.append(finder)
    _ACTIVE.append(env)
    sys.modules[OPS_MODULE] = shim
    sys.path.insert(0, str(checkout.root))
    real = importlib.metadata.distribution
    importlib.metadata.distribution = _hide_distributions(real)  # type: ignore[assignment]
    logs = None if LOG_DIR_ENV in os.environ else tempfile.mkdtemp(prefix="fd-conformance-fastdeploy-log-")
    if logs is not None:
        os.environ[LOG_DIR_ENV] = logs
    try:
        yield env
    finally:
        _ACTIVE.remove(env)
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if env.record_for(n) is not None]:
            del sys.modules[name]
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
    """Import ``name`` from the checkout. Inside :func:`import_environment` an import that fails
    on a module outside :data:`REQUIRED_MODULES` is retried with that module stood in; a missing
    required package becomes :class:`MissingDependency` (one line: which package, how to install)."""
    env = active_environment()
    for _ in range(MAX_STAND_INS):
        try:
            if env is None:
                module = importlib.import_module(name)
            else:
                env.importing += 1
                try:
                    module = importlib.import_module(name)
                finally:
                    env.importing -= 1
            break
        except ModuleNotFoundError as err:
            dotted = err.name or ""
            top = dotted.split(".")[0]
            if not top or top == "fastdeploy":
                raise UsageError(
                    f"{checkout} has no module {err.name or name!r} (FastDeploy too old or too new for the bridge?)",
                    "point at a FastDeploy 2.x checkout",
                ) from err
            required = top in REQUIRED_MODULES and importlib.util.find_spec(top) is None
            if env is None or required or env.record_for(dotted) is not None:
                package = pypi_name(dotted)
                raise MissingDependency(
                    f"importing {name} from {checkout} needs the Python package {package!r} (module {dotted!r}), which is not installed",
                    f"{INSTALL_FIX} (or `pip install {package}`)",
                ) from err
            env.stand_in(dotted, env.where(err))
    else:
        raise UsageError(
            f"importing {name} from {checkout} still fails after {MAX_STAND_INS} stand-ins for missing modules",
            "install the packages listed with `pip install` and try again",
        )
    origin = Path(getattr(module, "__file__", "") or "")
    if name.split(".")[0] == "fastdeploy" and checkout.root not in origin.resolve().parents:
        raise UsageError(
            f"{name} was imported from {origin}, not from the checkout {checkout}",
            "uninstall the other fastdeploy or run from a clean interpreter",
        )
    return module
