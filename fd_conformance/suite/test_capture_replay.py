"""C1 capture/replay: for every capture size (and a padded size below it), graph replay equals the
eager forward with the same inputs and weights, within the case's tolerances (FDC301); and every
size the case declares, main and draft, has a graph of its own (FDC306): a step padded into a
larger size's graph, or run with no graph at all, would pass "replay == eager" while the engine
serves that size with a graph it never captured for it."""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.runtime.base import EventKind, Runtime, StaleGraphError
from fd_conformance.suite._support import (
    capture_size_findings,
    compare_outputs,
    declared_sizes,
    exception_finding,
    graphs_by_model,
    graphs_on,
    models_named,
    models_of,
    step_sizes,
)
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("capture_replay")


def token_counts(capture_sizes: tuple[int, ...] | list[int]) -> list[int]:
    """Each capture size exactly, plus one below it: that run is padded up to the size."""
    counts = set(capture_sizes) | {s - 1 for s in capture_sizes if s > 1}
    return sorted(counts, reverse=True)


def test_capture_replay(fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict) -> None:
    replays: list[tuple[int, str]] = []  # (graph identity, label) of every replay, in order

    def on_event(event: Any) -> None:
        if event.kind is EventKind.GRAPH_REPLAYED:
            replays.append((event.subject_id, event.subject))

    unsubscribe = fd_runtime.events.subscribe(on_event)
    replayed: dict[int, list[tuple[int, str]]] = {}  # token count -> the graphs its step replayed
    models = models_named(fd_subject)
    try:
        graphs_on(fd_subject)
        fd_subject.runner.capture_model()
        for num_tokens in token_counts(step_sizes(fd_case, fd_subject)):
            inputs = fd_subject.make_inputs(num_tokens, seed=num_tokens)
            before = len(replays)
            what = f"replay at {num_tokens} tokens ({models})"
            try:
                got = fd_subject.forward(inputs)
            except StaleGraphError as err:
                fd_verdict.add(exception_finding("FDC301", err, what))
                continue
            replayed[num_tokens] = replays[before:]
            if len(replays) == before:
                # No replay: "replay == eager" would be vacuously true. At a declared size that is
                # FDC306 below; a padded count below a size may run eagerly (nothing to compare).
                continue
            want = fd_subject.eager_forward(inputs)
            fd_verdict.extend(compare_outputs(fd_runtime, got, want, fd_case.tolerances, "FDC301", what))
    finally:
        unsubscribe()
    # Graphs are attributed to the model OBJECT holding them (labels are free text).
    owned = graphs_by_model(fd_subject)
    roles = {(graph.identity, graph.label): role for role, graphs in owned.items() for graph in graphs}
    wrappers = {role: type(model).__qualname__ for role, model in models_of(fd_subject)}
    fd_verdict.extend(capture_size_findings(declared_sizes(fd_case, fd_subject), replayed, roles, wrappers))
    fd_verdict.conclude()
