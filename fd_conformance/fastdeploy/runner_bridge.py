"""C3 on FastDeploy's real teardown code: ``GPUModelRunner.clear_parameters`` (and
``update_parameters``) run over recorded stand-ins, for every flag combination.

The code under test is FastDeploy's own method body, called unbound as
``GPUModelRunner.clear_parameters(runner, pid)``; ``runner`` is a :class:`StandInRunner`, a fake
``self`` whose collaborators are the kit's stand-ins: a main model and an MTP draft model that
own recorded graphs (captured over their parameters and the TP group), a weight manager that
releases those parameters and shuts the group down as FastDeploy's ``DynamicWeightManager``
does, and a proposer holding the draft. Every call they receive is logged in order and turned
into :mod:`fd_conformance.lifecycle` events, so the verdicts are the kit's own rules:

* FDC201 a graph (main or draft) alive when the weight manager releases a parameter it captured,
* FDC202 a graph alive when the TP group it captured is shut down (the MTP hang),
* FDC203 a graph still alive when ``clear_parameters`` returns (the leak),
* FDC204 ``update_parameters`` then replays a graph that captured the released buffers.

Anything else the body touches on ``self`` is a falsy recording stand-in (an unknown flag reads
as off), so older and newer revisions of the method run unchanged. The draft shares the main
model's embedding and lm_head, as FastDeploy's MTP draft does, so releasing the main weights
frees buffers the draft's graphs captured. The stand-ins themselves are :mod:`.runner_stand_ins`.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Protocol, cast
from unittest import mock

from fd_conformance.fastdeploy.checkout import Checkout, import_module
from fd_conformance.fastdeploy.runner_stand_ins import (
    Anything,
    CallLog,
    RecordedGroup,
    RecordedParam,
    StandInModel,
    StandInWeightManager,
)
from fd_conformance.fastdeploy.stand_ins import MissingDependency
from fd_conformance.findings import Finding
from fd_conformance.lifecycle import LifecycleRecorder
from fd_conformance.runtime.base import EventBus

if TYPE_CHECKING:
    from fd_conformance.runtime.base import Runtime

RUNNER_MODULE = "fastdeploy.worker.gpu_model_runner"
RUNNER_CLASS = "GPUModelRunner"
SPEC_METHODS: tuple[str | None, ...] = (None, "mtp", "ngram")
SHARED_PARAMS = ("embed_tokens.weight", "lm_head.weight")


@dataclass(frozen=True)
class Combo:
    """One point of use_cudagraph x draft_model_use_cudagraph x speculative method."""

    use_cudagraph: bool
    draft_model_use_cudagraph: bool
    spec_method: str | None

    @property
    def has_draft_model(self) -> bool:
        return self.spec_method == "mtp"

    def label(self) -> str:
        return (
            f"main={'on' if self.use_cudagraph else 'off'} draft={'on' if self.draft_model_use_cudagraph else 'off'} "
            f"spec={self.spec_method or '-'}"
        )


def combos() -> Iterator[Combo]:
    for main, draft, spec in itertools.product((True, False), (True, False), SPEC_METHODS):
        yield Combo(main, draft, spec)


class GraphedModel(Protocol):
    """What the runner's capture and the first decode step after an update do to a model's graphs."""

    def capture(self) -> None: ...

    def replay(self) -> None: ...


@dataclass
class ModelSet:
    """The models one run puts under FastDeploy's body. ``model``/``draft`` are what it sees as
    ``self.model`` and ``self.proposer.model``; ``graphed``/``graphed_draft`` capture and replay
    their graphs; ``params`` are what the weight manager releases; ``explain`` turns an exception
    the models themselves caused into findings (none: the run could not be judged, an ERROR)."""

    model: Any
    draft: Any | None
    graphed: GraphedModel
    graphed_draft: GraphedModel | None
    params: list[RecordedParam]
    group: RecordedGroup
    explain: Callable[[BaseException, str], list[Finding]] = lambda err, method: []


#: Makes the models of one run: (combo, event bus, call log) -> the set.
ModelFactory = Callable[[Combo, EventBus, CallLog], ModelSet]


def stand_in_models(combo: Combo, bus: EventBus, log: CallLog) -> ModelSet:
    """The stand-in main model and MTP draft (sharing the embedding and lm_head)."""
    group = RecordedGroup("tp_group")
    shared = [RecordedParam(n) for n in SHARED_PARAMS]
    main_params = [*shared, RecordedParam("layers.0.weight")]
    model = StandInModel("main", bus, main_params, group, log)
    draft = (
        StandInModel("draft", bus, [*shared, RecordedParam("mtp.layers.0.weight")], group, log) if combo.has_draft_model else None
    )
    return ModelSet(model, draft, model, draft, main_params, group)


class StandInRunner(Anything):
    """The fake ``self``: the flags of one :class:`Combo`, the models (stand-ins unless given), a
    stand-in weight manager, and a recorded ``capture_model()`` that captures the main and the
    draft graphs the flags ask for."""

    def __init__(self, combo: Combo, bus: EventBus, log: CallLog, models: ModelSet | None = None) -> None:
        super().__init__("self", log)
        chosen = models or stand_in_models(combo, bus, log)
        known: dict[str, Any] = {
            "combo": combo,
            "chosen": chosen,
            "model": chosen.model,
            "use_cudagraph": combo.use_cudagraph,
            "spec_method": combo.spec_method,  # SpecMethod is a str Enum: "mtp" == SpecMethod.MTP
            "speculative_method": combo.spec_method,
            "speculative_decoding": combo.spec_method is not None,
            "dynamic_weight_manager": StandInWeightManager(bus, chosen.params, chosen.group, True, log),
            "is_weight_sleeping": False,  # the v1 doors' state: awake, as after start-up
            "is_kvcache_sleeping": False,
        }
        for key, value in known.items():
            object.__setattr__(self, key, value)
        self.graph_opt_config.use_cudagraph = combo.use_cudagraph
        self.graph_opt_config.draft_model_use_cudagraph = combo.draft_model_use_cudagraph
        self.fd_config.graph_opt_config = self.graph_opt_config
        self.fd_config.parallel_config.shutdown_comm_group_if_worker_idle = True
        self.fd_config.speculative_config.method = combo.spec_method
        if chosen.draft is not None:
            object.__setattr__(self.proposer, "model", chosen.draft)

    def capture_model(self) -> None:
        self._log.append("self.capture_model()")
        if self.use_cudagraph:
            self.chosen.graphed.capture()
        if self.chosen.graphed_draft is not None and self.combo.draft_model_use_cudagraph:
            self.chosen.graphed_draft.capture()

    def models(self) -> list[GraphedModel]:
        return [m for m in (self.chosen.graphed, self.chosen.graphed_draft) if m is not None]


@dataclass
class RunnerRow:
    combo: Combo
    method: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    calls: list[str] = field(default_factory=list)
    skipped: str | None = None  # why this combination cannot arise in this FastDeploy


@dataclass
class RunnerReport:
    where: str
    rows: list[RunnerRow] = field(default_factory=list)
    error: str | None = None  # the runner class could not be imported

    @property
    def violations(self) -> int:
        return sum(1 for r in self.rows if any(f.is_error for f in r.findings))

    @property
    def errors(self) -> int:
        return sum(1 for r in self.rows if r.error) + (1 if self.error else 0)


@dataclass(frozen=True)
class Door:
    """One entry point through which FastDeploy's runner releases weights and groups, and the call
    that brings them back. ``contract``: ``recapture`` (every graph destroyed, captured again after
    the restore) or ``in_place`` (graphs kept; new weights written into the tensors they captured)."""

    release: str
    restore: str | None
    args: tuple[Any, ...] = ()
    contract: str = "recapture"

    def label(self, method: str) -> str:
        """``clear_parameters`` as before; ``sleep(weight)`` for a door called with tags."""
        return f"{method}({self.args[0]})" if self.args and isinstance(self.args[0], str) else method


#: Every door the bridge drives, when the runner has it: clear/update_parameters (the first RL
#: API), sleep/wakeup for each tag set (the v1 API of #6761), update_weights (weights written in
#: place by RDMA, graphs kept: #6052).
DOORS = (
    Door("clear_parameters", "update_parameters", (0,)),
    Door("sleep", "wakeup", ("weight",)),
    # The KV cache is not a recorded buffer: this door keeps the graphs (judged as in place), and
    # only a release or stale replay of the weights and groups it touches is a finding.
    Door("sleep", "wakeup", ("kv_cache",), "in_place"),
    Door("sleep", "wakeup", ("weight,kv_cache",)),
    Door("update_weights", None, (), "in_place"),
)


def _run_door(cls: Any, combo: Combo, door: Door, make_models: ModelFactory | None = None) -> list[RunnerRow]:
    """Capture as the flags say, go through ``door``, then come back and replay (the first decode
    step): the release row is judged by the door's contract, the restore row by FDC204. Each door
    on fresh stand-ins, so a finding at one door never hides or causes one at another."""
    bus, log = EventBus(), CallLog()
    runner = StandInRunner(combo, bus, log, make_models(combo, bus, log) if make_models else None)
    explain = runner.chosen.explain
    recorder = LifecycleRecorder(cast("Runtime", SimpleNamespace(events=bus)))  # it reads only ``.events``
    rows = []
    with recorder, contextlib.ExitStack() as undo:
        _quiet_device_reports(undo, cls, log)
        runner.capture_model()
        del log[:]
        release = RunnerRow(combo, door.label(door.release))
        caused = _call(cls, door.release, runner, door.args, explain, release)
        if door.contract == "recapture":
            recorder.check_cleared()  # in_place keeps its graphs by design: FDC203 is not its contract
        else:
            for model in runner.models():
                model.replay()  # the first decode step after an in-place update
        release.findings, release.calls = caused + recorder.findings(), list(log)
        rows.append(release)
        seen = len(release.findings) - len(caused)
        del log[:]
        if door.restore is not None and hasattr(cls, door.restore):
            restore = RunnerRow(combo, door.label(door.restore))
            caused = _call(cls, door.restore, runner, door.args, explain, restore)
            if not caused and restore.error is None:
                for model in runner.models():
                    model.replay()  # the first decode step after the update
            restore.findings = caused + [f for f in recorder.findings()[seen:] if f.code == "FDC204"]
            restore.calls = list(log)
            rows.append(restore)
    return rows


#: Module-level helpers the doors call only to report device memory (NVML on a GPU host): on a CPU
#: they raise, and what they print decides nothing, so they are logged instead while a door runs.
DEVICE_REPORTS = ("print_gpu_memory_use",)


def _quiet_device_reports(undo: contextlib.ExitStack, cls: Any, log: CallLog) -> None:
    module = sys.modules.get(getattr(cls, "__module__", ""))
    for name in DEVICE_REPORTS:
        if module is not None and callable(getattr(module, name, None)):
            undo.enter_context(mock.patch.object(module, name, lambda *a, _n=name, **k: log.append(f"{_n}()")))


def _call(cls: Any, method: str, runner: Any, args: tuple[Any, ...], explain: Any, row: RunnerRow) -> list[Finding]:
    """FastDeploy's ``method`` body, unbound, on the stand-in ``self``: the findings the models' own
    exception explains, or the row's error when nothing does."""
    try:
        getattr(cls, method)(runner, *args)
    except MissingDependency:  # the body used a module stood in for at import: exit 6, by name
        raise
    except Exception as err:  # the models' own defect (explained), or something the stand-ins do not model
        caused: list[Finding] = explain(err, method)
        row.error = None if caused else _describe_error(err)
        return caused
    return []


def _run_combo(cls: Any, combo: Combo, make_models: ModelFactory | None = None) -> list[RunnerRow]:
    """Every door the runner has, each on its own stand-ins (over the stand-in models, or those
    ``make_models`` makes)."""
    return [row for door in DOORS if hasattr(cls, door.release) for row in _run_door(cls, combo, door, make_models)]


def _describe_error(err: BaseException) -> str:
    frame = traceback.extract_tb(err.__traceback__)[-1] if err.__traceback__ else None
    where = f" at {frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}" if frame else ""
    return f"{type(err).__name__}: {err}{where}"


def door_methods(cls: Any) -> list[str]:
    """The row labels the doors of ``cls`` give (release, then restore, door by door)."""
    labels = []
    for door in DOORS:
        if hasattr(cls, door.release):
            labels.append(door.label(door.release))
            if door.restore is not None and hasattr(cls, door.restore):
                labels.append(door.label(door.restore))
    return labels


def draft_graphs_exist(checkout: Checkout) -> bool:
    """Whether this FastDeploy can capture draft graphs at all: ``draft_model_use_cudagraph``
    arrived in 2.3; before it a draft never had graphs, so draft-on rows would be invented."""
    try:
        config = import_module("fastdeploy.config", checkout)
        return hasattr(config.GraphOptimizationConfig({}), "draft_model_use_cudagraph")
    except MissingDependency:
        raise
    except Exception:  # an old or partial config module: fall back to reading its source
        path = checkout.package / "config.py"
        return path.is_file() and "draft_model_use_cudagraph" in path.read_text(encoding="utf-8", errors="replace")


def runner_class(checkout: Checkout) -> type:
    """The checkout's real GPUModelRunner (inside :func:`~.checkout.import_environment`)."""
    cls: type = getattr(import_module(RUNNER_MODULE, checkout), RUNNER_CLASS)
    return cls


def skip_reason(combo: Combo, has_draft_graphs: bool) -> str | None:
    if combo.draft_model_use_cudagraph and not has_draft_graphs:
        return "n/a: this FastDeploy has no draft_model_use_cudagraph (draft graphs never exist)"
    return None


def run_combo(cls: type, combo: Combo, has_draft_graphs: bool, make_models: ModelFactory | None = None) -> list[RunnerRow]:
    """clear_parameters and update_parameters rows of one combination (n/a rows when it cannot arise)."""
    why = skip_reason(combo, has_draft_graphs)
    if why is not None:
        return [RunnerRow(combo, method, skipped=why) for method in door_methods(cls)]
    return _run_combo(cls, combo, make_models)


def check_runner(checkout: Checkout) -> RunnerReport:
    """Every combination through the checkout's real GPUModelRunner teardown methods."""
    report = RunnerReport(f"{RUNNER_MODULE}.{RUNNER_CLASS}")
    try:
        cls = runner_class(checkout)
    except MissingDependency:
        raise
    except Exception as err:  # one broken import is this table's error, not the whole command's
        report.error = f"could not import {RUNNER_MODULE}: {_describe_error(err)}"
        return report
    has_draft_graphs = draft_graphs_exist(checkout)
    for combo in combos():
        report.rows.extend(run_combo(cls, combo, has_draft_graphs))
    return report
