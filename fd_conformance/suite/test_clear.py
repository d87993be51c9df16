"""C2 clear: after clear_graph_opt_backend() no graph of the model (main or draft) is alive
(FDC203) and graph memory is back to the post-warm-up baseline (FDC302; 4 KiB resolution on a
GPU, exact tracked bytes under host emulation); clearing before any capture and clearing twice
are safe no-ops (FDC303); and clear destroys every graph the model owns whatever its graph flag
says NOW (FDC203): engines switch flags at run time, after graphs were captured under them."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.runtime.base import Runtime
from fd_conformance.suite._sizes import no_graph_findings
from fd_conformance.suite._support import (
    add_alive_graph_findings,
    alive_graphs,
    clear_call_name,
    graph_memory_refs,
    graph_refs,
    graphs_on,
    guarded,
    holder_names,
    kit_call,
    memory_holders,
    memory_leak_finding,
    memory_resolution,
    models_of,
    recorded,
    recorder_findings,
    require_clear_methods,
    settled_memory,
    step_sizes,
)
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("clear")

#: A clear that raised: the registry's code for it, named here, where the registry says it is detected.
CLEAR_RAISED = "FDC303"

# Which runner flags are switched off between capture and clear; "draft" ones skip without a draft.
FLAG_FLIPS = [
    pytest.param(("use_cudagraph",), id="mainOff"),
    pytest.param(("draft_model_use_cudagraph",), id="draftOff"),
    pytest.param(("use_cudagraph", "draft_model_use_cudagraph"), id="bothOff"),
]


def test_clear_releases_graphs_and_memory(
    fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict
) -> None:
    require_clear_methods(fd_subject)
    graphs_on(fd_subject)
    largest = max(fd_case.capture_sizes)
    fd_subject.eager_forward(fd_subject.make_inputs(largest))  # warm-up: lazy library state is not graph memory
    baseline = settled_memory(fd_runtime)
    with recorded(fd_runtime) as recorder:
        refs = capture_to_clear(fd_case, fd_subject, fd_verdict)
        buffers = graph_memory_refs(fd_subject)  # before the clear: whose graphs' buffers they are
        clear_and_check(recorder, fd_subject, fd_verdict)
    fd_verdict.extend(f for f in recorder_findings(recorder) if f.code == "FDC203")  # order is C3's
    add_alive_graph_findings(fd_verdict, alive_graphs(refs), clears_of(fd_subject), fd_subject)
    after = settled_memory(fd_runtime)
    resolution = memory_resolution(fd_runtime)
    # Reserved as well as allocated: an output buffer kept alive is a few KiB allocated but pins
    # its graph's whole private pool segment, which only the reserved figure shows.
    held = {
        "allocated": after.allocated - baseline.allocated,
        "reserved": after.reserved - baseline.reserved,
    }
    figures = (
        f"allocated {baseline.allocated} -> {after.allocated} B, reserved {baseline.reserved} -> {after.reserved} B "
        f"from the post-warm-up baseline to after clear; resolution {resolution} B"
    )
    if after.graphs is not None and baseline.graphs is not None:
        # Judge graph memory alone where the runtime can attribute bytes (host emulation's graph
        # outputs, a torch device's graph pools): a copy or a static input buffer the engine keeps
        # outside its graphs on purpose is not a clear leak.
        held = {"allocated": after.graphs - baseline.graphs}
        figures = f"graph memory {baseline.graphs} -> {after.graphs} B from before capture to after clear"
        if after.graphs_reserved is not None and baseline.graphs_reserved is not None:
            held["reserved"] = after.graphs_reserved - baseline.graphs_reserved
            figures = (
                f"graph-pool memory allocated {baseline.graphs} -> {after.graphs} B, reserved {baseline.graphs_reserved} "
                f"-> {after.graphs_reserved} B from the post-warm-up baseline to after clear; resolution {resolution} B"
            )
    over = {kind: delta for kind, delta in held.items() if delta >= resolution}
    # Memory is judged only once no graph is alive: a live graph holds its pool by definition,
    # and FDC203 already names it (one defect, one finding).
    if "FDC203" not in fd_verdict.error_codes and over:
        unit = "bytes" if fd_runtime.graphs_are_real else "host-tracked graph-output bytes"
        amount = ", ".join(
            f"{delta} {unit} {kind}" if fd_runtime.graphs_are_real else f"{delta} {unit}" for kind, delta in over.items()
        )
        fd_verdict.add(memory_leak_finding(fd_subject, amount, memory_holders(buffers), figures))
    fd_verdict.conclude()


def test_clear_before_capture_and_twice(fd_subject: Any, fd_verdict: CheckVerdict) -> None:
    require_clear_methods(fd_subject)
    graphs_on(fd_subject)
    clear_each(fd_verdict, fd_subject, "before any capture")
    fd_subject.runner.capture_model()
    if clear_each(fd_verdict, fd_subject, "after capture (first clear)"):
        clear_each(fd_verdict, fd_subject, "again (clear twice)")
    fd_verdict.conclude()


def clear_each(verdict: CheckVerdict, subject: Any, when: str) -> bool:
    """Each wrapper's clear on its own, so FDC303 names the one that raised (main or draft, its
    class and the spelling called); whether every one succeeded."""
    from fd_conformance.protocol import CANONICAL, LEGACY, resolve_clear_method

    ok = True
    for role, model in models_of(subject):
        method = resolve_clear_method(model)
        assert method is not None, f"{type(model).__qualname__}: require_clear_methods() must run first"
        spelling = CANONICAL if hasattr(model, CANONICAL) else LEGACY
        call = f"{type(model).__qualname__}.{spelling}()"
        ok &= guarded(verdict, CLEAR_RAISED, f"{role} wrapper {call} {when}", partial(kit_call, subject, call, method), call=call)
    return ok


def capture_to_clear(case: ModelCase, subject: Any, verdict: CheckVerdict) -> list[Any]:
    """capture_model() and a step per declared size, main and draft (graphs may be captured lazily
    on forward); weak references to the graphs that now exist -- failing with FDC306 naming each
    model when there are none (nothing to clear: the check would pass vacuously)."""
    subject.runner.capture_model()
    for size in step_sizes(case, subject):
        subject.forward(subject.make_inputs(size))
    refs = graph_refs(subject)
    if not refs:
        after = f"{type(subject.runner).__qualname__}.capture_model() and a forward per capture size"
        verdict.extend(no_graph_findings(case, subject, [role for role, _ in models_of(subject)], after))
        verdict.conclude()
    return refs


def clears_of(subject: Any) -> str:
    """``Glm4Moe.clear_graph_opt_backend() and Glm4MTP.clear_graph_opt_backend()``: what clear_each calls."""
    return " and ".join(clear_call_name(model) for _, model in models_of(subject))


def clear_and_check(recorder: Any, subject: Any, verdict: CheckVerdict, flags: str = "") -> None:
    """Every model's clear, then FDC203 for any graph still alive, named with the object holding it.
    A clear that raises fails the check with FDC303 naming it: the graphs it left would restate it."""
    after = clears_of(subject) + flags
    with recorder.judging(after, holder_names(subject)):
        if not clear_each(verdict, subject, f"after capture{flags}"):
            verdict.conclude()
        recorder.check_cleared(after=after)


@pytest.mark.parametrize("switched_off", FLAG_FLIPS)
def test_clear_whatever_the_flags(
    fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict, switched_off: tuple[str, ...]
) -> None:
    """Capture with every flag on, switch ``switched_off`` off, clear: no graph may survive. A
    clear written as ``if not use_cudagraph: return`` strands the graphs captured before the switch."""
    if fd_subject.draft is None and "draft_model_use_cudagraph" in switched_off:
        pytest.skip(f"{fd_case.name} has no draft model (mainOff covers its one flag)")
    require_clear_methods(fd_subject)
    graphs_on(fd_subject)
    flags = f" with {' and '.join(switched_off)} off"
    with recorded(fd_runtime) as recorder:
        refs = capture_to_clear(fd_case, fd_subject, fd_verdict)
        for flag in switched_off:
            setattr(fd_subject.runner, flag, False)
        clear_and_check(recorder, fd_subject, fd_verdict, flags)
    fd_verdict.extend(f for f in recorder_findings(recorder) if f.code == "FDC203")
    add_alive_graph_findings(fd_verdict, alive_graphs(refs), clears_of(fd_subject) + flags, fd_subject)
    fd_verdict.conclude()
