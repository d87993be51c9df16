"""What stands in for what a CPU host lacks while FastDeploy imports, and the errors that say when
the lack shows: a compiled op called (:class:`CompiledOpCalled`), a package the checks need after
all (:class:`MissingDependency`, :class:`StandInReached`: exit 6, naming the package).

Apart from :mod:`.checkout`, which decides when a module is stood in and puts the stand-ins in
place: these are the stand-ins themselves, each failing loudly the moment FastDeploy uses one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fd_conformance.errors import EXIT_MISSING_DEPENDENCY, UsageError

if TYPE_CHECKING:
    from fd_conformance.fastdeploy.checkout import Environment

OPS_MODULE = "fastdeploy.model_executor.ops.gpu"
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


class StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
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
