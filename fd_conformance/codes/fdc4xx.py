"""FDC4xx: graph-opt config invariants on a post-processed config (fd_conformance.config_rules)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E, W = Severity.ERROR, Severity.WARNING
_CHECK = "fd_conformance.config_rules.check_fdc"
_CLEAN = ("torch-glm4-moe",)  # the reference post-processor: no FDC4xx on any generated config
_SIZE_HINT = (
    "post-process {name} to sorted(set(s for s in sizes if s > 0), reverse=True) and keep at least one size while graphs are on"
)

ENTRIES = (  # in the order check_config() runs them: FDC406 judges the lists FDC402 leaves (not in use)
    Rule(
        "FDC401",
        E,
        "prefill CUDA graphs on while a CPU cache swaps layer by layer (num_cpu_blocks > 0)",
        (f"{_CHECK}401_cpu_cache_prefill_graphs",),
        "apply the CPU-cache rule LAST in post-processing: when num_cpu_blocks > 0 set cudagraph_only_prefill=False "
        "(and use_cudagraph=False for the prefill role)",
        ("cfg-mutant-forcing-prefill-graphs",),
        Doc(
            what="After post-processing, prefill graphs are on (use_cudagraph and cudagraph_only_prefill) while "
            "num_cpu_blocks > 0.",
            why="A CPU cache swaps KV layer by layer into new device addresses; a captured prefill graph replays the "
            "old ones. The real defect: forcing prefill graphs on for the prefill role after the CPU-cache rule ran.",
            bad="if cfg.cache_config.num_cpu_blocks > 0:\n    cfg.graph_opt_config.cudagraph_only_prefill = False\n"
            "if role == 'prefill':\n    cfg.graph_opt_config.cudagraph_only_prefill = True  # undoes it",
            good="if role == 'prefill':\n    cfg.graph_opt_config.cudagraph_only_prefill = True\n"
            "if cfg.cache_config.num_cpu_blocks > 0:  # last\n    cfg.graph_opt_config.cudagraph_only_prefill = False",
        ),
        clean=_CLEAN,
    ),
    Rule(
        "FDC402",
        E,
        "capture sizes in use not unique, positive and sorted descending, or empty with graphs on",
        (f"{_CHECK}402_capture_size_shape",),
        _SIZE_HINT,
        ("cfg-mutant-keeping-user-order",),
        Doc(
            what="The capture-size list the runner captures now has non-positive or non-integer entries, "
            "duplicates, is not in descending order, or is empty (or unset) while its graphs are on.",
            why="Decode capture registers all-reduce buffers largest first and maps a batch to the smallest graph "
            "that fits; duplicates capture twice, ascending order misplaces buffers, an empty list captures nothing.",
            bad="cfg.graph_opt_config.cudagraph_capture_sizes = user_sizes  # [1, 4, 2, 4]",
            good="cfg.graph_opt_config.cudagraph_capture_sizes = sorted(set(s for s in user_sizes if s > 0), reverse=True)",
        ),
        clean=_CLEAN,
    ),
    Rule(
        "FDC406",
        W,
        "capture sizes malformed (as FDC402) in a list not in use: its graphs are off",
        (f"{_CHECK}406_unused_capture_size_shape",),
        _SIZE_HINT,
        ("cfg-mutant-duplicating-unused-prefill-max",),
        Doc(
            what="A malformed capture-size list (as FDC402) that nothing captures now because its graphs are off.",
            why="It breaks nothing today, but a flag flipped later captures it as is (FastDeploy's default prefill "
            "list holds its max size twice while prefill graphs are off).",
            bad="cfg.graph_opt_config.cudagraph_capture_sizes_prefill = [max_len, max_len, 1]",
            good="cfg.graph_opt_config.cudagraph_capture_sizes_prefill = sorted({max_len, 1}, reverse=True)",
        ),
        clean=_CLEAN,
    ),
    Rule(
        "FDC403",
        E,
        "MTP decode capture sizes not multiples of the tokens per step (num_speculative_tokens + 1)",
        (f"{_CHECK}403_speculative_step",),
        "generate decode capture sizes as batch_size * {step}, after the last change to num_speculative_tokens (the "
        "prefill role resets it to 1)",
        ("cfg-mutant-ignoring-speculative-step",),
        Doc(
            what="With a multi-token speculative method (mtp, suffix) and decode graphs on, a decode capture size "
            "that is not a multiple of num_speculative_tokens + 1.",
            why="Each request decodes num_speculative_tokens + 1 tokens per step, so no batch ever fills such a graph, "
            "and the batch-to-graph mapping truncates.",
            bad="cfg.graph_opt_config.cudagraph_capture_sizes = [8, 4, 2, 1]  # MTP with 1 speculative token",
            good="step = cfg.speculative_config.num_speculative_tokens + 1\n"
            "cfg.graph_opt_config.cudagraph_capture_sizes = [b * step for b in (8, 4, 2, 1)]",
        ),
        clean=_CLEAN,
    ),
    Rule(
        "FDC404",
        E,
        "static graph (graph_opt_level > 0) with RL dynamic weight loading",
        (f"{_CHECK}404_rl_dynamic_graph",),
        "set graph_opt_level=0 when dynamic_load_weight is on, after any other graph-level adjustment",
        ("cfg-mutant-keeping-static-graph-for-rl",),
        Doc(
            what="graph_opt_level > 0 (a static program) while load_config.dynamic_load_weight is on.",
            why="RL weight sync replaces the parameters the static program captured; the program keeps using the old ones.",
            bad="cfg.graph_opt_config.graph_opt_level = 1  # set after the RL adjustment",
            good="if cfg.load_config.dynamic_load_weight:  # last\n    cfg.graph_opt_config.graph_opt_level = 0",
        ),
        clean=_CLEAN,
    ),
    Rule(
        "FDC405",
        E,
        "capture size not divisible by the TP size under sequence-parallel MoE (hangs)",
        (f"{_CHECK}405_tp_divisible",),
        "filter capture sizes to multiples of {tp} (FastDeploy's filter_capture_size) or disable use_sequence_parallel_moe",
        ("cfg-mutant-ignoring-tp-divisibility",),
        Doc(
            what="Sequence-parallel MoE with tensor_parallel_size > 1 and graphs on, and a capture size in use that "
            "the TP size does not divide.",
            why="The graph's tokens are split across ranks; an uneven split makes ranks issue mismatched collectives "
            "inside the graph, and they hang.",
            bad="cfg.graph_opt_config.cudagraph_capture_sizes = [6, 3, 1]  # tensor_parallel_size = 2",
            good="tp = cfg.parallel_config.tensor_parallel_size\n"
            "cfg.graph_opt_config.cudagraph_capture_sizes = [s for s in sizes if s % tp == 0]",
        ),
        clean=_CLEAN,
    ),
)
