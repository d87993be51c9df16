"""Lifecycle rules FDC201-FDC204, each tripped by a wrong order of real runtime calls (torch CPU,
host graphs, a real gloo group) and silent on the right order. A GPU test repeats FDC204 where a
stale replay does not raise but computes garbage."""

from __future__ import annotations

import functools
import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # the whole file needs torch: skip it cleanly without

from _helpers import torch_cpu_runtime  # noqa: E402

from fd_conformance.findings import Finding  # noqa: E402
from fd_conformance.lifecycle import LifecycleRecorder, format_event  # noqa: E402
from fd_conformance.runtime.base import CLEAR_BEGIN_MARK, CLEAR_END_MARK, EventKind, Graph, StaleGraphError  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime, create  # noqa: E402


class TinyModel:
    """A main model and an MTP-like draft sharing the embedding, each owning one graph."""

    def __init__(self, rt: TorchRuntime) -> None:
        torch.manual_seed(0)
        self.rt = rt
        self.embed = torch.nn.Parameter(torch.randn(8, 8))  # shared by main and draft
        self.main_w = torch.nn.Parameter(torch.randn(8, 8))
        self.draft_w = torch.nn.Parameter(torch.randn(8, 8))
        self.x = torch.randn(2, 8)
        self.graphs: dict[str, Graph] = {}

    def params(self) -> dict[str, torch.nn.Parameter]:
        return {"embed": self.embed, "main_w": self.main_w, "draft_w": self.draft_w}

    def capture(self, owner: str, group: Any = None) -> Any:
        weight = self.main_w if owner == "main" else self.draft_w
        names = {"embed": self.embed, f"{owner}_w": weight}

        def step() -> torch.Tensor:
            y = self.x @ self.embed @ weight
            if group is not None:
                group.all_reduce(y)
            return y

        graph = self.rt.new_graph(f"{owner}-decode-2", owner=owner)
        self.graphs[owner] = graph
        return graph.capture(step, buffers=names, groups=[group] if group is not None else [])

    def clear(self, owner: str) -> None:
        self.rt.events.mark(CLEAR_BEGIN_MARK, owner=owner)
        self.graphs[owner].reset()
        self.rt.events.mark(CLEAR_END_MARK, owner=owner)

    def release_all(self) -> None:
        for name, param in self.params().items():
            self.rt.release_parameter(param, name)


@pytest.fixture
def rt() -> TorchRuntime:
    return torch_cpu_runtime()


def _codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


# --- FDC201 -------------------------------------------------------------------------------


def test_fdc201_draft_cleared_after_weight_release(rt: TorchRuntime) -> None:
    """The MTP defect: main graphs cleared, weights released, THEN the draft's graphs cleared."""
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        model.capture("draft")
        model.clear("main")
        model.release_all()
        model.clear("draft")
    findings = rec.findings()
    # embed and draft_w are both captured by the draft graph: ONE finding for that graph, naming both.
    assert _codes(findings) == ["FDC201"]
    first = findings[0]
    assert "'draft-decode-2'" in first.message and "owner draft" in first.message
    assert "2 parameters it captured were released ('embed', 'draft_w'" in first.message
    assert "param_released" in first.message
    assert first.location.obj == "graph 'draft-decode-2' (owner draft)"
    assert first.format().startswith("graph 'draft-decode-2' (owner draft): FDC201 ")


def test_fdc201_is_one_finding_per_graph_capture_however_many_parameters(rt: TorchRuntime) -> None:
    """A release loop frees every parameter: 3 live graphs x 40 parameters is 3 findings (one per
    graph, with the count and the first names), not 120 -- one defect must read as one finding."""
    params = {f"layers.{i}.weight": torch.nn.Parameter(torch.randn(4, 4)) for i in range(40)}
    x = torch.randn(2, 4)
    graphs = [rt.new_graph(f"decode-{n}", owner="lm") for n in (4, 2, 1)]
    for graph in graphs:
        graph.capture(lambda: sum(x @ p for p in params.values()), buffers=params)
    with LifecycleRecorder(rt) as rec:
        for graph in graphs:  # re-capture under the recorder: it only judges graphs it saw captured
            graph.reset()
            graph.capture(lambda: sum(x @ p for p in params.values()), buffers=params)
        for name, param in params.items():
            rt.release_parameter(param, name)
    findings = rec.findings()
    assert _codes(findings) == ["FDC201"] * 3
    assert [f.location.obj for f in findings] == [f"graph 'decode-{n}' (owner lm)" for n in (4, 2, 1)]
    message = findings[0].message
    assert (
        "40 parameters it captured were released ('layers.0.weight', 'layers.1.weight', 'layers.2.weight' and 37 more" in message
    )
    assert "first at #" in message and "param_released 'layers.0.weight'" in message


def test_fdc201_silent_when_graphs_cleared_first(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        model.capture("draft")
        model.clear("draft")
        model.clear("main")
        model.release_all()
    assert rec.findings() == []
    assert rec.live_graphs() == []


# --- FDC202 -------------------------------------------------------------------------------


def test_fdc202_group_shut_down_under_a_live_graph(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    group = rt.new_group("tp")
    with LifecycleRecorder(rt) as rec:
        model.capture("draft", group=group)
        rt.shutdown_group(group)
        model.clear("draft")
    [finding] = rec.findings()
    assert finding.code == "FDC202"
    assert "'draft-decode-2' (owner draft" in finding.message and "group 'tp'" in finding.message
    assert "group_shutdown" in finding.message


def test_fdc202_silent_when_graph_destroyed_before_shutdown(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    group = rt.new_group("tp")
    with LifecycleRecorder(rt) as rec:
        model.capture("draft", group=group)
        model.clear("draft")
        rt.shutdown_group(group)
        again = rt.new_group("tp")  # restart, as update_parameters does
        model.capture("draft", group=again)
        model.clear("draft")
        rt.shutdown_group(again)
    assert rec.findings() == []


# --- FDC203 -------------------------------------------------------------------------------


def test_fdc203_check_cleared_reports_the_graph_left_alive(rt: TorchRuntime) -> None:
    """The guard defect: main graphs off, draft graphs on, clear only looks at the main flag."""
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("draft")
        found = rec.check_cleared()
    assert _codes(found) == ["FDC203"] and rec.findings() == found
    assert "'draft-decode-2' (owner draft" in found[0].message
    assert rec.check_cleared(owner="main") == []  # filtered by owner


def test_fdc203_check_cleared_silent_after_reset_or_drop(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        model.capture("draft")
        model.graphs["main"].reset()
        model.graphs.clear()  # the draft's graph is dropped, not reset: FastDeploy clears this way
        assert rec.check_cleared() == []
    assert rec.findings() == []


def _ones_times_len(items: list[Any]) -> torch.Tensor:
    return torch.ones(2) * len(items)


def test_fdc203_unreachable_graph_in_a_cycle_counts_as_destroyed(rt: TorchRuntime) -> None:
    """Only the garbage collector frees a graph caught in a reference cycle; the rule runs it."""
    gc.disable()  # so the cycle survives until the recorder collects it
    try:
        with LifecycleRecorder(rt) as rec:
            graph = rt.new_graph("cyclic", owner="draft")
            graph.capture(functools.partial(_ones_times_len, [graph]))  # fn -> [graph] -> graph -> fn
            del graph
            assert [g.label for g in rec.live_graphs()] == ["cyclic"]  # not yet collected
            rt.events.mark(CLEAR_END_MARK, owner="draft")
            assert rec.check_cleared() == []
        assert rec.findings() == [] and rec.live_graphs() == []
    finally:
        gc.enable()


def test_fdc203_mark_rule_fires_only_for_that_owner(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        model.capture("draft")
        rt.events.mark(CLEAR_END_MARK, owner="main")  # main's clear "ran" but reset nothing
        model.clear("draft")  # right: no finding for the draft
    [finding] = rec.findings()
    assert finding.code == "FDC203" and "'main-decode-2' (owner main" in finding.message
    assert "clear_graph_opt_backend:end" in finding.message


def test_fdc203_mark_without_owner_means_every_graph(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        model.capture("draft")
        model.graphs["main"].reset()
        rt.events.mark(CLEAR_END_MARK)
    assert [f.location.obj for f in rec.findings()] == ["graph 'draft-decode-2' (owner draft)"]


# --- FDC204 -------------------------------------------------------------------------------


def test_fdc204_replay_after_reload_without_recapture(rt: TorchRuntime) -> None:
    """The stale-graph defect: update_parameters reloads weights but does not recapture."""
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        graph = model.graphs["main"]
        rt.release_parameter(model.main_w, "main_w")  # (FDC201 too: the graph is alive)
        rt.restore_parameter(model.main_w, torch.ones(8, 8), "main_w")
        with pytest.raises(StaleGraphError):  # the host emulation refuses; a GPU would not
            graph.replay()
        with pytest.raises(StaleGraphError):
            graph.replay()
    assert _codes(rec.findings()) == ["FDC201", "FDC204"]  # one FDC204 per stale capture
    stale = rec.findings()[1]
    assert "'main_w' replaced" in stale.message and "graph_replayed" in stale.message


def test_fdc204_reports_a_released_buffer(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    model.capture("main")
    graph = model.graphs["main"]
    with LifecycleRecorder(rt) as rec:
        graph.reset()
        graph.capture(lambda: model.x @ model.main_w, buffers={"main_w": model.main_w})
        rt.release_parameter(model.main_w, "main_w")
        with pytest.raises(StaleGraphError):
            graph.replay()
    assert _codes(rec.findings()) == ["FDC201", "FDC204"]
    assert "'main_w' released" in rec.findings()[1].message


def test_fdc204_silent_after_recapture_and_in_place_update(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        out = model.capture("main")
        with torch.no_grad():
            model.main_w.mul_(2)  # same address: a real graph sees it, not stale
        model.graphs["main"].replay()
        model.clear("main")
        model.release_all()
        for name, param in model.params().items():
            rt.restore_parameter(param, torch.full((8, 8), 0.5), name)
        out = model.capture("main")
        model.graphs["main"].replay()
        torch.testing.assert_close(out, model.x @ model.embed @ model.main_w)
    assert rec.findings() == []


# --- the recorder itself -------------------------------------------------------------------


def test_recorder_records_in_order_and_stops_on_exit(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        assert [g.label for g in rec.live_graphs()] == ["main-decode-2"]
        assert rec.live_graphs("draft") == []
        model.clear("main")
    model.capture("draft")  # after exit: not recorded
    kinds = [e.kind for e in rec.events]
    assert kinds == [EventKind.GRAPH_CAPTURED, EventKind.MARK, EventKind.GRAPH_DESTROYED, EventKind.MARK]
    assert [e.seq for e in rec.events] == sorted(e.seq for e in rec.events)
    assert rec.last_event is not None and format_event(rec.last_event).endswith("mark 'clear_graph_opt_backend:end' [main]")
    assert rt.events.listeners == []
    gc.collect()


# --- naming: which object holds the graph, during which call (issue 36.7 c) ----------------------


class Engine:
    """A runner whose clear_parameters() releases weights before the draft's graph is destroyed."""

    def __init__(self, rt: TorchRuntime, model: TinyModel, group: Any) -> None:
        self.rt, self.model, self.group = rt, model, group

    def clear_parameters(self) -> None:
        self.model.clear("main")
        self.rt.shutdown_group(self.group)
        self.model.release_all()
        self.model.clear("draft")


def test_findings_made_while_judging_name_the_holder_and_the_call(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    group = rt.new_group("tp")
    asked: list[list[int]] = []

    def holders(graph_ids: Any) -> dict[int, str]:  # the suites pass suite._support.holder_names(subject)
        asked.append(list(graph_ids))
        return {id(graph): f"the {owner} model Acme{owner.title()}" for owner, graph in model.graphs.items()}

    with LifecycleRecorder(rt) as rec:
        model.capture("main")
        model.capture("draft", group=group)
        with rec.judging("Engine.clear_parameters()", holders):
            Engine(rt, model, group).clear_parameters()
        other = TinyModel(rt)
        other.capture("main")
        rt.release_parameter(other.main_w, "main_w")  # after the block: named as before
    fdc202, fdc201, after = rec.findings()
    assert (fdc202.code, fdc201.code, after.code) == ("FDC202", "FDC201", "FDC201")
    for finding in (fdc202, fdc201):
        assert "'draft-decode-2' (owner draft, captured at event #" in finding.message
        assert "), held by the draft model AcmeDraft, was alive when " in finding.message
        assert finding.message.endswith(" during Engine.clear_parameters()")
    assert len(asked) == 1  # asked once, at the first finding, for every graph alive then
    assert " held by " not in after.message and " during " not in after.message


def test_check_cleared_while_judging_names_the_holder(rt: TorchRuntime) -> None:
    model = TinyModel(rt)
    with LifecycleRecorder(rt) as rec:
        model.capture("draft")
        with rec.judging("AcmeDraft.clear_graph_opt_backend()", lambda ids: dict.fromkeys(ids, "the draft model AcmeDraft")):
            (found,) = rec.check_cleared(after="AcmeDraft.clear_graph_opt_backend()")
    assert "held by the draft model AcmeDraft, is still alive after AcmeDraft.clear_graph_opt_backend()" in found.message


# --- GPU ---------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_gpu_stale_replay_gives_wrong_output_and_fdc204() -> None:
    rt = create("cuda")
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64).cuda()
    x = torch.randn(4, 64, device="cuda")
    new_weight = (-3.0 * lin.weight.detach() + 1.0).clone()  # made before release: no reuse games
    stream = torch.cuda.Stream()  # side-stream warm-up, as torch's CUDA-graph docs prescribe
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        for _ in range(3):
            lin(x)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with LifecycleRecorder(rt) as rec:
        graph = rt.new_graph("decode-4")
        out = graph.capture(lambda: lin(x), buffers=dict(lin.named_parameters()))
        rt.release_parameter(lin.weight, "weight")
        rt.restore_parameter(lin.weight, new_weight, "weight")
        graph.replay()  # no error on a GPU: the graph reads the old (freed) block
        rt.synchronize()
        with torch.no_grad():
            expected = lin(x)
        stale_output = out.clone()
        graph.reset()
    print(f"\nmax |stale replay - eager(new weights)| = {(stale_output - expected).abs().max().item():.4f}")
    assert not torch.allclose(stale_output, expected, rtol=1e-3, atol=1e-3)
    assert [f.code for f in rec.findings()] == ["FDC201", "FDC204"]
