"""Leak-detection resolution of the clear check (C2): the noise floor of "memory after clear minus
the pre-capture baseline" on GOOD models over repeated capture -> step -> clear cycles, and the
smallest deliberate leak (a buffer kept alive across clear) that the check's threshold reports.

The clear check reports FDC302 for a delta of at least ``memory_resolution(runtime)`` bytes
(4 KiB on a GPU). A threshold is sound when the noise floor of every good model stays below it
(no false positive) and a leak of the threshold's size is reported (the resolution is real).
Models: every bundled good torch case, plus the outside-style Acme model (another author's graph
cache, labels and flags), so the floor is not only that of code we wrote.

    python bench/leak_resolution.py                 # cuda when a GPU is visible, else cpu
    python bench/leak_resolution.py --device cpu --cycles 20
    python bench/leak_resolution.py --quick         # cpu, one model, 2 cycles (CI: tests/test_bench.py)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from _quick import add_quick

from fd_conformance.cases import ModelCase
from fd_conformance.devices import visible_gpu_count
from fd_conformance.runtime import get_runtime
from fd_conformance.runtime.base import Runtime
from fd_conformance.suite._support import clear_models, graphs_on, memory_resolution, settled_memory

LEAK_SIZES = (512, 2048, 4096, 16384, 1 << 20)
OUTSIDE_MODELS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "outside_models"


def good_torch_cases() -> list[ModelCase]:
    """Bundled good torch cases and the outside Acme model: the models a false positive would block."""
    from fd_reference_models import cases as reference

    sys.path.insert(0, str(OUTSIDE_MODELS))
    import acme_lm

    bundled = [c for c in reference.all_cases() if c.runtime == "torch" and not c.expected_findings and c.checks is None]
    return bundled + list(acme_lm.GOOD)


def one_cycle(case: ModelCase, subject: Any, runtime: Runtime, device: str, leak_bytes: int = 0) -> tuple[int, int]:
    """(allocated, reserved) deltas of one capture -> step per size -> clear cycle; with
    ``leak_bytes``, a buffer of exactly that size outlives the clear (the model "forgot" it)."""
    baseline = settled_memory(runtime)
    subject.runner.capture_model()
    for size in case.capture_sizes:
        subject.forward(subject.make_inputs(size))
    kept = torch.empty(leak_bytes // 4, dtype=torch.float32, device=device) if leak_bytes else None
    clear_models(subject)
    after = settled_memory(runtime)
    del kept
    return after.allocated - baseline.allocated, after.reserved - baseline.reserved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cycles", type=int, default=20)
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.device, args.cycles = "cpu", 2
    device = args.device if args.device != "auto" else ("cuda" if visible_gpu_count() else "cpu")
    runtime = get_runtime("torch", device)
    resolution = memory_resolution(runtime)
    print(
        f"device={device} graphs={'real' if runtime.graphs_are_real else 'host-emulated'} resolution={resolution} B (smallest delta reported)"
    )
    print(f"{'model':<26} {'cycles':>6} {'max|d alloc| B':>15} {'max|d reserved| B':>18}  false positive")
    floors: list[int] = []
    cases = good_torch_cases()[:1] if args.quick else good_torch_cases()
    for case in cases:
        subject = case.factory(runtime)
        graphs_on(subject)
        subject.eager_forward(subject.make_inputs(max(case.capture_sizes)))  # lazy library state first
        try:
            deltas = [one_cycle(case, subject, runtime, device) for _ in range(args.cycles)]
        finally:
            getattr(subject.runner, "close", lambda: None)()  # a comm group per subject stays open otherwise
        alloc, reserved = max(abs(a) for a, _ in deltas), max(abs(r) for _, r in deltas)
        floors.append(max(alloc, reserved))
        print(f"{case.name:<26} {args.cycles:>6} {alloc:>15} {reserved:>18}  {'YES' if floors[-1] >= resolution else 'no'}")
    print(f"noise floor {max(floors)} B over {args.cycles} cycles x {len(floors)} models; resolution {resolution} B")
    if runtime.graphs_are_real:
        case = cases[0]
        subject = case.factory(runtime)
        graphs_on(subject)
        subject.eager_forward(subject.make_inputs(max(case.capture_sizes)))
        print(f"{'leak B':>10} {'d alloc B':>12} {'d reserved B':>13}  reported at resolution ({case.name})")
        try:
            for size in LEAK_SIZES:
                alloc, reserved = one_cycle(case, subject, runtime, device, size)
                print(f"{size:>10} {alloc:>12} {reserved:>13}  {'yes' if max(alloc, reserved) >= resolution else 'no'}")
        finally:
            getattr(subject.runner, "close", lambda: None)()
    return 0


if __name__ == "__main__":
    sys.exit(main())
