"""FDC2xx: teardown-order rules over recorded runtime calls (fd_conformance.lifecycle, read by the suites)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E, W = Severity.ERROR, Severity.WARNING
_RECORDER = "fd_conformance.lifecycle.LifecycleRecorder"
_SUPPORT = "fd_conformance.suite._support"
_IN_PLACE = "fd_conformance.suite._in_place"  # the in_place weight cycle relays the recorder's findings
_REFERENCE = "torch-glm4-moe-mtp"  # the correct MTP model every FDC2xx mutant is a variant of

_RUNNER_CLEAR_FIRST = (
    "def clear_parameters(self, pid):\n    self.model.clear_graph_opt_backend()\n"
    "    self.proposer.model.clear_graph_opt_backend()\n    self.dynamic_weight_manager.clear_parameters(pid)"
)
_SWITCHED_BAD = (
    "def clear_parameters(self, pid):\n    if self.use_cudagraph:  # read now, not at capture time\n"
    "        self.model.clear_graph_opt_backend()\n    if self.draft_model_use_cudagraph:\n"
    "        self.proposer.model.clear_graph_opt_backend()\n    self.dynamic_weight_manager.clear_parameters(pid)"
)
_FLAG_SWITCH_WHY = (
    "a flag switched off after capture makes clear_parameters() skip that model's clear, so its captured graphs "
    "survive the weight release; clearing a model without graphs is a safe no-op, so the guard buys nothing"
)

ENTRIES = (
    Rule(
        "FDC201",
        E,
        "graph alive when a parameter it captured is released",
        (f"{_RECORDER}._check_release",),
        "destroy every graph (main AND draft) with clear_graph_opt_backend() before releasing weights",
        ("mutant-draft-cleared-after-release",),
        Doc(
            what="A recorded release of a parameter (freed, resized to 0, moved) while a live graph had captured its storage.",
            why="A graph replays against the addresses it captured; after the release they hold other data or "
            "nothing, and on some runtimes the release waits on the graph (the MTP hang).",
            bad="def clear_parameters(self, pid):\n    self.dynamic_weight_manager.clear_parameters(pid)\n"
            "    self.proposer.model.clear_graph_opt_backend()",
            good=_RUNNER_CLEAR_FIRST,
        ),
        clean=(_REFERENCE,),
        emitted_by=(_SUPPORT, _IN_PLACE),  # teardown_findings relays the recorder's finding
    ),
    Rule(
        "FDC202",
        E,
        "graph alive when a comm group it captured is shut down",
        (f"{_RECORDER}._check_shutdown",),
        "destroy every graph (main AND draft) before shutting down communication groups; NCCL's destroy waits on "
        "graphs that captured the communicator",
        ("mutant-group-shutdown-first",),
        Doc(
            what="A recorded communication-group shutdown while a live graph had captured collectives on it.",
            why="NCCL's communicator destroy waits on graphs that captured it: the weight sync hangs on every rank.",
            bad="def clear_parameters(self, pid):\n    paddle.distributed.shutdown_process_group(self.tp_group)\n"
            "    self.model.clear_graph_opt_backend()",
            good="def clear_parameters(self, pid):\n    self.model.clear_graph_opt_backend()\n"
            "    paddle.distributed.shutdown_process_group(self.tp_group)",
        ),
        clean=(_REFERENCE,),
        emitted_by=(_SUPPORT, _IN_PLACE),  # teardown_findings relays the recorder's finding
    ),
    Rule(
        "FDC203",
        E,
        "graph still alive after clear_graph_opt_backend() or the runner's clear_parameters()",
        (
            f"{_RECORDER}.check_cleared",
            f"{_RECORDER}._check_clear_mark",
            f"{_SUPPORT}.add_alive_graph_findings",
            f"{_SUPPORT}.teardown_findings",
        ),
        "reset every graph (main and draft) in clear_graph_opt_backend() whatever the graph flags say now, and have "
        "the runner's clear_parameters() call every wrapper's clear (and reset the graphs it holds itself) before "
        "releasing weights",
        ("mutant-flag-gated-clear", "mutant-forgetful-clear"),
        Doc(
            what="A graph still alive when a model's clear_graph_opt_backend() or the runner's clear_parameters() has "
            "returned: the clear skipped it (a capture size, the draft, a flag switched off), or nothing that is "
            "called destroys it.",
            why="The surviving graph keeps its memory pool and the storage it captured; the next weight release "
            "frees memory under it and the next replay reads stale or freed buffers.",
            bad="def clear_graph_opt_backend(self):\n    if self.use_cudagraph:  # off now, on at capture\n"
            "        self.graphs.clear()",
            good="def clear_graph_opt_backend(self):\n    for graph in self.graphs.values():\n"
            "        graph.reset()\n    self.graphs.clear()",
        ),
        clean=(_REFERENCE,),
        emitted_by=("fd_conformance.suite.test_clear",),  # the clear check relays the recorder's finding
    ),
    Rule(
        "FDC204",
        E,
        "graph replayed after its captured buffers were released or replaced",
        (f"{_RECORDER}._check_replay",),
        "recapture graphs after reloading weights (update_parameters must call capture_model()); an engine that "
        "keeps its graphs (in_place) must write new weights into the tensors they captured (copy_/set_value), "
        "never re-create or re-point them",
        ("mutant-update-without-recapture", "tests/fixtures/in_place/vllm_style.py::RecreatesTransposed"),
        Doc(
            what="A recorded replay of a graph whose captured parameter storage was released or replaced since it was captured.",
            why="Reloaded weights live at new addresses; the graph still reads the old ones, so outputs are silently "
            "wrong (or read freed memory).",
            bad="def update_parameters(self, pid):\n    self.dynamic_weight_manager.update_parameters(pid)",
            good="def update_parameters(self, pid):\n    self.dynamic_weight_manager.update_parameters(pid)\n"
            "    self.capture_model()",
        ),
        clean=(_REFERENCE,),
        emitted_by=(  # relay the recorder's finding: the weight-cycle check, the FastDeploy runner bridge
            "fd_conformance.suite.test_weight_cycle",
            "fd_conformance.fastdeploy.runner_bridge",
            _IN_PLACE,  # also its own: a captured tensor the in-place update replaced
        ),
    ),
    Rule(
        "FDC205",
        W,
        "runner's clear_parameters() strands graphs when a graph flag is switched off after capture (flags fixed by config)",
        ("fd_conformance.suite.test_teardown_order.test_teardown_after_flag_switch",),
        "{runner}.clear_parameters() must call every wrapper's clear_graph_opt_backend() (main AND draft) "
        "unconditionally, before releasing weights: clearing a model without graphs is a safe no-op",
        ("mutant-clears-by-current-flags",),
        Doc(
            what="clear_parameters() keys each model's clear on its graph flag as it reads now; switched off after "
            "capture, it leaves that model's graphs alive. A warning: on an engine whose flags are fixed by config "
            "the switch does not happen.",
            why=_FLAG_SWITCH_WHY,
            bad=_SWITCHED_BAD,
            good=_RUNNER_CLEAR_FIRST,
        ),
        clean=(_REFERENCE,),
    ),
    Rule(
        "FDC206",
        E,
        "runner's clear_parameters() strands graphs when a graph flag is switched off after capture (flags switch at run time)",
        ("fd_conformance.suite.test_teardown_order.test_teardown_after_flag_switch",),
        "{runner}.clear_parameters() must call every wrapper's clear_graph_opt_backend() (main AND draft) "
        "unconditionally, before releasing weights: clearing a model without graphs is a safe no-op",
        ("mutant-clears-by-current-flags-run-time",),
        Doc(
            what="FDC205 on an engine that switches graph flags while serving (the case declares "
            "switches_graph_flags_at_run_time), so the stranding happens: an error.",
            why=_FLAG_SWITCH_WHY,
            bad=_SWITCHED_BAD,
            good=_RUNNER_CLEAR_FIRST,
        ),
        clean=(_REFERENCE,),
    ),
)
