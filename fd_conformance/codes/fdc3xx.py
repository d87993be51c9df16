"""FDC3xx: the shipped conformance suite on a real runtime (fd_conformance.suite)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E = Severity.ERROR
_SUITE = "fd_conformance.suite"
_REFERENCE = ("torch-glm4-moe", "torch-glm4-moe-mtp")

ENTRIES = (
    Rule(
        "FDC301",
        E,
        "graph replay differs from eager forward",
        (f"{_SUITE}.test_capture_replay.test_capture_replay", f"{_SUITE}._support.compare_outputs"),
        "capture on the current weights and static inputs, and return the same outputs as eager, sliced back to the real tokens",
        ("mutant-baked-token-ids",),
        Doc(
            what="For some capture size, the graph's outputs differ from the eager forward on the same inputs and "
            "weights (beyond the case's tolerances), have another shape, are missing, or the replay raises.",
            why="A graph replays what it captured: a value baked in at capture time (token ids, a Python scalar, a "
            "fresh tensor instead of the static input buffer) makes every served step wrong without an error.",
            bad="def forward(self, ids):\n    ids = paddle.to_tensor(ids.numpy())  # a copy, baked into the graph\n"
            "    return self.model(ids)",
            good="def forward(self, ids):\n    self.static_ids.copy_(ids)  # the buffer the graph captured\n"
            "    return self.graph.replay()",
        ),
        clean=_REFERENCE,
    ),
    Rule(
        "FDC302",
        E,
        "graph memory not returned after clear",
        ("fd_conformance.suite.test_clear.test_clear_releases_graphs_and_memory", f"{_SUITE}._support.memory_leak_finding"),
        "in the clear of {blamed}, drop every reference to its graphs' output buffers and memory pool (they pin the "
        "graph memory), then empty the allocator cache",
        ("mutant-leaky-clear",),
        Doc(
            what="After clear_graph_opt_backend(), the graphs' memory is not back to the post-warm-up baseline: on a "
            "torch GPU the bytes allocated or reserved in the caching allocator's graph pools (resolution 4 KiB; "
            "buffers the engine keeps outside every capture, such as static inputs, are not graph memory), under "
            "host emulation the exact bytes of live graph outputs.",
            why="Output buffers kept past the clear pin the graph's memory pool: every weight cycle leaks a pool "
            "until the device runs out of memory.",
            bad="def clear_graph_opt_backend(self):\n    self.graphs.clear()  # self.outputs still holds their buffers",
            good="def clear_graph_opt_backend(self):\n    self.graphs.clear()\n    self.outputs.clear()",
        ),
        clean=_REFERENCE,
    ),
    Rule(
        "FDC303",
        E,
        "clear before capture or clear twice is not a safe no-op",
        ("fd_conformance.suite.test_clear.clear_each",),
        "make {call} a no-op when there is no backend or no graph yet (no AttributeError)",
        ("mutant-clear-raises-before-capture",),
        Doc(
            what="A wrapper's clear raises when called before any capture, or when called a second time.",
            why="Engines clear unconditionally (a safe runner does so on every weight sync): a clear that raises when "
            "there is nothing to clear crashes the first sync before capture.",
            bad="def clear_graph_opt_backend(self):\n    self.backend.clear()  # AttributeError before capture",
            good="def clear_graph_opt_backend(self):\n    if self.backend is not None:\n        self.backend.clear()",
        ),
        clean=_REFERENCE,
        emitted_by=(  # a real FastDeploy wrapper's or runner's clear that raised, and its table
            "fd_conformance.fastdeploy.wrappers_bridge",
            "fd_conformance.fastdeploy.real_runner",
            "fd_conformance.cli.fastdeploy",
        ),
    ),
    Rule(
        "FDC304",
        E,
        "outputs after the weight cycle differ from eager with the new weights",
        (f"{_SUITE}.test_weight_cycle.test_weight_cycle", f"{_SUITE}._support.compare_outputs"),
        "recapture graphs after every weight reload (update_parameters must call capture_model()): reloaded weights "
        "live at new addresses; an engine that keeps its graphs (in_place) must copy new weights into the captured "
        "tensors, derived ones (transposed, fused, quantised, scales) included; replay must return the same outputs as eager",
        ("mutant-update-without-recapture", "mutant-baked-token-ids"),
        Doc(
            what="After clear -> release -> reload -> recapture, a replay differs from the eager forward with the new "
            "weights (or refuses to replay stale buffers).",
            why="This is RL weight sync: a model that passes C1 but serves the old weights (or freed memory) after a "
            "sync trains on wrong rollouts without any error.",
            bad="def update_parameters(self, pid):\n    self.dynamic_weight_manager.update_parameters(pid)",
            good="def update_parameters(self, pid):\n    self.dynamic_weight_manager.update_parameters(pid)\n"
            "    self.capture_model()",
        ),
        clean=_REFERENCE,
        emitted_by=("fd_conformance.suite._in_place",),  # the in_place weight cycle
    ),
    Rule(
        "FDC305",
        E,
        "memory grows across weight-update cycles",
        (f"{_SUITE}.test_weight_cycle.test_weight_cycle",),
        "drop old graphs, output buffers and weight copies on every clear_parameters()",
        ("mutant-retain-old-weights",),
        Doc(
            what="Memory held after each weight cycle keeps growing over the cycles (beyond the resolution).",
            why="A leak per sync ends in an out-of-memory crash hours into RL training.",
            bad="def clear_parameters(self, pid):\n    self.old_weights.append(self.model.state_dict())  # kept forever\n    ...",
            good="def clear_parameters(self, pid):\n    self.model.clear_graph_opt_backend()\n"
            "    self.dynamic_weight_manager.clear_parameters(pid)",
        ),
        clean=_REFERENCE,
        emitted_by=("fd_conformance.suite._in_place",),  # the in_place weight cycle
    ),
    Rule(
        "FDC306",
        E,
        "a declared capture size has no graph of its own (main or draft): padded into a larger one, or none",
        (
            f"{_SUITE}.test_capture_replay.test_capture_replay",
            f"{_SUITE}._sizes.capture_size_findings",
            f"{_SUITE}._sizes.no_graph_findings",  # a model with a graph flag on and no graph at all
            f"{_SUITE}.test_teardown_order.require_graphs_for_flags",
            f"{_SUITE}.test_clear.capture_to_clear",
        ),
        "capture a graph for size {size} in capture_model() (or lazily on first use), or declare only the sizes the "
        "engine captures (the case's {field})",
        ("mutant-uncaptured-size",),
        Doc(
            what="The step of a declared capture size (main or draft) replays no graph, or only a larger size's graph "
            "it was padded into.",
            why="The declared size list is what the engine plans memory and batching by; a size without its own "
            "graph runs padded (slower, more memory) or eager, and the C1-C4 checks at that size test another graph.",
            bad="capture_sizes = (4, 2, 1)\n\ndef capture_model(self):\n    for size in (4, 2):  # 1 is never captured\n"
            "        self.capture(size)",
            good="capture_sizes = (4, 2, 1)\n\ndef capture_model(self):\n    for size in capture_sizes:\n"
            "        self.capture(size)",
        ),
        clean=_REFERENCE,
    ),
)
