"""PaddlePaddle runtime adapter: the real Paddle 3.x calls FastDeploy's engine makes.

Graphs are ``paddle.device.cuda.graphs.CUDAGraph`` on CUDA (one memory pool per owner, as
FastDeploy's piecewise backend keeps one per backend) and the host emulation from
:mod:`fd_conformance.runtime.host_graph` on CPU. Weights are released with
``param._clear_data()`` and restored with ``new._share_buffer_to(param)``, exactly as
FastDeploy's ``DynamicWeightManager`` does, so a restored weight lives at a NEW address and a
graph captured before the cycle is stale. Paddle is imported only when :func:`create` runs.

Graph memory and ``FLAGS_use_cuda_malloc_async_allocator``
-------------------------------------------------------------
Paddle's default auto-growth allocator keeps the blocks a CUDA graph's private pool used, so
``CUDAGraph.reset()`` + ``empty_cache()`` does not lower reserved memory; FastDeploy therefore
runs with ``FLAGS_use_cuda_malloc_async_allocator=true`` (stream-ordered ``cudaMallocAsync``),
under which graph memory really goes back. Paddle reads ``FLAGS_*`` from the environment when
it is imported and builds its GPU allocator when CUDA is first used, so :func:`create` puts the
flag into ``os.environ`` *before* it imports paddle. When paddle was imported earlier, the
adapter falls back to ``paddle.set_flags`` and, if the GPU allocator already holds memory (so
it was built under the old setting), warns with :class:`AsyncAllocatorFlagWarning`: the C2
memory check may then fail spuriously. Set the flag in the environment (or let the kit's
spawned workers set it) to avoid that. An explicit ``false`` from the user is respected, with
the same warning.
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

from fd_conformance.errors import UsageError
from fd_conformance.runtime.base import (
    RUNTIME_DEVICES,
    EventKind,
    Graph,
    Group,
    MemoryCategory,
    MemoryStats,
    RecordedGraph,
    Runtime,
)
from fd_conformance.runtime.host_graph import HostEmulation, HostTensorOps


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def paddle_version(paddle: ModuleType) -> str:
    """``paddle.__version__``, read by name: paddle imports it from ``paddle.version`` without listing
    it in ``__all__``, so a strict type checker does not count it as paddle's attribute."""
    return str(getattr(paddle, "__version__", "unknown"))


def _nested_shape(value: Any) -> tuple[int, ...]:
    """The shape of a (nested) list/scalar weight value, without building a tensor for it."""
    import numpy as np  # numpy ships with paddle; lazy like the rest of the framework imports

    return tuple(np.shape(value))


def _run_no_grad(fn: Callable[[], Any]) -> Any:
    """Run a captured callable as a real capture would: no autograd graph kept alive."""
    import paddle

    with paddle.no_grad():
        return fn()


ASYNC_ALLOCATOR_FLAG = "FLAGS_use_cuda_malloc_async_allocator"
ASYNC_ALLOCATOR_FLAG_HELP = (
    f"{ASYNC_ALLOCATOR_FLAG}=true makes Paddle return CUDA-graph memory on reset (FastDeploy "
    "sets it); it must be in the environment before paddle is imported"
)
# ProcessGroup creation reads the global rank from here even for a one-rank group.
TRAINER_ID_ENV = "PADDLE_TRAINER_ID"


class AsyncAllocatorFlagWarning(UserWarning):
    """Paddle's GPU allocator was built without the async allocator: graph memory may stay reserved."""


def _flag_is_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def ensure_async_allocator_flag() -> bool:
    """Turn the async allocator on, as early as possible; returns whether it is on.

    Before paddle is imported the environment variable is enough. After, ``set_flags`` still
    works as long as the GPU allocator has not been built; once it holds memory it is too late
    and we say so (the C2 memory check would otherwise blame the model for Paddle's pool).
    """
    explicit = os.environ.get(ASYNC_ALLOCATOR_FLAG)
    if explicit is not None and not _flag_is_true(explicit):
        warnings.warn(
            f"{ASYNC_ALLOCATOR_FLAG}={explicit!r} was set by the user; graph memory may not be "
            f"returned on clear, so FDC302 can be a false positive. Fix: unset it or set it to true",
            AsyncAllocatorFlagWarning,
            stacklevel=2,
        )
        return False
    if "paddle" not in sys.modules:
        os.environ[ASYNC_ALLOCATOR_FLAG] = "true"
        return True
    import paddle

    if _flag_is_true(str(paddle.get_flags([ASYNC_ALLOCATOR_FLAG]).get(ASYNC_ALLOCATOR_FLAG))):
        return True
    too_late = (
        paddle.device.is_compiled_with_cuda()
        and paddle.device.cuda.device_count() > 0
        and (paddle.device.cuda.memory_reserved() > 0)
    )
    paddle.set_flags({ASYNC_ALLOCATOR_FLAG: True})
    os.environ[ASYNC_ALLOCATOR_FLAG] = "true"
    if too_late:
        warnings.warn(
            f"paddle initialised CUDA before the adapter could set {ASYNC_ALLOCATOR_FLAG}=true; "
            "graph memory may stay reserved after clear (FDC302 can be a false positive). "
            f"Fix: export {ASYNC_ALLOCATOR_FLAG}=true before importing paddle",
            AsyncAllocatorFlagWarning,
            stacklevel=2,
        )
        return False
    return True


def _free_port() -> int:
    """A loopback port for the one-rank groups' TCPStore (nobody else connects to it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_STORE: dict[int, Any] = {}  # pid -> this process's TCPStore (a forked child must not reuse its parent's)


def _shared_store() -> Any:
    """The process's one TCPStore for every group it makes, as ``paddle.distributed.new_group``
    shares its default store (each group keys its rendezvous by its own ring id). Starting a
    store waits ~90 ms for its server, which a store per group paid on every restart."""
    from paddle.base import core

    pid = os.getpid()
    if pid not in _STORE:
        _STORE.clear()
        _STORE[pid] = core.TCPStore("127.0.0.1", _free_port(), True, 1, 30)
    return _STORE[pid]


class PaddleGroup(Group):
    """A real one-rank Paddle ProcessGroup (gloo on CPU, NCCL on GPU), registered with
    ``paddle.distributed`` so its own shutdown/destroy calls work on it.

    ``paddle.distributed.new_group`` creates no ProcessGroup for a single rank (and its
    collectives skip non-members), so the group is built from Paddle's own parts instead:
    the process's TCPStore, ``_new_process_group_impl`` and ``Group``. Collectives call the ProcessGroup
    directly, on the calculation stream on CUDA so that they land inside a captured graph.
    """

    def __init__(self, name: str, backend: str) -> None:
        import paddle.distributed.collective as collective
        from paddle.distributed.communication.group import Group as PaddleDistGroup
        from paddle.distributed.communication.group import _add_new_group

        os.environ.setdefault(TRAINER_ID_ENV, "0")
        self.name = name
        self.backend = backend
        gid = collective._new_ring_id()
        self.dist_name = f"fd_conformance_{name}_{gid}"
        store = _shared_store()
        self._pg: Any = collective._new_process_group_impl(backend, store, 0, 1, self.dist_name, None, group_id=gid)
        self.dist_group: Any = PaddleDistGroup(0, gid, [0], pg=self._pg, name=self.dist_name)
        collective._get_group_map_by_name()[self.dist_name] = self.dist_group
        collective._get_group_map()[gid] = self.dist_group
        _add_new_group(self.dist_group)
        self._alive = True

    def _all_reduce(self, tensor: Any) -> None:
        from paddle.base import core

        if self.backend == "nccl":
            self._pg.all_reduce_on_calc_stream(tensor, core.ReduceOp.SUM)
        else:
            self._pg.all_reduce(tensor, core.ReduceOp.SUM, True).wait()

    def shutdown(self) -> None:
        """NCCL: ``shutdown_process_group`` destroys the communicator (this is the call that
        waits on graphs still holding its collectives). Gloo has no shutdown, so the group is
        deregistered with ``destroy_process_group`` and its context dropped."""
        import paddle.distributed as dist

        if self._pg is None:
            return  # already torn down
        self._alive = False
        if self.backend == "nccl":
            dist.shutdown_process_group(self.dist_group)
        dist.destroy_process_group(self.dist_group)
        import paddle.distributed.collective as collective

        collective._get_group_map_by_name().pop(self.dist_name, None)
        collective._get_group_map().pop(self.dist_group.id, None)
        self._pg = None


class PaddleCudaGraph(RecordedGraph):
    """``paddle.device.cuda.graphs.CUDAGraph`` with FastDeploy's capture sequence:
    synchronize, capture_begin, run, capture_end, then one replay so the outputs hold values
    (capturing only records kernels; nothing has run yet)."""

    def __init__(self, runtime: PaddleRuntime, label: str, owner: str, pool_id: Any) -> None:
        super().__init__(runtime, label, owner)
        self._pool_id = pool_id
        self._graph: Any = None

    def _capture(self, fn: Callable[[], Any]) -> Any:
        import paddle
        from paddle.device.cuda import graphs

        graph = graphs.CUDAGraph(pool_id=self._pool_id)
        paddle.device.synchronize()
        graph.capture_begin()
        try:
            outputs = fn()
        finally:
            # End the capture even when fn fails: a stream left capturing poisons every later call.
            graph.capture_end()
        graph.replay()
        paddle.device.synchronize()
        self._graph = graph
        return outputs

    def _replay(self) -> None:
        self._graph.replay()

    def _reset(self) -> None:
        self._graph.reset()
        self._graph = None


class PaddleRuntime(Runtime):
    """Paddle on ``cuda`` (real graphs) or ``cpu`` (host-emulated graphs)."""

    name = "paddle"

    def __init__(self, device: str) -> None:
        import paddle

        super().__init__(device)
        self._paddle = paddle
        self._pool_ids: dict[str, Any] = {}  # owner -> CUDA graph memory pool id
        paddle.device.set_device("gpu:0" if device == "cuda" else "cpu")
        paddle.disable_static()
        self.host = HostEmulation(
            HostTensorOps(
                is_tensor=lambda value: isinstance(value, paddle.Tensor),
                nbytes=lambda tensor: 0 if self.is_released(tensor) else _nbytes(tensor),
                copy_into=self.copy_into,
                run=_run_no_grad,
            )
        )
        if device != "cuda":
            self._ledger = self.host.ledger  # Paddle's GPU allocator counts our allocations by itself

    # --- framework / device -------------------------------------------------------
    @property
    def version(self) -> str:
        return paddle_version(self._paddle)

    def device_count(self) -> int:
        if self.device != "cuda":
            return 1  # the host, as the torch adapter counts it
        return int(self._paddle.device.cuda.device_count())

    def device_name(self) -> str:
        if self.device == "cuda":
            return str(self._paddle.device.cuda.get_device_name())
        return "cpu (host-emulated graphs)"

    def synchronize(self) -> None:
        if self.device == "cuda":
            self._paddle.device.cuda.synchronize()

    def memory_stats(self) -> MemoryStats:
        if self.device == "cuda":
            cuda = self._paddle.device.cuda
            return MemoryStats(int(cuda.memory_allocated()), int(cuda.memory_reserved()))
        return self.host.memory_stats()

    def empty_cache(self) -> None:
        if self.device == "cuda":
            self._paddle.device.cuda.empty_cache()

    # --- tensors ------------------------------------------------------------------
    def address(self, tensor: Any) -> int:
        if not tensor._is_initialized():
            return 0
        return int(tensor.data_ptr() or 0)

    def is_released(self, tensor: Any) -> bool:
        return not tensor._is_initialized()

    def to_numpy(self, tensor: Any) -> Any:
        return tensor.numpy()

    def clone(self, tensor: Any) -> Any:
        with self._paddle.no_grad():
            return self._account(tensor.detach().clone(), MemoryCategory.BUFFERS)

    def copy_into(self, dst: Any, src: Any) -> None:
        with self._paddle.no_grad():
            dst.copy_(src, False)

    # --- graphs -------------------------------------------------------------------
    def new_graph(self, label: str, owner: str = "main") -> Graph:
        if self.device == "cuda":
            if owner not in self._pool_ids:
                from paddle.base.core import CUDAGraph as CoreCUDAGraph

                self._pool_ids[owner] = CoreCUDAGraph.gen_new_memory_pool_id()
            return PaddleCudaGraph(self, label, owner, self._pool_ids[owner])
        return self.host.new_graph(self, label, owner)

    # --- weights, the way FastDeploy's DynamicWeightManager does it ---------------------
    # (the storage operations under Runtime.release_parameter/restore_parameter)
    def _placement(self, param: Any) -> Any:
        return param.place  # read before release: a cleared tensor has no place

    def _free_storage(self, param: Any) -> None:
        param._clear_data()

    def _new_storage(self, value: Any, like: Any, placement: Any, name: str) -> Any:
        """A fresh tensor with ``like``'s dtype on ``placement`` holding ``value`` (never ``value``
        itself: the caller may keep using it, and sharing would alias the two)."""
        paddle = self._paddle
        # Shape first: a wrong weight set must fail as a usage error before anything is allocated.
        shape = list(value.shape) if hasattr(value, "shape") else list(_nested_shape(value))
        if shape != list(like.shape):
            raise UsageError(
                f"restore of parameter {name or '<unnamed>'}: value shape {tuple(shape)} != parameter shape {tuple(like.shape)}",
                "load a weight set built for this model config",
            )
        with paddle.no_grad():
            if isinstance(value, paddle.Tensor):
                new = value.detach().astype(like.dtype)._copy_to(placement, True)
            else:
                new = paddle.to_tensor(value, dtype=like.dtype, place=placement)
        return new

    def _poison(self, tensor: Any) -> None:
        # Paddle's fill_ rejects NaN; 1e4 is finite in every float dtype and far from real weights.
        with self._paddle.no_grad():
            tensor.fill_(1.0e4 if tensor.is_floating_point() else 0)

    def _install_storage(self, param: Any, fresh: Any) -> None:
        with self._paddle.no_grad():
            fresh._share_buffer_to(param)

    # --- communication ------------------------------------------------------------
    def new_group(self, name: str = "tp") -> Group:
        group = PaddleGroup(name, "nccl" if self.device == "cuda" else "gloo")
        self._groups.append(group)
        self.events.emit(EventKind.GROUP_CREATED, name, id(group))
        return group

    group_type = PaddleGroup

    def _destroy_group(self, group: PaddleGroup) -> None:
        group.shutdown()


def _cuda_available(paddle: Any) -> bool:
    return bool(paddle.device.is_compiled_with_cuda()) and int(paddle.device.cuda.device_count()) > 0


def create(device: str = "auto") -> PaddleRuntime:
    """Build the Paddle adapter. ``auto`` picks CUDA when Paddle sees a GPU, else CPU."""
    if device not in RUNTIME_DEVICES:
        raise UsageError(f"unknown device {device!r}", f"use one of {', '.join(RUNTIME_DEVICES)}")
    if device in ("auto", "cuda"):
        # Before `import paddle`, so the allocator is built with it (see module docstring).
        ensure_async_allocator_flag()
    import paddle

    if device == "auto":
        device = "cuda" if _cuda_available(paddle) else "cpu"
    elif device == "cuda" and not _cuda_available(paddle):
        build = "CUDA build" if paddle.device.is_compiled_with_cuda() else "CPU-only build"
        raise UsageError(
            f"device 'cuda' requested but paddle {paddle_version(paddle)} ({build}) sees no GPU",
            "install paddlepaddle-gpu on a CUDA host, or use --fd-device cpu",
        )
    return PaddleRuntime(device)
