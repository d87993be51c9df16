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
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fd_conformance.errors import EXIT_MISSING_DEPENDENCY, UsageError

OPS_MODULE = "fastdeploy.model_executor.ops.gpu"
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


class StandInReached(MissingDependency):
    """FastDeploy used a module the bridge stood in for: the checks need that package after all."""

    def __init__(self, module: str, what: str, imported_by: str) -> None:
        package = pypi_name(module)
        where = f", imported by {imported_by}" if imported_by else ""
        super().__init__(
            f"FastDeploy used {what} from {module!r}{where}, which is not installed (fd-conformance stood in for it "
            f"because only an import needed it); the checks need the Python package {package!r}",
            f"pip install {package}",
        )
        self.module = module
        self.what = what


def pypi_name(dotted: str) -> str:
    """The PyPI package that provides module ``dotted`` (longest known prefix wins)."""
    prefixes = [".".join(dotted.split(".")[:n]) for n in range(dotted.count(".") + 1, 0, -1)]
    return next((PYPI_NAMES[p] for p in prefixes if p in PYPI_NAMES), dotted.split(".")[0])


@dataclass
class StandInRecord:
    """One module the bridge stood in for: why (the FastDeploy line whose import needed it) and
    what FastDeploy reached on it at run time (empty when the checks never used it)."""

    module: str
    imported_by: str
    reached: list[str] = field(default_factory=list)

    @property
    def package(self) -> str:
        return pypi_name(self.module)

    def describe(self) -> str:
        used = f"; REACHED: {', '.join(self.reached)}" if self.reached else ""
        return f"{self.module} (pip: {self.package}) for {self.imported_by or 'an import'}{used}"


class StandIn:
    """A name looked up on a stood-in module. While FastDeploy imports, attribute lookups and
    calls (decorators, module-level ``set_bridge(...)``) give more stand-ins; every other use,
    and any call once the import is over, raises :class:`StandInReached` naming the module."""

    __slots__ = ("_fdc_path", "_fdc_record", "_fdc_env")
    _fdc_path: str
    _fdc_record: StandInRecord
    _fdc_env: Environment

    def __init__(self, path: str, record: StandInRecord, env: Environment) -> None:
        object.__setattr__(self, "_fdc_path", path)
        object.__setattr__(self, "_fdc_record", record)
        object.__setattr__(self, "_fdc_env", env)

    def _fdc_reach(self, what: str) -> StandInReached:
        record: StandInRecord = self._fdc_record
        record.reached.append(what)
        return StandInReached(record.module, what, record.imported_by)

    def __getattr__(self, name: str) -> StandIn:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(f"{self._fdc_path}.{name}", self._fdc_record, self._fdc_env)

    def __setattr__(self, name: str, value: Any) -> None:
        raise self._fdc_reach(f"{self._fdc_path}.{name} = ...")

    def __call__(self, *args: Any, **kwargs: Any) -> StandIn:
        if self._fdc_env.importing:
            return StandIn(f"{self._fdc_path}(...)", self._fdc_record, self._fdc_env)
        raise self._fdc_reach(f"{self._fdc_path}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        """``class X(standin.Base)``: a base that raises when an instance is made."""
        path, reach = self._fdc_path, self._fdc_reach

        def __init__(_self: Any, *args: Any, **kwargs: Any) -> None:
            raise reach(f"{path}() (a subclass instantiated)")

        return (type(path.rsplit(".", 1)[-1], (), {"__init__": __init__, "__module__": self._fdc_record.module}),)

    def __repr__(self) -> str:
        return f"<fd-conformance stand-in {self._fdc_path}>"

    def __bool__(self) -> bool:
        raise self._fdc_reach(f"bool({self._fdc_path})")

    def __iter__(self) -> Iterator[Any]:
        raise self._fdc_reach(f"iter({self._fdc_path})")

    def __len__(self) -> int:
        raise self._fdc_reach(f"len({self._fdc_path})")

    def __getitem__(self, key: Any) -> Any:
        raise self._fdc_reach(f"{self._fdc_path}[...]")

    def __enter__(self) -> Any:
        raise self._fdc_reach(f"with {self._fdc_path}")

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ raised already
        return None

    def __index__(self) -> int:
        raise self._fdc_reach(f"{self._fdc_path} as a number")

    __int__ = __float__ = __index__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __lt__(self, other: object) -> bool:
        raise self._fdc_reach(f"{self._fdc_path} compared")

    __le__ = __gt__ = __ge__ = __lt__


class MissingModuleStandIn(types.ModuleType):
    """Stands in for a module FastDeploy imports that is not installed here; every name on it is
    a :class:`StandIn`. A package: its submodules are stood in too (``import moviepy.editor``)."""

    def __init__(self, name: str, record: StandInRecord, env: Environment) -> None:
        super().__init__(name, f"fd-conformance stand-in for the missing module {record.module!r}")
        self.__path__: list[str] = []
        self.__fdc_record__ = record
        self.__fdc_env__ = env

    def __getattr__(self, name: str) -> StandIn:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return StandIn(f"{self.__name__}.{name}", self.__fdc_record__, self.__fdc_env__)


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on sys.meta_path: resolves the stood-in modules and their submodules only."""

    def __init__(self, env: Environment) -> None:
        self.env = env

    def find_spec(self, fullname: str, path: Sequence[str] | None = None, target: Any = None) -> Any:
        if self.env.record_for(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        record = self.env.record_for(spec.name)
        assert record is not None
        return MissingModuleStandIn(spec.name, record, self.env)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


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
    finder = _StandInFinder(env)
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
