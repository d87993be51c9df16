"""Linter configuration: the names the static rules look for, read from ``[tool.fd-conformance.lint]``.

Every engine spells its wrappers, weight managers and graph flags a little differently, so the
names are data, not code. The table is a sub-table of ``[tool.fd-conformance]`` because the
parent table is shared with the pytest plugin; an unknown key *inside* it is a usage error
(a typo there would silently switch a rule off).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fd_conformance.codes.index import detected_in
from fd_conformance.errors import UsageError
from fd_conformance.findings import Severity
from fd_conformance.spelling import SPELLINGS

# tomllib is 3.11+; requires-python is >=3.10, where the same parser ships as tomli (a dependency
# there, see pyproject.toml). The sys.version_info test is what type checkers understand.
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

CLEAR_SPELLINGS = SPELLINGS  # (canonical, legacy): always graph-clear calls, whatever the config says

#: The codes the linter raises, read from the registry (a code with a detector in lint/rules.py);
#: severity overrides may only name these.
LINT_CODES = tuple(detected_in("fd_conformance.lint.rules"))

TABLE = ("tool", "fd-conformance", "lint")

#: Files above this many bytes are skipped with a notice, never parsed. ``ast.parse`` builds about
#: 150 bytes of node objects per byte of source (a 52 MB generated file peaked at 8 GB); the largest
#: hand-written Python file we found (torch's common_methods_invocations.py, 1.4 MB) is below it, what
#: is above is generated code (protobuf messages, API clients, tables), never a model wrapper.
#: Biome skips files above 1 MiB (``files.maxSize``) for the same reason.
MAX_FILE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class LintConfig:
    """Names (fnmatch patterns unless noted) the rules match against. Defaults fit FastDeploy 2.x."""

    # Class names that make a class an engine-facing wrapper (unless it is a building block, below).
    wrapper_patterns: tuple[str, ...] = ("*ForCausalLM", "*ForConditionalGeneration", "*MTP*")
    # Class names never treated as wrappers, by any route: weight-loading helpers share the
    # wrapper's prefix, and "*MTP*" also names the speculative-decoding machinery around the draft
    # (MTPProposer, MTPProposerCUDA, MTPSampler, ...).
    exclude_classes: tuple[str, ...] = ("*PretrainedModel", "*Proposer*", "*Sampler", "*Config", "*Runner")
    # Names of model *building blocks*: layers, heads, embeddings, and the inner backbone "XModel"
    # a wrapper holds. A class so named is never a wrapper by name pattern alone (Glm4MTPLayer,
    # Ernie4_5_MTPModel); a registered class or a subclass of a wrapper base still is one: the
    # engine instantiates it as a model.
    block_patterns: tuple[str, ...] = (
        "*Model",
        "*Layer",
        "*Block",
        "*Head",
        "*Embedding",
        "*Embeddings",
        "*Attention",
        "*MLP",
        "*Norm",
        "*Linear",
        "*Projection",
        "*Projector",
        "*Encoder",
        "*Decoder",
        "*Pooler",
        "*LayerList",
        "*ModuleList",
        "*Sequential",
        "*Proposer*",
    )
    # Direct base names that make a class a building block too (class MTPHead(nn.Linear), class
    # FooMTPPredictor(FooMTPLayer)); the framework roots Layer and Module never count. Not
    # "*Model": wrappers commonly derive from a "*PreTrainedModel" base.
    block_bases: tuple[str, ...] = (
        "*Layer",
        "*Block",
        "*Head",
        "*Embedding",
        "*Attention",
        "*MLP",
        "*Norm",
        "*Linear",
        "*Projection",
        "*LayerList",
        "*ModuleList",
        "*Sequential",
    )
    # Base-class names (exact) whose subclasses are wrappers; FastDeploy spells it "Casual".
    wrapper_bases: tuple[str, ...] = ("ModelForCasualLM", "ModelForCausalLM")
    # Decorator names (exact, any receiver) that register a wrapper with the engine.
    register_decorators: tuple[str, ...] = ("register_model_class",)
    # Decorator names (exact) that add the clear method at import time (FastDeploy's GraphOptWrapper).
    graph_opt_decorators: tuple[str, ...] = ("support_graph_optimization",)
    # Calls (exact method/function names) that free weights or shut down communication.
    release_calls: tuple[str, ...] = (
        "clear_parameters",
        "_clear_data",
        "clear_model_weight",
        "shutdown_process_group",
        "destroy_process_group",
        "clear_communication_group",
    )
    # Of those, the calls that shut down communication groups (a graph of ANY model may have
    # captured a collective on them); the others release weights.
    group_release_calls: tuple[str, ...] = ("shutdown_process_group", "destroy_process_group", "clear_communication_group")
    # Calls (exact names) that destroy captured graphs; both clear spellings are always included.
    graph_clear_calls: tuple[str, ...] = CLEAR_SPELLINGS
    # Receiver attribute names that hold a draft / speculative model.
    draft_receivers: tuple[str, ...] = ("proposer", "*draft*", "mtp", "*_mtp", "mtp_*", "drafter")
    # Class names (fnmatch) that own a draft model: inside their methods ``self.model`` (any
    # attribute of ``self`` not named ``*main*``) is the draft, e.g. MTPProposer.clear_mtp_graphs.
    draft_owner_classes: tuple[str, ...] = ("*Proposer*",)
    # Flags that switch the *main* model's graphs on.
    main_flags: tuple[str, ...] = ("use_cudagraph",)
    # Flags that switch the *draft* model's graphs on.
    draft_flags: tuple[str, ...] = ("draft_model_use_cudagraph", "draft_*cudagraph*", "*draft*_use_cudagraph")
    # Flags (exact names) that say some speculative method is on (true whenever a draft model is).
    speculative_switches: tuple[str, ...] = ("speculative_decoding",)
    # Attributes (exact names) holding the speculative method, compared with a draft method below.
    speculative_method_names: tuple[str, ...] = ("spec_method", "speculative_method", "method")
    # Speculative methods (lower case) that run a draft MODEL with graphs of its own.
    draft_methods: tuple[str, ...] = ("mtp",)
    # Path globs (relative to the scan root, POSIX) to skip, e.g. "tests/fixtures/*".
    exclude: tuple[str, ...] = ()
    # Per-code severity overrides: {"FDC002": "error"}.
    severity: dict[str, Severity] = field(default_factory=dict)
    # Files larger than this many bytes are skipped with a one-line notice, never parsed (generated
    # code; parsing costs ~150x its size in memory). Raise it to lint such a file anyway.
    max_file_bytes: int = MAX_FILE_BYTES
    # Where the settings came from, for messages.
    source: str = "<defaults>"

    @property
    def all_graph_clear_calls(self) -> frozenset[str]:
        return frozenset(self.graph_clear_calls) | frozenset(CLEAR_SPELLINGS)


_INT_KEYS = {"max-file-bytes": "max_file_bytes"}  # whole numbers >= 1
_LIST_KEYS = {
    f.name.replace("_", "-"): f.name for f in fields(LintConfig) if f.name not in ("severity", "source", *_INT_KEYS.values())
}


def config_from_mapping(table: dict[str, Any], source: str) -> LintConfig:
    """Validate a TOML table into a config; every error names the key and the file it came from."""
    kwargs: dict[str, Any] = {"source": source}
    for key, value in table.items():
        if key == "severity":
            kwargs["severity"] = _severity_table(value, source)
            continue
        if key in _INT_KEYS:
            kwargs[_INT_KEYS[key]] = _whole_number(key, value, source)
            continue
        attr = _LIST_KEYS.get(key)
        if attr is None:
            known = ", ".join(sorted([*_LIST_KEYS, *_INT_KEYS, "severity"]))
            raise UsageError(f"unknown lint setting {key!r} in {source}", f"use one of: {known}")
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise UsageError(
                f"lint setting {key!r} in {source} must be a list of non-empty strings, got {value!r}",
                f'write it as {key} = ["name", ...]',
            )
        kwargs[attr] = tuple(value)
    return LintConfig(**kwargs)


def _whole_number(key: str, value: Any, source: str) -> int:
    """A TOML integer >= 1 (never a bool, which TOML keeps apart but Python's int admits)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(
            f"lint setting {key!r} in {source} must be a whole number >= 1, got {value!r}", f"write it as {key} = 4194304"
        )
    return value


def _severity_table(value: Any, source: str) -> dict[str, Severity]:
    if not isinstance(value, dict):
        raise UsageError(f"lint setting 'severity' in {source} must be a table", 'write severity = { FDC002 = "error" }')
    result: dict[str, Severity] = {}
    for code, level in value.items():
        if code not in LINT_CODES:
            raise UsageError(
                f"severity override for unknown lint code {code!r} in {source}", f"use one of {', '.join(LINT_CODES)}"
            )
        if level not in ("error", "warning"):
            raise UsageError(f"severity for {code} in {source} is {level!r}", 'use "error" or "warning"')
        result[code] = Severity(level)
    return result


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as err:
        raise UsageError(
            f"cannot read config file {path}: {err.strerror}", "pass an existing readable TOML file to --config"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"config file {path} is not valid TOML: {err}", "fix the TOML syntax") from None


def _lint_table(data: dict[str, Any], path: Path) -> dict[str, Any] | None:
    node: Any = data
    for part in TABLE:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    if not isinstance(node, dict):
        raise UsageError(f"[{'.'.join(TABLE)}] in {path} is not a table", "make it a TOML table of lint settings")
    return node


def load_config(start: Path | None = None, config_file: Path | None = None) -> LintConfig:
    """``--config FILE`` wins; else the nearest pyproject.toml at or above ``start``; else defaults.

    A ``--config`` file may be a pyproject.toml (the ``[tool.fd-conformance.lint]`` table is read)
    or a plain TOML file whose top-level keys are the lint settings.
    """
    if config_file is not None:
        data = _read_toml(config_file)
        table = _lint_table(data, config_file)
        if table is None:
            table = {} if "tool" in data else data
        return config_from_mapping(table, str(config_file))
    here = (start or Path.cwd()).resolve()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            table = _lint_table(_read_toml(candidate), candidate)
            return config_from_mapping(table or {}, str(candidate))
    return LintConfig()
