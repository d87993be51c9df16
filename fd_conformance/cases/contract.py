"""Model cases: what the suites certify, as data (like vLLM's test registry or PyTorch's ModuleInfo).

A :class:`ModelCase` names a model, its runtime, and a factory that builds a :class:`Subject`
(wrapper, optional draft, runner, input builder) from a tiny config on a given runtime.
The suites only ever talk to a Subject, so a model author certifies their own wrapper by
writing one factory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fd_conformance.errors import UsageError, validate_capture_sizes, validate_tolerance
from fd_conformance.spelling import closest

if TYPE_CHECKING:
    from fd_conformance.runtime.base import Graph, Runtime


@runtime_checkable
class ModelRunner(Protocol):
    """The engine side of the RL weight cycle (FastDeploy's GPUModelRunner, reduced)."""

    use_cudagraph: bool
    draft_model_use_cudagraph: bool

    def capture_model(self) -> None:
        """Warm up and capture every capture size, main and draft, in descending order."""

    def clear_parameters(self) -> None:
        """Destroy all graphs (main and draft), then release weights and shut down groups."""

    def update_parameters(self, weights: Mapping[str, Any]) -> None:
        """Restart groups, load ``weights`` into NEW buffers, and capture again."""


@runtime_checkable
class Subject(Protocol):
    """One built model under test, as a case factory returns it."""

    runtime: Runtime
    wrapper: Any  # the engine-facing wrapper; must satisfy GraphOptModel
    draft: Any | None  # the draft (MTP) wrapper, or None
    runner: ModelRunner

    def make_inputs(self, num_tokens: int, seed: int = 0) -> Any:
        """Inputs for one step of ``num_tokens`` tokens (multimodal cases include pixels)."""

    def forward(self, inputs: Any) -> Mapping[str, Any]:
        """One step through the runner: replays a captured graph when one fits the size.
        Returns named outputs, e.g. ``{"logits": ..., "draft_logits": ...}``."""

    def eager_forward(self, inputs: Any) -> Mapping[str, Any]:
        """The same step with the same weights and no graphs: the reference for replay."""

    def new_weights(self, seed: int) -> Mapping[str, Any]:
        """A fresh, seeded weight set (name -> tensor) for ``runner.update_parameters``."""

    def graphs(self) -> Sequence[Graph]:
        """Every graph the subject's models currently own, main and draft (alive or not)."""


SubjectFactory = Callable[["Runtime"], Subject]

#: What a case name may hold: it is a pytest id (``test_clear[NAME-cpu]``, split at ``[``, ``]``,
#: ``::`` and ``/`` by reports and node-id selection), a ``-k`` word, and a line of the
#: ``--cases-file`` that ``fd-conformance changed`` writes (split at whitespace, ``#`` a comment).
CASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
TOLERANCE_KEYS = ("rtol", "atol")
#: The weight-update contracts a case can declare (ModelCase.weight_update), the default first.
WEIGHT_UPDATES = ("recapture", "in_place")
#: What ``ModelCase.capabilities`` may name: "draft" is read by the subject fixture (a declared draft
#: the factory does not build fails the row); "moe" and "multimodal" are labels for the reader.
CAPABILITIES = ("draft", "moe", "multimodal")
#: What ``ModelCase.checks`` may name: the matrix columns of fd_conformance.suite, each module's
#: ``pytest.mark.conformance`` argument (tests/test_case_fields.py keeps the two equal).
SUITE_CHECKS = ("protocol", "config", "capture_replay", "clear", "teardown_order", "weight_cycle")


def validate_case_name(name: Any) -> str:
    """``name`` when it can be a case name (:data:`CASE_NAME`); else a one-line UsageError naming it."""
    if not isinstance(name, str) or not name.strip():
        raise UsageError(
            f"case name {name!r} is empty or not a string", "give the ModelCase a name, e.g. ModelCase('my-glm4', ...)"
        )
    if not CASE_NAME.fullmatch(name):
        bad = next((c for c in name if not CASE_NAME.fullmatch("a" + c)), name[0])
        fixed = re.sub(r"[^A-Za-z0-9._+-]+", "-", name).strip("-._+") or "my-model"
        raise UsageError(
            f"case name {name!r} has {bad!r}: a case name is a test id, a -k word and a --cases-file line",
            f"use letters, digits and . _ + - only, starting with a letter or digit, e.g. {fixed!r}",
        )
    return name


def _valid_tolerances(tolerances: Any, where: str) -> dict[str, float]:
    """The case's tolerances as a plain dict (picklable) of known keys, each a finite number >= 0."""
    if not isinstance(tolerances, Mapping):
        raise UsageError(
            f"{where}: tolerances {tolerances!r} is not a mapping", "give e.g. tolerances={'rtol': 1e-4, 'atol': 1e-4}"
        )
    unknown = [key for key in tolerances if key not in TOLERANCE_KEYS]
    if unknown:
        raise UsageError(
            f"{where}: tolerances has unknown key(s) {', '.join(map(repr, unknown))}",
            f"use only {' and '.join(TOLERANCE_KEYS)} (a key left out is 1e-4)",
        )
    return {key: validate_tolerance(value, f"{where}: tolerances[{key!r}]") for key, value in tolerances.items()}


def _valid_names(value: Any, where: str, field_name: str, vocabulary: Sequence[str]) -> frozenset[str]:
    """``value`` as a frozenset of names from ``vocabulary``. A misspelt name matched nothing and
    certified silently (``{"Draft"}`` dropped the draft promise, ``{"clearr"}`` certified one check),
    so an unknown one is refused, with the near miss and the valid names."""
    valid = ", ".join(map(repr, vocabulary))
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (set, frozenset, list, tuple)):
        raise UsageError(f"{where}: {field_name} {value!r} is not a set of names", f"give e.g. frozenset({{{vocabulary[0]!r}}})")
    unknown = sorted((name for name in value if name not in vocabulary), key=repr)
    if unknown:
        misses = [(name, closest(name, vocabulary) if isinstance(name, str) else None) for name in unknown]
        guesses = [f"{near!r}" + (f" for {name!r}" if len(unknown) > 1 else "") for name, near in misses if near]
        hint = f"did you mean {', '.join(guesses)}? " if guesses else ""
        raise UsageError(
            f"{where}: {field_name} has unknown name{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}",
            f"{hint}the valid names are {valid}",
        )
    return frozenset(value)


def _finding_codes() -> tuple[str, ...]:
    """Every registered finding code: what ``expected_findings`` may name. Imported here, not at the
    top: the registry is needed only once a case is built."""
    from fd_conformance.codes import ENTRIES

    return tuple(sorted(rule.code for rule in ENTRIES))


@dataclass(frozen=True)
class ModelCase:
    """A model to certify. ``expected_findings`` is empty for a good model; a mutant lists the
    finding codes the suites must report for it (and no others)."""

    name: str
    runtime: str  # "torch" | "paddle"
    factory: SubjectFactory
    capture_sizes: tuple[int, ...]
    # What the model has: "draft" is a promise the kit holds the factory to (a case that declares
    # it and builds no draft fails every check, instead of certifying with every draft check
    # skipped); "multimodal" and "moe" are labels for the reader.
    capabilities: frozenset[str] = frozenset()
    expected_findings: frozenset[str] = frozenset()
    description: str = ""
    # Left out of the hash (a dict cannot be hashed; equality still compares it), so a frozen case
    # hashes: it is a pytest parameter and a set/dict key. A plain dict, not a MappingProxyType:
    # cases must stay picklable for the isolation workers' process boundary.
    tolerances: Mapping[str, float] = field(default_factory=lambda: {"rtol": 1e-4, "atol": 1e-4}, hash=False)
    # C6: the engine's config post-processor this model ships with (cfg -> cfg, or in place), and
    # how to build that engine's config object from a raw graph-opt config
    # (fd_conformance.config_rules.RawGraphOptConfig; None = an FDConfig-shaped namespace).
    # The config suite property-tests the post-processor; without one it skips with that reason.
    config_postprocessor: Callable[[Any], Any] | None = None
    config_builder: Callable[[Any], Any] | None = None
    # Matrix columns this case is certified on; None means all. A config-only mutant names
    # {"config"} so its good model underneath is not re-certified by every other check.
    checks: frozenset[str] | None = None
    # True when the engine switches use_cudagraph / draft_model_use_cudagraph while serving, after
    # graphs were captured under them. A runner that keys each clear on the flag it reads at clear
    # time then strands graphs for real: FDC206 (an error) instead of the FDC205 warning that
    # fixed-config engines (FastDeploy's runner has that shape) get.
    switches_graph_flags_at_run_time: bool = False
    # The step sizes (tokens given to make_inputs) at which the DRAFT must replay a graph of its
    # own; None means the main model's capture_sizes. MTP drafts usually capture fewer sizes.
    draft_capture_sizes: tuple[int, ...] | None = None
    # "kit": the subject hands its graphs through graphs() (made with runtime.new_graph). "native":
    # the model makes torch.cuda.CUDAGraph itself and the runtime observes them (cases/native.py);
    # a subject without graphs() is taken as native too.
    graphs: str = "kit"
    # How the engine updates weights (WEIGHT_UPDATES): "recapture" (FastDeploy's clear/update_parameters:
    # every graph destroyed, new weights in new buffers, captured again) or "in_place" (vLLM, SGLang,
    # FastDeploy's update_weights: graphs kept, new weights written into the tensors they captured,
    # through runner.update_weights(new_weights)). The certificate says which judged the row.
    weight_update: str = "recapture"

    def __post_init__(self) -> None:
        """Bad input is refused here, when the case is built: one line naming the case and the
        field, before any check runs (a bad size would otherwise fail or certify every cell)."""
        where = f"case {validate_case_name(self.name)!r}"
        set_field = object.__setattr__  # frozen: normalised values (tuples, floats) are set once, here
        set_field(
            self,
            "capture_sizes",
            validate_capture_sizes(self.capture_sizes, f"{where}: capture_sizes", "capture_sizes=(4, 2, 1)"),
        )
        if self.draft_capture_sizes is not None:
            draft = validate_capture_sizes(
                self.draft_capture_sizes,
                f"{where}: draft_capture_sizes",
                "draft_capture_sizes=(2, 1), or leave it out to use capture_sizes",
            )
            set_field(self, "draft_capture_sizes", draft)
        set_field(self, "tolerances", _valid_tolerances(self.tolerances, where))
        set_field(self, "capabilities", _valid_names(self.capabilities, where, "capabilities", CAPABILITIES))
        set_field(self, "expected_findings", _valid_names(self.expected_findings, where, "expected_findings", _finding_codes()))
        if self.checks is not None:
            set_field(self, "checks", _valid_names(self.checks, where, "checks", SUITE_CHECKS))
        if self.weight_update not in WEIGHT_UPDATES:
            near = closest(str(self.weight_update), WEIGHT_UPDATES)
            raise UsageError(
                f"{where}: weight_update={self.weight_update!r} is no contract the kit knows",
                f"{'did you mean ' + repr(near) + '? ' if near else ''}give one of {', '.join(map(repr, WEIGHT_UPDATES))}",
            )
        if self.graphs not in ("kit", "native"):
            raise UsageError(
                f"{where}: graphs={self.graphs!r} is neither 'kit' nor 'native'",
                "give graphs='native' for a model that makes torch.cuda graphs itself, or leave it out (the kit's graphs)",
            )

    @property
    def draft_sizes(self) -> tuple[int, ...]:
        """Sizes the draft must capture: its own when declared, else the main model's."""
        return self.capture_sizes if self.draft_capture_sizes is None else self.draft_capture_sizes

    @property
    def module(self) -> str:
        """Module the factory lives in: changed-file selection maps source files to cases by it."""
        return getattr(self.factory, "__module__", "")

    @property
    def is_mutant(self) -> bool:
        return bool(self.expected_findings)

    def has(self, capability: str) -> bool:
        return capability in self.capabilities
