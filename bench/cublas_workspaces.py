"""What tensordict's CudaGraphModule runners leave behind per weight sync: cuBLAS's per-stream
workspaces (issue 40's tensordict engine, and why it gives them back).

Each round makes a runner per size (each warms up and captures on two streams of its own), runs
it, measures what is allocated with the runners alive, drops them, measures again, then clears
cuBLAS's workspaces and measures a third time:

    python bench/cublas_workspaces.py [--rounds 6]     # needs a GPU and tensordict

On a CPU host (and with ``--quick`` there) it says what it needs and exits 2.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

from _quick import add_quick

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "native_models"))
SIZES = (4, 2, 1)


def settled() -> int:
    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_allocated())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    add_quick(parser)
    args = parser.parse_args()
    import torch

    from fd_conformance.devices import no_gpu_reason

    if no_gpu_reason() is not None or not torch.cuda.is_available():
        print(f"needs a CUDA GPU (cuBLAS workspaces live in device memory): {no_gpu_reason()}")
        return 2
    try:
        from tensordict.nn import CudaGraphModule
    except ImportError:
        print("needs tensordict (pip install tensordict)")
        return 2
    from kiln.model import KilnLM

    model = KilnLM().cuda()
    ids = {size: torch.zeros(size, dtype=torch.long, device="cuda") for size in SIZES}
    for round_ in range(2 if args.quick else args.rounds):
        runners = {size: CudaGraphModule(model, warmup=1, device=torch.device("cuda")) for size in SIZES}
        with torch.no_grad():
            for size, runner in runners.items():
                runner(ids[size])
                runner(ids[size])
        live = settled()
        del runners, runner
        dead = settled()
        torch._C._cuda_clearCublasWorkspaces()
        print(f"round {round_}: allocated with runners {live}, dropped {dead}, workspaces cleared {settled()} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
