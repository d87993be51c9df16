"""Real wrappers, real clear: every registered model wrapper built on CPU from a tiny config, its
graph-optimisation backends given recorded graphs where FastDeploy keeps captured ones, and the
wrapper's own ``clear_graph_opt_backend()`` (either spelling) called as the engine calls it.

The protocol table judges classes; this one judges what the clear *does*. A wrapper whose clear
exists but misses a backend (a VL wrapper clearing its language model and not its vision tower)
or delegates with the wrong argument passes by class and fails here:

* **FDC203** a recorded graph still alive after the clear (named by the sublayer owning it),
* **FDC303** the clear raised: before any capture, after one, or called twice,
* **FDC005** the clear cannot be called without arguments, **FDC001** there is none.

A raise before any capture is judged apart from the wrapper's own verdict (which is its clear
after capture and called twice) and grouped by where it was raised (:class:`SharedRaise`): on
develop every wrapper's clear reaches the same shared backend line that dereferences a piecewise
backend made only on the first forward, one defect that a per-wrapper count would report fifteen
times. It stays a finding: the kit's contract says a clear before capture is a no-op, and the
FDC205 fix (clear every wrapper unconditionally) would crash on it.

How a wrapper is built (:mod:`.wrapper_build`): the checkout's own ``FDConfig`` with graphs on and
a tiny model config (:mod:`.tiny_config`), every ``fastdeploy`` module reporting CUDA while it is
built. Where the graphs go (:mod:`.recorded_graphs`): each object reachable from the wrapper that
has a ``graph_opt_backend`` gets that backend's piecewise CUDA-graph backend (FastDeploy's own
class, made as its ``__call__`` makes it on the first step), and every entry of it that holds a
``cuda_graph`` gets a :class:`~.recorded_graphs.RecordedGraph`, alive while anything references it.

A wrapper that does not build on CPU is a row saying why (the exception and FastDeploy's line),
never a pass; a clear that calls a compiled op is an ERROR row (it cannot run here), not FDC303.
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fd_conformance.fastdeploy.checkout import Checkout
from fd_conformance.fastdeploy.recorded_graphs import Recording, backends_of
from fd_conformance.fastdeploy.stand_ins import CompiledOpCalled, MissingDependency
from fd_conformance.fastdeploy.tiny_config import (  # noqa: F401 - re-exported: tests read the tiny config here
    FAMILY_FIELDS,
    TINY_FIELDS,
    TINY_PRETRAINED,
    TINY_VISION,
    families_of,
    tiny_model_config,
)
from fd_conformance.fastdeploy.wrapper_build import WrapperBuilder
from fd_conformance.findings import Finding, make_finding
from fd_conformance.spelling import CANONICAL, LEGACY

BEFORE_CAPTURE = "before any capture"


@dataclass
class WrapperRow:
    name: str
    qualname: str
    verdict: str = "ok"  # ok | FAIL | not built | ERROR
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""  # not built / ERROR: why; ok/FAIL: what was checked
    backends: list[str] = field(default_factory=list)  # where graphs were recorded
    graphs: int = 0
    before_capture: Finding | None = None  # FDC303 raised by the clear before any capture (grouped: SharedRaise)
    raised_at: str = ""  # where it was raised: the checkout's innermost file:line ("" when outside it)
    raised: str = ""  # what was raised: ``Type: message``
    cleared_before_capture: bool = False  # the clear before any capture ran and returned


#: The fix for a clear that raises before any capture, wherever the raising line is.
BEFORE_CAPTURE_FIX = "create what the clear clears eagerly (at build), or make the clear a no-op when nothing was captured"


@dataclass
class SharedRaise:
    """One raise of the clear before any capture, with every wrapper whose clear raised it at the
    same line: one defect in the code they share (FastDeploy's graph-opt backend), counted once."""

    at: str
    raised: str
    wrappers: list[str]
    fix: str = BEFORE_CAPTURE_FIX

    @property
    def short_at(self) -> str:
        """``graph_optimization_backend.py:179``: what a row's cell names."""
        return self.at.rsplit("/", 1)[-1] or "outside the checkout"

    def cell(self) -> str:
        """The affected rows' cell: ``FDC303 (shared: file.py:179, see below)``."""
        return f"FDC303 ({'shared' if len(self.wrappers) > 1 else 'at'}: {self.short_at}, see below)"

    def finding(self) -> Finding:
        where = f" at {self.at}" if self.at else ""
        message = (
            f"the clear before any capture raised {self.raised}{where} in {len(self.wrappers)} wrapper(s): "
            f"{', '.join(self.wrappers)}; fix: {self.fix}"
        )
        return make_finding("FDC303", message, call="clear before any capture")


@dataclass
class WrappersReport:
    where: str
    rows: list[WrapperRow] = field(default_factory=list)
    error: str | None = None

    @property
    def shared_raises(self) -> list[SharedRaise]:
        """The before-capture raises grouped by where they were raised (a raise outside the
        checkout is its wrapper's own group), in the order of their first wrapper."""
        groups: dict[str, SharedRaise] = {}
        for row in self.rows:
            if row.before_capture is not None:
                key = row.raised_at or f"({row.name})"
                groups.setdefault(key, SharedRaise(row.raised_at, row.raised, [])).wrappers.append(row.name)
        return list(groups.values())

    @property
    def violations(self) -> int:
        """FAIL rows (each wrapper's own clear) plus each shared before-capture raise once."""
        return sum(1 for r in self.rows if r.verdict == "FAIL") + len(self.shared_raises)

    @property
    def not_checked(self) -> int:
        return sum(1 for r in self.rows if r.verdict in ("not built", "ERROR"))


def raised_at(err: BaseException, checkout: Checkout) -> str:
    """``fastdeploy/x.py:12``: the innermost frame of ``err`` inside the checkout ("" when none is)."""
    import traceback

    frames = [f for f in traceback.extract_tb(err.__traceback__) if str(checkout.root) in f.filename]
    frame = frames[-1] if frames else None
    return f"{frame.filename.removeprefix(str(checkout.root) + '/')}:{frame.lineno}" if frame else ""


def _raised(err: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text[:160]}"


def describe(err: BaseException, checkout: Checkout) -> str:
    """``Type: first line of the message at fastdeploy/x.py:12`` (the checkout's innermost line)."""
    where = raised_at(err, checkout)
    return f"{_raised(err)}{' at ' + where if where else ''}"


def clear_method(cls: type) -> tuple[str | None, Any]:
    """The clear the engine's call reaches on ``cls`` (either spelling, canonical first) and its function."""
    for name in (CANONICAL, LEGACY):
        if callable(getattr(cls, name, None)):
            return name, getattr(cls, name)
    return None, None


def _needs_arguments(method: Any) -> list[str]:
    try:
        parameters = list(inspect.signature(method).parameters.values())[1:]  # unbound: skip self
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def uncallable_clear(cls: type) -> list[Finding]:
    """FDC001 (no clear) or FDC005 (a clear the engine's argument-less call cannot reach), judged
    by class: such a wrapper is never built (building one may fetch a checkpoint's config)."""
    spelling, method = clear_method(cls)
    if spelling is None:
        message = f"{cls.__qualname__} has no clear method: its recorded graphs cannot be cleared"
        return [make_finding("FDC001", message, cls=cls.__qualname__)]
    if needed := _needs_arguments(method):
        message = f"{cls.__qualname__}.{spelling}() requires {', '.join(needed)}; the engine passes none"
        return [make_finding("FDC005", message, params=", ".join(needed))]
    return []


def _call_clear(row: WrapperRow, clear: Callable[[], Any], cls: type, spelling: str, checkout: Checkout, when: str) -> bool:
    """Call the wrapper's real clear as the engine does; whether it returned. What it raised goes on
    ``row``: a compiled op is an ERROR, anything else FDC303 (before any capture: judged apart)."""
    try:
        clear()
    except MissingDependency:
        raise
    except CompiledOpCalled as err:
        row.verdict, row.reason = "ERROR", f"{spelling}() {when} calls a compiled op, cannot run on CPU: {err}"
        return False
    except Exception as err:
        finding = make_finding(
            "FDC303",
            f"{cls.__qualname__}.{spelling}() {when} raised {describe(err, checkout)}",
            call=f"{cls.__qualname__}.{spelling}()",
        )
        if when == BEFORE_CAPTURE:  # judged apart, grouped by where it was raised (SharedRaise)
            row.before_capture, row.raised_at, row.raised = finding, raised_at(err, checkout), _raised(err)
        else:
            row.findings.append(finding)
        return False
    return True


def check_wrapper(cls: type, name: str, build: Callable[[type], Any], checkout: Checkout) -> WrapperRow:
    """Build one wrapper, record graphs in its backends, run its real clear before capture,
    after it and twice; one row (a raise before capture in ``before_capture``, not its verdict)."""
    row = WrapperRow(name, f"{cls.__module__}.{cls.__qualname__}")
    spelling, _ = clear_method(cls)
    row.findings.extend(uncallable_clear(cls))
    if row.findings:  # judged by class: there is no clear the engine could call
        row.verdict, row.reason = "FAIL", "not built: the engine's call cannot reach a clear"
        return row
    try:
        wrapper = build(cls)
    except MissingDependency:
        raise
    except Exception as err:  # one wrapper that will not build on CPU is its row, never the table
        row.verdict, row.reason = "not built", f"does not build on CPU: {describe(err, checkout)}"
        return row
    holders = list(backends_of(wrapper))
    if not holders:
        row.verdict, row.reason = "ERROR", "built, but no graph_opt_backend reachable from it with graphs on"
        return row
    assert spelling is not None
    recording = Recording()
    call = functools.partial(_call_clear, row, getattr(wrapper, spelling), cls, spelling, checkout)
    row.cleared_before_capture = call(BEFORE_CAPTURE)
    try:
        for path, owner in holders:
            row.graphs += recording.plant(path, owner)
            row.backends.append(path)
    except Exception as err:
        row.verdict, row.reason = "ERROR", f"could not record graphs in its backends: {describe(err, checkout)}"
        return row
    if call("after capture"):
        gc.collect()  # a graph kept only by a reference cycle would still hold its memory pool
        row.findings.extend(recording.recorder.check_cleared(after=f"{cls.__qualname__}.{spelling}()"))
        call("called twice")
    recording.recorder.stop()
    if row.verdict == "ok" and row.findings:
        row.verdict = "FAIL"
    return row


def check_wrappers(checkout: Checkout) -> WrappersReport:
    """Every registered wrapper built and cleared for real; one row each."""
    report = WrappersReport("fastdeploy.model_executor.models (instances)")
    try:
        builder = WrapperBuilder(checkout)
    except MissingDependency:
        raise
    except Exception as err:
        report.error = f"could not build a tiny FDConfig: {describe(err, checkout)}"
        return report
    for cls, name in sorted(builder.wrappers.items(), key=lambda item: item[1]):
        row = check_wrapper(cls, name, builder.build, checkout)
        if row.findings and row.verdict == "ERROR":  # what was found before the bridge got stuck still fails it
            row.verdict = "FAIL"
        report.rows.append(row)
    return report
