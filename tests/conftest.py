"""Fixtures shared by the kit's own test modules."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterator

import pytest

from fd_conformance.frameworks import FRAMEWORKS
from fd_conformance.runtime.base import Runtime, RuntimeEvent

# pytester's in-process runs remove from sys.modules whatever the inner session imported. A
# framework with C extensions cannot be imported a second time in one process (torch then fails
# with "SystemError: ... bad call flags" or a segfault, depending on which test runs next), so the
# frameworks are imported once here, before any snapshot, and stay put.
for _framework in FRAMEWORKS:
    if importlib.util.find_spec(_framework) is not None:
        importlib.import_module(_framework)


@pytest.fixture
def events(rt: Runtime) -> Iterator[list[RuntimeEvent]]:
    """Every event the module's ``rt`` fixture emits during the test, in order.

    Each module defines ``rt`` for its framework (torch, paddle); this one fixture serves them
    all. Unsubscribed afterwards, so a module-scoped runtime does not keep feeding a finished
    test's list.
    """
    seen: list[RuntimeEvent] = []
    unsubscribe = rt.events.subscribe(seen.append)
    try:
        yield seen
    finally:
        unsubscribe()
