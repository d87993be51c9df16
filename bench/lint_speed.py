"""Linter throughput on a generated tree of model-like files (target: >= 500 files/s).

Why generated: a FastDeploy checkout is not available offline; the files mimic its shapes
(decorated inner model, registered wrapper with a delegating clear, a runner with guarded
clears and a weight release) at about the size of a real model file.

    python bench/lint_speed.py [--files 2000] [--keep DIR] [--jobs N] [--changed 20] [--quick]

Prints files/s wall and per CPU-second (children included) and the 1-minute load average, for
the full tree and for a pre-commit-style run over a few files with the tree as context.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from _quick import add_quick

from fd_conformance.lint import LintConfig, LintResult, lint_paths

TEMPLATE = '''\
"""Generated model module {i}."""

from typing import Dict

import paddle
from paddle import nn

from fastdeploy.model_executor.graph_optimization.decorator import support_graph_optimization
from fastdeploy.model_executor.models.model_base import ModelForCasualLM, ModelRegistry


class Model{i}Attention(nn.Layer):
    def __init__(self, fd_config, layer_id: int, prefix: str = "") -> None:
        super().__init__()
        self.qkv_proj = nn.Linear(fd_config.hidden_size, 3 * fd_config.hidden_size)
        self.o_proj = nn.Linear(fd_config.hidden_size, fd_config.hidden_size)
        self.layer_id = layer_id

    def forward(self, forward_meta, hidden_states):
        qkv_out = self.qkv_proj(hidden_states)
        q, k, v = qkv_out.split(3, axis=-1)
        attn = paddle.matmul(q, k, transpose_y=True) / (q.shape[-1] ** 0.5)
        attn = paddle.nn.functional.softmax(attn, axis=-1)
        return self.o_proj(paddle.matmul(attn, v))


class Model{i}DecoderLayer(nn.Layer):
    def __init__(self, fd_config, prefix: str = "") -> None:
        super().__init__()
        self.self_attn = Model{i}Attention(fd_config, layer_id=0, prefix=f"{{prefix}}.self_attn")
        self.mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8))
        self.input_layernorm = nn.LayerNorm(8)
        self.post_attention_layernorm = nn.LayerNorm(8)

    def forward(self, forward_meta, hidden_states, residual=None):
        if residual is None:
            residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = self.self_attn(forward_meta=forward_meta, hidden_states=hidden_states)
        hidden_states = hidden_states + residual
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        return self.mlp(hidden_states) + residual, residual


@support_graph_optimization
class Model{i}Model(nn.Layer):
    def __init__(self, fd_config=None) -> None:
        super().__init__()
        self.num_layers = fd_config.model_config.num_hidden_layers
        self.layers = nn.LayerList([Model{i}DecoderLayer(fd_config, prefix=f"model.layers.{{j}}") for j in range(2)])
        self.norm = nn.LayerNorm(8)

    def forward(self, ids_remove_padding, forward_meta):
        hidden_states = self.embed_tokens(ids_remove_padding)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(forward_meta, hidden_states, residual)
        return self.norm(hidden_states)


@ModelRegistry.register_model_class(architecture="Model{i}ForCausalLM", module_name="model_{i}")
class Model{i}ForCausalLM(ModelForCasualLM):
    def __init__(self, fd_config) -> None:
        super(Model{i}ForCausalLM, self).__init__(fd_config)
        self.model = Model{i}Model(fd_config=fd_config)
        self.lm_head = nn.Linear(8, 100)

    @paddle.no_grad()
    def set_state_dict(self, state_dict: Dict[str, paddle.Tensor]) -> None:
        for name, weight in state_dict.items():
            if name.startswith("lm_head"):
                self.lm_head.weight.set_value(weight)

    def compute_logits(self, hidden_states, forward_meta=None):
        logits = self.lm_head(hidden_states).astype(paddle.float32)
        logits[:, 100:] = -float("inf")
        return logits

    def forward(self, ids_remove_padding, forward_meta):
        return self.model(ids_remove_padding=ids_remove_padding, forward_meta=forward_meta)

    def clear_grpah_opt_backend(self):
        """Clear graph optimization backend, the captured cuda graph will be cleaned"""
        self.model.clear_grpah_opt_backend(fd_config=self.fd_config)


class Runner{i}:
    def clear_parameters(self, pid):
        if self.use_cudagraph:
            self.model.clear_graph_opt_backend()
        if self.spec_method == "mtp" and self.graph_opt_config.draft_model_use_cudagraph:
            self.proposer.model.clear_graph_opt_backend()
        self.dynamic_weight_manager.clear_parameters(pid, self.shutdown_comm_group_if_worker_idle)
        paddle.device.cuda.empty_cache()

    def update_parameters(self, pid):
        self.dynamic_weight_manager.update_parameters(pid)
        self.initialize_kv_cache()
        if self.use_cudagraph:
            self.capture_model()
'''


def generate(root: Path, count: int) -> None:
    for i in range(count):
        sub = root / f"pkg{i // 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"model_{i}.py").write_text(TEMPLATE.format(i=i), encoding="utf-8")


def _cpu() -> float:
    """CPU seconds of this process and its reaped children (the --jobs workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _measure(label: str, paths: list[Path], root: Path, **kwargs: object) -> LintResult:
    start, cpu_start, load = time.perf_counter(), _cpu(), os.getloadavg()[0]
    result = lint_paths(paths, LintConfig(), root=root, **kwargs)  # type: ignore[arg-type]
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu_start
    assert not any(f.is_error for f in result.findings), "generated tree must be error-free"
    # Wall time is what a user waits; CPU time is the figure to compare on a shared, loaded machine.
    # os.times() counts in clock ticks (10 ms): a small tree can take less than one.
    per_cpu = f"{result.files_scanned / cpu:.0f}" if cpu > 0 else "- (under one clock tick)"
    print(
        f"{label:<24} files: {result.files_scanned}  context-parsed: {result.context_files_parsed}  "
        f"findings: {len(result.findings)}  seconds: {seconds:.3f}  files/s: {result.files_scanned / seconds:.0f}  "
        f"cpu_seconds: {cpu:.3f}  files/cpu-s: {per_cpu}  load1: {load:.2f}"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000, help="how many files to generate (default 2000)")
    parser.add_argument("--keep", type=Path, default=None, help="generate into this directory and keep it")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes for the full-tree run (0 = one per CPU)")
    parser.add_argument(
        "--changed",
        type=int,
        default=20,
        help="also lint this many files alone, as pre-commit does, with the tree as context (0: skip)",
    )
    add_quick(parser)
    args = parser.parse_args()
    if args.quick:
        args.files, args.changed = 40, 4
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        generate(root, args.files)
        (root / "pyproject.toml").write_text("")  # the project root the pre-commit run finds
        result = _measure(f"full tree (jobs={args.jobs})", [root], root, jobs=args.jobs)
        assert result.files_scanned == args.files, result.files_scanned
        if args.changed:
            # The layer classes clear nothing and their base (nn.Layer) is defined nowhere in the tree:
            # the worst case of the lookup, the whole tree's text is indexed (nothing else is parsed).
            step = max(1, args.files // args.changed)
            changed = sorted(root.rglob("model_*.py"))[::step][: args.changed]
            _measure("changed files + context", changed, root)


if __name__ == "__main__":
    main()
