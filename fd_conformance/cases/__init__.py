"""Model cases: the contract a model author implements, where cases come from, which ones run.

:mod:`.contract` is the contract (:class:`ModelCase`, :class:`Subject`, :class:`ModelRunner`);
:mod:`.loading` turns ``--fd-model`` specs and installed entry points into cases;
:mod:`.selection` picks a session's cases (specs or installed, a selection file, a runtime);
:mod:`.shard` keeps the whole cases of one shard (``--shard K/N``).
Each imports only those before it, and nothing here imports a framework.
"""

from __future__ import annotations

from fd_conformance.cases.contract import ModelCase, ModelRunner, Subject, SubjectFactory
from fd_conformance.cases.loading import (
    ENTRY_POINT_GROUP,
    SPEC_FORM,
    coerce_cases,
    installed_cases,
    installed_cases_with_origin,
    load_spec,
    load_spec_with_origin,
    locate_spec,
)
from fd_conformance.cases.selection import KNOWN_RUNTIMES, apply_selection, read_selection, select_cases
from fd_conformance.cases.shard import SHARD_FORM, Shard, parse_shard, partition, read_durations, shard_of

__all__ = [
    "ENTRY_POINT_GROUP",
    "KNOWN_RUNTIMES",
    "SHARD_FORM",
    "SPEC_FORM",
    "ModelCase",
    "ModelRunner",
    "Shard",
    "Subject",
    "SubjectFactory",
    "apply_selection",
    "coerce_cases",
    "installed_cases",
    "installed_cases_with_origin",
    "load_spec",
    "locate_spec",
    "load_spec_with_origin",
    "parse_shard",
    "partition",
    "read_durations",
    "read_selection",
    "select_cases",
    "shard_of",
]
