"""What the rest of the protocol package speaks in: the protocol class, its errors, one definition
of the clear method, and the mark an installed alias carries.

Why a module of its own: shim detection, resolution, the alias and the checks all describe a
definition the same way, and the alias must be recognisable to resolution without resolution
importing the alias (which itself resolves): :class:`AliasEntry` is that mark.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from fd_conformance.errors import UsageError
from fd_conformance.findings import Location


@runtime_checkable
class GraphOptModel(Protocol):
    """An engine-facing model wrapper whose captured graphs the engine can destroy."""

    def clear_graph_opt_backend(self) -> None:
        """Destroy every captured graph the model owns (a draft's included); no arguments."""


class GraphOptProtocolWarning(UserWarning):
    """A model that will not conform as written (near-miss name): fix the source."""


class ProtocolError(UsageError):
    """A class the kit was asked to decorate or alias breaks the protocol (e.g. FDC003)."""


#: Set on a callable the kit itself put on an instance for the duration of a check (native mode
#: makes each clear method an observation point there): the protocol judges the author's code
#: behind it, never the kit's wrapper (which would read as an instance method of the author's).
KIT_OBSERVATION_MARK = "__fd_observation_point__"


def authored(value: Any) -> Any:
    """The author's callable behind a kit observation point, else ``value`` itself."""
    return value.__wrapped__ if getattr(value, KIT_OBSERVATION_MARK, False) else value


def own_attributes(obj: object) -> dict[str, Any]:
    """The instance's own attributes as its author set them (the kit's observation points left out)."""
    state = getattr(obj, "__dict__", {}) if not isinstance(obj, type) else {}
    return {name: value for name, value in state.items() if not getattr(value, KIT_OBSERVATION_MARK, False)}


class AliasEntry:
    """Base of the descriptor the kit installs under both spellings (:mod:`.alias`): resolution
    sees through it to ``original``, the class's own entry under that name (None: a pure alias)."""

    original: Any


@dataclass(frozen=True)
class Definition:
    """One real definition of the clear method: where it lives and under which spelling."""

    owner: type
    spelling: str
    entry: Any  # the raw class-__dict__ value (function, staticmethod, ...), never our descriptor

    @property
    def function(self) -> Any:
        """The plain function behind the entry, for identity, code and source position (a
        ``functools.partialmethod``'s is the function it partially applies)."""
        entry = self.entry.func if isinstance(self.entry, functools.partialmethod) else self.entry
        return inspect.unwrap(getattr(entry, "__func__", entry))

    @property
    def qualname(self) -> str:
        if isinstance(self.entry, functools.partialmethod):  # the name is the method; the function is a helper
            return f"{self.owner.__qualname__}.{self.spelling}"
        return getattr(self.function, "__qualname__", f"{self.owner.__qualname__}.{self.spelling}")

    @property
    def location(self) -> Location:
        code = getattr(self.function, "__code__", None)
        if code is None:
            return class_location(self.owner, obj=f"{self.owner.__qualname__}.{self.spelling}")
        return Location(path=code.co_filename, line=code.co_firstlineno, obj=self.qualname)

    def describe(self) -> str:
        loc = self.location
        where = f"{loc.path}:{loc.line}" if loc.path else "<unknown source>"
        return f"{self.qualname} ({where})"


def class_location(cls: type, obj: str | None = None) -> Location:
    """Where ``cls`` is defined (path and line when its source can be found)."""
    try:
        path = inspect.getsourcefile(cls)
        line = inspect.getsourcelines(cls)[1] if path else None
    except (OSError, TypeError):
        path, line = None, None
    return Location(path=path, line=line, obj=obj or cls.__qualname__)
