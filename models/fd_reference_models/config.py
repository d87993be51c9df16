"""A small FDConfig-like graph-opt config, its post-processor, and known-bad post-processors.

Attribute names are FastDeploy's (``fastdeploy/config.py``) so the kit's rules read both the
same way. The good :func:`postprocess` mirrors FDConfig.postprocess's graph-opt adjustments and
applies the CPU-cache rule LAST, so no earlier adjustment can undo it. Each mutant skips or
reorders exactly one step and must fail exactly one rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# FastDeploy's default prefill capture sizes and the ladder its decode sizes are drawn from.
DEFAULT_PREFILL_SIZES = (8, 4, 2, 1)
DECODE_SIZE_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


@dataclass
class GraphOptConfig:
    use_cudagraph: bool = True
    cudagraph_only_prefill: bool = False
    cudagraph_capture_sizes: list[int] | None = None
    cudagraph_capture_sizes_prefill: list[int] | None = None
    graph_opt_level: int = 0
    draft_model_use_cudagraph: bool = False


@dataclass
class CacheConfig:
    num_cpu_blocks: int = 0


@dataclass
class SchedulerConfig:
    splitwise_role: str = "mixed"
    max_num_seqs: int = 8


@dataclass
class SpeculativeConfig:
    method: str | None = None
    num_speculative_tokens: int = 1


@dataclass
class LoadConfig:
    dynamic_load_weight: bool = False  # RL weight sync


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    use_sequence_parallel_moe: bool = False


@dataclass
class FDConfig:
    graph_opt_config: GraphOptConfig = field(default_factory=GraphOptConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
    speculative_config: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    load_config: LoadConfig = field(default_factory=LoadConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)

    @classmethod
    def from_raw(cls, raw: Any) -> FDConfig:
        """Build from any object with the raw field names (e.g. the kit's RawGraphOptConfig)."""
        sizes = getattr(raw, "cudagraph_capture_sizes", None)
        return cls(
            GraphOptConfig(
                use_cudagraph=raw.use_cudagraph,
                cudagraph_only_prefill=raw.cudagraph_only_prefill,
                cudagraph_capture_sizes=None if sizes is None else list(sizes),
                graph_opt_level=raw.graph_opt_level,
            ),
            CacheConfig(num_cpu_blocks=raw.num_cpu_blocks),
            SchedulerConfig(splitwise_role=raw.splitwise_role, max_num_seqs=raw.max_num_seqs),
            SpeculativeConfig(method=raw.speculative_method, num_speculative_tokens=raw.num_speculative_tokens),
            LoadConfig(dynamic_load_weight=raw.dynamic_load_weight),
            ParallelConfig(
                tensor_parallel_size=raw.tensor_parallel_size, use_sequence_parallel_moe=raw.use_sequence_parallel_moe
            ),
        )


def _round_up(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def _normalise(sizes: list[int], multiple: int, keep_order: bool) -> list[int]:
    """Round each size up to ``multiple``, then dedupe and sort descending (capture order)."""
    rounded = [_round_up(s, multiple) for s in sizes if s > 0]
    return rounded if keep_order else sorted(set(rounded), reverse=True)


def _postprocess(cfg: FDConfig, *, skip: frozenset[str] = frozenset()) -> FDConfig:
    """FDConfig.postprocess's graph-opt part; ``skip`` names the one step a mutant leaves out."""
    g, role = cfg.graph_opt_config, cfg.scheduler_config.splitwise_role
    spec, par = cfg.speculative_config, cfg.parallel_config
    # A prefill-only instance captures prefill graphs or none (FastDeploy's adjustment).
    if role == "prefill":
        g.use_cudagraph = g.cudagraph_only_prefill
    # Static graphs cannot survive RL weight sync: fall back to dynamic graph.
    if cfg.load_config.dynamic_load_weight and "rl" not in skip:
        g.graph_opt_level = 0
    # The prefill role runs one MTP step.
    if spec.method == "mtp" and role == "prefill":
        spec.num_speculative_tokens = 1
    # Sequence-parallel MoE needs at least one sequence per rank.
    if par.use_sequence_parallel_moe and cfg.scheduler_config.max_num_seqs < par.tensor_parallel_size:
        par.use_sequence_parallel_moe = False
    # Capture sizes last among the sizing steps: they depend on every value fixed above.
    step = spec.num_speculative_tokens + 1 if spec.method in ("mtp", "suffix") and "spec_step" not in skip else 1
    tp = par.tensor_parallel_size if par.use_sequence_parallel_moe and "tp" not in skip else 1
    keep_order = "sort" in skip
    if g.cudagraph_capture_sizes is None:
        cap = max(cfg.scheduler_config.max_num_seqs * step, 1)
        g.cudagraph_capture_sizes = [s for s in DECODE_SIZE_LADDER if s <= cap] or [1]
    g.cudagraph_capture_sizes = _normalise(g.cudagraph_capture_sizes, math.lcm(step, tp), keep_order)
    if g.cudagraph_capture_sizes_prefill is None:
        g.cudagraph_capture_sizes_prefill = list(DEFAULT_PREFILL_SIZES)
    g.cudagraph_capture_sizes_prefill = _normalise(g.cudagraph_capture_sizes_prefill, tp, keep_order)
    # LAST: the CPU-cache rule. Layer-by-layer host-to-device swap rewrites KV under a captured
    # prefill graph, so nothing after this line may turn prefill graphs back on.
    if cfg.cache_config.num_cpu_blocks > 0 and g.use_cudagraph and g.cudagraph_only_prefill:
        g.cudagraph_only_prefill = False
        if role == "prefill":
            g.use_cudagraph = False
    return cfg


def postprocess(cfg: FDConfig) -> FDConfig:
    """The reference post-processor: every graph-opt rule holds on what it returns."""
    return _postprocess(cfg)


def postprocess_forcing_prefill_graphs(cfg: FDConfig) -> FDConfig:
    """MUTANT (the FastDeploy bug): forces piecewise prefill graphs on for the prefill role
    after the CPU-cache rule ran, so a prefill node with num_cpu_blocks > 0 captures anyway."""
    _postprocess(cfg)
    if cfg.scheduler_config.splitwise_role == "prefill":
        cfg.graph_opt_config.use_cudagraph = True
        cfg.graph_opt_config.cudagraph_only_prefill = True
    return cfg


def postprocess_keeping_user_order(cfg: FDConfig) -> FDConfig:
    """MUTANT: capture sizes kept as given (ascending ladder, duplicates) -> FDC402."""
    return _postprocess(cfg, skip=frozenset({"sort"}))


def postprocess_ignoring_speculative_step(cfg: FDConfig) -> FDConfig:
    """MUTANT: MTP decode sizes not scaled by num_speculative_tokens + 1 -> FDC403."""
    return _postprocess(cfg, skip=frozenset({"spec_step"}))


def postprocess_keeping_static_graph_for_rl(cfg: FDConfig) -> FDConfig:
    """MUTANT: static graph left on under RL dynamic weight loading -> FDC404."""
    return _postprocess(cfg, skip=frozenset({"rl"}))


def postprocess_ignoring_tp_divisibility(cfg: FDConfig) -> FDConfig:
    """MUTANT: sizes not filtered to multiples of TP under sequence-parallel MoE -> FDC405."""
    return _postprocess(cfg, skip=frozenset({"tp"}))


def postprocess_duplicating_unused_prefill_max(cfg: FDConfig) -> FDConfig:
    """MUTANT (FastDeploy's default shape): the prefill size list gets its max size appended again
    while prefill graphs are off -> FDC406 (a warning: nothing captures that list today)."""
    _postprocess(cfg)
    g = cfg.graph_opt_config
    if not g.cudagraph_only_prefill and g.cudagraph_capture_sizes_prefill:
        g.cudagraph_capture_sizes_prefill.append(max(g.cudagraph_capture_sizes_prefill))
    return cfg


# Mutant -> the codes C6 must report for it: the property test's error, and the warnings
# (FDC406) its search finds. Keeping the user's order also leaves the UNUSED list unsorted.
MUTANTS: dict[str, tuple[Callable[[FDConfig], FDConfig], tuple[str, ...]]] = {
    "forcing_prefill_graphs": (postprocess_forcing_prefill_graphs, ("FDC401",)),
    "keeping_user_order": (postprocess_keeping_user_order, ("FDC402", "FDC406")),
    "ignoring_speculative_step": (postprocess_ignoring_speculative_step, ("FDC403",)),
    "keeping_static_graph_for_rl": (postprocess_keeping_static_graph_for_rl, ("FDC404",)),
    "ignoring_tp_divisibility": (postprocess_ignoring_tp_divisibility, ("FDC405",)),
    "duplicating_unused_prefill_max": (postprocess_duplicating_unused_prefill_max, ("FDC406",)),
}
