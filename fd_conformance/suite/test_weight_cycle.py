"""C4 weight cycle: clear -> release -> reload NEW weights -> recapture, then outputs equal the
eager forward with the new weights (FDC304); no graph replays stale buffers (FDC204); the
teardown-order rules hold at EVERY cycle's clear_parameters(), not only after the first capture
as C3 judges them (FDC201/FDC202/FDC203, named with the cycle: a runner that keeps the first
capture's graph list clears nothing it captured since); and --fd-cycles cycles (default 5) do not
grow memory (FDC305). A case under the ``in_place`` contract (graphs kept across the update) is
judged by :mod:`._in_place` instead."""

from __future__ import annotations

from typing import Any

import pytest

from fd_conformance.cases import ModelCase
from fd_conformance.findings import Location, make_finding
from fd_conformance.runtime.base import Runtime, StaleGraphError
from fd_conformance.suite._in_place import run_in_place_cycles
from fd_conformance.suite._support import (
    call_or_conclude,
    compare_outputs,
    exception_finding,
    graphs_on,
    grows,
    holder_names,
    memory_resolution,
    models_named,
    recorded,
    recorder_findings,
    require_clear_methods,
    settled_allocated,
    teardown_findings,
)
from fd_conformance.suite.test_clear import CLEAR_RAISED
from fd_conformance.verdict import CheckVerdict

pytestmark = pytest.mark.conformance("weight_cycle")


def test_weight_cycle(fd_case: ModelCase, fd_runtime: Runtime, fd_subject: Any, fd_verdict: CheckVerdict, fd_cycles: int) -> None:
    graphs_on(fd_subject)
    if fd_case.weight_update == "in_place":
        run_in_place_cycles(fd_case, fd_runtime, fd_subject, fd_verdict, fd_cycles)
        return
    require_clear_methods(fd_subject)
    runner = fd_subject.runner
    name = type(runner).__qualname__
    models = models_named(fd_subject)
    sizes = sorted(fd_case.capture_sizes, reverse=True)
    inputs = {size: fd_subject.make_inputs(size, seed=size) for size in sizes}
    held: list[int] = []
    # One recorder over the whole run: a stale replay is judged against the capture it came from,
    # which may be the initial one (a runner that never recaptures).
    with recorded(fd_runtime) as recorder:
        runner.capture_model()
        for cycle in range(1, fd_cycles + 1):
            since = len(recorder_findings(recorder))
            with recorder.judging(f"{name}.clear_parameters()", holder_names(fd_subject)):
                call_or_conclude(fd_verdict, CLEAR_RAISED, fd_subject, f"{name}.clear_parameters()", runner.clear_parameters)
            teardown = teardown_findings(recorder, fd_subject, since, f"weight cycle {cycle}")
            if teardown:
                # What follows (stale replays, recapture over live graphs) would only restate it.
                fd_verdict.extend(teardown)
                break
            with recorder.judging(
                f"weight cycle {cycle}: {name}.update_parameters() and a forward per size", holder_names(fd_subject)
            ):
                runner.update_parameters(fd_subject.new_weights(seed=cycle))
                for size in sizes:
                    try:
                        got = fd_subject.forward(inputs[size])
                    except StaleGraphError as err:
                        # Host emulation refuses the stale replay a GPU would run on freed memory; either
                        # way no output equals eager with the new weights, so both codes, on both devices.
                        during = f"cycle {cycle} replay at {size} tokens after {name}.update_parameters() ({models})"
                        fd_verdict.add(exception_finding("FDC204", err, during))
                        fd_verdict.add(exception_finding("FDC304", err, during))
                        break
                    want = fd_subject.eager_forward(inputs[size])
                    what = f"cycle {cycle}, {size} tokens after {name}.update_parameters() ({models})"
                    fd_verdict.extend(compare_outputs(fd_runtime, got, want, fd_case.tolerances, "FDC304", what))
            seen = set(fd_verdict.error_codes)
            # Only stale replays are this check's; teardown order is C3's (one defect, one check).
            fd_verdict.extend(f for f in recorder_findings(recorder) if f.code == "FDC204" and f.code not in seen)
            if fd_verdict.error_codes:
                break  # the same defect repeats every cycle; one cycle's findings say it
            held.append(settled_allocated(fd_runtime))
    resolution = memory_resolution(fd_runtime)
    if grows(held, resolution):
        # The allocator cannot tell owners apart: the finding names every object the cycle ran.
        steps = f"{name}.clear_parameters() -> update_parameters() -> forward"
        fd_verdict.add(
            make_finding(
                "FDC305",
                f"memory grew {held[-1] - held[0]} bytes over {len(held)} weight cycles of {steps} with {models} "
                f"(held after each: {held}; resolution {resolution}): the runner or a wrapper keeps something per cycle",
                Location(obj=f"runner {name} with {models}"),
            )
        )
    fd_verdict.conclude()
