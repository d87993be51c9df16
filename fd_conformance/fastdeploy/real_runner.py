"""C3 on FastDeploy's real teardown over its real wrappers: ``GPUModelRunner.clear_parameters``
and ``update_parameters`` (the runner table's bodies, called unbound on its stand-in ``self``)
with ``self.model`` a registered wrapper built on CPU as the wrappers table builds it and, with
MTP, ``self.proposer.model`` the draft FastDeploy pairs with it, built sharing the main wrapper's
embedding and head as FastDeploy's proposer builds it.

The runner table asks whether the runner clears in the right order over models that behave;
this one asks whether it does over the models FastDeploy ships: the body calls the wrapper's own
clear (either spelling, whatever the branch's runner spells), which must reach every graph of
every backend. Graphs are recorded where the wrappers table records them (FastDeploy's own
piecewise backend, a :class:`~.recorded_graphs.RecordedGraph` in each entry), each capturing the
model's parameters and the TP group, so the verdicts are the runner table's codes:

* FDC201/FDC202/FDC203/FDC204 from the lifecycle recorder, as in the runner table;
* **FDC001** the body calls a clear the real wrapper does not have (a draft without one, or only
  the other spelling): the weight sync crashes there;
* **FDC303** the wrapper's own clear raised inside the body.

The draft is FastDeploy's: its MTP proposer loads the main architecture's name with ``Moe``
replaced by ``MTP`` (:data:`DRAFT_RENAME`); a main wrapper with no such registered draft has its
MTP rows n/a, saying which name was looked for. Every model has served a step before teardown, so
each backend has its piecewise backend (an empty one where the flags captured nothing).
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fd_conformance.fastdeploy.checkout import Checkout
from fd_conformance.fastdeploy.recorded_graphs import RecordedGraph, backends_of, graph_entries, record_graph
from fd_conformance.fastdeploy.runner_bridge import (
    RUNNER_CLASS,
    RUNNER_MODULE,
    Combo,
    ModelFactory,
    ModelSet,
    RunnerRow,
    combos,
    door_methods,
    draft_graphs_exist,
    run_combo,
    runner_class,
)
from fd_conformance.fastdeploy.runner_stand_ins import CallLog, RecordedGroup, RecordedParam
from fd_conformance.fastdeploy.stand_ins import MissingDependency
from fd_conformance.fastdeploy.wrapper_build import WrapperBuilder
from fd_conformance.fastdeploy.wrappers_bridge import clear_method, describe, uncallable_clear
from fd_conformance.findings import Finding, make_finding
from fd_conformance.runtime.base import BufferRef, EventBus, EventKind
from fd_conformance.spelling import CANONICAL, LEGACY

#: FastDeploy's MTP proposer loads the draft under the main architecture's name with this replaced.
DRAFT_RENAME = ("Moe", "MTP")
CLEARS = (CANONICAL, LEGACY)


class GraphedWrapper:
    """A real wrapper's graphs in one run: :meth:`capture` records a graph in every entry of every
    backend that holds none (FastDeploy captures only empty entries), each over the wrapper's
    parameters and the group; :meth:`replay` is the first decode step over the graphs alive."""

    def __init__(self, owner: str, wrapper: Any, bus: EventBus, params: dict[int, RecordedParam], group: RecordedGroup) -> None:
        self.owner, self.wrapper, self.bus, self.group = owner, wrapper, bus, group
        self.params = [params.setdefault(id(p), RecordedParam(name)) for name, p in wrapper.named_parameters()]
        self.holders = list(backends_of(wrapper))
        for entry in self.entries():  # a graph left by the previous run is gone before this one starts
            entry.cuda_graph = None
            if hasattr(entry, "captured"):
                entry.captured = False

    def entries(self) -> Iterator[Any]:
        for _path, holder in self.holders:
            yield from graph_entries(holder)

    def refs(self) -> tuple[BufferRef, ...]:
        return tuple(p.ref() for p in self.params)

    def capture(self) -> None:
        for index, entry in enumerate(self.entries()):
            if entry.cuda_graph is None:
                label = f"{self.owner}:{getattr(entry, 'real_shape', index)}"
                record_graph(self.bus, entry, label, self.owner, buffers=self.refs(), groups=(id(self.group),))

    def replay(self) -> None:
        for entry in self.entries():
            graph = entry.cuda_graph
            if isinstance(graph, RecordedGraph):
                self.bus.emit(EventKind.GRAPH_REPLAYED, graph.label, id(graph), owner=self.owner, buffers=self.refs())


@dataclass
class Pairing:
    """One main wrapper and the draft FastDeploy gives it (built, or why not)."""

    main: str
    main_wrapper: Any
    draft: str | None = None  # the registered draft name, when FastDeploy has one
    draft_wrapper: Any = None
    draft_problem: str | None = None  # why the MTP rows are n/a

    def models(self, combo: Combo, bus: EventBus, log: CallLog) -> ModelSet:
        """The set one run of ``combo`` puts under the body (see :data:`~.runner_bridge.ModelFactory`)."""
        group, params = RecordedGroup("tp_group"), dict[int, RecordedParam]()
        main = GraphedWrapper("main", self.main_wrapper, bus, params, group)
        draft = GraphedWrapper("draft", self.draft_wrapper, bus, params, group) if combo.has_draft_model else None
        roles = {"main": (self.main, self.main_wrapper), "draft": (self.draft or "", self.draft_wrapper)}
        return ModelSet(
            self.main_wrapper,
            draft.wrapper if draft else None,
            main,
            draft,
            list(params.values()),  # the weight manager holds both models (FastDeploy gives it [model, proposer.model])
            group,
            lambda err, method: explain(err, method, roles),
        )


def explain(err: BaseException, method: str, roles: dict[str, tuple[str, Any]]) -> list[Finding]:
    """The finding when the real wrappers caused ``err``: a clear the body called is missing
    (FDC001), or a wrapper's own clear raised (FDC303); none when something else did."""
    call = f"{RUNNER_CLASS}.{method}"
    text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
    for role, (name, wrapper) in roles.items():
        if wrapper is None:
            continue
        if isinstance(err, AttributeError) and err.name in CLEARS and getattr(err, "obj", None) is wrapper:
            has = clear_method(type(wrapper))[0]
            what = f"it has only {has}()" if has else "it has no clear under either spelling"
            message = f"{call} calls {err.name}() on the {role} {name}, which does not have it ({what}): {text}"
            return [make_finding("FDC001", message, cls=name)]
        if any(frame.f_code.co_name in CLEARS and frame.f_locals.get("self") is wrapper for frame, _ in _frames(err)):
            message = f"{name}'s own clear raised inside {call} (the {role}): {text}"
            return [make_finding("FDC303", message, call=f"{name}.clear_graph_opt_backend()")]
    return []


def _frames(err: BaseException) -> Iterator[tuple[Any, int]]:
    return traceback.walk_tb(err.__traceback__)


@dataclass
class PairRows:
    pairing: Pairing
    rows: list[RunnerRow] = field(default_factory=list)


@dataclass
class RealRunnerReport:
    where: str
    pairs: list[PairRows] = field(default_factory=list)
    not_built: dict[str, str] = field(default_factory=dict)  # main wrapper -> why it is not in the table
    error: str | None = None

    @property
    def rows(self) -> list[RunnerRow]:
        return [row for pair in self.pairs for row in pair.rows]

    @property
    def violations(self) -> int:
        return sum(1 for pair in self.pairs if any(f.is_error for r in pair.rows for f in r.findings))

    @property
    def errors(self) -> int:
        return sum(1 for r in self.rows if r.error) + (1 if self.error else 0)


def draft_name(main: str) -> str:
    """The architecture FastDeploy's MTP proposer loads for ``main`` (``main`` itself: no draft)."""
    return main.replace(*DRAFT_RENAME)


def pairings(builder: WrapperBuilder, checkout: Checkout, report: RealRunnerReport) -> list[Pairing]:
    """Every registered wrapper with a clear the engine can call, built, with its draft; a wrapper
    that does not build is in ``report.not_built`` (the wrappers table has its row)."""
    by_name = {name: cls for cls, name in builder.wrappers.items()}
    drafts = {draft_name(main) for main in by_name if draft_name(main) != main} & by_name.keys()
    found = []
    for name, cls in sorted(by_name.items()):
        if name in drafts or uncallable_clear(cls):
            continue  # a draft (it runs under its main), or judged by class in the other tables
        try:
            pairing = Pairing(name, builder.build(cls))
        except MissingDependency:
            raise
        except Exception as err:  # one wrapper that will not build never hides the others
            report.not_built[name] = describe(err, checkout)
            continue
        draft = draft_name(name)
        if draft == name:
            pairing.draft_problem = (
                f"n/a: no MTP draft (FastDeploy's proposer makes one by {DRAFT_RENAME[0]} -> {DRAFT_RENAME[1]} in the name)"
            )
        elif draft not in by_name:
            pairing.draft_problem = f"n/a: FastDeploy's MTP proposer would load {draft}, which is not registered"
        else:
            pairing.draft = draft
            try:
                pairing.draft_wrapper = builder.build(by_name[draft], sharing_model=pairing.main_wrapper)
            except MissingDependency:
                raise
            except Exception as err:
                pairing.draft_problem = f"n/a: the draft {draft} does not build on CPU: {describe(err, checkout)}"
        found.append(pairing)
    return found


def run_pairing(cls: type, pairing: Pairing, has_draft_graphs: bool) -> list[RunnerRow]:
    """Every combination through the real body over one main wrapper and its draft."""
    make: ModelFactory = pairing.models
    rows = []
    for combo in combos():
        if combo.has_draft_model and pairing.draft_problem:
            rows += [RunnerRow(combo, m, skipped=pairing.draft_problem) for m in door_methods(cls)]
        else:
            rows += run_combo(cls, combo, has_draft_graphs, make)
    return rows


def check_real_runner(checkout: Checkout) -> RealRunnerReport:
    """The real runner's teardown over every real wrapper that builds; one group of rows per wrapper."""
    report = RealRunnerReport(f"{RUNNER_MODULE}.{RUNNER_CLASS} over the registered wrappers")
    try:
        cls = runner_class(checkout)
        builder = WrapperBuilder(checkout)
    except MissingDependency:
        raise
    except Exception as err:
        report.error = f"could not import the runner or build a tiny FDConfig: {describe(err, checkout)}"
        return report
    has_draft_graphs = draft_graphs_exist(checkout)
    for pairing in pairings(builder, checkout, report):
        report.pairs.append(PairRows(pairing, run_pairing(cls, pairing, has_draft_graphs)))
    return report
