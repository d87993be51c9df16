"""C6 on FastDeploy's real config: the kit's Hypothesis search over raw graph-opt settings,
each built into a real ``FDConfig`` (whose constructor runs FastDeploy's post-processing).

Configs are built the way FastDeploy's own tests build them (``tests/utils.py``,
``tests/utils/test_config.py``): each sub-config from an ``args`` dict, a namespace model config,
``test_mode=True``, ``get_host_ip`` and ``current_platform`` patched, the platform reporting CUDA
(FastDeploy switches graphs off on any other platform, which would make every rule vacuous).
Keyword arguments the checkout's ``FDConfig`` does not take are left out, so older and newer
trees build alike. A raw config FastDeploy refuses (its constructor raises) is a rejection,
counted and shown, never a violation: refusing a bad combination is a correct answer.

One search per error rule (FDC401-FDC405), so every invariant FastDeploy breaks gets its own
minimal failing config, and one search for the warning (FDC406).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Collection
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import ModuleType, SimpleNamespace
from typing import Any
from unittest import mock

from fd_conformance.config_rules import (
    CONFIG_CHECKS,
    InvariantViolation,
    RawGraphOptConfig,
    assert_postprocessor_preserves_invariants,
    find_config_warnings,
)
from fd_conformance.fastdeploy.checkout import Checkout, import_module
from fd_conformance.fastdeploy.stand_ins import MissingDependency
from fd_conformance.findings import RULES

CONFIG_MODULE = "fastdeploy.config"
#: What a refused raw config is judged as: graphs off, so no rule can fire on it.
REJECTED = SimpleNamespace(graph_opt_config=SimpleNamespace(use_cudagraph=False))


class CudaPlatform:
    """Stands in for ``fastdeploy.config.current_platform``: CUDA, and nothing else."""

    def is_cuda(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Callable[[], bool]:
        if name.startswith("is_"):
            return lambda: False
        raise AttributeError(name)


@dataclass
class ConfigRow:
    code: str
    title: str
    minimal: str | None = None  # RawGraphOptConfig(...) of the minimal failing example
    message: str = ""
    severity: str = "error"


@dataclass
class ConfigReport:
    where: str
    rows: list[ConfigRow] = field(default_factory=list)
    built: int = 0
    rejected: int = 0
    first_rejection: str = ""
    seconds: float = 0.0
    error: str | None = None

    @property
    def violations(self) -> int:
        return sum(1 for r in self.rows if r.minimal is not None and r.severity == "error")


def _args(raw: RawGraphOptConfig) -> dict[str, dict[str, Any]]:
    """The per-sub-config ``args`` dicts of one raw config (FastDeploy's own key names)."""
    return {
        "GraphOptimizationConfig": {
            "use_cudagraph": raw.use_cudagraph,
            "cudagraph_only_prefill": raw.cudagraph_only_prefill,
            "graph_opt_level": raw.graph_opt_level,
            "cudagraph_capture_sizes": None if raw.cudagraph_capture_sizes is None else list(raw.cudagraph_capture_sizes),
        },
        "SchedulerConfig": {"splitwise_role": raw.splitwise_role, "max_num_seqs": raw.max_num_seqs},
        "CacheConfig": {"num_cpu_blocks": raw.num_cpu_blocks},
        # FastDeploy derives use_sequence_parallel_moe from expert parallelism with TP > 1.
        "ParallelConfig": {
            "tensor_parallel_size": raw.tensor_parallel_size,
            "enable_expert_parallel": raw.use_sequence_parallel_moe,
            "use_sequence_parallel_moe": raw.use_sequence_parallel_moe,
        },
        "LoadConfig": {"dynamic_load_weight": raw.dynamic_load_weight},
        "SpeculativeConfig": {"method": raw.speculative_method, "num_speculative_tokens": raw.num_speculative_tokens},
    }


def _model_config(module: ModuleType) -> SimpleNamespace:
    moe_phase = getattr(module, "MoEPhase", None)
    return SimpleNamespace(
        max_model_len=512,
        architectures=["test_model"],
        mm_max_tokens_per_item=None,
        enable_mm=False,
        model_format="paddle",
        first_k_dense_replace=0,
        version="init",
        moe_phase=moe_phase() if moe_phase else None,
    )


def make_builder(module: ModuleType, model_config: Callable[[], Any] | None = None) -> Callable[[RawGraphOptConfig], Any]:
    """raw config -> the checkout's post-processed FDConfig (or :data:`REJECTED`); ``model_config``
    makes the model config (default: the namespace the config rules need, no model fields)."""
    accepted = set(inspect.signature(module.FDConfig.__init__).parameters)
    keyword = {
        "GraphOptimizationConfig": "graph_opt_config",
        "SchedulerConfig": "scheduler_config",
        "CacheConfig": "cache_config",
        "ParallelConfig": "parallel_config",
        "LoadConfig": "load_config",
        "SpeculativeConfig": "speculative_config",
    }

    def build(raw: RawGraphOptConfig) -> Any:
        kwargs: dict[str, Any] = {"model_config": model_config() if model_config else _model_config(module), "test_mode": True}
        for cls_name, args in _args(raw).items():
            if cls_name == "SpeculativeConfig" and raw.speculative_method is None:
                continue
            cls = getattr(module, cls_name, None)
            if cls is not None and keyword[cls_name] in accepted:
                kwargs[keyword[cls_name]] = cls(args)
        with ExitStack() as stack:
            stack.enter_context(mock.patch.object(module, "current_platform", CudaPlatform(), create=True))
            if hasattr(module, "get_host_ip"):
                stack.enter_context(mock.patch.object(module, "get_host_ip", lambda: "127.0.0.1"))
            return module.FDConfig(**{k: v for k, v in kwargs.items() if k in accepted})

    return build


def check_config_module(
    module: ModuleType, *, max_examples: int = 200, where: str = CONFIG_MODULE, codes: Collection[str] | None = None
) -> ConfigReport:
    """Search the rules (all, or ``codes``) against ``module``'s FDConfig; one row per rule code."""
    report = ConfigReport(where)
    started = time.perf_counter()
    build = make_builder(module)

    def postprocess(raw: RawGraphOptConfig) -> Any:
        report.built += 1
        try:
            return build(raw)
        except MissingDependency:  # a stood-in module used while building: the check needs it (exit 6)
            raise
        except Exception as err:  # FastDeploy refused this raw config: a rejection, not a violation
            report.rejected += 1
            report.first_rejection = report.first_rejection or f"{type(err).__name__}: {err}"[:160]
            return REJECTED

    def identity(raw: RawGraphOptConfig) -> RawGraphOptConfig:
        return raw

    for code in (c for c in CONFIG_CHECKS if codes is None or c in codes):
        row = ConfigRow(code, RULES[code].title, severity=RULES[code].severity.value)
        if row.severity == "error":
            try:
                assert_postprocessor_preserves_invariants(postprocess, build=identity, codes=[code], max_examples=max_examples)
            except InvariantViolation as violation:
                _fill(row, violation, code)
        else:
            warning = find_config_warnings(postprocess, build=identity, max_examples=max_examples)
            if warning is not None and any(f.code == code for f in warning.findings):
                _fill(row, warning, code)
        report.rows.append(row)
    report.seconds = time.perf_counter() - started
    return report


def _fill(row: ConfigRow, violation: InvariantViolation, code: str) -> None:
    row.minimal = violation.raw.describe()
    found = [f.message for f in violation.findings if f.code == code]
    row.message = found[0] if found else str(violation)


def check_checkout_config(checkout: Checkout, *, max_examples: int = 200, codes: Collection[str] | None = None) -> ConfigReport:
    """C6 on the checkout's ``fastdeploy.config``; an import failure is this table's error."""
    try:
        module = import_module(CONFIG_MODULE, checkout)
    except MissingDependency:
        raise
    except Exception as err:
        report = ConfigReport(CONFIG_MODULE)
        report.error = f"could not import {CONFIG_MODULE}: {type(err).__name__}: {err}"
        return report
    return check_config_module(module, max_examples=max_examples, codes=codes)
