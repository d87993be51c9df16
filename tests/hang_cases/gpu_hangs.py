"""GPU hang programs (run on a CUDA host only; imported lazily inside the worker).

``spin_kernel``: a kernel that spins on the GPU while the host synchronises.
``collective_graph_order``: the mechanism behind the MTP draft hang -- a CUDA graph that
captured an all_reduce on a one-rank NCCL group, with the group shut down before (wrong) or
after (fixed) the graph is destroyed, recorded by the lifecycle recorder.
``illegal_address``: a kernel store far out of bounds -> a sticky CUDA error.
"""

from __future__ import annotations

from typing import Any

from fd_conformance.isolation import mark, stream_events


def spin_kernel() -> None:
    import torch

    mark("gpu: torch.cuda._sleep(huge) then synchronize")
    torch.cuda._sleep(1 << 62)  # spins ~forever on the device
    torch.cuda.synchronize()


def collective_graph_order(wrong: bool, device: str = "cuda") -> dict[str, Any]:
    from fd_conformance.lifecycle import LifecycleRecorder
    from fd_conformance.runtime import get_runtime

    runtime = get_runtime("torch", device)
    stream_events(runtime.events)
    recorder = LifecycleRecorder(runtime).start()
    group = runtime.new_group("tp")
    import torch

    x = torch.ones(16, device=device)
    graph = runtime.new_graph("draft-decode", owner="draft")
    graph.capture(lambda: group.all_reduce(x), buffers=[x], groups=[group])
    graph.replay()
    runtime.synchronize()
    if wrong:
        mark("mtp: shutting down the group while the draft graph is alive (wrong order)")
        runtime.shutdown_group(group)
        mark("mtp: group shut down; now resetting the graph")
        graph.reset()
    else:
        mark("mtp: resetting the draft graph first (fixed order)")
        graph.reset()
        runtime.shutdown_group(group)
    runtime.synchronize()
    mark("mtp: completed")
    return {"completed": True, "findings": sorted({f.code for f in recorder.findings()})}


def illegal_address() -> None:
    import torch

    mark("gpu: copy from a device pointer nobody allocated")
    base = torch.empty(1, device="cuda")
    # an index far outside the allocation: the gather kernel faults with an illegal address
    idx = torch.tensor([1 << 40], device="cuda")
    base[idx].sum().item()
