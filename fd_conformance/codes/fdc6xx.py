"""FDC6xx: tensor-parallel capture plans, checked before capturing (fd_conformance.distributed.capture_plan)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E = Severity.ERROR
_PLAN = "fd_conformance.distributed.capture_plan"
_TP_MODELS = "models/fd_reference_models/torch_models/tensor_parallel.py"
_GOOD_PLAN = "sizes = sorted(graph_opt_config.cudagraph_capture_sizes, reverse=True)  # the shared config only"

ENTRIES = (
    Rule(
        "FDC601",
        E,
        "TP ranks plan to capture graphs in different orders (their collectives would deadlock)",
        (f"{_PLAN}.check_capture_plans",),
        "derive the capture order from the shared graph-opt config only (sorted descending), never from rank-local "
        "state; every rank must capture the same sizes in the same order",
        (f"{_TP_MODELS}::AscendingCaptureRunner",),
        Doc(
            what="Two TP ranks whose published capture plans (owner, size, in capture order) differ.",
            why="Captures with collectives inside must be issued in the same order on every rank; otherwise the "
            "ranks wait in mismatched all-reduces and the capture deadlocks.",
            bad="sizes = sorted(self.local_sizes)  # rank-local, ascending",
            good=_GOOD_PLAN,
        ),
        clean=(f"{_TP_MODELS}::TensorParallelRunner",),
    ),
    Rule(
        "FDC602",
        E,
        "a TP rank's capture plan is not in descending size order per model",
        (f"{_PLAN}.check_capture_plans",),
        "capture decode sizes largest first per model (sorted(capture_sizes, reverse=True)), as FastDeploy does",
        (f"{_TP_MODELS}::AscendingCaptureRunner",),
        Doc(
            what="A rank that plans to capture one model's sizes other than largest first.",
            why="Decode capture registers all-reduce buffers largest first; smaller graphs reuse the larger one's "
            "pool. Another order allocates more and disagrees with ranks that follow the config.",
            bad="for size in sorted(capture_sizes):\n    capture(size)",
            good="for size in sorted(capture_sizes, reverse=True):\n    capture(size)",
        ),
        clean=(f"{_TP_MODELS}::TensorParallelRunner",),
    ),
    Rule(
        "FDC603",
        E,
        "a TP rank ended without publishing its capture plan",
        (f"{_PLAN}.exchange_capture_plans",),
        "make sure every TP rank reaches capture_model(); read what that rank did instead (its result, or its "
        "crash report FDC502); a rank that never ends is reported as a hang (FDC501), not here",
        ("tests/test_tensor_parallel.py::rank_absent_peer",),
        Doc(
            what="A rank whose process ended (returned or raised) without publishing its capture plan. A slow rank is "
            "waited for, however long: no deadline decides this finding.",
            why="Capturing without that rank would wait forever in the first in-graph collective; the check says "
            "which rank is missing instead.",
            bad="if rank == 0:\n    build_model()  # the other ranks never reach capture_model()",
            good="build_model()\ncapture_in_agreed_order(runner, store, rank, world_size)",
        ),
        clean=(f"{_TP_MODELS}::TensorParallelRunner",),
    ),
)
