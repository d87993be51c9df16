"""Graph-opt config invariants (C6), checked on the config an engine's post-processing produced.

FastDeploy adjusts its graph-opt config in several places (``FDConfig.postprocess``,
``GraphOptimizationConfig.init_with_cudagrpah_size``, speculative and splitwise adjustments). A
later adjustment can silently undo an earlier rule -- the real case: forcing piecewise prefill
graphs on for the prefill role bypassed the rule that turns them off when a CPU cache swaps KV
layer by layer. So the rules are checked on the *result*, and
:func:`assert_postprocessor_preserves_invariants` property-tests a post-processor over many raw
configs and reports the minimal one it breaks.

The config is duck-typed: every field is read through :data:`FIELD_PATHS`, FastDeploy's nested
attribute path first (``graph_opt_config.use_cudagraph`` on an ``FDConfig``), then a flat name
(a bare ``GraphOptimizationConfig``-like object or a namespace).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from fd_conformance.codes.index import detected_in
from fd_conformance.errors import UsageError
from fd_conformance.findings import Finding, Location, make_finding

if TYPE_CHECKING:  # hypothesis is imported only when the property helpers run (not in every session)
    from hypothesis import settings
    from hypothesis.strategies import SearchStrategy

SPLITWISE_ROLES = ("mixed", "prefill", "decode")
# Speculative methods whose decode step carries num_speculative_tokens + 1 tokens per request
# (FastDeploy sizes its graphs by that product for these, see FDConfig.__init__).
MULTI_TOKEN_METHODS = ("mtp", "suffix")

FIELD_PATHS: dict[str, tuple[str, ...]] = {
    "use_cudagraph": ("graph_opt_config.use_cudagraph", "use_cudagraph"),
    "cudagraph_only_prefill": ("graph_opt_config.cudagraph_only_prefill", "cudagraph_only_prefill"),
    "cudagraph_capture_sizes": ("graph_opt_config.cudagraph_capture_sizes", "cudagraph_capture_sizes"),
    "cudagraph_capture_sizes_prefill": (
        "graph_opt_config.cudagraph_capture_sizes_prefill",
        "cudagraph_capture_sizes_prefill",
    ),
    "graph_opt_level": ("graph_opt_config.graph_opt_level", "graph_opt_level"),
    "num_cpu_blocks": ("cache_config.num_cpu_blocks", "num_cpu_blocks"),
    "splitwise_role": ("scheduler_config.splitwise_role", "splitwise_role"),
    "speculative_method": ("speculative_config.method", "speculative_method"),
    "num_speculative_tokens": ("speculative_config.num_speculative_tokens", "num_speculative_tokens"),
    "dynamic_load_weight": ("load_config.dynamic_load_weight", "dynamic_load_weight"),
    "tensor_parallel_size": ("parallel_config.tensor_parallel_size", "tensor_parallel_size"),
    "use_sequence_parallel_moe": ("parallel_config.use_sequence_parallel_moe", "use_sequence_parallel_moe"),
}
# What an absent field means (FastDeploy's own defaults, e.g. num_cpu_blocks None -> 0).
FIELD_DEFAULTS: dict[str, Any] = {
    "cudagraph_only_prefill": False,
    "cudagraph_capture_sizes": None,
    "cudagraph_capture_sizes_prefill": None,
    "graph_opt_level": 0,
    "num_cpu_blocks": 0,
    "splitwise_role": "mixed",
    "speculative_method": None,
    "num_speculative_tokens": 0,
    "dynamic_load_weight": False,
    "tensor_parallel_size": 1,
    "use_sequence_parallel_moe": False,
}
_ABSENT = object()


def _get_path(cfg: object, path: str) -> Any:
    value: Any = cfg
    for part in path.split("."):
        value = getattr(value, part, _ABSENT) if value is not None else _ABSENT
        if value is _ABSENT:
            return _ABSENT
    return value


def read_field(cfg: object, field: str) -> Any:
    """One logical field of ``cfg`` by :data:`FIELD_PATHS`; its default when no path exists."""
    for path in FIELD_PATHS[field]:
        value = _get_path(cfg, path)
        if value is not _ABSENT:
            return FIELD_DEFAULTS.get(field) if value is None and field == "num_cpu_blocks" else value
    if field not in FIELD_DEFAULTS:
        raise UsageError(
            f"config {type(cfg).__name__} has none of {', '.join(FIELD_PATHS[field])}",
            "pass the post-processed FDConfig (or an object with graph_opt_config.use_cudagraph)",
        )
    return FIELD_DEFAULTS[field]


@dataclass(frozen=True)
class GraphOptView:
    """The fields the rules read, resolved once; ``location`` names the config in findings."""

    use_cudagraph: bool
    cudagraph_only_prefill: bool
    cudagraph_capture_sizes: Sequence[Any] | None
    cudagraph_capture_sizes_prefill: Sequence[Any] | None
    graph_opt_level: int
    num_cpu_blocks: int
    splitwise_role: str
    speculative_method: str | None
    num_speculative_tokens: int
    dynamic_load_weight: bool
    tensor_parallel_size: int
    use_sequence_parallel_moe: bool

    @classmethod
    def of(cls, cfg: object) -> GraphOptView:
        return cls(**{name: read_field(cfg, name) for name in FIELD_PATHS})

    @property
    def prefill_graphs_on(self) -> bool:
        """FastDeploy captures prefill (piecewise) graphs only: use_cudagraph + cudagraph_only_prefill."""
        return bool(self.use_cudagraph and self.cudagraph_only_prefill)

    @property
    def decode_graphs_on(self) -> bool:
        return bool(self.use_cudagraph and not self.cudagraph_only_prefill)

    @property
    def sizes_in_use(self) -> tuple[str, Sequence[Any] | None] | None:
        """(field name, sizes) of the list the runner will capture, or None with graphs off."""
        if self.prefill_graphs_on:
            return "cudagraph_capture_sizes_prefill", self.cudagraph_capture_sizes_prefill
        if self.decode_graphs_on:
            return "cudagraph_capture_sizes", self.cudagraph_capture_sizes
        return None


# --------------------------------------------------------------------------- rules
RuleFn = Callable[[GraphOptView, Location], list[Finding]]


def check_fdc401_cpu_cache_prefill_graphs(v: GraphOptView, loc: Location) -> list[Finding]:
    if not (v.prefill_graphs_on and v.num_cpu_blocks > 0):
        return []
    return [
        make_finding(
            "FDC401",
            f"prefill CUDA graphs are on (use_cudagraph=True, cudagraph_only_prefill=True, role "
            f"{v.splitwise_role!r}) while a CPU cache of num_cpu_blocks={v.num_cpu_blocks} swaps KV layer by "
            f"layer host-to-device; the captured prefill graph replays stale cache addresses",
            loc,
        )
    ]


def _size_problems(sizes: Sequence[Any]) -> list[str]:
    problems = []
    if any(not isinstance(s, int) or isinstance(s, bool) or s <= 0 for s in sizes):
        problems.append("has non-positive or non-integer entries")
    if len(set(sizes)) != len(sizes):
        problems.append("has duplicates")
    if not problems and list(sizes) != sorted(sizes, reverse=True):
        problems.append("is not in descending order (decode capture registers all-reduce buffers largest first)")
    return problems


def check_fdc402_capture_size_shape(v: GraphOptView, loc: Location) -> list[Finding]:
    """FDC402 on the list the runner captures now (decode sizes with decode graphs on, prefill
    sizes with prefill graphs on); a list whose graphs are off is FDC406's, a warning."""
    in_use = v.sizes_in_use
    if in_use is None:
        return []
    name, sizes = in_use
    problems = _size_problems(list(sizes)) if sizes is not None else []
    # None (unset, not post-processed) captures nothing, exactly like []: same finding.
    if not sizes:
        problems.append("is empty while its graphs are on")
    if not problems:
        return []
    return [
        make_finding(
            "FDC402",
            f"{name}={list(sizes) if sizes is not None else None}: {'; '.join(problems)}",
            loc,
            name=name,
        )
    ]


def check_fdc406_unused_capture_size_shape(v: GraphOptView, loc: Location) -> list[Finding]:
    """FDC406 (warning): a malformed list nothing captures now. FastDeploy's own default prefill
    list holds its max size twice while prefill graphs are off; flipping the flag later would
    capture it as is, so it is reported, but it breaks nothing today and never fails a gate."""
    in_use = v.sizes_in_use
    findings = []
    for name in ("cudagraph_capture_sizes", "cudagraph_capture_sizes_prefill"):
        sizes = getattr(v, name)
        if (in_use is not None and in_use[0] == name) or not sizes:
            continue  # the list in use is FDC402's; an empty unused list captures nothing, rightly
        problems = _size_problems(list(sizes))
        if not problems:
            continue
        off = (
            "graphs are off (use_cudagraph=False)"
            if not v.use_cudagraph
            else "prefill graphs are off (cudagraph_only_prefill=False)"
            if name.endswith("_prefill")
            else "decode graphs are off (cudagraph_only_prefill=True)"
        )
        findings.append(
            make_finding(
                "FDC406",
                f"{name}={list(sizes)}: {'; '.join(problems)}; not captured now ({off}), but a flag "
                f"flipped later captures it as is",
                loc,
                name=name,
            )
        )
    return findings


def check_fdc403_speculative_step(v: GraphOptView, loc: Location) -> list[Finding]:
    if v.speculative_method not in MULTI_TOKEN_METHODS or not v.decode_graphs_on:
        return []
    step = int(v.num_speculative_tokens) + 1
    sizes = list(v.cudagraph_capture_sizes or [])
    bad = [s for s in sizes if isinstance(s, int) and s % step]
    if not bad:
        return []
    return [
        make_finding(
            "FDC403",
            f"speculative method {v.speculative_method!r} decodes {step} tokens per request "
            f"(num_speculative_tokens={v.num_speculative_tokens}) but capture sizes {bad} are not multiples "
            f"of {step}: no batch ever fills those graphs and batch->graph mapping truncates",
            loc,
            step=step,
        )
    ]


def check_fdc404_rl_dynamic_graph(v: GraphOptView, loc: Location) -> list[Finding]:
    if not (v.dynamic_load_weight and v.graph_opt_level and v.graph_opt_level > 0):
        return []
    return [
        make_finding(
            "FDC404",
            f"graph_opt_level={v.graph_opt_level} (static graph) with load_config.dynamic_load_weight=True: "
            f"RL weight sync replaces parameters the static program captured",
            loc,
        )
    ]


def check_fdc405_tp_divisible(v: GraphOptView, loc: Location) -> list[Finding]:
    tp = int(v.tensor_parallel_size or 1)
    in_use = v.sizes_in_use
    if not (v.use_sequence_parallel_moe and tp > 1 and in_use is not None):
        return []
    bad = [s for s in (in_use[1] or []) if isinstance(s, int) and s % tp]
    if not bad:
        return []
    return [
        make_finding(
            "FDC405",
            f"sequence-parallel MoE with tensor_parallel_size={tp} and graphs on, but {in_use[0]} {bad} are "
            f"not divisible by {tp}: a graph whose token count is not split evenly across ranks hangs",
            loc,
            tp=tp,
        )
    ]


#: Code -> its check, read from the registry (each FDC4xx entry names its ``check_fdc4NN_*`` here),
#: run in registry order (fd_conformance/codes/fdc4xx.py puts FDC406 right after FDC402).
CONFIG_CHECKS: dict[str, RuleFn] = {code: globals()[name] for code, (name,) in detected_in(__name__).items()}


def check_config(cfg: object, *, where: str | None = None) -> list[Finding]:
    """Every graph-opt invariant ``cfg`` (post-processed) breaks; empty when it is sound.

    Errors gate; the one warning (FDC406) is a malformed capture-size list that is not in use.
    """
    view = GraphOptView.of(cfg)
    loc = Location(obj=where or type(cfg).__qualname__)
    return [finding for rule in CONFIG_CHECKS.values() for finding in rule(view, loc)]


# --------------------------------------------------------------------------- raw configs
@dataclass(frozen=True)
class RawGraphOptConfig:
    """What a user can pass before post-processing; :meth:`to_namespace` shapes it like FDConfig."""

    use_cudagraph: bool = True
    cudagraph_only_prefill: bool = False
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    graph_opt_level: int = 0
    splitwise_role: str = "mixed"
    num_cpu_blocks: int = 0
    speculative_method: str | None = None
    num_speculative_tokens: int = 1
    dynamic_load_weight: bool = False
    tensor_parallel_size: int = 1
    use_sequence_parallel_moe: bool = False
    max_num_seqs: int = 8

    def to_namespace(self) -> SimpleNamespace:
        """A fresh, mutable FDConfig-shaped object (real FastDeploy attribute paths)."""
        return SimpleNamespace(
            graph_opt_config=SimpleNamespace(
                use_cudagraph=self.use_cudagraph,
                cudagraph_only_prefill=self.cudagraph_only_prefill,
                cudagraph_capture_sizes=None if self.cudagraph_capture_sizes is None else list(self.cudagraph_capture_sizes),
                cudagraph_capture_sizes_prefill=None,
                graph_opt_level=self.graph_opt_level,
            ),
            cache_config=SimpleNamespace(num_cpu_blocks=self.num_cpu_blocks),
            scheduler_config=SimpleNamespace(splitwise_role=self.splitwise_role, max_num_seqs=self.max_num_seqs),
            speculative_config=SimpleNamespace(
                method=self.speculative_method, num_speculative_tokens=self.num_speculative_tokens
            ),
            load_config=SimpleNamespace(dynamic_load_weight=self.dynamic_load_weight),
            parallel_config=SimpleNamespace(
                tensor_parallel_size=self.tensor_parallel_size, use_sequence_parallel_moe=self.use_sequence_parallel_moe
            ),
        )

    def describe(self) -> str:
        """Only the fields that differ from the defaults: the readable part of a minimal example."""
        default = asdict(RawGraphOptConfig())
        changed = {k: v for k, v in asdict(self).items() if default[k] != v}
        return "RawGraphOptConfig(" + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + ")"


def graph_opt_configs() -> SearchStrategy[RawGraphOptConfig]:
    """Hypothesis strategy over raw configs: roles, CPU cache, MTP, RL flag, TP/SP-MoE, sizes.

    Sizes come unsorted and with duplicates on purpose: normalising them is the post-processor's job.
    """
    from hypothesis import strategies as st

    return st.builds(
        RawGraphOptConfig,
        use_cudagraph=st.booleans(),
        cudagraph_only_prefill=st.booleans(),
        cudagraph_capture_sizes=st.none() | st.lists(st.integers(1, 512), min_size=1, max_size=8).map(tuple),
        graph_opt_level=st.integers(0, 2),
        splitwise_role=st.sampled_from(SPLITWISE_ROLES),
        num_cpu_blocks=st.just(0) | st.integers(1, 4096),
        speculative_method=st.sampled_from((None, "mtp")),
        num_speculative_tokens=st.integers(1, 5),
        dynamic_load_weight=st.booleans(),
        tensor_parallel_size=st.sampled_from((1, 2, 4, 8)),
        use_sequence_parallel_moe=st.booleans(),
        max_num_seqs=st.integers(1, 256),
    )


class InvariantViolation(AssertionError):
    """A post-processor broke a rule; carries the minimal raw config and what it broke."""

    def __init__(
        self, postprocess_name: str, raw: RawGraphOptConfig, findings: list[Finding], error: BaseException | None
    ) -> None:
        self.raw = raw
        self.findings = findings
        self.error = error
        what = (
            f"raised {type(error).__name__}: {error}"
            if error is not None
            else "broke " + "; ".join(f"{f.code} {f.message}" for f in findings)
        )
        super().__init__(f"{postprocess_name} {what}. Minimal failing config: {raw.describe()}")


def assert_postprocessor_preserves_invariants(
    postprocess: Callable[[Any], Any],
    build: Callable[[RawGraphOptConfig], Any] | None = None,
    *,
    codes: Collection[str] | None = None,
    max_examples: int = 300,
) -> None:
    """Property-test an engine's config post-processor against :data:`CONFIG_CHECKS` (error findings;
    warnings such as FDC406 never fail it: see :func:`find_config_warnings`).

    ``build(raw)`` makes the engine's config object (default: an FDConfig-shaped namespace);
    ``postprocess(cfg)`` adjusts it in place or returns the result. Raises
    :class:`InvariantViolation` with Hypothesis's *minimal* failing raw config, or returns None.
    Deterministic (derandomized, no example database) so CI failures reproduce.
    """
    found = _minimal_breaking_config(postprocess, build, codes, max_examples, errors=True)
    if found is not None:
        raise found


def find_config_warnings(
    postprocess: Callable[[Any], Any],
    build: Callable[[RawGraphOptConfig], Any] | None = None,
    *,
    max_examples: int = 300,
) -> InvariantViolation | None:
    """The same search for warning-level findings (FDC406): the minimal raw config whose
    post-processed form draws a warning, with those warnings; None when none does. Reported, never
    gating: a malformed list that is not in use breaks nothing the engine captures today."""
    return _minimal_breaking_config(postprocess, build, None, max_examples, errors=False)


def _minimal_breaking_config(
    postprocess: Callable[[Any], Any],
    build: Callable[[RawGraphOptConfig], Any] | None,
    codes: Collection[str] | None,
    max_examples: int,
    *,
    errors: bool,
) -> InvariantViolation | None:
    """Hypothesis's minimal raw config whose post-processed form draws findings of the wanted
    severity (errors, or warnings) -- or for errors, on which the post-processor crashes."""
    from hypothesis import find
    from hypothesis.errors import NoSuchExample

    unknown = set(codes or ()) - set(CONFIG_CHECKS)
    if unknown:
        raise UsageError(f"unknown config rule code(s) {sorted(unknown)}", f"use codes from {sorted(CONFIG_CHECKS)}")
    make = build or RawGraphOptConfig.to_namespace

    def run(raw: RawGraphOptConfig) -> tuple[list[Finding], BaseException | None]:
        cfg = make(raw)
        try:
            out = postprocess(cfg)
        except Exception as err:  # noqa: BLE001 - a crash on a valid raw config is a failure too, shrunk the same way
            return [], err if errors else None
        found = check_config(cfg if out is None else out)
        return [f for f in found if f.is_error is errors and (codes is None or f.code in codes)], None

    def breaks(raw: RawGraphOptConfig) -> bool:
        findings, error = run(raw)
        return bool(findings) or error is not None

    try:
        minimal = find(graph_opt_configs(), breaks, settings=search_settings(max_examples))
    except NoSuchExample:
        return None
    findings, error = run(minimal)
    return InvariantViolation(getattr(postprocess, "__qualname__", repr(postprocess)), minimal, findings, error)


def search_settings(max_examples: int) -> settings:
    """The search's settings, each field a verdict depends on set here, none taken from the loaded
    profile (a user's, or the ``ci`` profile Hypothesis loads itself on CI): the same post-processor
    gets the same verdict and the same minimal config on any host (DESIGN.md, "Determinism").

    ``deadline=None``: a post-processor that takes 300 ms per config on a busy host is as
    conforming as one that takes 3 ms (Hypothesis's default 200 ms deadline failed good models
    with DeadlineExceeded). Derandomized without a database, generate-then-shrink, quiet: a CI
    failure reproduces locally and prints nothing but the kit's own report."""
    from hypothesis import HealthCheck, Phase, Verbosity
    from hypothesis import settings as hypothesis_settings

    fixed: dict[str, Any] = {}
    if hasattr(hypothesis_settings.default, "backend"):  # a profile's other backend (e.g. crosshair) searches differently
        fixed["backend"] = "hypothesis"
    return hypothesis_settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        phases=(Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        **fixed,
    )
