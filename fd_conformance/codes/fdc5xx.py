"""FDC5xx: checks that hang or crash, caught by the isolation layer (fd_conformance.isolation)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E = Severity.ERROR
_CASES = "tests/hang_cases/session_hangs.py"

ENTRIES = (
    Rule(
        "FDC501",
        E,
        "check hung and was killed by the watchdog",
        ("fd_conformance.isolation.process.RunResult.finding",),
        "read the Python/native stacks in the report; a graph alive across a comm-group shutdown is the usual cause",
        (f"{_CASES}::test_hang",),
        Doc(
            what="A check that did not finish within its timeout; the parent's watchdog killed its worker and "
            "reports the Python and native stacks, the stuck frame and the last lifecycle event.",
            why="A hang in the engine's teardown (a communicator destroy waiting on a live graph) stalls the whole "
            "weight sync; the session goes on and says where it stuck instead of timing out the CI job.",
            bad="def clear_parameters(self, pid):\n    dist.destroy_process_group(self.tp_group)  # graphs alive: waits\n"
            "    self.model.clear_graph_opt_backend()",
            good="def clear_parameters(self, pid):\n    self.model.clear_graph_opt_backend()\n"
            "    dist.destroy_process_group(self.tp_group)",
        ),
        clean=(f"{_CASES}::test_before",),
    ),
    Rule(
        "FDC502",
        E,
        "check's worker process crashed",
        ("fd_conformance.isolation.process.RunResult.finding",),
        "reproduce with the same test alone; see the worker log tail in the report",
        (f"{_CASES}::test_segfault",),
        Doc(
            what="A check whose worker process died (a signal, os._exit, out of memory) before reporting.",
            why="A crash in native code (a replay on freed memory) takes the process with it; isolation turns it into "
            "a finding with the cause and the log tail, and the rest of the session still runs.",
            bad="graph.replay()  # after its captured weights were freed: SIGSEGV",
            good="model.clear_graph_opt_backend()\nrelease_weights()\nreload_weights()\ncapture_model()\ngraph.replay()",
        ),
        clean=(f"{_CASES}::test_before",),
    ),
)
