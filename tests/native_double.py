"""A CPU test double of ``torch.cuda.CUDAGraph`` for native mode's tests (imported as
``native_double``: tests/ is on sys.path; ``-p native_double`` patches it into a whole session).

:class:`TapeGraph` keeps the semantics the kit's rules are about, not the speed: between
``capture_begin`` and ``capture_end`` it records every aten op with ALIASES of the tensors it
touched (the storage they had then, as a CUDA graph bakes in addresses), and ``replay`` runs the
ops again into the same output storage. So a weight swapped with ``param.data = new`` is not seen
by a replay (stale, as on a GPU), and a weight whose storage was resized to 0 makes the replay
fail (a GPU would read freed memory). :func:`graph` and :func:`graph_pool_handle` stand in for
``torch.cuda.graph`` and ``torch.cuda.graph_pool_handle``, which need a device.
"""

from __future__ import annotations

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

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        alias = tree_map_only(torch.Tensor, lambda t: t.detach(), (args, kwargs, out))
        self.ops.append((func, alias[0], alias[1], alias[2]))
        return out


class TapeGraph:
    """Stands in for ``torch.cuda.CUDAGraph`` (see the module docstring)."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._tape: list[tuple[Any, Any, Any, Any]] | None = None
        self._mode: _Tape | None = None

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **_: Any) -> None:
        if self._tape is not None:
            raise RuntimeError("This CUDAGraph instance already owns a captured graph")
        self._mode = _Tape()
        self._mode.__enter__()

    def capture_end(self) -> None:
        mode, self._mode = self._mode, None
        assert mode is not None, "capture_end without capture_begin"
        mode.__exit__(None, None, None)
        self._tape = mode.ops

    def replay(self) -> None:
        if self._tape is None:
            raise RuntimeError("replay() of a graph that is not captured")
        with torch.no_grad():
            for func, args, kwargs, out in self._tape:
                result = func(*args, **kwargs)
                for dst, src in zip(tree_flatten(out)[0], tree_flatten(result)[0], strict=True):
                    if isinstance(dst, torch.Tensor) and dst is not src:
                        dst.copy_(src)

    def reset(self) -> None:
        self._tape = None

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
        monkeypatch.setattr(torch.cuda, "Stream", lambda *args, **kwargs: None)  # torch.cuda.stream(None) is a no-op


_session_patch = pytest.MonkeyPatch()


def pytest_configure(config: pytest.Config) -> None:
    """Loaded with ``-p native_double``: the whole session (in-process checks) sees the double."""
    install(_session_patch)


def pytest_unconfigure(config: pytest.Config) -> None:
    _session_patch.undo()
