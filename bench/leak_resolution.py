"""Leak-detection resolution of the clear check (C2): the noise floor of "memory after clear minus
the post-warm-up baseline" on GOOD models, over repeated capture/clear cycles, and the smallest
deliberate leak (a buffer kept alive across clear) that stands out from it.

The clear check flags FDC302 above ``memory_resolution(runtime)`` (1 MiB on a GPU). This prints
whether that threshold has headroom over the measured noise, per model and per figure.

    python bench/leak_resolution.py                 # cuda when a GPU is visible, else cpu
    python bench/leak_resolution.py --device cpu --cycles 10
"""

from __future__ import annotations

import argparse

from fd_conformance.devices import visible_gpu_count
from fd_conformance.runtime import get_runtime
from fd_conformance.suite._support import clear_models, graphs_on, memory_resolution, settled_memory
from fd_reference_models import cases as reference

LEAK_SIZES = (512, 4096, 65536, 1 << 20, 4 << 20)
FACTORIES = {
    "torch-glm4-moe": reference.torch_glm4_moe,
    "torch-glm4-moe-mtp": reference.torch_glm4_moe_mtp,
    "torch-qwen3-vl": reference.torch_qwen3_vl,
}


def one_cycle(subject: object, runtime: object, leak_bytes: int = 0) -> tuple[int, int]:
    """(allocated, reserved) deltas of one capture -> forward -> clear cycle against its baseline."""
    baseline = settled_memory(runtime)  # type: ignore[arg-type]
    subject.runner.capture_model()  # type: ignore[attr-defined]
    kept = None
    if leak_bytes:
        # A buffer the model forgets to drop, sized exactly: float32 elements.
        inputs = subject.make_inputs(1)  # type: ignore[attr-defined]
        like = next(iter(inputs.values()))
        import torch

        kept = torch.empty(leak_bytes // 4, dtype=torch.float32, device=like.device)
    clear_models(subject)
    after = settled_memory(runtime)  # type: ignore[arg-type]
    del kept
    return after.allocated - baseline.allocated, after.reserved - baseline.reserved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cycles", type=int, default=20)
    args = parser.parse_args()
    device = args.device if args.device != "auto" else ("cuda" if visible_gpu_count() else "cpu")
    runtime = get_runtime("torch", device)
    resolution = memory_resolution(runtime)
    print(f"device={device} graphs={'real' if runtime.graphs_are_real else 'host-emulated'} threshold={resolution} B")
    print(f"{'model':<22} {'cycles':>6} {'max|d alloc| B':>15} {'max|d reserved| B':>18}")
    for name, factory in FACTORIES.items():
        subject = factory(runtime)
        graphs_on(subject)
        subject.eager_forward(subject.make_inputs(max(subject.wrapper.graph_opt_config.capture_sizes)))
        try:
            deltas = [one_cycle(subject, runtime) for _ in range(args.cycles)]
        finally:
            subject.runner.close()  # one communicator per subject otherwise stays open to the end
        print(f"{name:<22} {args.cycles:>6} {max(abs(a) for a, _ in deltas):>15} {max(abs(r) for _, r in deltas):>18}")
    if runtime.graphs_are_real:
        subject = FACTORIES["torch-glm4-moe"](runtime)
        graphs_on(subject)
        print(f"{'leak B':>10} {'d alloc B':>12} {'d reserved B':>13}  flagged at threshold")
        try:
            for size in LEAK_SIZES:
                alloc, reserved = one_cycle(subject, runtime, size)
                print(f"{size:>10} {alloc:>12} {reserved:>13}  {'yes' if max(alloc, reserved) > resolution else 'no'}")
        finally:
            subject.runner.close()


if __name__ == "__main__":
    main()
