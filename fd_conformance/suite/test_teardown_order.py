"""C3 teardown order: during the runner's clear_parameters(), every graph (main AND draft) is
destroyed before any parameter it captured is freed (FDC201) and before any group it captured is
shut down (FDC202), and no graph survives (FDC203) -- for every combination of the runner's
use_cudagraph x draft_model_use_cudagraph, judged on the recorded real runtime calls."""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.runtime.base import Runtime
from fd_conformance.suite._support import (
    add_alive_graph_findings,
    alive_graphs,
    graph_refs,
    graphs_by_model,
    recorded,
    recorder_findings,
    require_clear_methods,
)
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("teardown_order")

FLAG_COMBINATIONS = [
    pytest.param(main, draft, id=f"main{'On' if main else 'Off'}-draft{'On' if draft else 'Off'}")
    for main in (True, False)
    for draft in (True, False)
]


@pytest.mark.parametrize(("use_cudagraph", "draft_model_use_cudagraph"), FLAG_COMBINATIONS)
def test_teardown_order(
    fd_case: ModelCase,
    fd_runtime: Runtime,
    fd_subject: Any,
    fd_verdict: CheckVerdict,
    use_cudagraph: bool,
    draft_model_use_cudagraph: bool,
) -> None:
    if draft_model_use_cudagraph and fd_subject.draft is None:
        pytest.skip(f"{fd_case.name} has no draft model")
    require_clear_methods(fd_subject)
    runner = fd_subject.runner
    runner.use_cudagraph = use_cudagraph
    runner.draft_model_use_cudagraph = draft_model_use_cudagraph
    with recorded(fd_runtime) as recorder:
        runner.capture_model()
        # FastDeploy's capture_model() returns early when use_cudagraph is off and graphs are
        # captured lazily on forward: one step per capture size (as C2 does) makes them exist,
        # or the order below would be judged over no graph at all and pass vacuously.
        for size in fd_case.capture_sizes:
            fd_subject.forward(fd_subject.make_inputs(size))
        refs = graph_refs(fd_subject)
        require_graphs_for_flags(fd_case, fd_subject, use_cudagraph, draft_model_use_cudagraph)
        runner.clear_parameters()
        recorder.check_cleared()  # clear_parameters() must leave no graph alive either
    fd_verdict.extend(recorder_findings(recorder))
    add_alive_graph_findings(fd_verdict, alive_graphs(refs), "clear_parameters()")
    fd_verdict.conclude()


def require_graphs_for_flags(case: ModelCase, subject: Any, use_cudagraph: bool, draft_model_use_cudagraph: bool) -> None:
    """Fail (one line) when a model whose graph flag is on owns no graph after capture and a step
    per size: teardown order over zero graphs proves nothing about that model."""
    # Attributed by which model object holds the graph (see graphs_by_model), never by its label;
    # graphs held by neither alone (a runner-owned step graph) count for either flag.
    owned = graphs_by_model(subject)
    has = {role: bool(owned[role] or owned["unattributed"]) for role in ("main", "draft")}
    flagged = [
        owner for owner, on in (("main", use_cudagraph), ("draft", draft_model_use_cudagraph and subject.draft is not None)) if on
    ]
    empty = [owner for owner in flagged if not has[owner]]
    if empty:
        pytest.fail(
            f"{case.name}: {' and '.join(empty)} graph flag on, but no {'/'.join(empty)} graph exists after capture_model() "
            f"and a forward per capture size; fix: capture in capture_model() (or lazily on forward) whenever that flag is on",
            pytrace=False,
        )
