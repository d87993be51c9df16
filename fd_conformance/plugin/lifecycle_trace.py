"""Each check's lifecycle events, kept while it runs, and its trace on the deciding report.

``fd_runtime`` hands every test's fresh runtime to :func:`watch`; ``fd_verdict`` stamps findings
with :func:`clock`; the matrix hook puts :func:`trace_of` on the call report as the attribute
``fd_trace`` (:data:`~fd_conformance.matrix_keys.check_record.TRACE_ATTR`), which xdist and the
isolation worker serialise with the report, and JUnit XML never shows.

PYTEST_DONT_REWRITE: holds no test assertions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from fd_conformance.report.lifecycle_trace import TraceLog
    from fd_conformance.runtime.base import Runtime
    from fd_conformance.verdict import CheckVerdict

TRACE_LOG_KEY: pytest.StashKey[TraceLog] = pytest.StashKey()
#: Set in a session's config stash to trace passing checks too: the documentation's good twins
#: (scripts/code_pictures.py). Unset, only a check with an error finding gets a trace.
TRACE_ALL_KEY: pytest.StashKey[bool] = pytest.StashKey()


def watch(node: pytest.Item, runtime: Runtime) -> None:
    """Keep every event ``runtime`` emits for ``node``'s trace (its runtime is fresh per test)."""
    from fd_conformance.report.lifecycle_trace import TraceLog

    log = TraceLog()
    runtime.events.subscribe(log)
    node.stash[TRACE_LOG_KEY] = log


def clock(node: pytest.Item) -> int | None:
    """The number of the latest event ``node``'s runtime emitted (None: none, or no runtime)."""
    log = node.stash.get(TRACE_LOG_KEY, None)
    return log.last_seq if log is not None else None


def trace_of(item: pytest.Item, verdict: CheckVerdict) -> dict[str, Any] | None:
    """The item's trace from its events and its verdict's findings (None: no error, or no event)."""
    log = item.stash.get(TRACE_LOG_KEY, None)
    if log is None:
        return None
    from fd_conformance.report.lifecycle_trace import check_trace

    return check_trace(log.events, verdict.findings, always=item.config.stash.get(TRACE_ALL_KEY, False))
