"""C2 clear: after clear_graph_opt_backend() no graph of the model (main or draft) is alive
(FDC203) and graph memory is back to the post-warm-up baseline (FDC302; 4 KiB resolution on a
GPU, exact tracked bytes under host emulation); clearing before any capture and clearing twice
are safe no-ops (FDC303); and clear destroys every graph the model owns whatever its graph flag
says NOW (FDC203): engines switch flags at run time, after graphs were captured under them."""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.findings import Location, make_finding
from fd_conformance.runtime.base import Runtime
from fd_conformance.suite._support import (
    add_alive_graph_findings,
    alive_graphs,
    clear_models,
    graph_refs,
    graphs_on,
    guarded,
    memory_resolution,
    recorded,
    recorder_findings,
    require_clear_methods,
    settled_memory,
)
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("clear")

# Which runner flags are switched off between capture and clear; "draft" ones skip without a draft.
FLAG_FLIPS = [
    pytest.param(("use_cudagraph",), id="mainOff"),
    pytest.param(("draft_model_use_cudagraph",), id="draftOff"),
    pytest.param(("use_cudagraph", "draft_model_use_cudagraph"), id="bothOff"),
]
SAFE_CLEAR_HINT = "make clear_graph_opt_backend() a no-op when there is no backend or no graph yet (no AttributeError)"


def test_clear_releases_graphs_and_memory(
    fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict
) -> None:
    require_clear_methods(fd_subject)
    graphs_on(fd_subject)
    largest = max(fd_case.capture_sizes)
    fd_subject.eager_forward(fd_subject.make_inputs(largest))  # warm-up: lazy library state is not graph memory
    baseline = settled_memory(fd_runtime)
    with recorded(fd_runtime) as recorder:
        refs = capture_to_clear(fd_case, fd_subject)
        clear_models(fd_subject)
        recorder.check_cleared()  # FDC203 for any graph still alive, named with its owner
    fd_verdict.extend(f for f in recorder_findings(recorder) if f.code == "FDC203")  # order is C3's
    add_alive_graph_findings(fd_verdict, alive_graphs(refs), "clear_graph_opt_backend()")
    after = settled_memory(fd_runtime)
    resolution = memory_resolution(fd_runtime)
    # Reserved as well as allocated: an output buffer kept alive is a few KiB allocated but pins
    # its graph's whole private pool segment, which only the reserved figure shows.
    held = {
        "allocated": after.allocated - baseline.allocated,
        "reserved": after.reserved - baseline.reserved,
    }
    if after.graphs is not None and baseline.graphs is not None:
        # Host emulation can attribute bytes: judge graph memory alone (a copy the model keeps
        # outside its graphs is not a clear leak; a GPU cannot tell the two apart).
        held = {"allocated": after.graphs - baseline.graphs}
    over = {kind: delta for kind, delta in held.items() if delta >= resolution}
    # Memory is judged only once no graph is alive: a live graph holds its pool by definition,
    # and FDC203 already names it (one defect, one finding).
    if "FDC203" not in fd_verdict.error_codes and over:
        unit = "bytes" if fd_runtime.graphs_are_real else "host-tracked graph-output bytes"
        fd_verdict.add(
            make_finding(
                "FDC302",
                f"{', '.join(f'{delta} {kind}' for kind, delta in over.items())} {unit} still held after clear "
                f"(baseline {baseline}, after {after}, resolution {resolution})",
                "drop every graph's output buffers and memory pool in clear, then empty the allocator cache",
                Location(obj=fd_case.name),
            )
        )
    fd_verdict.conclude()


def test_clear_before_capture_and_twice(fd_subject: Any, fd_verdict: CheckVerdict) -> None:
    require_clear_methods(fd_subject)
    graphs_on(fd_subject)
    guarded(fd_verdict, "FDC303", "clear before any capture", SAFE_CLEAR_HINT, lambda: clear_models(fd_subject))
    fd_subject.runner.capture_model()
    if guarded(fd_verdict, "FDC303", "first clear after capture", SAFE_CLEAR_HINT, lambda: clear_models(fd_subject)):
        guarded(fd_verdict, "FDC303", "second clear (clear twice)", SAFE_CLEAR_HINT, lambda: clear_models(fd_subject))
    fd_verdict.conclude()


def capture_to_clear(case: ModelCase, subject: Any) -> list[Any]:
    """capture_model() and a step per size (graphs may be captured lazily on forward); weak
    references to the graphs that now exist -- failing in one line when there are none."""
    subject.runner.capture_model()
    for size in case.capture_sizes:
        subject.forward(subject.make_inputs(size))
    refs = graph_refs(subject)
    if not refs:
        pytest.fail(f"{case.name}: capture_model() captured no graph; nothing to clear", pytrace=False)
    return refs


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
    with recorded(fd_runtime) as recorder:
        refs = capture_to_clear(fd_case, fd_subject)
        for flag in switched_off:
            setattr(fd_subject.runner, flag, False)
        clear_models(fd_subject)
        recorder.check_cleared()
    fd_verdict.extend(f for f in recorder_findings(recorder) if f.code == "FDC203")
    add_alive_graph_findings(fd_verdict, alive_graphs(refs), f"clear_graph_opt_backend() with {' and '.join(switched_off)} off")
    fd_verdict.conclude()
