"""FDC0xx: the GraphOptModel protocol (fd_conformance.protocol; FDC001/2/4 also statically, by lint/)."""

from __future__ import annotations

from fd_conformance.codes.entry import Doc, Rule, Severity

E, W = Severity.ERROR, Severity.WARNING
_CHECKS = "fd_conformance.protocol.checks"  # one check_fdc00N_* per code, run in checks.CHECKS order
_FIXTURES = "tests/fixtures/protocol"
_ALIAS = "fd_conformance.protocol.alias"  # install_legacy_alias refuses FDC001/003/006 classes

ENTRIES = (
    Rule(
        "FDC001",
        E,
        "model wrapper has no clear_graph_opt_backend() under either spelling",
        (f"{_CHECKS}.check_fdc001_no_reachable_clear", "fd_conformance.lint.rules.check_fdc001_wrapper_without_clear"),
        "give {cls} a `def clear_graph_opt_backend(self) -> None:` that the engine's call reaches (own or inherited; "
        "a forwarding shim in the way must forward to a name that exists, e.g. `super().clear_graph_opt_backend()`) "
        "and that destroys every graph it owns, e.g. `self.model.clear_graph_opt_backend()` for a wrapper around a "
        "@support_graph_optimization model",
        ("mutant-qwen3-vl-without-clear", f"{_FIXTURES}/fdc001_bad.py", "tests/fixtures/lint/rules/fdc001_bad.py"),
        Doc(
            what="An engine-facing model wrapper whose clear_graph_opt_backend() the engine cannot reach: none under "
            "either spelling, own or inherited; only forwarding shims with nothing to forward to; or a shim in the "
            "way of the real body that forwards to a missing name or loops.",
            why="Before RL weight sync the engine destroys every captured graph through this method. Without it the "
            "call raises AttributeError (or recurses), the graphs stay alive across the weight release, and the next "
            "replay reads freed memory or the NCCL teardown hangs.",
            bad="class AcmeForCausalLM(ModelForCasualLM):\n    def forward(self, ids):\n        return self.model(ids)",
            good="class AcmeForCausalLM(ModelForCasualLM):\n    def forward(self, ids):\n        return self.model(ids)\n\n"
            "    def clear_graph_opt_backend(self) -> None:\n        self.model.clear_graph_opt_backend()",
        ),
        clean=("torch-qwen3-vl", f"{_FIXTURES}/fdc001_good.py", "tests/fixtures/lint/rules/fdc001_good.py"),
        emitted_by=(
            _ALIAS,  # refuses to alias a class without a clear, with this code's hint
            "fd_conformance.suite._support",  # skips a lifecycle check the protocol check reports
            "fd_conformance.fastdeploy.wrappers_bridge",  # a real FastDeploy wrapper judged by class
            "fd_conformance.fastdeploy.real_runner",  # the real runner's call to a missing clear
        ),
    ),
    Rule(
        "FDC002",
        W,
        "legacy spelling clear_grpah_opt_backend used",
        (f"{_CHECKS}.check_fdc002_legacy_only", "fd_conformance.lint.rules.check_fdc002_legacy_spelling"),
        "rename clear_grpah_opt_backend to clear_graph_opt_backend (`fd-conformance lint --fix` does it and keeps a "
        "`clear_grpah_opt_backend = clear_graph_opt_backend` alias for old callers)",
        ("mutant-glm4-moe-legacy-spelling", f"{_FIXTURES}/fdc002_bad.py", "tests/fixtures/lint/rules/fdc002_bad.py"),
        Doc(
            what="A definition or call of the legacy misspelling clear_grpah_opt_backend.",
            why="It conforms through the kit's alias, but an engine without the alias calls clear_graph_opt_backend() "
            "and crashes, or skips clearing, on a model that only has the old name.",
            bad="def clear_grpah_opt_backend(self):\n    self.model.clear_grpah_opt_backend()",
            good="def clear_graph_opt_backend(self):\n    self.model.clear_graph_opt_backend()\n\n"
            "clear_grpah_opt_backend = clear_graph_opt_backend  # only while old callers remain",
        ),
        clean=("torch-glm4-moe", f"{_FIXTURES}/fdc002_good.py", "tests/fixtures/lint/rules/fdc002_good.py"),
        emitted_by=("fd_conformance.lint.fix",),  # --fix leaves a line whose noqa names this code
    ),
    Rule(
        "FDC003",
        E,
        "both spellings defined with different bodies",
        (f"{_CHECKS}.check_fdc003_split_bodies", "fd_conformance.suite.test_protocol.test_protocol"),
        "keep one body in clear_graph_opt_backend and make clear_grpah_opt_backend a shim "
        "(`clear_grpah_opt_backend = clear_graph_opt_backend`), or delete clear_grpah_opt_backend",
        (f"{_FIXTURES}/fdc003_bad.py",),
        Doc(
            what="A class whose two spellings reach different methods (two real bodies, not one body and a shim).",
            why="Callers of one spelling skip the other's clearing: the engine clears the main graphs through one name "
            "while the draft's are destroyed only under the other, and they survive the weight release.",
            bad="def clear_graph_opt_backend(self):\n    self.model.clear_graph_opt_backend()\n\n"
            "def clear_grpah_opt_backend(self):\n    self.mtp.clear_graph_opt_backend()",
            good="def clear_graph_opt_backend(self):\n    self.model.clear_graph_opt_backend()\n"
            "    self.mtp.clear_graph_opt_backend()\n\nclear_grpah_opt_backend = clear_graph_opt_backend",
        ),
        clean=(f"{_FIXTURES}/fdc003_good.py",),
        emitted_by=(_ALIAS,),
    ),
    Rule(
        "FDC004",
        E,
        "near-miss misspelling of the clear method",
        (f"{_CHECKS}.check_fdc004_near_miss", "fd_conformance.lint.rules.check_fdc004_near_miss"),
        "rename {name} to clear_graph_opt_backend (keep a {name} alias only if other code calls it)",
        (f"{_FIXTURES}/fdc004_bad.py", "tests/fixtures/lint/rules/fdc004_bad.py"),
        Doc(
            what="A name within two edits of either spelling that is neither (clear_graph_opt_backed, "
            "Clear_graph_opt_backend); underscore-wrapped private helpers are not counted.",
            why="The engine looks the method up by its exact name, so a typo is a wrapper without the method: its "
            "graphs are never destroyed, and nothing fails until the weight sync.",
            bad="def clear_graph_opt_backed(self):\n    self.model.clear_graph_opt_backend()",
            good="def clear_graph_opt_backend(self):\n    self.model.clear_graph_opt_backend()",
        ),
        clean=(f"{_FIXTURES}/fdc004_good.py", "tests/fixtures/lint/rules/fdc004_good.py"),
    ),
    Rule(
        "FDC005",
        E,
        "clear method requires arguments",
        (f"{_CHECKS}.check_fdc005_requires_arguments",),
        "give {params} defaults or read them from self (e.g. self.fd_config), so `model.clear_graph_opt_backend()` works",
        (f"{_FIXTURES}/fdc005_bad.py",),
        Doc(
            what="A clear method (or an instance attribute under its name) whose no-argument call leaves a parameter unfilled.",
            why="The engine calls clear_graph_opt_backend() with no arguments, so clearing raises TypeError and the "
            "graphs stay alive.",
            bad="def clear_graph_opt_backend(self, fd_config):\n    self.model.clear_graph_opt_backend(fd_config=fd_config)",
            good="def clear_graph_opt_backend(self):\n    self.model.clear_graph_opt_backend(fd_config=self.fd_config)",
        ),
        clean=(f"{_FIXTURES}/fdc005_good.py",),
        emitted_by=("fd_conformance.fastdeploy.wrappers_bridge",),  # a real FastDeploy wrapper judged by class
    ),
    Rule(
        "FDC006",
        E,
        "attribute under the clear method's name is not callable",
        (f"{_CHECKS}.check_fdc006_not_callable",),
        "define `def clear_graph_opt_backend(self) -> None:` and assign no other value to {spelling}; a descriptor "
        "there must bind to a callable that takes no arguments",
        (f"{_FIXTURES}/fdc006_bad.py",),
        Doc(
            what="What the engine's call gets under either spelling cannot be called: a plain value (None, a flag), a "
            "descriptor that binds to a non-callable, or one whose binding raises.",
            why="The engine's clear call raises TypeError (or the descriptor's error) before anything is cleared.",
            bad="class Wrapper(nn.Module):\n    clear_graph_opt_backend = None  # filled in later, maybe",
            good="class Wrapper(nn.Module):\n    def clear_graph_opt_backend(self) -> None:\n"
            "        self.model.clear_graph_opt_backend()",
        ),
        clean=(f"{_FIXTURES}/fdc006_good.py",),
        emitted_by=(_ALIAS,),
    ),
)
