"""C1 capture/replay: for every capture size (and a padded size below it), graph replay equals the
eager forward with the same inputs and weights, within the case's tolerances (FDC301)."""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.runtime.base import EventKind, Runtime, StaleGraphError
from fd_conformance.suite._support import compare_outputs, exception_finding, graphs_on
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("capture_replay")


def token_counts(capture_sizes: tuple[int, ...]) -> list[int]:
    """Each capture size exactly, plus one below it: that run is padded up to the size."""
    counts = set(capture_sizes) | {s - 1 for s in capture_sizes if s > 1}
    return sorted(counts, reverse=True)


def test_capture_replay(fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict) -> None:
    replays: list[str] = []
    unsubscribe = fd_runtime.events.subscribe(lambda e: replays.append(e.subject) if e.kind is EventKind.GRAPH_REPLAYED else None)
    try:
        graphs_on(fd_subject)
        fd_subject.runner.capture_model()
        for num_tokens in token_counts(fd_case.capture_sizes):
            inputs = fd_subject.make_inputs(num_tokens, seed=num_tokens)
            before = len(replays)
            try:
                got = fd_subject.forward(inputs)
            except StaleGraphError as err:
                fd_verdict.add(
                    exception_finding("FDC301", err, f"replay at {num_tokens} tokens", "capture on the current weights")
                )
                continue
            if len(replays) == before:
                # Without a replay, "replay == eager" would be vacuously true: the case is broken.
                pytest.fail(
                    f"{fd_case.name}: forward at {num_tokens} tokens replayed no graph after capture_model()", pytrace=False
                )
            want = fd_subject.eager_forward(inputs)
            fd_verdict.extend(
                compare_outputs(fd_runtime, got, want, fd_case.tolerances, "FDC301", f"replay at {num_tokens} tokens")
            )
    finally:
        unsubscribe()
    fd_verdict.conclude()
