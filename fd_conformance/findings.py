"""Findings: the one result type every check in the kit returns.

Protocol checks, the static linter, lifecycle rules, suite checks and config rules all
speak in findings, so reports, exit codes and suppression work the same everywhere.
Codes are stable: CI configs and ``# noqa`` comments refer to them, so never renumber.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any


class Severity(str, enum.Enum):
    """How a finding gates CI: errors fail the run, warnings are reported only."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Location:
    """Where a finding points: a source position, or an object/event when there is no file."""

    path: str | None = None
    line: int | None = None
    col: int | None = None
    obj: str | None = None

    def __str__(self) -> str:
        if self.path is not None:
            parts = [self.path]
            if self.line is not None:
                parts.append(str(self.line))
                if self.col is not None:
                    parts.append(str(self.col))
            where = ":".join(parts)
            return f"{where} ({self.obj})" if self.obj else where
        return self.obj or "<unknown>"


@dataclass(frozen=True)
class Finding:
    """One violation (or warning) of the graph-opt contract."""

    code: str
    severity: Severity
    message: str
    hint: str
    location: Location = Location()

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def format(self) -> str:
        """``where: CODE message (hint)`` -- one line, as compilers and linters print."""
        return f"{self.location}: {self.code} {self.message} (fix: {self.hint})"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


@dataclass(frozen=True)
class Rule:
    """A documented finding code: the README's table is generated from the registry below."""

    code: str
    severity: Severity
    title: str
    where: str  # which part of the kit raises it (protocol, lint, ...); for lint, "lint: <function in lint/rules.py>"


RULES: dict[str, Rule] = {}


def register_rule(code: str, severity: Severity, title: str, where: str) -> Rule:
    """Declare a code once; raising an undeclared code is a bug caught by the kit's tests."""
    rule = Rule(code, severity, title, where)
    existing = RULES.get(code)
    if existing is not None and existing != rule:
        raise ValueError(f"finding code {code} registered twice with different meanings")
    RULES[code] = rule
    return rule


def make_finding(code: str, message: str, hint: str, location: Location = Location()) -> Finding:
    """Build a finding whose severity comes from the rule registry (one source of truth)."""
    try:
        rule = RULES[code]
    except KeyError:
        raise KeyError(f"finding code {code} is not registered; add it with register_rule()") from None
    return Finding(code, rule.severity, message, hint, location)


E, W = Severity.ERROR, Severity.WARNING

# Protocol (fd_conformance.protocol) -- also raised by the linter where the concept is static.
register_rule(
    "FDC001",
    E,
    "model wrapper has no clear_graph_opt_backend() under either spelling",
    "protocol, lint: check_fdc001_wrapper_without_clear",
)
register_rule("FDC002", W, "legacy spelling clear_grpah_opt_backend used", "protocol, lint: check_fdc002_legacy_spelling")
register_rule("FDC003", E, "both spellings defined with different bodies", "protocol")
register_rule("FDC004", E, "near-miss misspelling of the clear method", "protocol, lint: check_fdc004_near_miss")
register_rule("FDC005", E, "clear method requires arguments", "protocol")
register_rule("FDC006", E, "attribute under the clear method's name is not callable", "protocol")
# Static rules (fd_conformance.lint): ``where`` names the function in fd_conformance/lint/rules.py.
register_rule(
    "FDC100",
    E,
    "source file could not be parsed, so no lint rule ran on it",
    "lint: check_fdc100_cannot_parse and check_fdc100_cannot_read",
)
register_rule(
    "FDC101", E, "weights released or comm group shut down before graphs are cleared", "lint: check_fdc101_release_before_clear"
)
register_rule(
    "FDC102",
    E,
    "draft graph clearing guarded by the main model's graph flag only",
    "lint: check_fdc102_draft_clear_under_main_flag",
)
# Lifecycle rules over recorded runtime calls (fd_conformance.lifecycle).
register_rule("FDC201", E, "graph alive when a parameter it captured is released", "lifecycle")
register_rule("FDC202", E, "graph alive when a comm group it captured is shut down", "lifecycle")
register_rule("FDC203", E, "graph still alive after clear_graph_opt_backend() or the runner's clear_parameters()", "lifecycle")
register_rule("FDC204", E, "graph replayed after its captured buffers were released or replaced", "lifecycle")
register_rule(
    "FDC205",
    W,
    "runner's clear_parameters() strands graphs when a graph flag is switched off after capture (flags fixed by config)",
    "lifecycle",
)
register_rule(
    "FDC206",
    E,
    "runner's clear_parameters() strands graphs when a graph flag is switched off after capture (flags switch at run time)",
    "lifecycle",
)
# Suite checks on a real runtime (fd_conformance.suite).
register_rule("FDC301", E, "graph replay differs from eager forward", "suite")
register_rule("FDC302", E, "graph memory not returned after clear", "suite")
register_rule("FDC303", E, "clear before capture or clear twice is not a safe no-op", "suite")
register_rule("FDC304", E, "outputs after the weight cycle differ from eager with the new weights", "suite")
register_rule("FDC305", E, "memory grows across weight-update cycles", "suite")
register_rule(
    "FDC306", E, "a declared capture size has no graph of its own (main or draft): padded into a larger one, or none", "suite"
)
# Config invariants (fd_conformance.config_rules).
register_rule("FDC401", E, "prefill CUDA graphs on while a CPU cache swaps layer by layer (num_cpu_blocks > 0)", "config")
register_rule("FDC402", E, "capture sizes in use not unique, positive and sorted descending, or empty with graphs on", "config")
register_rule("FDC403", E, "MTP decode capture sizes not multiples of the tokens per step (num_speculative_tokens + 1)", "config")
register_rule("FDC404", E, "static graph (graph_opt_level > 0) with RL dynamic weight loading", "config")
register_rule("FDC405", E, "capture size not divisible by the TP size under sequence-parallel MoE (hangs)", "config")
register_rule("FDC406", W, "capture sizes malformed (as FDC402) in a list not in use: its graphs are off", "config")
# Isolation (fd_conformance.isolation).
register_rule("FDC501", E, "check hung and was killed by the watchdog", "isolation")
register_rule("FDC502", E, "check's worker process crashed", "isolation")
# Tensor parallelism (fd_conformance.distributed.capture_plan): checked BEFORE capturing, so a bad plan is a
# finding instead of ranks deadlocked in mismatched collectives.
register_rule("FDC601", E, "TP ranks plan to capture graphs in different orders (their collectives would deadlock)", "tp")
register_rule("FDC602", E, "a TP rank's capture plan is not in descending size order per model", "tp")
register_rule("FDC603", E, "a TP rank did not publish its capture plan in time (absent, hung or crashed)", "tp")


def rules_markdown() -> str:
    """The finding-code table for the README (a test keeps the README in sync with this)."""
    lines = ["| code | severity | raised by | meaning |", "|---|---|---|---|"]
    for rule in sorted(RULES.values(), key=lambda r: r.code):
        lines.append(f"| {rule.code} | {rule.severity.value} | {rule.where} | {rule.title} |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - `python -m fd_conformance.findings` prints the table
    print(rules_markdown())
