"""Command-line options an ini key can set too (below both pytest plugins, like matrix_keys).

Why: a project pins its settings once in ``pytest.ini``/``pyproject.toml`` (``fd_runtime = torch``,
``fd_timeout = 600``) instead of repeating flags in every CI job, as pytest-timeout's ``timeout``
ini does. One rule for every ``--fd-*`` option: the command line wins; when the option is absent the
ini value is used; when both are absent, the option's built-in default. The effective value is
written back into ``config.option`` before anything reads it, so every reader (``getoption``, the
isolation worker's copy of the options) sees one value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pytest

IniType = Literal["string", "bool", "linelist"]


@dataclass(frozen=True)
class IniOption:
    """One ``--fd-x`` option and its ``fd_x`` ini key; ``default`` is used when neither is given."""

    flag: str
    kind: IniType
    default: Any
    help: str

    @property
    def dest(self) -> str:
        """argparse's attribute name (``--fd-no-spare`` -> ``fd_no_spare``), also the ini key."""
        return self.flag.lstrip("-").replace("-", "_")

    def add(self, group: pytest.OptionGroup, parser: pytest.Parser, **argparse_kwargs: Any) -> None:
        """Register the flag (absent = None, or [] when repeatable) and the ini key beside it."""
        absent: Any = [] if argparse_kwargs.get("action") == "append" else None
        group.addoption(self.flag, default=absent, help=f"{self.help} (ini: {self.dest})", **argparse_kwargs)
        parser.addini(self.dest, f"default for {self.flag}: {self.help}", type=self.kind, default=self._ini_default())

    def _ini_default(self) -> Any:
        if self.kind == "bool":
            return bool(self.default)
        if self.kind == "linelist":
            return list(self.default or [])
        return "" if self.default is None else str(self.default)

    def resolve(self, config: pytest.Config) -> None:
        """Write the effective value into ``config.option``: the flag's when given, else the ini's,
        else the default (an empty ini string is "not set")."""
        given = getattr(config.option, self.dest, None)
        if given not in (None, []):
            return
        value = config.getini(self.dest)
        if self.kind == "string" and value == "":
            value = self.default
        setattr(config.option, self.dest, value)


def resolve_all(config: pytest.Config, options: Sequence[IniOption]) -> None:
    """:meth:`IniOption.resolve` for each option (call first thing in ``pytest_configure``)."""
    for option in options:
        option.resolve(config)
