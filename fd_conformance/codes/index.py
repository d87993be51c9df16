"""What the kit asks of the registry: which codes a module detects (dispatch) and which modules may
name a code (emitters).

Why here: the registry is the one list of codes. The lint codes, the config checks and the kit's
own tests read these answers instead of keeping a list of their own, as ruff's code map drives
its dispatch; a list kept elsewhere drifts from the registry the day a code is added.
"""

from __future__ import annotations

from pathlib import Path

from fd_conformance.codes import ENTRIES
from fd_conformance.codes.entry import Rule

#: The folder holding the ``fd_conformance`` package: where a dotted module name is a file.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def detected_in(module: str) -> dict[str, tuple[str, ...]]:
    """Code -> the names of ``module``'s own functions that detect it, in registry order (the
    order a module dispatches its checks in): ``detected_in("fd_conformance.config_rules")``."""
    prefix = f"{module}."
    found: dict[str, tuple[str, ...]] = {}
    for rule in ENTRIES:
        names = tuple(d[len(prefix) :] for d in rule.detectors if d.startswith(prefix) and "." not in d[len(prefix) :])
        if names:
            found[rule.code] = names
    return found


def module_of(dotted: str) -> str:
    """The module part of a detector's dotted name (``module.function``, ``module.Class.method``):
    its longest prefix that is a module file of the kit."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = _SOURCE_ROOT.joinpath(*parts[:cut])
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return ".".join(parts[:cut])
    raise LookupError(f"{dotted} names no module of the kit")


def emitting_modules(rule: Rule) -> tuple[str, ...]:
    """Every module allowed to name ``rule``'s code: its detectors' modules, then ``emitted_by``."""
    modules = [module_of(d) for d in rule.detectors] + list(rule.emitted_by)
    return tuple(dict.fromkeys(modules))
