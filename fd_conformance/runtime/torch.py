"""PyTorch runtime adapter: real CUDA graphs on a GPU, the host emulation on CPU.

Imported only through ``get_runtime("torch", ...)``; torch itself is imported here, never
above ``fd_conformance/runtime/``.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import functools
import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from fd_conformance.errors import UsageError
from fd_conformance.runtime import torch_native
from fd_conformance.runtime.base import (
    RUNTIME_DEVICES,
    EventKind,
    Graph,
    GraphObserver,
    Group,
    MemoryCategory,
    MemoryStats,
    RecordedGraph,
    Runtime,
)
from fd_conformance.runtime.host_graph import HostEmulation, HostTensorOps

GROUP_TIMEOUT = datetime.timedelta(seconds=60)  # a one-rank group that takes longer is broken
SPLIT_SHARE_ENV = "NCCL_COMM_SPLIT_SHARE_RESOURCES"  # NCCL reads it at a process's first split
# The one-rank default world a runtime of this process made ("group") and its FileStore's file
# ("store"), and on CUDA the user's NCCL_COMM_SPLIT_SHARE_RESOURCES before it (SPLIT_SHARE_SAVED, None
# when unset); empty while there is none, or the world is a launcher's. Process-wide: the world
# outlives the runtime that made it, and later runtimes join it.
_KIT_WORLD: dict[str, Any] = {}
SPLIT_SHARE_SAVED = "split_share_saved"
_STORE_IDS = itertools.count()


@functools.cache
def _store_root() -> str:
    """The process's directory for its worlds' store files, removed at exit. Not with a runtime:
    the world outlives a dropped runtime, and deleting its store deadlocks the next rendezvous."""
    root = tempfile.mkdtemp(prefix="fdc-torch-store-")
    atexit.register(shutil.rmtree, root, True)
    return root


def end_kit_world() -> None:
    """Destroy the default world if a runtime of this process made it (never a launcher's), and
    with it every group still split from it; then its store file. The user's
    NCCL_COMM_SPLIT_SHARE_RESOURCES (or its absence) comes back with the world's end."""
    _restore_split_share()
    group, store = _KIT_WORLD.pop("group", None), _KIT_WORLD.pop("store", None)
    if group is not None and dist.is_initialized() and dist.group.WORLD is group:
        dist.destroy_process_group()
    if store is not None:
        with contextlib.suppress(OSError):
            os.remove(store)


def _share_split_resources() -> None:
    """For the kit's world only: its groups split from it sharing its resources (a restart then costs
    milliseconds). The user's value is kept, and remembered (absence too) for end_kit_world, so a
    native engine that makes its world after the kit's sees the environment the user gave it."""
    if SPLIT_SHARE_SAVED not in _KIT_WORLD:
        _KIT_WORLD[SPLIT_SHARE_SAVED] = os.environ.get(SPLIT_SHARE_ENV)
    os.environ.setdefault(SPLIT_SHARE_ENV, "1")


def _restore_split_share() -> None:
    if SPLIT_SHARE_SAVED not in _KIT_WORLD:
        return
    saved = _KIT_WORLD.pop(SPLIT_SHARE_SAVED)
    if saved is None:
        os.environ.pop(SPLIT_SHARE_ENV, None)
    else:
        os.environ[SPLIT_SHARE_ENV] = saved


# Every captured, not-yet-reset CUDA graph of the PROCESS, whichever runtime made it: cuBLAS
# workspaces and the capture stream are process-wide and get_runtime() builds a new runtime per
# call, so "may I clear the workspaces?" is a question about all of them. Weak, because dropping
# a graph destroys it.
_LIVE_CUDA_GRAPHS: weakref.WeakSet[TorchCudaGraph] = weakref.WeakSet()


def live_cuda_graphs() -> int:
    """How many captured CUDA graphs are alive in this process (any runtime)."""
    return len(_LIVE_CUDA_GRAPHS)


#: The caching allocator's id of its default pool; every other pool belongs to a graph capture
#: (a private pool per graph, or one shared through ``graph_pool_handle()``).
DEFAULT_POOL = (0, 0)


def _graph_pool_bytes(device: int) -> tuple[int, int] | None:
    """(allocated, reserved) bytes of the segments in graph pools, from the allocator's snapshot:
    what a clear must give back. Buffers an engine allocates outside a capture (static inputs it
    keeps on purpose, arenas) sit in the default pool and are not graph memory. None when this
    torch's snapshot does not say which pool a segment is in."""
    allocated = reserved = 0
    for segment in torch.cuda.memory_snapshot():  # type: ignore[no-untyped-call]
        if segment.get("device", device) != device:
            continue
        pool = segment.get("segment_pool_id")
        if pool is None:
            return None
        if tuple(pool) != DEFAULT_POOL:
            allocated += int(segment["allocated_size"])
            reserved += int(segment["total_size"])
    return allocated, reserved


def _no_graph_alive() -> bool:
    """No graph of the process is alive, the kit's or a model's own: what a process-wide resource
    (cuBLAS workspaces, the kit's world) may be torn down under."""
    return not _LIVE_CUDA_GRAPHS and not torch_native.live_native_graphs()


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _run_no_grad(fn: Callable[[], Any]) -> Any:
    # A real capture of a forward never records autograd history; neither does the emulation.
    with torch.no_grad():
        return fn()


class TorchCudaGraph(RecordedGraph):
    """A ``torch.cuda.CUDAGraph`` on its own private memory pool.

    A private pool per graph means ``reset()`` plus dropping the outputs gives the whole pool back
    to the caching allocator, so "memory returns to the baseline after clear" is measurable.
    """

    def __init__(self, runtime: TorchRuntime, label: str, owner: str) -> None:
        super().__init__(runtime, label, owner)
        self._torch_runtime = runtime
        self._graph: torch.cuda.CUDAGraph | None = None
        self._pool: Any = None
        self._outputs: Any = None

    def _capture(self, fn: Callable[[], Any]) -> Any:
        self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        # torch.cuda.graph syncs, collects and captures on a side stream; warm-up runs (lazy
        # cuBLAS/NCCL init) are the caller's job, as in FastDeploy's backend.
        with torch.no_grad(), torch.cuda.graph(graph, pool=self._pool):
            outputs = fn()
        self._graph, self._outputs = graph, outputs
        _LIVE_CUDA_GRAPHS.add(self)
        return outputs

    def _replay(self) -> None:
        assert self._graph is not None  # alive implies captured
        self._graph.replay()

    def _reset(self) -> None:
        if self._graph is not None:
            torch.cuda.synchronize()  # a replay still in flight must not lose its memory
            self._graph.reset()
            _LIVE_CUDA_GRAPHS.discard(self)
        self._graph, self._pool, self._outputs = None, None, None


class TorchGroup(Group):
    """A one-process group made with ``dist.new_group`` on top of the default process group."""

    def __init__(self, name: str, handle: Any, backend: str) -> None:
        self.name = name
        self.handle = handle
        self.backend = backend
        self._alive = True

    def _all_reduce(self, tensor: Any) -> None:
        dist.all_reduce(tensor, group=self.handle)


class TorchRuntime(Runtime):
    """``torch`` on ``cuda`` (real CUDA graphs, NCCL) or ``cpu`` (host graphs, gloo)."""

    name = "torch"

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.torch_device = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")
        self.host = HostEmulation(
            HostTensorOps(
                is_tensor=lambda value: isinstance(value, torch.Tensor),
                nbytes=lambda tensor: 0 if self.is_released(tensor) else _nbytes(tensor),
                copy_into=self.copy_into,
                run=_run_no_grad,
            )
        )
        if device != "cuda":
            self._ledger = self.host.ledger  # the CUDA allocator counts our allocations by itself
        self._owns_default_group = False

    # --- framework / device ---------------------------------------------------------
    @property
    def version(self) -> str:
        return str(torch.__version__)

    def device_count(self) -> int:
        return torch.cuda.device_count() if self.device == "cuda" else 1

    def device_name(self) -> str:
        if self.device == "cuda":
            return str(torch.cuda.get_device_name(self.torch_device))
        return "cpu (host-emulated graphs)"

    def synchronize(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def memory_stats(self) -> MemoryStats:
        if self.device == "cuda":
            pools = _graph_pool_bytes(self.torch_device.index or 0)
            allocated, reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
            if pools is None:
                return MemoryStats(allocated, reserved)
            return MemoryStats(allocated, reserved, graphs=pools[0], graphs_reserved=pools[1])
        return self.host.memory_stats()

    def empty_cache(self) -> None:
        if self.device != "cuda":
            return
        torch.cuda.synchronize()
        # cuBLAS keeps one workspace per (handle, stream), allocated through the caching allocator
        # on first use. The first matmul captured on torch.cuda.graph's capture stream allocates it
        # INSIDE that graph's private pool, and graph.reset() does not free it: on the H200 ~32 MiB
        # stayed allocated after resetting a tiny GLM4-MoE graph, pinning the pool. Clearing the
        # workspaces frees it. Only when no graph is alive IN THE PROCESS: the capture stream (and
        # so its workspace) is shared by every capture of every runtime, and a live graph replays
        # against that pointer.
        if _no_graph_alive():  # a model's own graphs too
            clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear is not None:
                clear()
        torch.cuda.empty_cache()

    # --- tensors ----------------------------------------------------------------------
    def address(self, tensor: Any) -> int:
        if self.is_released(tensor):
            return 0
        return int(tensor.data_ptr())

    def is_released(self, tensor: Any) -> bool:
        # Released the RL way: storage resized to 0 bytes while the tensor keeps its shape.
        return bool(tensor.numel() > 0 and tensor.untyped_storage().nbytes() == 0)

    def to_numpy(self, tensor: Any) -> Any:
        value = tensor.detach()
        if value.dtype in (torch.bfloat16, torch.float16):
            value = value.float()  # numpy has no bfloat16; float32 holds both exactly
        return value.cpu().numpy()

    def clone(self, tensor: Any) -> Any:
        return self._account(tensor.detach().clone(memory_format=torch.contiguous_format), MemoryCategory.BUFFERS)

    def copy_into(self, dst: Any, src: Any) -> None:
        with torch.no_grad():
            dst.copy_(src)

    # --- graphs -------------------------------------------------------------------------
    def new_graph(self, label: str, owner: str = "main") -> Graph:
        # Under a native observer the kit's graphs are framework graphs like the model's own (on a
        # CPU that is only so with a test double in place of the class: the observer needs one).
        if self.device == "cuda" or self.observes_natively():
            return TorchCudaGraph(self, label, owner)
        return self.host.new_graph(self, label, owner)

    # --- native mode ---------------------------------------------------------------------
    def native_graphs_unavailable(self) -> str | None:
        # Without a GPU there are no CUDA graphs to observe -- unless a test double stands in for
        # the class (the kit's CPU tests of the event derivation patch one in).
        if self.device != "cuda" and torch.cuda.CUDAGraph is torch_native.TORCH_CUDA_GRAPH:
            return "native CUDA graphs need a GPU"
        return None

    def observes_natively(self) -> bool:
        return torch_native.observing(self)

    def native_graphs_alive(self) -> bool:
        return torch_native.live_native_graphs() > 0

    def observe_native_graphs(self) -> GraphObserver:
        reason = self.native_graphs_unavailable()
        if reason is not None:
            raise UsageError(f"native graph mode on {self.device}: {reason}", "run the native case on a CUDA device")
        if self.device == "cuda" and _no_graph_alive():
            # A native engine makes its own world when none exists (its own device_id, its own
            # splits): it must not find the one a kit check of this worker kept.
            end_kit_world()
        return torch_native.TorchGraphObserver(self)

    # --- weights: the storage operations under Runtime.release_parameter/restore_parameter ---
    def _placement(self, param: Any) -> Any:
        return param.device  # a tensor keeps its device after its storage is resized to 0

    def _free_storage(self, param: Any) -> None:
        # In place, as FSDP and RL weight managers do: the Parameter object (and every module
        # attribute pointing at it) survives; only its bytes go.
        param.untyped_storage().resize_(0)

    def _new_storage(self, value: Any, like: Any, placement: Any, name: str) -> Any:
        if tuple(value.shape) != tuple(like.shape):
            raise UsageError(
                f"restore of parameter {name or '<unnamed>'}: value shape {tuple(value.shape)} "
                f"!= parameter shape {tuple(like.shape)}",
                "load a weight set built for this model config",
            )
        fresh = torch.empty(like.shape, dtype=like.dtype, device=placement)
        with torch.no_grad():
            fresh.copy_(value)
        return fresh

    def _poison(self, tensor: Any) -> None:
        with torch.no_grad():
            tensor.fill_(float("nan") if tensor.is_floating_point() else 0)

    def _install_storage(self, param: Any, fresh: Any) -> None:
        with torch.no_grad():
            param.data = fresh  # same Parameter object, NEW storage

    # --- communication ------------------------------------------------------------------------
    def _backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    def _ensure_default_group(self) -> None:
        if dist.is_initialized() and self._kit_world_of_another_backend():
            end_kit_world()  # a cpu check after a cuda one in this worker (or back): each its own world
        if dist.is_initialized():
            return  # someone else (a launcher, a test) owns it, or a check before kept it; we only add subgroups
        # A fresh store file per world: one reused after destroy_process_group can carry keys from
        # the previous incarnation and confuse the rendezvous.
        store_file = os.path.join(_store_root(), f"store-{next(_STORE_IDS)}")
        store = dist.FileStore(store_file, 1)
        device_id = None
        if self.device == "cuda":
            # Every NCCL communicator's destroy waits ~0.5 s for its proxy thread (which polls
            # for its stop every 500 ms). So on a GPU the world connects eagerly (device_id) and is
            # kept for the process's later checks, and each group is split from it sharing its
            # resources: a group restart then costs milliseconds (bench/comm_group_cost.py); set
            # for this world's life only (_share_split_resources).
            _share_split_resources()
            device_id = self.torch_device
        try:
            dist.init_process_group(
                self._backend(), store=store, rank=0, world_size=1, timeout=GROUP_TIMEOUT, device_id=device_id
            )
        except BaseException:
            _restore_split_share()  # no world came: nothing of ours stays in the environment
            raise
        self._owns_default_group = True
        _KIT_WORLD.update(group=dist.group.WORLD, store=store_file)

    def _kit_world_of_another_backend(self) -> bool:
        """The kept world is the kit's, made for another device's backend (gloo for a cpu check, NCCL
        for a cuda one), and no graph can have captured its groups: ending it is safe."""
        if _KIT_WORLD.get("group") is not dist.group.WORLD or dist.get_backend() == self._backend():
            return False
        return _no_graph_alive()

    def new_group(self, name: str = "tp") -> Group:
        """A subgroup over every rank (joining or making the default world first).

        A subgroup, not the default group, so shutting it down (what the RL cycle does) leaves a
        launcher's world intact; on CUDA the communicator is warmed here so no lazy NCCL init
        lands inside a graph capture.
        """
        self._ensure_default_group()
        # Every rank of the world: a one-rank world we made ourselves, or a multi-rank world a
        # launcher (fd_conformance.distributed.world) joined before building us. new_group
        # is collective over the world, so every rank builds its groups in the same order.
        handle = dist.new_group(ranks=list(range(dist.get_world_size())), backend=self._backend(), timeout=GROUP_TIMEOUT)
        group = TorchGroup(name, handle, self._backend())
        if self.device == "cuda":
            # Communicators initialise lazily on first use; that must not happen inside a capture.
            warm = torch.zeros(1, device=self.torch_device)
            group.all_reduce(warm)
            torch.cuda.synchronize()
        self._groups.append(group)
        self.events.emit(EventKind.GROUP_CREATED, name, id(group))
        return group

    group_type = TorchGroup

    def _release_group(self, group: TorchGroup) -> None:
        # The subgroup only: the world stays for the next check's runtime to join (re-making it per
        # check cost +16 % on the CPU suite session, gloo; on a GPU ~0.5 s a check, NCCL).
        dist.destroy_process_group(group.handle)

    def _destroy_group(self, group: TorchGroup) -> None:
        dist.destroy_process_group(group.handle)
        if self.device != "cuda":
            self._end_world_if_unused()  # on a GPU the world stays: the restart's group is a split

    def _end_world_if_unused(self) -> None:
        if not self._groups and self._owns_default_group:
            # Last group gone: tear the world down too, so update_parameters' restart re-inits it.
            self._owns_default_group = False
            end_kit_world()


def create(device: str) -> Runtime:
    """Build the adapter; ``device`` is "auto" (CUDA when torch sees one), "cuda" or "cpu"."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            f"device 'cuda' requested but torch {torch.__version__} sees no CUDA device",
            "run on a GPU host with a CUDA build of torch, or use device 'cpu' (host-emulated graphs)",
        )
    if device not in RUNTIME_DEVICES:
        raise UsageError(f"unknown device {device!r}", f"use one of {', '.join(RUNTIME_DEVICES)}")
    return TorchRuntime(device)
