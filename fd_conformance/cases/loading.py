"""Where model cases come from: bundled/installed packages (entry points) and ``--fd-model`` specs.

A spec is ``module:attr`` or ``path/to/file.py:attr`` naming a :class:`ModelCase`, an iterable of
cases, or a zero-argument factory returning either. Every way a spec can be wrong (module missing,
attribute missing, factory raising, wrong type) becomes a one-line :class:`UsageError` that names
the spec and the fix, because a model author self-certifying should never read a traceback wall
to find a typo.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

from fd_conformance.cases.contract import ModelCase
from fd_conformance.errors import UsageError

ENTRY_POINT_GROUP = "fd_conformance.cases"
SPEC_FORM = "module:attr or path/to/file.py:attr"


def locate_spec(spec: str, source: str = "--fd-model") -> None:
    """What can be checked of a spec without importing its module (which may import a framework,
    1-2 s): its form, and that its file or module exists. ``fd-conformance run`` checks this much
    before it starts pytest; the import, the attribute and the cases are the session's to check."""
    module_part, _ = _split_spec(spec, source)
    if module_part.endswith(".py"):
        _spec_file(spec, module_part, source)
        return
    try:
        found = importlib.util.find_spec(module_part)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and module_part.startswith(missing + "."):
            raise _not_found(spec, module_part, source, missing) from err
        return  # a parent package that imports something missing: the session's import says what
    except Exception:  # noqa: BLE001 - a parent package that fails to import: the session reports it
        return
    if found is None:
        raise _not_found(spec, module_part, source, module_part)


def _split_spec(spec: str, source: str) -> tuple[str, str]:
    """(module or file, attribute) of a spec, or the one-line error for one of another form."""
    module_part, sep, attr_part = spec.rpartition(":")
    # "C:\\x.py" style drive letters aside, a spec needs exactly one module/attr split.
    if not sep or not module_part or not attr_part:
        raise UsageError(f"{source} {spec!r} is not {SPEC_FORM}", f"write it as {SPEC_FORM}, e.g. mypkg.cases:all_cases")
    return module_part, attr_part


def _spec_file(spec: str, module_part: str, source: str) -> Path:
    path = Path(module_part).resolve()
    if not path.is_file():
        raise UsageError(f"{source} {spec!r}: file {module_part!r} not found", f"give an existing .py file ({SPEC_FORM})")
    return path


def _not_found(spec: str, module_part: str, source: str, missing: str) -> UsageError:
    beside = _in_cwd_not_on_path(missing.split(".")[0])
    if beside:
        return UsageError(
            f"{source} {spec!r}: module {module_part!r} not found: {beside!r} is in the current directory, "
            "which is not on sys.path (plain `pytest` does not add it)",
            f"run `python -m pytest ...`, set PYTHONPATH=., or use the file form {module_part.replace('.', '/')}.py:{spec.rpartition(':')[2]}",
        )
    return UsageError(
        f"{source} {spec!r}: module {module_part!r} not found",
        "check the spelling, install the package, or run from the directory that contains it (it must be on sys.path)",
    )


def _import_spec_module(spec: str, module_part: str, source: str) -> ModuleType:
    """Import by dotted name, or by file path when the spec points at a ``.py`` file."""
    if module_part.endswith(".py"):
        path = _spec_file(spec, module_part, source)
        # A stable digest, not hash(): str hashes are salted per process (PYTHONHASHSEED), and an
        # isolation worker or xdist worker must derive the same module name (pickling by name).
        digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:16]
        name = f"_fd_conformance_user_{path.stem}_{digest}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:  # pragma: no cover - .py files always have one
            raise UsageError(f"{source} {spec!r}: cannot load {module_part!r}", "give a Python source file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look the module up by name
        try:
            module_spec.loader.exec_module(module)
        except UsageError as err:  # a ModelCase refused at build time: its own line, under the spec
            sys.modules.pop(name, None)
            raise UsageError(f"{source} {spec!r}: {err.problem}", err.fix) from err
        except SystemExit as err:
            sys.modules.pop(name, None)
            raise _exited(spec, module_part, source, err) from err
        except Exception as err:
            sys.modules.pop(name, None)
            raise UsageError(
                f"{source} {spec!r}: importing {module_part!r} raised {type(err).__name__}: {_one_line(err)}",
                "fix the error in that file",
            ) from err
        return module
    try:
        return importlib.import_module(module_part)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and (module_part == missing or module_part.startswith(missing + ".")):
            raise _not_found(spec, module_part, source, missing) from err
        raise UsageError(
            f"{source} {spec!r}: importing {module_part!r} failed: {_one_line(err)}",
            "install what that module imports",
        ) from err
    except UsageError as err:
        raise UsageError(f"{source} {spec!r}: {err.problem}", err.fix) from err
    except SystemExit as err:
        raise _exited(spec, module_part, source, err) from err
    except Exception as err:
        raise UsageError(
            f"{source} {spec!r}: importing {module_part!r} raised {type(err).__name__}: {_one_line(err)}",
            "fix the error in that module",
        ) from err


def _exited(spec: str, module_part: str, source: str, err: SystemExit) -> UsageError:
    """A module that calls ``sys.exit`` at import (a script's ``main()`` run unguarded): SystemExit is
    no Exception, so unnamed it ended the whole pytest session as an INTERNALERROR read as INTERRUPTED."""
    call = "sys.exit()" if err.code is None else f"sys.exit({err.code!r})"
    return UsageError(
        f"{source} {spec!r}: importing {module_part!r} called {call}",
        'a model module must not exit when imported: put that call under `if __name__ == "__main__":`',
    )


def _in_cwd_not_on_path(top: str) -> str | None:
    """The package or module file named ``top`` in the current directory when that directory is
    not importable (plain ``pytest`` leaves it off sys.path, ``python -m pytest`` puts it on)."""
    cwd = Path.cwd().resolve()
    if any(Path(entry or ".").resolve() == cwd for entry in sys.path):
        return None
    for candidate in (cwd / top, cwd / f"{top}.py"):
        if candidate.exists():
            return candidate.name
    return None


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _takes_arguments(factory: Any) -> bool:
    """Whether calling ``factory()`` would fail for want of an argument (a case factory takes none)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: let the call decide
        return False
    return any(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        for p in signature.parameters.values()
    )


def coerce_cases(value: Any, origin: str, allow_empty: bool = False) -> list[ModelCase]:
    """Turn what a spec or entry point names into cases; ``origin`` names it in errors.

    ``allow_empty``: an entry point may name no case here (the kit's own ``reference`` returns []
    where neither torch nor paddle is installed); an explicit spec naming none is a mistake."""
    if isinstance(value, ModelCase):
        return [value]
    if callable(value) and (isinstance(value, type) or _takes_arguments(value)):
        # Most likely the Subject factory (it takes the runtime) or the Subject class itself: the
        # spec must name the ModelCase list that wraps it.
        what = "a class" if isinstance(value, type) else "a function that takes arguments"
        raise UsageError(
            f"{origin} names {getattr(value, '__name__', type(value).__name__)}, {what}: a Subject factory, not a case",
            "point --model at the module's CASES: a list of ModelCase(name, runtime, factory, capture_sizes)",
        )
    if callable(value):
        try:
            produced = value()
        except UsageError as err:
            raise UsageError(f"{origin}: {err.problem}", err.fix) from err
        except Exception as err:
            raise UsageError(
                f"{origin}: the factory raised {type(err).__name__}: {_one_line(err)}",
                "make it return a ModelCase or a list of them without raising",
            ) from err
        if callable(produced) and not isinstance(produced, (ModelCase, type)):
            raise UsageError(f"{origin}: the factory returned another callable", "return a ModelCase or a list of them")
        return coerce_cases(produced, origin, allow_empty)
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, dict)):
        items = list(value)
        bad = [item for item in items if not isinstance(item, ModelCase)]
        if bad:
            raise UsageError(
                f"{origin}: expected ModelCase items, got {type(bad[0]).__name__}",
                "return fd_conformance.cases.ModelCase objects",
            )
        if not items and not allow_empty:
            raise UsageError(f"{origin}: names no cases (empty list)", "return at least one ModelCase")
        return items
    raise UsageError(
        f"{origin}: expected a ModelCase, a list of them or a factory, got {type(value).__name__}",
        "point it at fd_conformance.cases.ModelCase objects",
    )


def load_spec(spec: str, source: str = "--fd-model") -> list[ModelCase]:
    """Resolve one ``module:attr`` / ``file.py:attr`` spec to cases."""
    return [case for case, _ in load_spec_with_origin(spec, source)]


def load_spec_with_origin(spec: str, source: str = "--fd-model") -> list[tuple[ModelCase, str]]:
    """:func:`load_spec`, each case with where it came from (for errors naming two sources)."""
    module_part, attr_part = _split_spec(spec, source)
    module = _import_spec_module(spec, module_part, source)
    value: Any = module
    for part in attr_part.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UsageError(
                f"{source} {spec!r}: {module_part!r} has no attribute {attr_part!r}",
                "check the name after the colon",
            ) from None
    origin = f"{source} {spec!r}"
    return [(case, origin) for case in coerce_cases(value, origin)]


def installed_cases() -> list[ModelCase]:
    """Cases of every installed package that registers the ``fd_conformance.cases`` entry point."""
    return [case for case, _ in installed_cases_with_origin()]


def installed_cases_with_origin() -> list[tuple[ModelCase, str]]:
    cases: list[tuple[ModelCase, str]] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        origin = f"entry point {ep.name!r} ({ep.value}) in group {ENTRY_POINT_GROUP}"
        try:
            value = ep.load()
        except UsageError as err:
            raise UsageError(f"{origin}: {err.problem}", err.fix) from err
        except Exception as err:
            raise UsageError(
                f"{origin} failed to load: {type(err).__name__}: {_one_line(err)}",
                "fix or uninstall the package that registers it",
            ) from err
        cases.extend((case, origin) for case in coerce_cases(value, origin, allow_empty=True))
    return cases
