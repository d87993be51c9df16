"""A CPU test double of ``torch.cuda.CUDAGraph`` for native mode's tests (imported as
``native_double``: tests/ is on sys.path; ``-p native_double`` patches it into a whole session).

:class:`TapeGraph` keeps the semantics the kit's rules are about, not the speed: between
``capture_begin`` and ``capture_end`` it records every aten op with ALIASES of the tensors it
touched (the storage they had then, as a CUDA graph bakes in addresses), and ``replay`` runs the
ops again into the same output storage. It keeps nothing alive that it read (a CUDA graph holds
addresses, not tensors): when a storage the capture read is gone from its owner -- the weight
swapped with ``param.data = new``, resized to 0, deleted -- a GPU replay would read freed memory,
and the double's replay makes every floating-point tensor it made read NaN instead (what the
kit's runtime does to memory it frees), so the stale replay is visible in the outputs. Collectives
(``c10d`` ops) run at capture and are not replayed: in a one-rank world they change nothing. :func:`graph` and :func:`graph_pool_handle` stand in for
``torch.cuda.graph`` and ``torch.cuda.graph_pool_handle``, which need a device.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map_only


class _Tape(TorchDispatchMode):
    """Records (op, aliased args, kwargs, aliased outputs) while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[Any, Any, Any, Any]] = []
        # Storages the capture read but did not make (weights, buffers, static inputs): the
        # tensor that held each one (weakly: a graph keeps nothing alive) and its address then.
        self.external: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
        self._made: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        for tensor in tree_flatten((args, kwargs))[0]:
            if isinstance(tensor, torch.Tensor):
                key = tensor.untyped_storage()._cdata
                if key not in self._made and key not in self.external:
                    self.external[key] = (weakref.ref(tensor), tensor.untyped_storage().data_ptr())
        out = func(*args, **kwargs)
        if getattr(func, "namespace", "") == "c10d":
            # A collective runs once, at capture, and is not replayed: in the one-rank worlds of the
            # kit's tests it changes nothing, and the tape must hold no process group or work
            # handle (gloo's destructors wait on a group torn down under them).
            return out
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor) and tensor.untyped_storage()._cdata not in self.external:
                self._made.add(tensor.untyped_storage()._cdata)
        alias = tree_map_only(torch.Tensor, lambda t: t.detach(), (args, kwargs, out))
        self.ops.append((func, alias[0], alias[1], alias[2]))
        return out

    def reads_freed_memory(self) -> bool:
        """A storage the capture read is gone from its owner (the tensor collected, its storage
        resized to 0 or swapped for another): a GPU replay would read freed memory."""
        for ref, address in self.external.values():
            tensor = ref()
            if tensor is None or tensor.untyped_storage().data_ptr() != address:
                return True
        return False


class TapeGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` (see the module docstring)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._tape: list[tuple[Any, Any, Any, Any]] | None = None
        self._mode: _Tape | None = None
        self._captured: _Tape | None = None

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **_: Any) -> None:
        if self._tape is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph")
        self._mode = _Tape()
        self._mode.__enter__()

    def capture_end(self) -> None:
        mode, self._mode = self._mode, None
        assert mode is not None, "capture_end without capture_begin"
        mode.__exit__(None, None, None)
        self._tape, self._captured = mode.ops, mode

    def replay(self) -> None:
        if self._tape is None:
            raise RuntimeError("replay() of a graph that is not captured")
        assert self._captured is not None
        if self._captured.reads_freed_memory():
            self._poison_outputs()
            return
        with torch.no_grad():
            for func, args, kwargs, out in self._tape:
                result = func(*args, **kwargs)
                for dst, src in zip(tree_flatten(out)[0], tree_flatten(result)[0], strict=True):
                    if isinstance(dst, torch.Tensor) and dst is not src:
                        dst.copy_(src)

    def _poison_outputs(self) -> None:
        """What reading freed memory gives, made visible: every floating-point tensor the graph
        made (never one it only read) reads NaN, as the kit's runtime poisons what it frees."""
        assert self._tape is not None and self._captured is not None
        with torch.no_grad():
            for _, _, _, out in self._tape:
                for tensor in tree_flatten(out)[0]:
                    storage = tensor.untyped_storage() if isinstance(tensor, torch.Tensor) else None
                    if storage is not None and storage._cdata not in self._captured.external and storage.nbytes():
                        if tensor.is_floating_point():
                            tensor.fill_(float("nan"))

    def reset(self) -> None:
        self._tape, self._captured = None, None

    def pool(self) -> Any:
        return None


@contextmanager
def graph(cuda_graph: TapeGraph, pool: Any = None, stream: Any = None, capture_error_mode: str = "global") -> Iterator[None]:
    """``torch.cuda.graph`` for the double: capture_begin, the body, capture_end."""
    cuda_graph.capture_begin(pool)
    try:
        yield
    finally:
        cuda_graph.capture_end()


class NoStream:
    """``torch.cuda.Stream`` on a CPU-only build: making one gives None (``torch.cuda.stream(None)``
    is a no-op). A class, not a function: libraries annotate with ``torch.cuda.Stream | None`` at
    import time (transformers' continuous batching does)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
        return None


def graph_pool_handle() -> Any:
    return object()


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Patch the double in place of torch's graph API (undone with ``monkeypatch``), including
    what ``torch.cuda.make_graphed_callables`` calls around its captures on a CPU-only build."""
    monkeypatch.setattr(torch.cuda, "CUDAGraph", TapeGraph)
    monkeypatch.setattr(torch.cuda, "graph", graph)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", graph_pool_handle)
    monkeypatch.setattr(torch.cuda.graphs, "graph_pool_handle", graph_pool_handle)
    if not torch.cuda.is_available():
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
        monkeypatch.setattr(torch.cuda, "Stream", NoStream)


_session_patch = pytest.MonkeyPatch()


def pytest_configure(config: pytest.Config) -> None:
    """Loaded with ``-p native_double``: the whole session (in-process checks) sees the double."""
    install(_session_patch)


def pytest_unconfigure(config: pytest.Config) -> None:
    _session_patch.undo()
