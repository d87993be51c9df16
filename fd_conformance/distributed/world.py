"""A multi-rank torch.distributed world for TP checks: N spawned rank processes, one clock.

Tensor-parallel checks need N real processes in one process group (gloo on CPU, NCCL on GPU,
one process per GPU). Each rank is an isolation worker (:class:`fd_conformance.isolation.process.WorkerProcess`),
so a rank that hangs is diagnosed exactly like a hung single-process check -- faulthandler
stacks, py-spy native stacks, stuck frame, last streamed lifecycle event -- and the finding
names WHICH rank hung. The parent waits on every rank at once (one thread per rank, same
deadline): the rank stuck in a collective is the one whose clock runs out, while its peer that
skipped the collective returns normally.

A world is all-or-nothing: after any rank hangs or crashes the peers are inside (or past) a
collective that can never complete, so every rank is replaced before the next call.

Inside a rank, the called function gets a :class:`RankContext` (rank, world size, a store for
plan exchanges, a runtime whose groups span the world). Ranks keep their process group across
calls, so a world pays the spawn + torch import once for many checks.
"""

from __future__ import annotations

import datetime
import itertools
import os
import shutil
import tempfile
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from fd_conformance.devices import visible_gpu_count
from fd_conformance.distributed.capture_plan import ENDED_KEY
from fd_conformance.errors import UsageError, validate_timeout
from fd_conformance.findings import Finding
from fd_conformance.isolation import messages
from fd_conformance.isolation.process import RunResult, WorkerProcess, WorkerStartError
from fd_conformance.isolation.worker.calls import resolve
from fd_conformance.isolation.worker.channel import mark
from fd_conformance.runtime.base import announce_runtime

__all__ = ["DistributedWorld", "RankContext", "RankOutcome", "TorchRankStore", "WorldOutcome"]

BACKENDS = ("gloo", "nccl")
# How long a collective may wait inside the group before torch itself gives up. Longer than any
# sane watchdog timeout on purpose: the parent's watchdog must be the one that reports the hang.
WORLD_GROUP_TIMEOUT = datetime.timedelta(seconds=300)
RANK_ENTRY = "fd_conformance.distributed.world:_rank_entry"

Outcome = Literal["passed", "failed", "hang", "crash"]


# --- parent side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RankOutcome:
    """One rank's result for one call."""

    rank: int
    world_size: int
    target: str
    outcome: Outcome
    run: RunResult

    @property
    def value(self) -> Any:
        return self.run.payload.get("value")

    @property
    def details(self) -> str:
        """The traceback of a failed call, or the hang/crash evidence."""
        return str(self.run.payload.get("details", "")) or self.run.describe()

    @property
    def finding(self) -> Finding | None:
        """FDC501/FDC502 naming the rank, e.g. ``pkg:check [rank 0/2] hung: ...; stuck at File ..."""
        return self.run.finding(f"{self.target} [rank {self.rank}/{self.world_size}]")


@dataclass(frozen=True)
class WorldOutcome:
    """Every rank's result for one call, rank order."""

    target: str
    ranks: tuple[RankOutcome, ...]

    @property
    def passed(self) -> bool:
        return all(r.outcome == "passed" for r in self.ranks)

    @property
    def values(self) -> list[Any]:
        return [r.value for r in self.ranks]

    def by_outcome(self, outcome: Outcome) -> list[RankOutcome]:
        return [r for r in self.ranks if r.outcome == outcome]

    @property
    def findings(self) -> list[Finding]:
        return [f for r in self.ranks if (f := r.finding) is not None]

    def describe(self) -> str:
        return "\n".join(f"--- rank {r.rank}: {r.outcome}\n{r.details}" for r in self.ranks if r.outcome != "passed")


def _resolve_backend(backend: str, device: str) -> str:
    if backend == "auto":
        return "nccl" if device == "cuda" else "gloo"
    if backend not in BACKENDS:
        raise UsageError(f"unknown process-group backend {backend!r}", f"use one of auto, {', '.join(BACKENDS)}")
    if backend == "nccl" and device != "cuda":
        raise UsageError("backend 'nccl' needs device 'cuda'", "use backend 'gloo' for a CPU world")
    return backend


class DistributedWorld:
    """N spawned ranks in one torch.distributed world; :meth:`run` calls a function on all of them.

    >>> with DistributedWorld(2, device="cpu") as world:
    ...     outcome = world.run("my.checks:tp_check", timeout=120)
    """

    def __init__(self, world_size: int = 2, *, device: str = "cpu", backend: str = "auto") -> None:
        if world_size < 1:
            raise UsageError(f"world_size={world_size} must be at least 1", "ask for e.g. 2 ranks")
        if device not in ("cpu", "cuda"):
            raise UsageError(f"unknown device {device!r} for a distributed world", "use 'cpu' or 'cuda'")
        if device == "cuda":
            if visible_gpu_count() < world_size:
                raise UsageError(
                    f"a {world_size}-rank CUDA world needs {world_size} GPUs, {visible_gpu_count()} visible",
                    "run on a host with enough GPUs (one process per GPU) or use device 'cpu' with gloo",
                )
        self.world_size = world_size
        self.device = device
        self.backend = _resolve_backend(backend, device)
        self.workers: list[WorkerProcess] = []
        self.incarnations = 0  # how many times the ranks were (re)spawned: tests assert the replacement
        self._dir: str | None = None
        self._store_path = ""
        self._calls = itertools.count()

    # --- rank processes ---------------------------------------------------------------------
    def _spawn(self) -> None:
        self._kill_all()
        self._dir = tempfile.mkdtemp(prefix="fdc-world-")
        # A fresh store file per incarnation: keys of a dead world must not satisfy a new rendezvous.
        self._store_path = os.path.join(self._dir, "store")
        self.workers = [WorkerProcess("call") for _ in range(self.world_size)]
        self.incarnations += 1

    def _kill_all(self) -> None:
        for worker in self.workers:
            worker.kill()
        self.workers = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def run(self, target: str, *args: Any, timeout: float, **kwargs: Any) -> WorldOutcome:
        """Call ``target(ctx, *args, **kwargs)`` on every rank; each rank is watched with ``timeout``."""
        if ":" not in target:
            raise UsageError(f"rank function {target!r} has no ':'", "write it as 'package.module:function'")
        timeout = validate_timeout(timeout, "timeout")
        if not self.workers or not all(worker.alive for worker in self.workers):
            self._spawn()
        call_id = next(self._calls)
        results: list[RunResult | None] = [None] * self.world_size

        def watch(rank: int) -> None:
            message = messages.message(
                messages.CALL,
                target=RANK_ENTRY,
                args=(target, rank, self.world_size, self.backend, self.device, self._store_path, call_id, args, kwargs),
                kwargs={},
            )
            worker = self.workers[rank]
            try:
                results[rank] = worker.run(message, timeout)
            except WorkerStartError as err:  # never got going: reported as that rank's crash
                results[rank] = RunResult("crash", worker.pid, 0.0, cause=str(err).splitlines()[0], log_tail=str(err))
            except Exception as err:  # noqa: BLE001 - any watcher failure is that rank's crash
                # A watcher thread's exception would vanish (threads only print it) and leave this
                # rank without a result: every other rank's outcome would be lost with it.
                text = f"{type(err).__name__}: {err}"
                results[rank] = RunResult(
                    "crash", worker.pid, 0.0, cause=f"watcher failed: {text.splitlines()[0]}", log_tail=traceback.format_exc()
                )

        # One watcher per rank, same deadline: the rank whose clock runs out is the one that hung.
        threads = [threading.Thread(target=watch, args=(rank,), name=f"fdc-rank-{rank}") for rank in range(self.world_size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ranks = []
        for rank, result in enumerate(results):
            assert result is not None  # every watcher returns a RunResult
            status = "crash" if result.status == "not_started" else result.status  # a rank's start: as before
            outcome: Outcome = status if status != "done" else result.payload.get("outcome", "failed")
            ranks.append(RankOutcome(rank, self.world_size, target, outcome, result))
        if any(r.outcome in ("hang", "crash") for r in ranks):
            self._kill_all()  # a broken collective poisons every peer: next call gets a fresh world
        return WorldOutcome(target, tuple(ranks))

    def close(self) -> None:
        for worker in self.workers:
            worker.stop(timeout=2.0)
        self._kill_all()

    def __enter__(self) -> DistributedWorld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- rank side -------------------------------------------------------------------------------


class TorchRankStore:
    """:class:`fd_conformance.distributed.capture_plan.RankStore` over a ``torch.distributed`` store."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def set(self, key: str, value: bytes) -> None:
        self.store.set(key, value)

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        try:
            self.store.wait([key], datetime.timedelta(seconds=timeout))
        except Exception:  # noqa: BLE001 - torch raises DistStoreError/RuntimeError by version: both mean "not set"
            return None
        return bytes(self.store.get(key))

    def has(self, key: str) -> bool:
        return bool(self.store.check([key]))


@dataclass
class RankContext:
    """What a function running on one rank is handed."""

    rank: int
    world_size: int
    backend: str
    device: str
    store: TorchRankStore  # prefixed per call: keys of one call never satisfy the next
    _runtimes: list[Any] = field(default_factory=list)

    def runtime(self) -> Any:
        """A :class:`fd_conformance.runtime.torch.TorchRuntime` whose groups span the whole world.

        Its lifecycle events stream to the parent, so a hang report names the last one."""
        # torch only inside a rank: the parent that builds the world never imports it
        from fd_conformance.runtime.torch import TorchRuntime

        runtime = TorchRuntime(self.device)
        announce_runtime(runtime.events)
        self._runtimes.append(runtime)
        return runtime


_WORLD: dict[str, Any] = {}  # per rank process: the store and the initialised default group


def _join_world(rank: int, world_size: int, backend: str, device: str, store_path: str) -> Any:
    """Initialise the default process group once per rank process; later calls reuse it."""
    if _WORLD.get("store_path") == store_path:
        return _WORLD["store"]
    # torchrun's variables, so code that reads them (and NCCL's own logs) sees a normal launch.
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size))
    import torch
    import torch.distributed as dist

    kwargs: dict[str, Any] = {}
    if device == "cuda":
        torch.cuda.set_device(rank)  # one process per GPU: rank r drives device r
        kwargs["device_id"] = torch.device("cuda", rank)  # eager NCCL init: never lazily inside a capture
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=WORLD_GROUP_TIMEOUT, **kwargs)
    _WORLD.update(store_path=store_path, store=store)
    return store


def _rank_entry(
    target: str,
    rank: int,
    world_size: int,
    backend: str,
    device: str,
    store_path: str,
    call_id: int,
    args: Sequence[Any],
    kwargs: dict[str, Any],
) -> Any:
    """Runs in each rank's worker: join the world, then call ``target(ctx, *args, **kwargs)``."""
    import torch.distributed as dist

    store = _join_world(rank, world_size, backend, device, store_path)
    ctx = RankContext(rank, world_size, backend, device, TorchRankStore(dist.PrefixStore(f"call-{call_id}/", store)))
    mark(f"rank {rank}/{world_size}: call {target}")
    try:
        return resolve(target)(ctx, *args, **kwargs)
    finally:  # peers waiting for this rank's capture plan learn it will never come (capture_plan.ENDED_KEY)
        ctx.store.set(f"{ENDED_KEY}/{rank}", b"1")
