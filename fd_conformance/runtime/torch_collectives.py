"""Native mode's view of ``torch.distributed``: the groups a capture issued collectives on, and
when a group is destroyed.

A CUDA graph that captured a collective replays it on the communicator it was captured on; a
group destroyed while such a graph lives is the MTP hang (FDC202: NCCL's destroy waits for work
the graph still owns). A model written without the kit calls ``torch.distributed`` itself, so
the observer wraps the module functions a graph can capture and ``destroy_process_group``, on
both ``torch.distributed`` and ``torch.distributed.distributed_c10d`` (the first re-exports the
second; callers resolve ``dist.all_reduce`` at call time, so the wrapper is what they get).
A communicator can also end without ``destroy_process_group``: ``ProcessGroup.shutdown()`` and
``abort()`` (what ``_abort_process_group`` calls, and what an engine's own recovery code may call)
are wrapped on the class. Each group is reported once: not again by the teardowns a wrapped one
calls in turn (``destroy_process_group`` calls ``shutdown()`` itself), nor by a second teardown of
a group already ended (an abort, then a destroy).

What it cannot see: a function bound before the observer was installed (``from torch.distributed
import all_reduce`` at import time), ``torch.distributed._functional_collectives`` and custom
communicators (vLLM's pynccl, custom all-reduce kernels), which never pass through these functions.
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

from fd_conformance.runtime.patches import Patches

# The c10d functions whose work a CUDA graph can capture; each takes the group as ``group``.
CAPTURABLE = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "isend",
    "irecv",
)
DESTROY = "destroy_process_group"
GROUP_TEARDOWNS = ("shutdown", "abort")  # ProcessGroup methods that end its communicator
MODULES = ("torch.distributed", "torch.distributed.distributed_c10d")


def default_group() -> Any:
    """The default process group, or None before ``init_process_group`` (a collective with
    ``group=None`` runs on it)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist.distributed_c10d._get_default_group()


def group_name(group: Any) -> str:
    """How a finding names a process group: its description where torch keeps one, else its number."""
    desc = str(getattr(group, "group_desc", "") or "")
    if desc and desc != "undefined":
        return desc
    number = getattr(group, "group_name", None)
    return f"process group {number}" if number is not None else type(group).__name__


class CollectiveHooks:
    """Wraps the capturable collectives, ``destroy_process_group`` and the group teardowns while installed.

    ``on_collective(group)`` runs for each collective called while ``capturing()`` is true (the
    group resolved: None means the default group); ``on_destroy(groups)`` runs BEFORE the
    framework's destroy (which may hang), with every group it is about to tear down.
    """

    def __init__(
        self,
        on_collective: Callable[[Any], None],
        on_destroy: Callable[[list[Any]], None],
        capturing: Callable[[], bool],
        known_groups: Callable[[], list[Any]],
    ) -> None:
        self._on_collective = on_collective
        self._on_destroy = on_destroy
        self._capturing = capturing
        self._known_groups = known_groups
        # Per thread: the teardowns a wrapped one calls are reported already, but another thread's
        # teardown (a recovery thread's abort while this one hangs in a destroy) is its own.
        self._under_way = threading.local()
        # Groups reported ended, held until the patches are undone: a second teardown of one ends
        # nothing new, and an id() alone could be a new group's after the old one is collected.
        self._ended: dict[int, Any] = {}

    def install(self, patches: Patches) -> None:
        """Wrap the functions on every module that has them, each undone by ``patches``; no-op
        without torch.distributed."""
        import torch.distributed as dist

        if not dist.is_available():
            return
        patches.callback(self._ended.clear)  # the groups reported ended are held until then
        wrapped: dict[int, Any] = {}  # one wrapper per original, shared by the re-exporting modules
        for module_name in MODULES:
            module = sys.modules.get(module_name)
            if module is None:
                continue
            for name in (*CAPTURABLE, DESTROY):
                original = getattr(module, name, None)
                if not callable(original):
                    continue
                if id(original) not in wrapped:
                    wrapped[id(original)] = self._destroy(original) if name == DESTROY else self._collective(original)
                patches.setattr(module, name, wrapped[id(original)])
        for name in GROUP_TEARDOWNS:
            if name in vars(dist.ProcessGroup):
                patches.setattr(dist.ProcessGroup, name, self._teardown(getattr(dist.ProcessGroup, name)))

    def _collective(self, original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)
        hooks = self

        def collective(*args: Any, **kwargs: Any) -> Any:
            if hooks._capturing():  # outside a capture a collective costs one call more
                group = signature.bind_partial(*args, **kwargs).arguments.get("group")
                group = group if group is not None else default_group()
                if group is not None:
                    hooks._on_collective(group)
            return original(*args, **kwargs)

        collective.__wrapped__ = original  # type: ignore[attr-defined]
        return collective

    def _destroy(self, original: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        def destroy_process_group(group: Any = None, *args: Any, **kwargs: Any) -> Any:
            # None tears every group down: the default one and every group a capture used.
            if group is None:
                groups = [g for g in (default_group(), *hooks._known_groups()) if g is not None]
            else:
                groups = [group]
            hooks._report(groups)
            return hooks._quietly(original, group, *args, **kwargs)

        destroy_process_group.__wrapped__ = original  # type: ignore[attr-defined]
        return destroy_process_group

    def _teardown(self, original: Callable[..., Any]) -> Callable[..., Any]:
        hooks = self

        def teardown(group: Any, *args: Any, **kwargs: Any) -> Any:
            if not getattr(hooks._under_way, "depth", 0):
                hooks._report([group])
            return hooks._quietly(original, group, *args, **kwargs)

        teardown.__wrapped__ = original  # type: ignore[attr-defined]
        return teardown

    def _report(self, groups: list[Any]) -> None:
        """``on_destroy`` with the groups not reported ended before, each once."""
        fresh = {id(g): g for g in groups if id(g) not in self._ended}
        if fresh:
            self._ended.update(fresh)
            self._on_destroy(list(fresh.values()))

    def _quietly(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run a teardown already reported: the teardowns it calls in turn (on this thread) report nothing."""
        under_way = self._under_way
        under_way.depth = getattr(under_way, "depth", 0) + 1
        try:
            return original(*args, **kwargs)
        finally:
            under_way.depth -= 1
