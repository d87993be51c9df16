"""``all_cases()``: the reference models and their mutants as data (entry point ``fd_conformance.cases``).

Good cases expect no findings; each mutant lists exactly the codes the suites must report.
Factories are module-level functions (picklable by name for spawned workers) that take a runtime.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fd_conformance.cases import ModelCase
from fd_conformance.runtime.base import Runtime
from fd_reference_models import config

MAIN_SIZES = (4, 2, 1)
DRAFT_SIZES = (2, 1)
# fd_reference_models.paddle_models.subjects.MAIN_CAPTURE_SIZES, restated so that listing the
# cases never imports paddle (a test keeps the two equal).
PADDLE_SIZES = (8, 4, 2, 1)
PADDLE_DRAFT_SIZES = (4, 2, 1)  # paddle_models.subjects.DRAFT_CAPTURE_SIZES, restated for the same reason
# C6: the engine's config post-processing every reference model ships with. Property-testing it
# costs ~0.3 s per case, so every good case carries it (no C6 SKIP on the reference zoo).
CONFIG = {"config_postprocessor": config.postprocess, "config_builder": config.FDConfig.from_raw}
CONFIG_MUTANT_PREFIX = "cfg-mutant-"  # named so a session can run only C6 on them (-k)


# --- PyTorch factories (torch is imported only when a factory runs) ------------------------------
def torch_glm4_moe(runtime: Runtime) -> Any:
    from fd_reference_models.torch_models.subject import glm4_moe_subject

    return glm4_moe_subject(runtime, capture_sizes=MAIN_SIZES)


def torch_glm4_moe_mtp(runtime: Runtime) -> Any:
    from fd_reference_models.torch_models.subject import glm4_moe_mtp_subject

    return glm4_moe_mtp_subject(runtime, capture_sizes=MAIN_SIZES, draft_capture_sizes=DRAFT_SIZES)


def torch_qwen3_vl(runtime: Runtime) -> Any:
    from fd_reference_models.torch_models.subject import qwen3_vl_subject

    return qwen3_vl_subject(runtime, capture_sizes=MAIN_SIZES)


def mutant_qwen3_vl_without_clear(runtime: Runtime) -> Any:
    from fd_reference_models.mutants import Qwen3VLWithoutClear
    from fd_reference_models.torch_models.subject import qwen3_vl_subject

    return qwen3_vl_subject(runtime, wrapper_cls=Qwen3VLWithoutClear)


def mutant_glm4_moe_legacy_spelling(runtime: Runtime) -> Any:
    from fd_reference_models.mutants import Glm4MoeLegacySpelling
    from fd_reference_models.torch_models.subject import glm4_moe_subject

    return glm4_moe_subject(runtime, wrapper_cls=Glm4MoeLegacySpelling)


def mutant_glm4_moe_split_spellings(runtime: Runtime) -> Any:
    from fd_reference_models.mutants import Glm4MoeSplitSpellings
    from fd_reference_models.torch_models.subject import glm4_moe_subject

    return glm4_moe_subject(runtime, wrapper_cls=Glm4MoeSplitSpellings)


def _mtp_with_runner(runtime: Runtime, runner_name: str, **flags: bool) -> Any:
    from fd_reference_models import runner_mutants
    from fd_reference_models.torch_models.subject import glm4_moe_mtp_subject

    return glm4_moe_mtp_subject(runtime, runner_cls=getattr(runner_mutants, runner_name), **flags)


def mutant_draft_cleared_after_release(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "DraftClearedAfterReleaseRunner")


def mutant_draft_guarded_by_main_flag(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "DraftGuardedByMainFlagRunner", use_cudagraph=False, draft_model_use_cudagraph=True)


def mutant_runner_forgets_draft(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "ForgetsDraftRunner", draft_model_use_cudagraph=False)


def mutant_clears_by_current_flags(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "ClearsByCurrentFlagsRunner")


def mutant_group_shutdown_first(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "GroupShutdownFirstRunner")


def mutant_update_without_recapture(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "UpdateWithoutRecaptureRunner")


def mutant_retain_old_weights(runtime: Runtime) -> Any:
    return _mtp_with_runner(runtime, "RetainOldWeightsRunner")


def _glm4_with_wrapper(runtime: Runtime, wrapper_name: str) -> Any:
    from fd_reference_models import mutants
    from fd_reference_models.torch_models.subject import glm4_moe_subject

    return glm4_moe_subject(runtime, wrapper_cls=getattr(mutants, wrapper_name))


def mutant_leaky_clear(runtime: Runtime) -> Any:
    return _glm4_with_wrapper(runtime, "LeakyClearGlm4Moe")


def mutant_forgetful_clear(runtime: Runtime) -> Any:
    return _glm4_with_wrapper(runtime, "ForgetfulClearGlm4Moe")


def mutant_baked_token_ids(runtime: Runtime) -> Any:
    return _glm4_with_wrapper(runtime, "BakedTokenIdsGlm4Moe")


def mutant_flag_gated_clear(runtime: Runtime) -> Any:
    return _glm4_with_wrapper(runtime, "FlagGatedClearGlm4Moe")


def mutant_clear_raises_before_capture(runtime: Runtime) -> Any:
    return _glm4_with_wrapper(runtime, "ClearRaisesBeforeCaptureGlm4Moe")


def mutant_uncaptured_size(runtime: Runtime) -> Any:
    """The engine captures sizes (4, 2) while the case declares (4, 2, 1): the 1-token step is
    padded into the size-2 graph, so size 1 never gets a graph of its own."""
    from fd_reference_models.torch_models.subject import glm4_moe_subject

    return glm4_moe_subject(runtime, capture_sizes=(4, 2))


CONFIG_MUTANT_DEFECTS = {  # config.MUTANTS name -> the one step it gets wrong (a test keeps the keys equal)
    "forcing_prefill_graphs": "prefill graphs forced on after the CPU-cache rule",
    "keeping_user_order": "capture sizes not sorted/deduplicated",
    "ignoring_speculative_step": "MTP sizes not scaled by the speculative step",
    "keeping_static_graph_for_rl": "static graph kept under RL weight loading",
    "ignoring_tp_divisibility": "sizes not multiples of TP under sequence-parallel MoE",
    "duplicating_unused_prefill_max": "max prefill size listed twice while prefill graphs are off (warning)",
}


def config_mutant_cases(base: ModelCase) -> list[ModelCase]:
    """C6 mutants: the good ``base`` model shipped with each known-bad config post-processor
    (:data:`fd_reference_models.config.MUTANTS`); each must report exactly its codes."""
    return [
        dataclasses.replace(
            base,
            name=CONFIG_MUTANT_PREFIX + name.replace("_", "-"),
            config_postprocessor=postprocessor,
            expected_findings=frozenset(codes),
            checks=frozenset({"config"}),
            description=f"config post-processor mutant: {CONFIG_MUTANT_DEFECTS[name]}",
        )
        for name, (postprocessor, codes) in config.MUTANTS.items()
    ]


def torch_cases() -> list[ModelCase]:
    moe, draft, mm = frozenset({"moe"}), frozenset({"moe", "draft"}), frozenset({"multimodal"})

    def case(name: str, factory: Any, caps: frozenset[str], findings: tuple[str, ...] = (), description: str = "") -> ModelCase:
        draft_sizes = DRAFT_SIZES if "draft" in caps else None  # the MTP draft captures fewer sizes (FDC306 checks both)
        return ModelCase(
            name, "torch", factory, MAIN_SIZES, caps, frozenset(findings), description or (factory.__doc__ or ""),
            draft_capture_sizes=draft_sizes,
        )  # fmt: skip

    glm4 = dataclasses.replace(
        case("torch-glm4-moe", torch_glm4_moe, moe, description="GLM4-MoE (dense + MoE layer, shared expert, top-2 of 4)"),
        **CONFIG,
    )
    return [
        glm4,
        dataclasses.replace(
            case("torch-glm4-moe-mtp", torch_glm4_moe_mtp, draft, description="GLM4-MoE + MTP draft (draft sizes 2, 1)"), **CONFIG
        ),
        dataclasses.replace(
            case("torch-qwen3-vl", torch_qwen3_vl, mm, description="Qwen3-VL (eager vision, graphed text decoder, deepstack)"),
            **CONFIG,
        ),
        case("mutant-qwen3-vl-without-clear", mutant_qwen3_vl_without_clear, mm, ("FDC001",), "Qwen3-VL wrapper lacks clear"),
        case(
            "mutant-glm4-moe-legacy-spelling",
            mutant_glm4_moe_legacy_spelling,
            moe,
            ("FDC002",),
            "legacy clear_grpah_opt_backend only",
        ),
        case(
            "mutant-glm4-moe-split-spellings",
            mutant_glm4_moe_split_spellings,
            moe,
            ("FDC003",),
            "both spellings, different bodies",
        ),
        case("mutant-draft-cleared-after-release", mutant_draft_cleared_after_release, draft, ("FDC201",), "MTP hang order"),
        case(
            "mutant-draft-guarded-by-main-flag",
            mutant_draft_guarded_by_main_flag,
            draft,
            ("FDC201", "FDC202", "FDC203", "FDC205"),
            "draft clear under main flag (main graphs off)",
        ),
        case(
            "mutant-clears-by-current-flags",
            mutant_clears_by_current_flags,
            draft,
            ("FDC205",),
            "FastDeploy's runner shape: each clear keyed on the flag now (a warning: flags fixed by config)",
        ),
        dataclasses.replace(
            case(
                "mutant-clears-by-current-flags-run-time",
                mutant_clears_by_current_flags,
                draft,
                ("FDC206",),
                "each clear keyed on the flag now, on an engine that switches flags while serving",
            ),
            switches_graph_flags_at_run_time=True,
        ),
        case(
            "mutant-group-shutdown-first",
            mutant_group_shutdown_first,
            draft,
            ("FDC202",),
            "group shut down before graphs cleared",
        ),
        case(
            "mutant-update-without-recapture",
            mutant_update_without_recapture,
            draft,
            ("FDC204", "FDC304"),
            "stale graphs after reload",
        ),
        case("mutant-retain-old-weights", mutant_retain_old_weights, draft, ("FDC305",), "old weights kept each cycle"),
        case(
            "mutant-runner-forgets-draft",
            mutant_runner_forgets_draft,
            draft,
            ("FDC306",),
            "runner given only the main model: the draft is never graphed (the README tutorial's broken runner)",
        ),
        case("mutant-leaky-clear", mutant_leaky_clear, moe, ("FDC302",), "output buffers survive clear"),
        case("mutant-forgetful-clear", mutant_forgetful_clear, moe, ("FDC203", "FDC201", "FDC202"), "clear skips a capture size"),
        case("mutant-baked-token-ids", mutant_baked_token_ids, moe, ("FDC301", "FDC304"), "capture-time token ids baked in"),
        case("mutant-flag-gated-clear", mutant_flag_gated_clear, moe, ("FDC203",), "clear skipped while the graph flag is off"),
        case(
            "mutant-clear-raises-before-capture",
            mutant_clear_raises_before_capture,
            moe,
            ("FDC303",),
            "FastDeploy's AttributeError",
        ),
        case("mutant-uncaptured-size", mutant_uncaptured_size, moe, ("FDC306",), "declared size 1 never captured (pads to 2)"),
        *config_mutant_cases(glm4),
    ]


# --- Paddle factories (paddle is imported only when a factory runs: listing stays instant) --------
def paddle_glm4_moe_mtp(runtime: Runtime) -> Any:
    from fd_reference_models.paddle_models import subjects

    return subjects.glm4_moe_subject(runtime)


def paddle_qwen3_vl(runtime: Runtime) -> Any:
    from fd_reference_models.paddle_models import subjects

    return subjects.qwen3_vl_subject(runtime)


def _paddle_mtp_with_runner(runtime: Runtime, runner_name: str) -> Any:
    from fd_reference_models import runner_mutants
    from fd_reference_models.paddle_models import subjects

    return subjects.glm4_moe_subject(runtime, runner_cls=getattr(runner_mutants, runner_name))


def paddle_mutant_draft_cleared_after_release(runtime: Runtime) -> Any:
    """The MTP hang order, on the Paddle adapter (``_clear_data`` release, Paddle groups)."""
    return _paddle_mtp_with_runner(runtime, "DraftClearedAfterReleaseRunner")


def paddle_mutant_group_shutdown_first(runtime: Runtime) -> Any:
    """Group shut down while graphs that captured it are alive, on the Paddle adapter."""
    return _paddle_mtp_with_runner(runtime, "GroupShutdownFirstRunner")


def paddle_mutant_update_without_recapture(runtime: Runtime) -> Any:
    """Weights re-shared (``_share_buffer_to``) after capture, no recapture: stale graphs."""
    return _paddle_mtp_with_runner(runtime, "UpdateWithoutRecaptureRunner")


def _paddle_glm4_with_wrapper(runtime: Runtime, wrapper_name: str) -> Any:
    from fd_reference_models.paddle_models import mutants, subjects

    return subjects.glm4_moe_subject(runtime, wrapper_cls=getattr(mutants, wrapper_name))


def paddle_mutant_leaky_clear(runtime: Runtime) -> Any:
    """Clear keeps every graph's output buffer alive (pool pinned), on the Paddle adapter."""
    return _paddle_glm4_with_wrapper(runtime, "LeakyClearGlm4Moe")


def paddle_mutant_forgetful_clear(runtime: Runtime) -> Any:
    """Clear skips the smallest capture size: that graph outlives release and shutdown, on Paddle."""
    return _paddle_glm4_with_wrapper(runtime, "ForgetfulClearGlm4Moe")


def paddle_mutant_baked_token_ids(runtime: Runtime) -> Any:
    """Capture-time token ids baked into the graph: replay differs from eager, on Paddle."""
    return _paddle_glm4_with_wrapper(runtime, "BakedTokenIdsGlm4Moe")


def paddle_cases() -> list[ModelCase]:
    """The tiny Paddle reference models (our own implementations; see paddle_models/) and the
    runtime-neutral runner mutants driving them, so the Paddle adapter's events are proven to trip
    the lifecycle rules too."""
    mtp = frozenset({"draft", "moe"})

    def mutant(name: str, factory: Any, codes: tuple[str, ...]) -> ModelCase:
        return ModelCase(
            name,
            "paddle",
            factory,
            PADDLE_SIZES,
            mtp,
            frozenset(codes),
            factory.__doc__ or "",
            draft_capture_sizes=PADDLE_DRAFT_SIZES,
        )

    return [
        ModelCase(
            "paddle-glm4-moe-mtp",
            "paddle",
            paddle_glm4_moe_mtp,
            PADDLE_SIZES,
            mtp,
            description="tiny Paddle GLM4-MoE + GLM4 MTP draft",
            draft_capture_sizes=PADDLE_DRAFT_SIZES,
            **CONFIG,
        ),
        ModelCase(
            "paddle-qwen3-vl",
            "paddle",
            paddle_qwen3_vl,
            PADDLE_SIZES,
            frozenset({"multimodal"}),
            description="tiny Paddle Qwen3-VL with deepstack",
            **CONFIG,
        ),
        mutant("paddle-mutant-draft-cleared-after-release", paddle_mutant_draft_cleared_after_release, ("FDC201",)),
        mutant("paddle-mutant-group-shutdown-first", paddle_mutant_group_shutdown_first, ("FDC202",)),
        mutant("paddle-mutant-update-without-recapture", paddle_mutant_update_without_recapture, ("FDC204", "FDC304")),
        # Model-level mutants: the torch mutants' defects (fd_reference_models.model_defects), same codes.
        mutant("paddle-mutant-leaky-clear", paddle_mutant_leaky_clear, ("FDC302",)),
        mutant("paddle-mutant-forgetful-clear", paddle_mutant_forgetful_clear, ("FDC203", "FDC201", "FDC202")),
        mutant("paddle-mutant-baked-token-ids", paddle_mutant_baked_token_ids, ("FDC301", "FDC304")),
    ]


def all_cases() -> list[ModelCase]:
    """Every reference case; framework-specific lists are built only when that framework is installed."""
    import importlib.util

    cases: list[ModelCase] = []
    if importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None:
        cases += torch_cases()
    if importlib.util.find_spec("paddle") is not None:
        cases += paddle_cases()
    return cases
