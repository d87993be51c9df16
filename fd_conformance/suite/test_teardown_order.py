"""C3 teardown order: during the runner's clear_parameters(), every graph (main AND draft) is
destroyed before any parameter it captured is freed (FDC201) and before any group it captured is
shut down (FDC202), and no graph survives (FDC203) -- for every combination of the runner's
use_cudagraph x draft_model_use_cudagraph, judged on the recorded real runtime calls. A graph left
alive is blamed on the call at fault: ``Runner.clear_parameters()`` when the model's own clear
destroys it, the model's clear when it does not.

And with a flag switched off AFTER capture (main, draft, both): a runner that keys each clear on the
flag it reads at clear time (``if use_cudagraph: clear main``) strands the graphs captured while it
was on. FDC205, a warning, for engines whose flags are fixed config (FastDeploy's runner has that
shape); FDC206, an error, when the case declares ``switches_graph_flags_at_run_time``."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.runtime.base import Runtime
from fd_conformance.runtime.graph import reset_graphs
from fd_conformance.suite._sizes import no_graph_findings
from fd_conformance.suite._support import (
    add_alive_graph_findings,
    alive_graphs,
    call_or_conclude,
    graph_refs,
    graphs_by_model,
    graphs_on,
    holder_names,
    recorded,
    require_clear_methods,
    survivors,
    teardown_findings,
)
from fd_conformance.suite.test_clear import CLEAR_RAISED
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("teardown_order")

FLAG_COMBINATIONS = [
    pytest.param(main, draft, id=f"main{'On' if main else 'Off'}-draft{'On' if draft else 'Off'}")
    for main in (True, False)
    for draft in (True, False)
]
# Which runner flags are switched off between capture and clear_parameters(); draft ones skip without a draft.
FLAG_SWITCHES = [
    pytest.param(("use_cudagraph",), id="mainSwitchedOff"),
    pytest.param(("draft_model_use_cudagraph",), id="draftSwitchedOff"),
    pytest.param(("use_cudagraph", "draft_model_use_cudagraph"), id="bothSwitchedOff"),
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
    after = f"{type(runner).__qualname__}.clear_parameters()"
    with recorded(fd_runtime) as recorder:
        capture_and_step(fd_case, fd_subject)
        refs = graph_refs(fd_subject)
        require_graphs_for_flags(fd_case, fd_subject, fd_verdict, use_cudagraph, draft_model_use_cudagraph)
        with recorder.judging(after, holder_names(fd_subject)):
            call_or_conclude(fd_verdict, CLEAR_RAISED, fd_subject, after, runner.clear_parameters)
        # clear_parameters() must leave no graph alive either; one left is blamed on the call at fault
        fd_verdict.extend(teardown_findings(recorder, fd_subject))
    add_alive_graph_findings(fd_verdict, alive_graphs(refs), after, fd_subject)
    fd_verdict.conclude()


@pytest.mark.parametrize("switched_off", FLAG_SWITCHES)
def test_teardown_after_flag_switch(
    fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict, switched_off: tuple[str, ...]
) -> None:
    """Capture with every flag on, switch ``switched_off`` off, clear_parameters(): a graph the runner
    leaves that a model's own clear destroys (or that the runner holds itself) was stranded by the
    switch. Graphs the model's clear cannot destroy are the clear check's (FDC203 there)."""
    if fd_subject.draft is None and "draft_model_use_cudagraph" in switched_off:
        pytest.skip(f"{fd_case.name} has no draft model (mainSwitchedOff covers its one flag)")
    require_clear_methods(fd_subject)
    graphs_on(fd_subject)
    runner = fd_subject.runner
    with recorded(fd_runtime) as recorder:
        capture_and_step(fd_case, fd_subject)
        require_graphs_for_flags(fd_case, fd_subject, fd_verdict, True, fd_subject.draft is not None)
        for flag in switched_off:
            setattr(runner, flag, False)
        call_or_conclude(
            fd_verdict, CLEAR_RAISED, fd_subject, f"{type(runner).__qualname__}.clear_parameters()", runner.clear_parameters
        )
        stranded = [left for left in survivors(recorder, fd_subject) if left.runner_at_fault]
    if stranded:
        # One defect, one check: what the runner leaves with the flags untouched is test_teardown_order's.
        left_anyway = roles_left_with_flags_untouched(fd_case, fd_runtime, fd_subject)
        stranded = [left for left in stranded if left.role not in left_anyway]
    code = "FDC206" if fd_case.switches_graph_flags_at_run_time else "FDC205"
    name = type(runner).__qualname__
    context = f" with {' and '.join(switched_off)} switched off after capture"
    fd_verdict.extend(left.finding(code, f"{name}.clear_parameters()", name, context) for left in stranded)
    fd_verdict.conclude()


def capture_and_step(case: ModelCase, subject: Any) -> None:
    """capture_model() and one step per capture size. FastDeploy's capture_model() returns early when
    use_cudagraph is off and graphs are captured lazily on forward: the steps make them exist, or the
    order would be judged over no graph at all and pass vacuously."""
    subject.runner.capture_model()
    for size in case.capture_sizes:
        subject.forward(subject.make_inputs(size))


def roles_left_with_flags_untouched(case: ModelCase, runtime: Runtime, like: Any) -> set[str]:
    """Roles ("main", "draft", "runner") of the graphs a FRESH subject's clear_parameters() leaves
    with every flag on and untouched since capture; empty when the build or the run fails (nothing
    is then proven to be the other check's finding). ``like`` is the check's own subject: a native
    one's sibling is observed the same way (a native subject has no graphs() of its own)."""
    from fd_conformance.cases.native import NativeSubject

    # The check's own subject is judged: its graphs go first. Left alive in a process-wide cache
    # (torch.compile's cudagraph trees, when the model's clear never resets the compiler), they are
    # handed to the fresh subject, which replays them instead of capturing its own: it then leaves
    # "nothing" and every stranded graph would be blamed on the switch (found on an H100).
    reset_graphs(like.graphs())
    try:
        built: Any = case.factory(runtime)
    except Exception:  # noqa: BLE001 - the fixture's build of the same factory succeeded; judge without it
        return set()
    subject = like.sibling(built) if isinstance(like, NativeSubject) else built
    try:
        graphs_on(subject)
        with recorded(runtime) as recorder:
            capture_and_step(case, subject)
            subject.runner.clear_parameters()
            return {left.role for left in survivors(recorder, subject)}
    except Exception:  # noqa: BLE001 - a runner that fails here fails test_teardown_order loudly
        return set()
    finally:
        reset_graphs(subject.graphs())
        if isinstance(subject, NativeSubject):
            subject.close()
            like.bind_roots()
        del subject, built
        gc.collect()


def require_graphs_for_flags(
    case: ModelCase, subject: Any, verdict: CheckVerdict, use_cudagraph: bool, draft_model_use_cudagraph: bool
) -> None:
    """Fail with FDC306 naming the model when a model whose graph flag is on owns no graph after
    capture and a step per size: teardown order over zero graphs proves nothing about that model."""
    # Attributed by which model object holds the graph (see graphs_by_model), never by its label;
    # graphs held by neither alone (a runner-owned step graph) count for either flag.
    owned = graphs_by_model(subject)
    has = {role: bool(owned[role] or owned["unattributed"]) for role in ("main", "draft")}
    flagged = [
        owner for owner, on in (("main", use_cudagraph), ("draft", draft_model_use_cudagraph and subject.draft is not None)) if on
    ]
    empty = [owner for owner in flagged if not has[owner]]
    if empty:
        after = f"{type(subject.runner).__qualname__}.capture_model() and a forward per capture size"
        verdict.extend(no_graph_findings(case, subject, empty, after))
        verdict.conclude()
