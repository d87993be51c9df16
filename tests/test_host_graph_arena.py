"""Issue 24 item 8: host emulation counts as graph memory only what the capture allocated.

A graph that writes into memory allocated before the capture began (a persistent logits arena,
a static input handed back) does not own that memory: on a GPU it lives outside the graph's
private pool and stays in the baseline, so clearing the graphs cannot "leak" it. Counting it (as
the ledger did) made a correct engine fail FDC302 on CPU while it certified on the H200.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")  # the whole file needs torch: skip it cleanly without

from _helpers import torch_cpu_runtime  # noqa: E402

from fd_conformance.runtime.host_graph import HostGraph, tensors_reachable  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime  # noqa: E402

GLOBAL_ARENA = torch.zeros(4, 8)  # an arena a captured function reaches through its module globals


@pytest.fixture
def rt() -> TorchRuntime:
    return torch_cpu_runtime()


def graph_bytes(rt: TorchRuntime) -> int:
    gc.collect()
    graphs = rt.memory_stats().graphs
    assert graphs is not None  # host emulation attributes graph memory
    return graphs


class Engine:
    """Owns an arena allocated with its weights; captured steps write into it."""

    def __init__(self) -> None:
        self.weight = torch.randn(8, 8)
        self.arena = torch.zeros(4, 8)

    def write_whole(self, x: torch.Tensor) -> torch.Tensor:
        self.arena[: x.shape[0]].copy_(x @ self.weight)
        return self.arena

    def write_view(self, x: torch.Tensor) -> torch.Tensor:
        self.arena[: x.shape[0]].copy_(x @ self.weight)
        return self.arena[: x.shape[0]]

    def fresh(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def test_an_arena_the_graph_writes_into_is_not_graph_memory(rt: TorchRuntime) -> None:
    engine = Engine()
    x = torch.randn(2, 8)
    for capture in (lambda: engine.write_whole(x), lambda: engine.write_view(x)):  # the arena, a view of it
        graph = rt.new_graph("arena")
        out = graph.capture(capture)
        assert isinstance(graph, HostGraph) and graph.graph_memory == []
        assert graph_bytes(rt) == 0
        graph.replay()
        torch.testing.assert_close(out[:2], x @ engine.weight)
        graph.reset()
    assert graph_bytes(rt) == 0  # the engine still holds its arena: no leak after clear


def test_a_bound_method_and_a_global_arena_are_found_too(rt: TorchRuntime) -> None:
    engine = Engine()
    x = torch.randn(2, 8)

    class Step:
        def __init__(self, engine: Engine, x: torch.Tensor) -> None:
            self.engine, self.x = engine, x

        def run(self) -> torch.Tensor:
            return self.engine.write_whole(self.x)

    graph = rt.new_graph("bound")
    graph.capture(Step(engine, x).run)  # reached through the bound method's object
    assert graph.graph_memory == [] and graph_bytes(rt) == 0

    def into_global() -> torch.Tensor:
        GLOBAL_ARENA[:2].copy_(x @ engine.weight)
        return GLOBAL_ARENA

    other = rt.new_graph("global")
    other.capture(into_global)  # reached through the captured function's globals
    assert other.graph_memory == [] and graph_bytes(rt) == 0


def test_a_fresh_output_is_graph_memory_beside_an_arena(rt: TorchRuntime) -> None:
    """The mutant's shape: a step writing into the arena and ALSO returning a new tensor; the new
    one is the graph's and, kept after reset, is exactly what FDC302 must see."""
    engine = Engine()
    x = torch.randn(2, 8)
    graph = rt.new_graph("both")
    arena, fresh = graph.capture(lambda: (engine.write_whole(x), engine.fresh(x)))
    assert [t is fresh for t in graph.graph_memory] == [True]
    assert graph_bytes(rt) == fresh.numel() * fresh.element_size()
    graph.reset()
    assert graph_bytes(rt) == fresh.numel() * fresh.element_size()  # kept by the caller: a leak
    del fresh, arena
    assert graph_bytes(rt) == 0


def test_a_static_input_returned_as_is_is_not_graph_memory(rt: TorchRuntime) -> None:
    static = torch.randn(3, 8)
    graph = rt.new_graph("passthrough")
    graph.capture(lambda: static, buffers={"static": static})
    assert graph.graph_memory == [] and graph_bytes(rt) == 0


def test_tensors_reachable_walks_closures_objects_and_containers() -> None:
    inner = torch.ones(1)
    deep = {"k": [(None, torch.zeros(2))]}
    holder: Any = type("Holder", (), {})()
    holder.cache = deep

    def fn() -> Any:
        return inner, holder

    found = tensors_reachable(fn, lambda v: isinstance(v, torch.Tensor))
    ids = {id(t) for t in found}
    assert id(inner) in ids and id(deep["k"][0][1]) in ids
