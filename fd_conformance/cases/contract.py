"""Model cases: what the suites certify, as data (like vLLM's test registry or PyTorch's ModuleInfo).

A :class:`ModelCase` names a model, its runtime, and a factory that builds a :class:`Subject`
(wrapper, optional draft, runner, input builder) from a tiny config on a given runtime.
The suites only ever talk to a Subject, so a model author certifies their own wrapper by
writing one factory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fd_conformance.errors import UsageError

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

    def __post_init__(self) -> None:
        sizes = self.draft_capture_sizes
        if sizes is not None and (not sizes or len(set(sizes)) != len(sizes) or any(int(s) <= 0 for s in sizes)):
            raise UsageError(
                f"case {self.name!r}: draft_capture_sizes {sizes!r} must be unique positive token counts",
                "give e.g. draft_capture_sizes=(2, 1), or leave it out to use capture_sizes",
            )
        if self.graphs not in ("kit", "native"):
            raise UsageError(
                f"case {self.name!r}: graphs={self.graphs!r} is neither 'kit' nor 'native'",
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
