"""Fixtures shared by the kit's own test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fd_conformance.runtime.base import Runtime, RuntimeEvent


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
