"""What native mode's hooks cost on capture and on replay (issue 25's goal: at most 5 %).

The same model is timed with the hooks off and on (a TorchGraphObserver installed and a
LifecycleRecorder listening, as during a check), in alternating rounds, medians compared:

* capture: one ``torch.cuda.graph`` around one forward (its own synchronize and cache emptying
  included, as a model pays it), median over the captures;
* replay: N replays back to back and one synchronize, per replay: what a decode loop sees;
* replay CPU: the same N replay calls without the final synchronize, per call: the launch path
  alone, where the hook's Python runs (a GPU-bound loop hides it; a launch-bound one does not).

* capture, graph hooks only: the capture with the observer installed but torch's own
  ``nn.Module.__call__`` put back, so modules are not recorded: the difference to the capture
  column is what recording the module calls costs on the real path (on the H200 host it is the
  larger share, and several times what "hooks alone" measures for the same calls on a quiet CPU);

* reference models, one weight sync's captures: ``runner.capture_model()`` of the bundled GLM4-MoE
  with its MTP draft (3 + 2 graphs) and of Qwen3-VL (3 graphs), warm-ups included, as the engine
  pays it at every weight sync; then the graphs are cleared (not timed); and their replay: every
  captured size's ``wrapper.forward(inputs)`` (input copy, replay, outputs) in turn, N times,
  one synchronize, per forward -- a decode step as the engine pays it;

* compiled (torch.compile, mode="reduce-overhead"), Kiln's model: what reading a cudagraph-tree
  capture's static inputs costs (``compiled_capture``'s stack walk, per capture, against the tree's
  whole warm-up + record of that graph), and a compiled forward that replays the recorded graph,
  per call, hooks off/on (the replay hook runs inside the tree's replay);

* hooks alone: the same captures around a graph class that does nothing (no device, no graph
  work), so what is left is the hooks' own Python per capture and per module call -- the fixed
  cost the capture column's percentage divides by the device's capture time.

Models: Quill's decoder as the native suites run it (tests/fixtures/native_models, hidden 32), a
serving-sized stack of the same mixers (hidden 2048, 8 mixers, 64 tokens), and a deep one (hidden
1024, 32 mixers: 129 modules and 128 weights, the count a scan of a real model walks). Hooks alone
runs the same modules at hidden 64: the hooks' cost depends on how many there are, not their size.

    python bench/native_overhead.py              # cuda
    python bench/native_overhead.py --quick      # cpu through the test double of the graph class
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from _quick import add_quick

from fd_conformance.lifecycle import LifecycleRecorder
from fd_conformance.runtime import get_runtime
from fd_conformance.runtime.base import Runtime

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "fixtures" / "native_models"), str(ROOT / "tests")]

from quill.blocks import Decoder, GatedMixer  # noqa: E402


def models(device: str, quick: bool, hidden: int | None = None) -> list[tuple[str, torch.nn.Module, torch.Tensor]]:
    """(label, model, static input) of each model timed; ``hidden`` overrides the stacks' width."""
    out = [("quill decoder (hidden 32, 8 tokens)", Decoder().to(device).eval(), torch.zeros(8, dtype=torch.long, device=device))]
    shapes = [("serving", 64, 2, 4), ("deep", 64, 4, 4)] if quick else [("serving", 2048, 8, 64), ("deep", 1024, 32, 16)]
    for name, width, depth, tokens in shapes:
        width = hidden or width
        stack = torch.nn.Sequential(*(GatedMixer(width) for _ in range(depth))).to(device).eval()
        out.append(
            (f"{name} stack (hidden {width}, {depth} mixers, {tokens} tokens)", stack, torch.randn(tokens, width, device=device))
        )
    return out


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def capture(model: torch.nn.Module, x: torch.Tensor) -> Any:
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        model(x)
    return graph


def time_capture(model: torch.nn.Module, x: torch.Tensor, device: str, n: int) -> float:
    times = []
    for _ in range(n):
        sync(device)
        start = time.perf_counter()
        graph = capture(model, x)
        sync(device)
        times.append(time.perf_counter() - start)
        del graph
    return statistics.median(times)


def time_replay(model: torch.nn.Module, x: torch.Tensor, device: str, n: int) -> tuple[float, float]:
    """(per replay with a final synchronize, per replay call alone) in seconds."""
    graph = capture(model, x)
    for _ in range(10):
        graph.replay()
    sync(device)
    start = time.perf_counter()
    for _ in range(n):
        graph.replay()
    launched = time.perf_counter()
    sync(device)
    done = time.perf_counter()
    return (done - start) / n, (launched - start) / n


class NullGraph:
    """A graph class that captures nothing: timing a capture around it times the hooks alone."""

    def capture_begin(self, *args: Any, **kwargs: Any) -> None: ...
    def capture_end(self) -> None: ...
    def replay(self) -> None: ...
    def reset(self) -> None: ...


def hook_cost(runtime: Runtime, model: torch.nn.Module, x: torch.Tensor, n: int) -> tuple[float, float, int]:
    """(median s per capture without hooks, with hooks, module calls per capture) around NullGraph."""
    from fd_conformance.runtime.torch_native import TorchGraphObserver

    calls = sum(1 for _ in model.modules())

    def capture_once() -> float:
        graph = NullGraph()
        start = time.perf_counter()
        graph.capture_begin()
        model(x)
        graph.capture_end()
        return time.perf_counter() - start

    off = statistics.median(capture_once() for _ in range(n))
    with TorchGraphObserver(runtime, NullGraph) as observer, LifecycleRecorder(runtime):
        observer.set_roots([("main", model)])
        on = statistics.median(capture_once() for _ in range(n))
    return off, on, calls


def measure(
    hooks: bool, runtime: Runtime, fn: Callable[..., Any], model: torch.nn.Module, *args: Any, module_calls: bool = True
) -> Any:
    """``fn(model, *args)``, with the hooks installed and a recorder listening when ``hooks``;
    without recording module calls when not ``module_calls`` (torch's ``__call__`` put back)."""
    if not hooks:
        return fn(model, *args)
    torch_call = torch.nn.Module.__call__
    with runtime.observe_native_graphs() as observer, LifecycleRecorder(runtime):
        observer.set_roots([("main", model)])
        if not module_calls:
            torch.nn.Module.__call__ = torch_call  # type: ignore[method-assign]  (close() leaves it)
        return fn(model, *args)


def clear_subject_graphs(subject: Any) -> None:
    from fd_conformance.engine.runner import clear_graphs_of

    for wrapper in (subject.draft, subject.wrapper):  # the draft's graphs first, as the runner does
        if wrapper is not None:
            clear_graphs_of(wrapper)


def time_capture_model(subject: Any, n: int) -> float:
    """Median seconds of ``subject.runner.capture_model()``, graphs cleared after each."""
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        subject.runner.capture_model()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        clear_subject_graphs(subject)
    return statistics.median(times)


def time_forward(subject: Any, n: int) -> float:
    """Seconds per ``wrapper.forward`` through a captured graph: every size of every wrapper in
    turn, ``n`` rounds, one synchronize (the graphs captured first, under the same hooks)."""
    subject.runner.capture_model()
    steps = [
        (wrapper, wrapper.dummy_inputs(size))
        for wrapper in (subject.wrapper, subject.draft)
        if wrapper is not None
        for size in wrapper.graph_opt_config.capture_sizes
    ]
    for wrapper, inputs in steps:
        wrapper.forward(inputs)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        for wrapper, inputs in steps:
            wrapper.forward(inputs)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    clear_subject_graphs(subject)
    return elapsed / (n * len(steps))


def on_subject(runtime: Runtime, subject: Any, hooks: bool, fn: Callable[[Any, int], float], n: int) -> float:
    """``fn(subject, n)``, with the hooks installed and a recorder listening when ``hooks``."""
    if not hooks:
        return fn(subject, n)
    with runtime.observe_native_graphs() as observer, LifecycleRecorder(runtime):
        observer.set_roots([("main", subject.wrapper), ("draft", subject.draft)])
        return fn(subject, n)


def reference_rows(runtime: Runtime, rounds: int) -> None:
    """The capture row for the bundled reference models (see the module docstring)."""
    from fd_reference_models.torch_models.subject import glm4_moe_mtp_subject, qwen3_vl_subject

    for label, factory in (
        ("GLM4-MoE + MTP draft (3 + 2 graphs)", glm4_moe_mtp_subject),
        ("Qwen3-VL (3 graphs)", qwen3_vl_subject),
    ):
        subject = factory(runtime)
        try:
            time_capture_model(subject, 2)  # warm-up: lazy library state
            for what, fn, n, scale, unit in (
                ("capture", time_capture_model, 10, 1e3, "ms"),
                ("replay", time_forward, 200, 1e6, "us"),
            ):
                pairs = [
                    (on_subject(runtime, subject, False, fn, n), on_subject(runtime, subject, True, fn, n)) for _ in range(rounds)
                ]
                ratios = [100 * (on / off - 1) for off, on in pairs]
                off, on = (statistics.median(col) * scale for col in zip(*pairs, strict=True))
                spread = f"{statistics.median(ratios):+.1f}% [{min(ratios):+.1f}, {max(ratios):+.1f}]"
                print(f"  {label:<38} {what:<8} {off:.2f}/{on:.2f} {unit} {spread}")
        finally:
            subject.runner.close()


def compiled_rows(runtime: Runtime, rounds: int, calls: int = 500) -> None:
    """The compiled row (see the module docstring): a fresh compile a round, recorded, then replayed."""
    from kiln.model import KilnLM

    import fd_conformance.runtime.torch_native.observer as observer_module

    walk: list[float] = []
    read = observer_module.compiled_capture

    def timed_read(graph: Any) -> Any:
        start = time.perf_counter()
        try:
            return read(graph)
        finally:
            walk.append(time.perf_counter() - start)

    def record_and_replay(net: torch.nn.Module) -> tuple[float, float]:
        fast = torch.compile(net, mode="reduce-overhead", fullgraph=True, dynamic=False)
        ids = torch.zeros(4, dtype=torch.long, device="cuda")
        fast(ids)  # compile + warm-up run
        torch.cuda.synchronize()
        start = time.perf_counter()
        fast(ids)  # the tree records its graph here
        torch.cuda.synchronize()
        recorded = time.perf_counter() - start
        for _ in range(10):
            fast(ids)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fast(ids)
        torch.cuda.synchronize()
        return recorded, (time.perf_counter() - start) / calls

    with contextlib.ExitStack() as patches:
        observer_module.compiled_capture = timed_read  # type: ignore[assignment]
        patches.callback(setattr, observer_module, "compiled_capture", read)
        pairs, records = [], []
        for _ in range(rounds):
            row = []
            for hooks in (False, True):
                torch.compiler.reset()
                net = KilnLM().cuda()
                recorded, per_call = measure(hooks, runtime, record_and_replay, net)
                row.append(per_call)
                if hooks:
                    records.append(recorded)
            pairs.append(row)
        torch.compiler.reset()
    ratios = [100 * (on / off - 1) for off, on in pairs]
    off, on = (statistics.median(col) * 1e6 for col in zip(*pairs, strict=True))
    print(
        f"  compiled Kiln LM: compiled_capture {statistics.median(walk) * 1e6:.1f} us per capture ({len(walk)} captures),"
        f" a tree record (warm-up + capture) {statistics.median(records) * 1e3:.2f} ms"
    )
    print(
        f"  compiled Kiln LM: replay per forward off/on {off:.1f}/{on:.1f} us"
        f" {statistics.median(ratios):+.1f}% [{min(ratios):+.1f}, {max(ratios):+.1f}]"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="alternating off/on rounds (default 5)")
    parser.add_argument("--captures", type=int, default=40, help="captures per round (default 40)")
    parser.add_argument(
        "--replays", type=int, default=2000, help="replays per round, at most (default 2000; fewer for slow graphs)"
    )
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        import native_double  # the CPU double of torch.cuda.CUDAGraph (tests/native_double.py)
        import pytest

        native_double.install(pytest.MonkeyPatch())
        device, args.rounds, args.captures, args.replays = "cpu", 1, 2, 5
    elif not torch.cuda.is_available():
        print("needs a CUDA device (use --quick on a CPU)")
        return 2
    else:
        device = "cuda"
    runtime = get_runtime("torch", device)
    print(f"native hooks overhead on {device} ({runtime.device_name()}), torch {torch.__version__}, {args.rounds} rounds")
    # ovh: the median over rounds of each round's on/off ratio (a round's pair ran back to back, so
    # drift of the host between rounds cancels), with the rounds' lowest and highest in brackets
    print("ovh: median of the rounds' on/off ratios [lowest, highest round]")
    header = f"{'model':<48} {'capture off/on ms':>18} {'ovh':>20} {'replay off/on us':>17} {'ovh':>20} {'replay CPU off/on us':>21} {'ovh':>20}"
    print(header)
    with torch.no_grad():
        for label, model, x in models(device, args.quick):
            model(x)  # warm-up: lazy library state
            # about half a second of replays a measurement: the deep stack's 2000 would take 5 s
            replays = args.replays if args.quick else max(200, min(args.replays, int(0.5 / time_replay(model, x, device, 50)[0])))
            figures: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
            for _ in range(args.rounds):
                for hooks in (False, True):
                    cap = measure(hooks, runtime, time_capture, model, x, device, args.captures)
                    rep, cpu = measure(hooks, runtime, time_replay, model, x, device, replays)
                    figures[hooks].append((cap, rep, cpu))
            med = {h: [statistics.median(col) for col in zip(*rows, strict=True)] for h, rows in figures.items()}
            cells = []
            for i, (scale, width) in enumerate(((1e3, 18), (1e6, 17), (1e6, 21))):
                off, on = med[False][i], med[True][i]
                ratios = [100 * (r_on[i] / r_off[i] - 1) for r_off, r_on in zip(figures[False], figures[True], strict=True)]
                spread = f"{statistics.median(ratios):+.1f}% [{min(ratios):+.1f}, {max(ratios):+.1f}]"
                cells.append(f"{f'{off * scale:.3f}/{on * scale:.3f}':>{width}} {spread:>20}")
            print(f"{label:<48} {' '.join(cells)}")
            if not args.quick:
                graph_only = []
                for _ in range(args.rounds):
                    off = measure(False, runtime, time_capture, model, x, device, args.captures)
                    on = measure(True, runtime, time_capture, model, x, device, args.captures, module_calls=False)
                    graph_only.append(100 * (on / off - 1))
                print(f"  {'capture, graph hooks only (no module calls recorded)':<60} {statistics.median(graph_only):+.1f}%")
        if not args.quick:
            print("reference models: runner.capture_model() off/on (warm-ups included), then replay, a forward through a graph:")
            reference_rows(runtime, args.rounds)
            print("torch.compile(mode='reduce-overhead'): reading a tree capture's static inputs, and its replay:")
            compiled_rows(runtime, args.rounds)
        print("hooks alone (a graph class that captures nothing; the model's forward on this host's CPU):")
        for label, model, x in models("cpu", args.quick, hidden=64):
            start = time.perf_counter()
            model(x)
            # about two seconds a side: the serving stack's forward alone takes milliseconds on a CPU
            n = 50 if args.quick else max(20, min(2000, int(2.0 / (time.perf_counter() - start))))
            off, on, calls = hook_cost(get_runtime("torch", "cpu"), model, x, n)
            added = (on - off) * 1e6
            print(f"  {label:<46} +{added:.1f} us per capture, {added / calls:.1f} us per module ({calls} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
