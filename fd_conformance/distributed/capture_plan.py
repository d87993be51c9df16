"""Tensor-parallel capture-order checks: agree on the plan BEFORE capturing anything.

A captured graph that contains a collective (the row-parallel all-reduce, FastDeploy's custom
all-reduce buffer registration) must be captured in the same order on every TP rank: rank 0
capturing size 4 while rank 1 captures size 1 means two mismatched collectives, which deadlock
(NCCL) or fail with a size mismatch (gloo). A deadlock shows up as a hung CI job with no finding,
so the kit checks the order while it is still data: every rank publishes its capture plan to a
shared key-value store, reads every other rank's plan with a bounded wait, and the check reports

* FDC601 when two ranks' plans differ (the deadlock that capturing would cause);
* FDC602 when a rank's plan is not descending per model (FastDeploy captures decode sizes
  largest first; the first capture reserves the graph pool and registers the all-reduce buffers);
* FDC603 when a rank never publishes (absent, hung or crashed): bounded, never a wait forever.

Only when no finding is raised does :func:`capture_in_agreed_order` capture. Runtime-neutral: the
store is any object with ``set``/``wait_get`` (the torch launcher adapts ``torch.distributed``'s
stores; Paddle's ``paddle.distributed`` TCPStore fits the same two methods).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from fd_conformance.findings import Finding, Location, make_finding

__all__ = [
    "CapturePlan",
    "PlanningRunner",
    "RankStore",
    "capture_in_agreed_order",
    "captured_order",
    "check_capture_plans",
    "decode_plan",
    "encode_plan",
    "exchange_capture_plans",
]

CapturePlan = tuple[tuple[str, int], ...]  # (owner, capture size) in the order the rank will capture
PLAN_KEY = "fd-conformance/capture-plan"
# Set by a rank's process when the function it ran has returned or raised (distributed/world.py):
# a peer whose plan is missing AND that has ended will never publish one. A peer still running is
# waited for, however slow its host: a verdict never depends on a deadline; a peer that truly hangs
# is the world's watchdog's to report (FDC501, naming the rank).
ENDED_KEY = "fd-conformance/rank-ended"
POLL_S = 0.05  # how often a waiting rank looks whether a silent peer has ended (latency only)


@runtime_checkable
class RankStore(Protocol):
    """The two key-value operations the exchange needs from a distributed store."""

    def set(self, key: str, value: bytes) -> None: ...

    def wait_get(self, key: str, timeout: float) -> bytes | None:
        """The value once some rank set ``key``; None when nobody did within ``timeout`` seconds."""
        ...

    def has(self, key: str) -> bool:
        """Whether some rank set ``key`` already (never waits)."""
        ...


@runtime_checkable
class PlanningRunner(Protocol):
    """A runner that can say, before capturing, in which order it will capture."""

    def capture_plan(self) -> CapturePlan: ...

    def capture_model(self) -> None: ...


def encode_plan(plan: Sequence[tuple[str, int]]) -> bytes:
    return json.dumps([[str(owner), int(size)] for owner, size in plan]).encode()


def decode_plan(data: bytes) -> CapturePlan:
    return tuple((str(owner), int(size)) for owner, size in json.loads(data.decode()))


def _show(plan: CapturePlan) -> str:
    return ", ".join(f"{owner}:{size}" for owner, size in plan) or "(nothing)"


def exchange_capture_plans(
    store: RankStore,
    rank: int,
    world_size: int,
    plan: Sequence[tuple[str, int]],
    *,
    key: str = PLAN_KEY,
) -> tuple[dict[int, CapturePlan], list[Finding]]:
    """Publish this rank's plan, then read every rank's; FDC603 for a rank that ended without one.

    No deadline: a slow peer (a busy host, a long model build) is waited for, so the same ranks
    give the same findings on any machine. Only a peer whose process has ended (``ENDED_KEY``)
    without publishing is absent.
    """
    mine = tuple((str(owner), int(size)) for owner, size in plan)
    store.set(f"{key}/{rank}", encode_plan(mine))
    plans: dict[int, CapturePlan] = {rank: mine}
    findings: list[Finding] = []
    for peer in range(world_size):
        if peer != rank:
            data = _plan_of(store, f"{key}/{peer}", f"{ENDED_KEY}/{peer}")
            if data is None:
                findings.append(
                    make_finding(
                        "FDC603",
                        f"rank {peer} of {world_size} ended without publishing a capture plan "
                        f"(rank {rank} checked; capturing now would wait forever in its first collective)",
                        Location(obj=f"tp rank {peer}"),
                    )
                )
            else:
                plans[peer] = decode_plan(data)
    return plans, findings


def _plan_of(store: RankStore, plan_key: str, ended_key: str) -> bytes | None:
    """The peer's plan once published; None once the peer has ended without one."""
    while True:
        data = store.wait_get(plan_key, POLL_S)
        if data is not None:
            return data
        if store.has(ended_key):  # ended: its plan, if any, was set before the marker
            return store.wait_get(plan_key, POLL_S) if store.has(plan_key) else None


def check_capture_plans(plans: Mapping[int, CapturePlan]) -> list[Finding]:
    """FDC602 per rank whose plan is not descending per owner; FDC601 per rank differing from the lowest rank."""
    findings: list[Finding] = []
    for rank in sorted(plans):
        plan = plans[rank]
        for owner in dict.fromkeys(owner for owner, _ in plan):
            sizes = [size for who, size in plan if who == owner]
            if sizes != sorted(sizes, reverse=True):
                findings.append(
                    make_finding(
                        "FDC602",
                        f"rank {rank} plans to capture {owner} sizes {sizes}, not largest first",
                        Location(obj=f"tp rank {rank} ({owner})"),
                    )
                )
    if not plans:
        return findings
    reference_rank = min(plans)
    reference = plans[reference_rank]
    for rank in sorted(plans):
        if rank != reference_rank and plans[rank] != reference:
            findings.append(
                make_finding(
                    "FDC601",
                    f"rank {rank} plans capture order [{_show(plans[rank])}] but rank {reference_rank} plans "
                    f"[{_show(reference)}]; their in-graph collectives would not match",
                    Location(obj=f"tp rank {rank}"),
                )
            )
    return findings


def capture_in_agreed_order(
    runner: PlanningRunner,
    store: RankStore,
    rank: int,
    world_size: int,
    *,
    key: str = PLAN_KEY,
) -> list[Finding]:
    """Exchange plans, check them, and capture only when every rank agrees on a valid order.

    Every rank sees every plan, so every rank reports the same findings and every rank skips the
    capture together: no rank is left alone inside a collective.
    """
    plans, findings = exchange_capture_plans(store, rank, world_size, runner.capture_plan(), key=key)
    findings += check_capture_plans(plans)
    if not findings:
        runner.capture_model()
    return findings


def captured_order(labels: Sequence[str]) -> CapturePlan:
    """The (owner, size) order of graph labels as the graph-opt backend names them ("main:4")."""
    out = []
    for label in labels:
        owner, _, size = label.rpartition(":")
        if owner and size.isdigit():
            out.append((owner, int(size)))
    return tuple(out)
