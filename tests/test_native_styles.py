"""Native mode on the ways torch users get graphs besides capturing modules themselves (issue 40).

Kiln (tests/fixtures/native_models/kiln, no kit import) gets its graphs from
``torch.compile(mode="reduce-overhead")``, a lazily filled LRU of captured runners that evicts and
falls back to eager, tensordict's ``CudaGraphModule`` (a graph cache from PyPI), and a side
stream capturing into a pool whose handle is a module global; its weights sit in
``ParameterDict`` containers the model reads but never calls. On CPU the hook layer is fed by the
graph double (``native_double``); the ``gpu`` tests run every Kiln row on real graphs.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import native_double  # noqa: E402  (tests/ is on sys.path)
from _helpers import torch_cpu_runtime  # noqa: E402

from fd_conformance.findings import RULES, Severity  # noqa: E402
from fd_conformance.lifecycle import LifecycleRecorder  # noqa: E402
from fd_conformance.runtime.base import EventKind  # noqa: E402
from fd_conformance.runtime.torch import TorchRuntime  # noqa: E402
from fd_conformance.runtime.torch_native import TorchGraphObserver  # noqa: E402

NATIVE_MODELS = Path(__file__).resolve().parent / "fixtures" / "native_models"
KILN = NATIVE_MODELS / "kiln_cases.py"
TREES = "torch._inductor.cudagraph_trees"


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> TorchRuntime:
    native_double.install(monkeypatch)
    return torch_cpu_runtime()


@pytest.fixture
def observer(rt: TorchRuntime) -> Iterator[TorchGraphObserver]:
    with rt.observe_native_graphs() as obs:
        assert isinstance(obs, TorchGraphObserver)
        yield obs


class Mats(torch.nn.Module):
    """Weights in a ParameterDict and a ParameterList, read by ``forward``, never called."""

    def __init__(self) -> None:
        super().__init__()
        self.mats = torch.nn.ParameterDict({"up": torch.nn.Parameter(torch.randn(6, 4))})
        self.bias = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(6))])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.mats["up"], self.bias[0])


def capture_mats(net: Mats, x: torch.Tensor) -> Any:
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        net(x)
    return graph


def codes(recorder: LifecycleRecorder) -> list[str]:
    return sorted(f.code for f in recorder.findings())


def subjects(recorder: LifecycleRecorder, kind: EventKind) -> list[str]:
    return [e.subject for e in recorder.events if e.kind is kind]


def test_parameter_containers_are_read_by_the_module_that_owns_them(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    """A swap inside a ParameterDict and a release inside a ParameterList under a live graph are
    seen and named (before, their owner ran but the containers' weights were not watched)."""
    net, x = Mats(), torch.randn(3, 4)
    observer.set_roots([("main", net)])
    with LifecycleRecorder(rt) as recorder:
        graph = capture_mats(net, x)
        net.mats["up"].data = torch.randn(6, 4)
        graph.replay()
        net.bias[0].untyped_storage().resize_(0)
        observer.observe("released")
    assert codes(recorder) == ["FDC201", "FDC204"]
    assert subjects(recorder, EventKind.PARAM_RESTORED) == ["mats.up"]
    assert subjects(recorder, EventKind.PARAM_RELEASED) == ["bias.0"]


# --- torch.compile's cudagraph trees, through a stand-in node (no CUDA here) ------------------------
def node_recording(graph: Any, static: list[torch.Tensor | None], inputs: list[torch.Tensor], *, pointers: bool = True) -> Any:
    """A ``CUDAGraphNode`` of torch's own class with the fields its constructor sets before it
    records (its ``__init__`` needs CUDA), and a ``_record`` compiled under the trees module's file
    name, as torch's own is: what native mode reads at capture_end."""
    trees = importlib.import_module(TREES)
    node = trees.CUDAGraphNode.__new__(trees.CUDAGraphNode)
    node.graph = graph
    if pointers:
        node.static_input_data_ptrs = [t.data_ptr() if t is not None else None for t in static]
    node.reconstructed_inputs = inputs
    node.non_static_input_idx = [i for i, t in enumerate(static) if t is None]
    node.wrapped_function = SimpleNamespace(constants=())
    source = "def _record(self, fn):\n    with torch.cuda.graph(self.graph):\n        return fn()\n"
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(source, trees.__file__, "exec"), namespace)  # a stand-in frame of torch's file
    return node, namespace["_record"]


def test_a_compiled_graph_captured_its_static_inputs_and_names_them(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    """Compiled code calls no module: the weights a cudagraph-tree node reads in place are its
    static inputs, named from the models under test; freeing one under the graph is FDC201."""
    net, x = Mats(), torch.randn(3, 4)
    observer.set_roots([("main", net)])
    weight, bias = net.mats["up"], net.bias[0]
    with LifecycleRecorder(rt) as recorder:
        graph = torch.cuda.CUDAGraph()
        node, record = node_recording(graph, [None, weight, bias], [x, weight, bias])
        with torch.no_grad():
            record(node, lambda: torch.nn.functional.linear(x, weight, bias))  # functional: no module runs
        captured = [e for e in recorder.events if e.kind is EventKind.GRAPH_CAPTURED]
        assert [sorted(ref.name for ref in e.buffers) for e in captured] == [["bias.0", "mats.up"]]
        assert captured[0].subject.startswith("CompiledGraph@3#")  # its size from the node's dynamic input
        weight.untyped_storage().resize_(0)
        observer.observe("released")
    assert codes(recorder) == ["FDC201"]
    assert observer.unknown_captures() == []


def test_a_compiled_graph_whose_node_cannot_be_read_is_unknown_not_empty(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    """A torch whose node no longer lists its static inputs: the graph's captured weights are
    unknown, and the observer says so (its checks are then not judged)."""
    net, x = Mats(), torch.randn(3, 4)
    observer.set_roots([("main", net)])
    graph = torch.cuda.CUDAGraph()
    node, record = node_recording(graph, [None, net.mats["up"]], [x], pointers=False)
    with torch.no_grad():
        record(node, lambda: torch.nn.functional.linear(x, net.mats["up"]))
    assert len(observer.unknown_captures()) == 1


def test_the_tree_managers_pool_keeping_graph_is_an_empty_capture_not_an_unknown_one(
    observer: TorchGraphObserver, rt: TorchRuntime
) -> None:
    """A cudagraph tree's manager captures one empty graph when made (it keeps the pool alive): it
    reads nothing, so it is neither unknown nor a graph of the models' weights."""
    trees = importlib.import_module(TREES)
    manager = trees.CUDAGraphTreeManager.__new__(trees.CUDAGraphTreeManager)
    manager.graph = torch.cuda.CUDAGraph()
    _, record = node_recording(manager.graph, [], [])
    with LifecycleRecorder(rt) as recorder:
        record(manager, lambda: None)
    captured = [e for e in recorder.events if e.kind is EventKind.GRAPH_CAPTURED]
    assert [e.buffers for e in captured] == [()]
    assert observer.unknown_captures() == []


def test_a_plain_capture_is_not_taken_for_a_compiled_one(observer: TorchGraphObserver, rt: TorchRuntime) -> None:
    """With the trees module loaded, a capture outside it is judged by its modules as before."""
    importlib.import_module(TREES)
    net, x = Mats(), torch.randn(3, 4)
    observer.set_roots([("main", net)])
    with LifecycleRecorder(rt) as recorder:
        capture_mats(net, x)
    captured = [e for e in recorder.events if e.kind is EventKind.GRAPH_CAPTURED]
    assert [sorted(ref.name for ref in e.buffers) for e in captured] == [["bias.0", "mats.up"]]
    assert observer.unknown_captures() == []


# --- the Kiln rows through the suites ---------------------------------------------------------------
def kiln_session(out: Path, attr: str, device: str, spec: Path = KILN) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable, "-m", "pytest", "--pyargs", "fd_conformance.suite", "-p", "no:cacheprovider", "-q", "-rs",
        f"--fd-model={spec}:{attr}", "--fd-cycles=3", f"--fd-report={out}", f"--fd-device={device}",
    ]  # fmt: skip
    tests = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (tests, os.environ.get("PYTHONPATH", ""))))}
    if device == "cpu":
        cmd += ["-p", "native_double", "--fd-isolate=off"]
        env["FD_CONFORMANCE_GPU"] = "0"
    else:
        # 4 workers share the one GPU: the Kiln rows are few and each worker compiles its graphs
        # (torch.compile), so 8 took 39 s against 28 s for 4 on an H100
        cmd += ["-n", "4"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)


def judged(out: Path, proc: subprocess.CompletedProcess[str]) -> dict[str, tuple[str, list[str]]]:
    path = out / "conformance.json"
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return {
        row["name"]: (row["verdict"], sorted(row.get("observed_findings", []))) for row in json.loads(path.read_text())["cases"]
    }


def wanted(attr: str) -> dict[str, tuple[str, list[str]]]:
    """Each good row certified with no finding; each variant its codes exactly."""
    from fd_conformance.cases import load_spec

    def verdict(codes: frozenset[str]) -> str:
        return "violations" if any(RULES[c].severity is Severity.ERROR for c in codes) else "certified"

    return {case.name: (verdict(case.expected_findings), sorted(case.expected_findings)) for case in load_spec(f"{KILN}:{attr}")}


def test_kiln_lazy_cache_rows_through_the_double(tmp_path: Path) -> None:
    """The LRU that captures in forward and evicts is certified; prewarming on placeholders and then
    assigning is FDC204+FDC304; a cache that falls back to eager on a failed capture is FDC306."""
    proc = kiln_session(tmp_path, "CPU_CASES", "cpu")
    assert judged(tmp_path, proc) == wanted("CPU_CASES"), proc.stdout[-6000:]


@pytest.mark.gpu
def test_kiln_rows_on_real_cuda_graphs(tmp_path: Path) -> None:
    """Every Kiln engine certified and every variant caught with exactly its codes, on real graphs:
    compiled (cudagraph trees), the lazy LRU, tensordict's CudaGraphModule (where installed) and
    the side-stream shared pool."""
    proc = kiln_session(tmp_path, "CASES", "cuda")
    got = judged(tmp_path, proc)
    assert got == wanted("CASES"), proc.stdout[-8000:]


@pytest.mark.gpu
def test_a_real_compiled_graph_names_what_it_read() -> None:
    """torch.compile(mode="reduce-overhead") on CUDA: the recorded graph's static inputs are the
    model's weights by name; freeing one under it is FDC201; torch.compiler.reset() first is clean."""
    sys.path.insert(0, str(NATIVE_MODELS))
    from kiln.model import KilnLM

    from fd_conformance.runtime import get_runtime

    runtime = get_runtime("torch", "cuda")
    for reset_first in (False, True):
        torch.compiler.reset()
        net = KilnLM().cuda()
        fast = torch.compile(net, mode="reduce-overhead", fullgraph=True, dynamic=False)
        ids = torch.zeros(4, dtype=torch.long, device="cuda")
        with runtime.observe_native_graphs() as obs, LifecycleRecorder(runtime) as recorder:
            obs.set_roots([("main", net)])
            with torch.no_grad():
                for _ in range(3):
                    fast(ids)
            captured = [e for e in recorder.events if e.kind is EventKind.GRAPH_CAPTURED]
            names = {ref.name for e in captured for ref in e.buffers}
            assert {"table.weight", "mixers.0.mats.up", "mixers.1.gain"} <= names, names
            if reset_first:
                torch.compiler.reset()
            net.mixers[0].mats["up"].untyped_storage().resize_(0)
            obs.observe("released")
            torch.compiler.reset()
        assert codes(recorder) == ([] if reset_first else ["FDC201"])
        if not reset_first:
            assert subjects(recorder, EventKind.PARAM_RELEASED)[:1] == ["mixers.0.mats.up"]


def test_a_row_whose_compiled_graphs_cannot_be_read_is_not_judged(tmp_path: Path) -> None:
    """A compiled engine on a torch whose tree nodes the kit cannot read (a stand-in: the node lacks
    static_input_data_ptrs) is "not-judged" with exit 3, never certified -- though it is correct."""
    proc = kiln_session(tmp_path, "CASES", "cpu", spec=NATIVE_MODELS / "unreadable_compiled_cases.py")
    assert judged(tmp_path, proc) == {"unreadable-compiled": ("not-judged", [])}, proc.stdout[-4000:]
    document = json.loads((tmp_path / "conformance.json").read_text())
    assert document["exit_code"] == 3
    assert "not judged: what graph(s) CompiledGraph#" in proc.stdout
