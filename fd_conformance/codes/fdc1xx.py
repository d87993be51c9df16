"""FDC1xx: the static linter (fd_conformance.lint; one ``check_fdc1NN_*`` function per code in lint/rules.py)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E = Severity.ERROR
_RULES = "fd_conformance.lint.rules"
_FIXTURES = "tests/fixtures/lint/rules"

ENTRIES = (
    Rule(
        "FDC100",
        E,
        "source file could not be parsed, so no lint rule ran on it",
        (f"{_RULES}.check_fdc100_cannot_parse", f"{_RULES}.check_fdc100_cannot_read"),
        "make the file readable text (UTF-8 or its declared coding) that parses as Python; until then none of its rules ran",
        (f"{_FIXTURES}/fdc100_bad.py",),
        Doc(
            what="A file the linter could not read, decode or parse.",
            why="No rule ran on it; passing it silently would certify a file nobody checked.",
            bad="def clear_graph_opt_backend(self)\n    self.model.clear_graph_opt_backend()",
            good="def clear_graph_opt_backend(self):\n    self.model.clear_graph_opt_backend()",
        ),
        clean=(f"{_FIXTURES}/fdc101_good.py",),
    ),
    Rule(
        "FDC101",
        E,
        "weights released or comm group shut down before graphs are cleared",
        (f"{_RULES}.check_fdc101_release_before_clear",),
        "move the {clear}() call before {release}()",
        (f"{_FIXTURES}/fdc101_bad.py",),
        Doc(
            what="In one function, a graph clear that comes after a weight release or a communication-group shutdown "
            "(in source order, unless the two sit in different branches of one if).",
            why="A graph captured on those weights or that communicator is still alive when they go: the release "
            "frees memory a graph still points at, and NCCL's destroy waits forever on a graph that captured the "
            "communicator (the MTP hang).",
            bad="def clear_parameters(self, pid):\n    self.dynamic_weight_manager.clear_parameters(pid)\n"
            "    self.proposer.model.clear_graph_opt_backend()",
            good="def clear_parameters(self, pid):\n    self.proposer.model.clear_graph_opt_backend()\n"
            "    self.dynamic_weight_manager.clear_parameters(pid)",
        ),
        clean=(f"{_FIXTURES}/fdc101_good.py",),
    ),
    Rule(
        "FDC102",
        E,
        "draft graph clearing guarded by the main model's graph flag only",
        (f"{_RULES}.check_fdc102_draft_clear_under_main_flag",),
        "guard the draft clear by the draft's own flag (e.g. {draft_flag}) alone, outside the main one",
        (f"{_FIXTURES}/fdc102_bad.py",),
        Doc(
            what="A draft model's clear that runs only for one value of the main model's graph flag, with no other "
            "draft clear in the function covering the other value.",
            why="Main and draft graphs are switched by separate flags. With the main model's graphs off and the "
            "draft's on, the draft's graphs are never destroyed and survive the weight release.",
            bad="if self.use_cudagraph:\n    self.model.clear_graph_opt_backend()\n"
            "    self.proposer.model.clear_graph_opt_backend()",
            good="if self.use_cudagraph:\n    self.model.clear_graph_opt_backend()\n"
            "if self.draft_model_use_cudagraph:\n    self.proposer.model.clear_graph_opt_backend()",
        ),
        clean=(f"{_FIXTURES}/fdc102_good.py",),
    ),
    Rule(
        "FDC103",
        E,
        "a door releases a model's weights or a group while that model's graphs are alive on some path",
        (f"{_RULES}.check_fdc103_release_under_live_graphs",),
        "destroy {model}'s graphs (its clear_graph_opt_backend()) before {release} on every path, "
        "guarded by that model's own graph flag",
        (f"{_FIXTURES}/fdc103_bad.py",),
        Doc(
            what="An entry point of a class that owns graphs (a runner method nothing in the class calls: "
            "clear_parameters, sleep, ...) that releases weights or shuts down communication groups, directly, "
            "through the class's own helpers or through the weight manager it built, while the graphs of a "
            "model whose weights that release covers (the manager's model list: the draft too under MTP) are "
            "still alive on some path: the clear is missing there, or comes only after. Every value of the main "
            "graph flag, the speculative method and the draft's graph flag is followed; other conditions are "
            "taken both ways.",
            why="The defect this kit exists for, at every door and not only the one named clear_parameters: a "
            "graph alive when its weights go reads freed memory, and one alive when its group is shut down makes "
            "NCCL's destroy wait forever (the MTP hang). A door added later (sleep by tag) that forgets the "
            "draft's graphs is the same bug.",
            bad="def sleep(self, tags):\n    if self.use_cudagraph:\n        self.model.clear_graph_opt_backend()\n"
            "    self.dynamic_weight_manager.clear_model_weight()  # built with [self.model, self.proposer.model]",
            good="def sleep(self, tags):\n    if self.use_cudagraph:\n        self.model.clear_graph_opt_backend()\n"
            "    if self.spec_method == SpecMethod.MTP and self.draft_model_use_cudagraph:\n"
            "        self.proposer.model.clear_graph_opt_backend()\n"
            "    self.dynamic_weight_manager.clear_model_weight()",
        ),
        clean=(f"{_FIXTURES}/fdc103_good.py",),
    ),
)
