"""The protocol (FDC0xx) on every model class a FastDeploy checkout registers, by class: nothing
is instantiated, so no weights, no GPU.

FastDeploy registers its models from ``fastdeploy/model_executor/models/__init__.py``, which
imports every module and turns the first failure into one ImportError for the whole package.
The bridge does that walk itself instead, module by module: the package is entered without
running its ``__init__`` (a namespace stand-in over the same directory, carrying
``model_base``'s names), each module is imported on its own, and a module that fails is one
row of the table while every other module is still checked. The wrappers are what FastDeploy
registers: classes in ``ModelRegistry`` (the ``register_model_class`` decorator) and
subclasses of ``ModelForCasualLM`` (what ``auto_models_registry`` adds).
"""

from __future__ import annotations

import inspect
import sys
import types
import warnings
from dataclasses import dataclass, field

from fd_conformance.fastdeploy.checkout import Checkout, import_module
from fd_conformance.fastdeploy.stand_ins import MissingDependency
from fd_conformance.findings import Finding
from fd_conformance.protocol import check_protocol

MODELS_PACKAGE = "fastdeploy.model_executor.models"
MODEL_BASE = f"{MODELS_PACKAGE}.model_base"
WRAPPER_BASES = ("ModelForCasualLM", "ModelForCausalLM")


@dataclass
class ModelRow:
    name: str  # registered architecture name, or the class name
    qualname: str  # module.Class
    findings: list[Finding] = field(default_factory=list)

    @property
    def is_error(self) -> bool:
        return any(f.is_error for f in self.findings)


@dataclass
class ModelsReport:
    where: str
    rows: list[ModelRow] = field(default_factory=list)
    import_failures: dict[str, str] = field(default_factory=dict)  # module -> "Error: message"
    modules: int = 0
    error: str | None = None

    @property
    def violations(self) -> int:
        return sum(1 for r in self.rows if r.is_error)


def _module_names(checkout: Checkout) -> list[str]:
    root = checkout.package / "model_executor" / "models"
    names = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "__init__.py" or path.stem == "model_base":
            continue
        names.append(".".join((MODELS_PACKAGE, *path.relative_to(root).with_suffix("").parts)))
    return names


def _enter_package(checkout: Checkout) -> types.ModuleType:
    """The models package without its __init__ (which aborts on the first bad module)."""
    import_module("fastdeploy.model_executor", checkout)
    package = types.ModuleType(MODELS_PACKAGE, "fd-conformance stand-in: the models package without its __init__")
    package.__path__ = [str(checkout.package / "model_executor" / "models")]
    package.__package__ = MODELS_PACKAGE
    sys.modules[MODELS_PACKAGE] = package
    base = import_module(MODEL_BASE, checkout)
    for name, value in vars(base).items():
        if not name.startswith("_"):
            setattr(package, name, value)
    return base


def _registered(base: types.ModuleType, modules: list[types.ModuleType]) -> dict[type, str]:
    """Wrapper class -> the name it is registered under (first one wins: aliases are one row)."""
    found: dict[type, str] = {}
    registry = getattr(base, "ModelRegistry", None)
    for name, cls in sorted(getattr(registry, "_arch_to_model_cls", {}).items()):
        if isinstance(cls, type):
            found.setdefault(cls, name)
    bases = tuple(b for b in (getattr(base, n, None) for n in WRAPPER_BASES) if isinstance(b, type))
    for module in modules:
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if bases and issubclass(cls, bases) and cls not in bases and cls.__module__ == module.__name__:
                found.setdefault(cls, cls.__name__)
    return found


def registered_wrappers(checkout: Checkout, failures: dict[str, str] | None = None) -> dict[type, str]:
    """Wrapper class -> registered name, every model module imported on its own (a module that
    fails is put in ``failures``, module -> error line). Raises if ``model_base`` cannot import."""
    base = _enter_package(checkout)
    modules = []
    for name in _module_names(checkout):
        try:
            modules.append(import_module(name, checkout))  # a missing package is stood in or named
        except Exception as err:  # one broken model module (a missing package too) never hides the others
            if failures is not None:
                failures[name] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    return _registered(base, modules)


def check_models(checkout: Checkout) -> ModelsReport:
    """check_protocol on every registered wrapper; one row per module that fails to import."""
    report = ModelsReport(MODELS_PACKAGE)
    report.modules = len(_module_names(checkout))
    try:
        wrappers = registered_wrappers(checkout, report.import_failures)
    except MissingDependency:
        raise
    except Exception as err:
        report.error = f"could not import {MODEL_BASE}: {type(err).__name__}: {err}"
        return report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # check_protocol reports FDC002 itself; no DeprecationWarning noise
        for cls, name in sorted(wrappers.items(), key=lambda item: item[1]):
            report.rows.append(ModelRow(name, f"{cls.__module__}.{cls.__qualname__}", check_protocol(cls)))
    return report
