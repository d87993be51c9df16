"""C4 under the ``in_place`` contract: the engine keeps its graphs across a weight update and writes
the new weights into the tensors they captured (vLLM's sleep level 1 and reload, SGLang's
update_weights_from_tensor, FastDeploy's update_weights).

Why a cycle of its own: keeping the graphs is the design there, so FDC203 (graph alive after
clear) does not apply; the defect of that design is a tensor the graphs captured that the update
REPLACES instead of overwriting (a transposed, fused or quantised weight or a scale re-created by
post-load processing, a parameter whose storage is swapped): every replay after it serves the old
weights. Each cycle is judged three ways, and no finding stops the others: a captured tensor the
model held at capture is no longer the model's after the update (FDC204, naming the tensor and the
step), a replay at any size differs from eager with the new weights (FDC304), a release under a
live graph the recorder saw (FDC201/FDC202); memory must not grow over the cycles (FDC305).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fd_conformance.cases import ModelCase
from fd_conformance.findings import Location, make_finding
from fd_conformance.runtime.base import Runtime, StaleGraphError
from fd_conformance.suite._support import (
    compare_outputs,
    exception_finding,
    grows,
    holder_names,
    memory_resolution,
    models_named,
    models_of,
    recorded,
    recorder_findings,
    settled_allocated,
)
from fd_conformance.verdict import NOT_JUDGED, CheckVerdict

#: The runner method an ``in_place`` case updates its weights through (new weights -> None).
UPDATE_METHOD = "update_weights"


def _modules(model: Any) -> Iterator[tuple[str, Any]]:
    """(dotted name, module) of ``model`` and everything under it, torch or Paddle."""
    if hasattr(model, "named_modules"):
        yield from model.named_modules()
    elif hasattr(model, "named_sublayers"):
        yield from model.named_sublayers(include_self=True)
    else:
        yield "", model


def model_tensors(subject: Any) -> dict[int, str]:
    """id -> dotted name of every tensor a model holds: parameters, buffers and plain tensor
    attributes (where derived weights live), for each model of the subject."""
    held: dict[int, str] = {}
    for role, model in models_of(subject):
        for prefix, module in _modules(model):
            owned = {**getattr(module, "_parameters", {}), **getattr(module, "_buffers", {}), **vars(module)}
            for attr, value in owned.items():
                if value is not None and hasattr(value, "shape") and not isinstance(value, type):
                    held.setdefault(id(value), f"{role}:{prefix + '.' if prefix else ''}{attr}")
    return held


def captured_model_tensors(subject: Any, held: dict[int, str]) -> list[tuple[str, str, Any]]:
    """(graph label, tensor's name in the model, tensor) for every tensor a live graph captured that
    a model holds now: what an in-place update must keep (same object, same memory)."""
    found = []
    for graph in subject.graphs():
        if not getattr(graph, "alive", True):
            continue
        for _, tensor in getattr(graph, "captured_buffers", ()):
            name = held.get(id(tensor))
            if name is not None:
                found.append((getattr(graph, "label", "?"), name, tensor))
    return found


def run_in_place_cycles(case: ModelCase, runtime: Runtime, subject: Any, verdict: CheckVerdict, cycles: int) -> None:
    """Capture once, then ``cycles`` times: update in place, judge, replay every size against eager."""
    runner = subject.runner
    name = type(runner).__qualname__
    update = getattr(runner, UPDATE_METHOD, None)
    if update is None:
        import pytest

        pytest.skip(f"{NOT_JUDGED}: {name} has no {UPDATE_METHOD}(new_weights), the door of the in_place contract")
    models = models_named(subject)
    sizes = sorted(case.capture_sizes, reverse=True)
    inputs = {size: subject.make_inputs(size, seed=size) for size in sizes}
    held: list[int] = []
    seen: set[tuple[str, str]] = set()  # (code, what): one finding per defect, not one per cycle

    def add(finding: Any, key: str) -> None:
        if (finding.code, key) not in seen:
            seen.add((finding.code, key))
            verdict.add(finding)

    with recorded(runtime) as recorder:
        runner.capture_model()
        for cycle in range(1, cycles + 1):
            step = f"weight cycle {cycle}: {name}.{UPDATE_METHOD}()"
            before = captured_model_tensors(subject, model_tensors(subject))
            with recorder.judging(step, holder_names(subject)):
                update(subject.new_weights(seed=cycle))
            still = model_tensors(subject)
            for label, tensor_name, tensor in before:
                if id(tensor) not in still:
                    add(
                        make_finding(
                            "FDC204",
                            f"graph {label!r} captured {tensor_name} and {step} replaced it with a new tensor: the "
                            "graph keeps reading the old one, so every replay after the update serves the old weights",
                            Location(obj=tensor_name),
                        ),
                        tensor_name,
                    )
            for size in sizes:
                what = f"cycle {cycle}, {size} tokens after {name}.{UPDATE_METHOD}() ({models})"
                try:
                    got = subject.forward(inputs[size])
                except StaleGraphError as err:  # host emulation refuses what a GPU replays from stale memory
                    add(exception_finding("FDC204", err, what), f"stale@{size}")
                    add(exception_finding("FDC304", err, what), f"stale@{size}")
                    continue
                for finding in compare_outputs(
                    runtime, got, subject.eager_forward(inputs[size]), case.tolerances, "FDC304", what
                ):
                    add(finding, f"{size}:{finding.location.obj}")
            for finding in recorder_findings(recorder):
                if finding.code in ("FDC201", "FDC202", "FDC204"):
                    add(finding, finding.message)
            held.append(settled_allocated(runtime))
    resolution = memory_resolution(runtime)
    if grows(held, resolution):
        verdict.add(
            make_finding(
                "FDC305",
                f"memory grew {held[-1] - held[0]} bytes over {len(held)} in-place updates ({name}.{UPDATE_METHOD}() "
                f"with {models}; held after each: {held}; resolution {resolution}): the update keeps something per cycle",
                Location(obj=f"runner {name} with {models}"),
            )
        )
    verdict.conclude()
