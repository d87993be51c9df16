"""What a runtime knows about memory: allocator figures, what a host-tracked allocation is for,
and moving a reloaded weight to a new address.

Apart from the :class:`~fd_conformance.runtime.base.Runtime` interface because the host emulation
keeps its own ledger and the adapters allocate through :func:`allocate_avoiding` themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar


class MemoryCategory(str, enum.Enum):
    """What a host-tracked allocation is for. A device allocator cannot tell its bytes apart; the
    host ledger can, so the clear check judges graph memory alone while the weight-cycle check
    sees everything (a retained weight copy is growth, not a clear leak)."""

    GRAPH_OUTPUTS = "graph_outputs"  # static outputs of captured graphs: what clear must give back
    WEIGHTS = "weights"  # parameter storage the runtime allocated on restore
    BUFFERS = "buffers"  # tensors the runtime cloned (static buffers, copies a model keeps)


@dataclass(frozen=True)
class MemoryStats:
    """Device allocator figures in bytes (host emulation reports the bytes it holds)."""

    allocated: int
    reserved: int
    # Bytes attributable to graphs, where the runtime can attribute them: host emulation's live
    # static outputs; on a torch device, the bytes in use in the caching allocator's graph pools
    # (the segments its snapshot gives a private pool id). None where nothing can be attributed.
    graphs: int | None = None
    # The graph pools' reserved bytes (a kept buffer pins its whole segment); device only.
    graphs_reserved: int | None = None


class AllocationLedger(Protocol):
    """Where a host-emulating runtime records the tensors it allocates (weakly: it keeps nothing alive)."""

    def track(self, tensor: Any, category: MemoryCategory) -> None: ...


@dataclass(frozen=True)
class ReleasedParam:
    """What a release remembers: once cleared, a tensor no longer knows its old address (nor, in
    Paddle, its place), and restore needs both to land the new weight elsewhere on that device."""

    address: int
    placement: Any  # the framework's device handle (torch.device, paddle Place)


StorageT = TypeVar("StorageT")


def allocate_avoiding(
    make: Callable[[], StorageT],
    address_of: Callable[[StorageT], int],
    avoid: int | None,
    poison: Callable[[StorageT], None] = lambda _: None,
) -> StorageT:
    """``make()`` a new buffer whose address is not ``avoid``.

    Real reloads land at new addresses (that is what makes stale graphs wrong); an allocator may
    hand the just-freed block straight back, which would hide a stale graph by luck. The unlucky
    block is kept alive while a second one is made, so the move is deterministic, and poisoned
    before it is dropped: it already holds the NEW values, and a stale graph still reading that
    address would otherwise compute the right answer by accident (seen on the H200).
    """
    fresh = make()
    if avoid is not None and address_of(fresh) == avoid:
        unlucky = fresh
        fresh = make()
        poison(unlucky)
        del unlucky
    return fresh
