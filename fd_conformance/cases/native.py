"""Native mode, subject side: certify a model that makes its framework's graphs itself.

The runtime observes the graphs (:class:`fd_conformance.runtime.base.GraphObserver`); a
:class:`NativeSubject` puts that observer between the suites and the author's subject, so the
suites run unchanged:

* ``graphs()`` answers from the observer: every graph captured during the check (the author's
  ``Subject.graphs()`` is optional in native mode, and not consulted);
* each lifecycle call -- the models' clear, the runner's ``capture_model`` / ``clear_parameters``
  / ``update_parameters`` -- is an observation point at its entry and exit, whoever calls it (the
  suites, or the runner calling a model's clear), so a weight freed in plain torch between two
  graph events is seen where it happened, not at the next replay.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fd_conformance.protocol.base import KIT_OBSERVATION_MARK
from fd_conformance.spelling import CANONICAL, LEGACY

if TYPE_CHECKING:
    from fd_conformance.cases.contract import ModelCase
    from fd_conformance.runtime.base import Graph, GraphObserver

KIT, NATIVE = "kit", "native"
RUNNER_CALLS = ("capture_model", "clear_parameters", "update_parameters")
MODEL_CALLS = (CANONICAL, LEGACY)


def declares_native(case: ModelCase) -> bool:
    """The case says its model makes its own graphs (``ModelCase(..., graphs="native")``)."""
    return getattr(case, "graphs", KIT) == NATIVE


def hands_no_graphs(subject: object) -> bool:
    """A subject without ``graphs()`` hands the kit no graphs: native mode is detected from it."""
    return not callable(getattr(subject, "graphs", None))


def observe_calls(obj: Any, role: str, names: tuple[str, ...], observer: GraphObserver) -> Callable[[], None]:
    """Make each method ``names`` of ``obj`` an observation point at entry and exit (on the
    instance only: the class, and so the protocol check, is untouched). Returns the undo."""
    added: list[str] = []
    state = getattr(obj, "__dict__", None)
    if state is None:  # __slots__: fewer observation points, the graph events still observe
        return lambda: None
    for name in names:
        with warnings.catch_warnings():
            # Reading the legacy spelling through the kit's alias warns: that is FDC002's to say, once.
            warnings.simplefilter("ignore", DeprecationWarning)
            method = getattr(obj, name, None)
        if not callable(method) or name in state:
            continue

        def observed(*args: Any, _method: Any = method, _point: str = f"{role}.{name}", **kwargs: Any) -> Any:
            observer.observe(f"{_point}:begin")
            try:
                return _method(*args, **kwargs)
            finally:
                observer.observe(f"{_point}:end")

        setattr(observed, KIT_OBSERVATION_MARK, True)  # the protocol check looks behind it
        state[name] = functools.wraps(method)(observed)
        added.append(name)

    def undo() -> None:
        for name in added:
            state.pop(name, None)

    return undo


class NativeSubject:
    """The author's subject with the observer's graphs and observed lifecycle calls; every other
    member is the author's own."""

    def __init__(self, subject: Any, observer: GraphObserver) -> None:
        self._subject = subject
        self._observer = observer
        self.bind_roots()
        # Each object's observation points are undone if a later one raises (an author's property,
        # a lazily built model): a half-built NativeSubject leaves the author's objects as they were.
        with contextlib.ExitStack() as undo:
            undo.callback(observe_calls(subject.runner, "runner", RUNNER_CALLS, observer))
            undo.callback(observe_calls(subject.wrapper, "main", MODEL_CALLS, observer))
            if subject.draft is not None:
                undo.callback(observe_calls(subject.draft, "draft", MODEL_CALLS, observer))
            self._undo = undo.pop_all()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._subject, name)

    @property
    def subject(self) -> Any:
        """The author's own subject object."""
        return self._subject

    @property
    def native_observer(self) -> GraphObserver:
        """The observer watching this subject's graphs."""
        return self._observer

    def graphs(self) -> list[Graph]:
        return self._observer.graphs()

    def bind_roots(self) -> None:
        """Name graphs and weights after this subject's models (the observer knows one subject's)."""
        self._observer.set_roots([("main", self._subject.wrapper), ("draft", self._subject.draft)])

    def sibling(self, subject: Any) -> NativeSubject:
        """Another subject of the same case, observed by the same observer (a check that builds a
        fresh one to compare with); :meth:`bind_roots` on this one once it is done."""
        return NativeSubject(subject, self._observer)

    def close(self) -> None:
        """Put the author's objects back as they were (the observer is closed by its owner)."""
        self._undo.close()
