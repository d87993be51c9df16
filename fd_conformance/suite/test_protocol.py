"""Protocol: every engine-facing wrapper (the draft included) conforms to GraphOptModel, and with
the legacy alias installed both spellings reach the same method (DESIGN.md "P")."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from fd_conformance.findings import Location, make_finding
from fd_conformance.suite._support import models_of
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("protocol")


def test_protocol(fd_subject: Any, fd_verdict: CheckVerdict) -> None:
    from fd_conformance.protocol import CANONICAL, LEGACY, check_protocol, legacy_alias, same_clear_target
    from fd_conformance.protocol.base import authored, own_attributes

    for role, model in models_of(fd_subject):
        findings = check_protocol(model)
        fd_verdict.extend(findings)
        if any(f.is_error for f in findings):
            continue  # the alias refuses non-conforming classes; the findings already say why
        if callable(own_attributes(model).get(CANONICAL)):
            continue  # the instance's own callable (set in __init__) shadows the class: no alias is involved
        cls = type(model)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the legacy spelling is FDC002's job
            with legacy_alias(cls):
                # authored(): native mode's observation points are the kit's, not the author's
                canonical = authored(getattr(model, CANONICAL, None))
                legacy = authored(getattr(model, LEGACY, None))
                # Compared by definition, not identity: a descriptor binds a new object per read.
                same = canonical is not None and legacy is not None and same_clear_target(canonical, legacy)
        if not same:
            fd_verdict.add(
                make_finding(
                    "FDC003",
                    f"{role} wrapper {cls.__qualname__}: with the alias installed, {CANONICAL} and {LEGACY} reach different methods",
                    Location(obj=f"{cls.__module__}.{cls.__qualname__}"),
                )
            )
    fd_verdict.conclude()
