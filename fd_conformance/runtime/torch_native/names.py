"""How native mode names what a graph captured and who owns it, from the models under test."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class ModuleNames:
    """Qualified names and roles ("main", "draft") of the modules of the models under test."""

    def __init__(self) -> None:
        self._roots: list[tuple[str, Any]] = []
        self._names: dict[int, tuple[frozenset[str], str]] = {}  # id(module) -> (roles, qualified name)
        self._fresh = False

    def set_roots(self, roots: Sequence[tuple[str, Any]]) -> None:
        self._roots = [(role, model) for role, model in roots if model is not None]
        self._names.clear()

    def stale(self) -> None:
        """A capture ended: the models may gain modules before the next one."""
        self._fresh = False

    def modules(self) -> list[torch.nn.Module]:
        """Every module of the models under test, once each (shared ones too)."""
        seen: dict[int, torch.nn.Module] = {}
        for _, root in self._roots:
            if isinstance(root, torch.nn.Module):
                for sub in root.modules():
                    seen.setdefault(id(sub), sub)
        return list(seen.values())

    def name(self, module: torch.nn.Module, key: str) -> str:
        known = self._known(module)
        if known is None:
            return f"{type(module).__name__}.{key}"
        return f"{known[1]}.{key}" if known[1] else key

    def owner(self, modules: list[torch.nn.Module]) -> str:
        """The role ("main", "draft") of the first module that ran and belongs to one model alone
        (a draft's graph runs the shared embedding too); else the first module's class name."""
        for module in modules:
            known = self._known(module)
            if known is not None and len(known[0]) == 1:
                return next(iter(known[0]))
        return type(modules[0]).__name__ if modules else ""

    def _known(self, module: torch.nn.Module) -> tuple[frozenset[str], str] | None:
        # Rebuilt once per capture at most (models gain modules between captures, never during one)
        if id(module) not in self._names and not self._fresh:
            self._fresh = True
            self._names.clear()
            for role, root in self._roots:
                if isinstance(root, torch.nn.Module):
                    for name, sub in root.named_modules(remove_duplicate=False):
                        roles, qualname = self._names.get(id(sub), (frozenset(), ""))
                        self._names[id(sub)] = (roles | {role}, qualname or _join(role, name))
        return self._names.get(id(module))


def _join(role: str, name: str) -> str:
    """How a finding names a module: "main" models' names bare, others prefixed ("draft.head")."""
    if role == "main":
        return name
    return f"{role}.{name}" if name else role
