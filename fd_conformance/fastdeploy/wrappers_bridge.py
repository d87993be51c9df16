"""Real wrappers, real clear: every registered model wrapper built on CPU from a tiny config, its
graph-optimisation backends given recorded graphs where FastDeploy keeps captured ones, and the
wrapper's own ``clear_graph_opt_backend()`` (either spelling) called as the engine calls it.

The protocol table judges classes; this one judges what the clear *does*. A wrapper whose clear
exists but misses a backend (a VL wrapper clearing its language model and not its vision tower)
or delegates with the wrong argument passes by class and fails here:

* **FDC203** a recorded graph still alive after the clear (named by the sublayer owning it),
* **FDC303** the clear raised: before any capture, after one, or called twice,
* **FDC005** the clear cannot be called without arguments, **FDC001** there is none.

A raise before any capture is judged apart from the wrapper's own verdict (which is its clear
after capture and called twice) and grouped by where it was raised (:class:`SharedRaise`): on
develop every wrapper's clear reaches the same shared backend line that dereferences a piecewise
backend made only on the first forward, one defect that a per-wrapper count would report fifteen
times. It stays a finding: the kit's contract says a clear before capture is a no-op, and the
FDC205 fix (clear every wrapper unconditionally) would crash on it.

How a wrapper is built: the checkout's own ``FDConfig`` (as the config table builds it, platform
patched to CUDA so the ``@support_graph_optimization`` decorator builds a backend) with a tiny
model config written here (:func:`tiny_model_config`), every ``fastdeploy`` module's
``current_platform`` reporting CUDA while the wrapper is built (layers refuse other platforms),
and a one-rank Paddle hybrid group when FastDeploy uses ``fleet`` (its parallel layers ask for
one). Where the graphs go: each object reachable from the wrapper that has a ``graph_opt_backend``
gets that backend's piecewise CUDA-graph backend (FastDeploy's own class, made as its
``__call__`` makes it on the first step), and every entry of it that holds a ``cuda_graph`` gets
a :class:`RecordedGraph`. A recorded graph is alive while anything references it (FastDeploy
frees a CUDA graph by dropping its last reference), so survival is measured, not inferred.

A wrapper that does not build on CPU is a row saying why (the exception and FastDeploy's line),
never a pass; a clear that calls a compiled op is an ERROR row (it cannot run here), not FDC303.
"""

from __future__ import annotations

import gc
import inspect
import sys
import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from fd_conformance.config_rules import RawGraphOptConfig
from fd_conformance.fastdeploy.checkout import Checkout, CompiledOpCalled, MissingDependency, import_module
from fd_conformance.fastdeploy.config_bridge import CONFIG_MODULE, CudaPlatform, make_builder
from fd_conformance.fastdeploy.models_bridge import registered_wrappers
from fd_conformance.findings import Finding, make_finding
from fd_conformance.lifecycle import LifecycleRecorder
from fd_conformance.runtime.base import EventBus, EventKind
from fd_conformance.spelling import CANONICAL, LEGACY

if TYPE_CHECKING:
    from fd_conformance.runtime.base import Runtime

BACKEND_ATTR = "graph_opt_backend"
PIECEWISE_ATTR = "cudagraph_piecewise_backend"
PIECEWISE_CLASS = "CudaGraphPiecewiseBackend"
MAX_DEPTH = 6  # wrapper -> model -> layers list -> layer -> ...: backends sit on the first levels
BEFORE_CAPTURE = "before any capture"


#: Model-config fields FastDeploy's layers read while building a wrapper, at tiny sizes: dense
#: attention and MLP, MoE (two experts, the second layer sparse), DeepSeek's latent attention (MLA),
#: the MTP draft's depth, and the multimodal ids. A field a wrapper needs that is missing here is a
#: 'not built' row naming it.
TINY_FIELDS: dict[str, Any] = {
    # dense decoder
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "ori_vocab_size": 64,
    "vocab_size": 64,
    "hidden_act": "silu",
    "hidden_dropout_prob": 0.0,
    "initializer_range": 0.02,
    "max_position_embeddings": 64,
    "max_model_len": 64,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "partial_rotary_factor": 1.0,
    "use_rope": True,
    "attention_bias": False,
    "use_qk_norm": False,
    # MoE: layer 0 dense, layer 1 sparse (Ernie, GLM, DeepSeek and Qwen3 spell it differently)
    "moe_intermediate_size": 16,
    "moe_num_experts": 2,
    "num_experts": 2,
    "n_routed_experts": 2,
    "moe_num_shared_experts": 0,
    "n_shared_experts": 1,
    "moe_layer_start_index": 1,
    "moe_layer_end_index": 1,
    "first_k_dense_replace": 1,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_experts_per_tok": 1,
    "moe_k": 1,
    "norm_topk_prob": True,
    "moe_use_aux_free": False,
    "moe_gate_fp32": False,
    "routed_scaling_factor": 1.0,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    # DeepSeek's multi-head latent attention
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 8,
    "v_head_dim": 8,
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    # MTP draft
    "num_nextn_predict_layers": 1,
    "start_layer_index": 0,
    # multimodal token ids and convolutions (VL wrappers)
    "im_patch_id": 1,
    "image_token_id": 2,
    "video_token_id": 3,
    "spatial_conv_size": 2,
    "temporal_conv_size": 2,
    # weights, formats, runner
    "is_quantized": False,
    "is_moe_quantized": False,
    "quantization": None,
    "quantization_config": None,
    "model_type": "tiny",
    "model": "tiny",
    "model_format": "paddle",
    "dtype": "float32",
    "enable_mm": False,
    "mm_max_tokens_per_item": None,
    "logprobs_mode": "raw_logprobs",
    "lm_head_fp32": False,
    "architectures": ["tiny"],
    "moe_phase": None,
    "version": None,
    "runner": "generate",
    "convert": "auto",
}
#: ``model_config.pretrained_config``: the checkpoint's own config (parallel layout under both the
#: old and the new name).
TINY_PRETRAINED: dict[str, Any] = {
    "prefix_name": "model",
    "tensor_model_parallel_size": 1,
    "tensor_parallel_degree": 1,
    "tensor_parallel_rank": 0,
}
#: ``model_config.vision_config``: a one-block vision tower (Qwen3-VL and Ernie VL field names).
TINY_VISION: dict[str, Any] = {
    "depth": 1,
    "hidden_act": "silu",
    "hidden_size": 16,
    "embed_dim": 16,
    "hidden": 16,
    "mlp_ratio": 2,
    "in_channels": 3,
    "intermediate_size": 32,
    "num_heads": 2,
    "num_position_embeddings": 16,
    "out_hidden_size": 16,
    "patch_size": 2,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "deepstack_visual_indexes": [],
    "tensor_parallel_degree": 1,
    "tensor_parallel_rank": 0,
}
#: Fields one model family reads in its own shape (as its checkpoint's config.json has them), keyed
#: by a module name under ``fastdeploy.model_executor.models`` that the wrapper or a base class lives
#: in; ``vision_config.x`` sets a field of the vision config.
FAMILY_FIELDS: dict[str, dict[str, Any]] = {
    # Ernie 4.5 VL keeps text and image experts side by side: a pair where text models have one value.
    "ernie4_5_vl": {"moe_num_experts": [2, 2], "moe_intermediate_size": [16, 16]},
    # Qwen3-VL's vision MLP knows one activation.
    "qwen3_vl": {"vision_config.hidden_act": "gelu_pytorch_tanh"},
    # DeepSeek-V3's attention (GLM's MoE-DSA builds on it) reads yarn scaling unconditionally up to 2.4.
    "deepseek_v3": {"rope_scaling": {"factor": 1.0, "original_max_position_embeddings": 64}},
}


def families_of(cls: type) -> tuple[str, ...]:
    """The :data:`FAMILY_FIELDS` keys whose module the wrapper or one of its bases lives in."""
    modules = {part for base in cls.__mro__ for part in base.__module__.split(".")}
    return tuple(key for key in FAMILY_FIELDS if key in modules)


def tiny_model_config(families: tuple[str, ...] = (), wrap: Callable[[dict[str, Any]], Any] | None = None) -> SimpleNamespace:
    """A model config small enough to build any wrapper on CPU in milliseconds; ``families`` apply
    their :data:`FAMILY_FIELDS`; ``wrap`` makes the nested configs what the checkout's layers expect
    (its ``PretrainedConfig.from_dict``: Paddle's vision towers refuse a plain namespace)."""
    fields, vision = dict(TINY_FIELDS), dict(TINY_VISION)
    for family in families:
        for key, value in FAMILY_FIELDS[family].items():
            target, _, name = key.rpartition(".")
            (vision if target == "vision_config" else fields)[name] = value
    nested = wrap or (lambda values: SimpleNamespace(**values))
    return SimpleNamespace(**fields, pretrained_config=nested(dict(TINY_PRETRAINED)), vision_config=nested(vision))


class RecordedGraph:
    """Stands where FastDeploy keeps a captured CUDA graph; its death (last reference dropped) is
    the GRAPH_DESTROYED event. ``replay``/``reset`` exist so code that touches a graph runs."""

    def __init__(self, label: str) -> None:
        self.label = label

    def replay(self) -> None:
        return None

    def reset(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"<RecordedGraph {self.label}>"


@dataclass
class WrapperRow:
    name: str
    qualname: str
    verdict: str = "ok"  # ok | FAIL | not built | ERROR
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""  # not built / ERROR: why; ok/FAIL: what was checked
    backends: list[str] = field(default_factory=list)  # where graphs were recorded
    graphs: int = 0
    before_capture: Finding | None = None  # FDC303 raised by the clear before any capture (grouped: SharedRaise)
    raised_at: str = ""  # where it was raised: the checkout's innermost file:line ("" when outside it)
    raised: str = ""  # what was raised: ``Type: message``
    cleared_before_capture: bool = False  # the clear before any capture ran and returned


#: The fix for a clear that raises before any capture, wherever the raising line is.
BEFORE_CAPTURE_FIX = "create what the clear clears eagerly (at build), or make the clear a no-op when nothing was captured"


@dataclass
class SharedRaise:
    """One raise of the clear before any capture, with every wrapper whose clear raised it at the
    same line: one defect in the code they share (FastDeploy's graph-opt backend), counted once."""

    at: str
    raised: str
    wrappers: list[str]
    fix: str = BEFORE_CAPTURE_FIX

    @property
    def short_at(self) -> str:
        """``graph_optimization_backend.py:179``: what a row's cell names."""
        return self.at.rsplit("/", 1)[-1] or "outside the checkout"

    def cell(self) -> str:
        """The affected rows' cell: ``FDC303 (shared: file.py:179, see below)``."""
        return f"FDC303 ({'shared' if len(self.wrappers) > 1 else 'at'}: {self.short_at}, see below)"

    def finding(self) -> Finding:
        where = f" at {self.at}" if self.at else ""
        message = (
            f"the clear before any capture raised {self.raised}{where} in {len(self.wrappers)} wrapper(s): "
            f"{', '.join(self.wrappers)}; fix: {self.fix}"
        )
        return make_finding("FDC303", message, call="clear before any capture")


@dataclass
class WrappersReport:
    where: str
    rows: list[WrapperRow] = field(default_factory=list)
    error: str | None = None

    @property
    def shared_raises(self) -> list[SharedRaise]:
        """The before-capture raises grouped by where they were raised (a raise outside the
        checkout is its wrapper's own group), in the order of their first wrapper."""
        groups: dict[str, SharedRaise] = {}
        for row in self.rows:
            if row.before_capture is not None:
                key = row.raised_at or f"({row.name})"
                groups.setdefault(key, SharedRaise(row.raised_at, row.raised, [])).wrappers.append(row.name)
        return list(groups.values())

    @property
    def violations(self) -> int:
        """FAIL rows (each wrapper's own clear) plus each shared before-capture raise once."""
        return sum(1 for r in self.rows if r.verdict == "FAIL") + len(self.shared_raises)

    @property
    def not_checked(self) -> int:
        return sum(1 for r in self.rows if r.verdict in ("not built", "ERROR"))


def raised_at(err: BaseException, checkout: Checkout) -> str:
    """``fastdeploy/x.py:12``: the innermost frame of ``err`` inside the checkout ("" when none is)."""
    import traceback

    frames = [f for f in traceback.extract_tb(err.__traceback__) if str(checkout.root) in f.filename]
    frame = frames[-1] if frames else None
    return f"{frame.filename.removeprefix(str(checkout.root) + '/')}:{frame.lineno}" if frame else ""


def _raised(err: BaseException) -> str:
    """``Type: first line of the message``."""
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text[:160]}"


def describe(err: BaseException, checkout: Checkout) -> str:
    """``Type: first line of the message at fastdeploy/x.py:12`` (the checkout's innermost line)."""
    where = raised_at(err, checkout)
    return f"{_raised(err)}{' at ' + where if where else ''}"


_ROUTINES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def backends_of(wrapper: Any) -> Iterator[tuple[str, Any]]:
    """(path, owner) for every object reachable from ``wrapper`` through attributes, lists and
    dicts (Paddle keeps sublayers in ``_sub_layers``) that has a graph-opt backend."""
    seen: set[int] = set()
    stack: list[tuple[str, Any, int]] = [("", wrapper, 0)]
    while stack:
        path, obj, depth = stack.pop()
        if id(obj) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(obj))
        if getattr(obj, "__dict__", None) is not None and BACKEND_ATTR in vars(obj):
            yield path or "(wrapper)", obj
        children: list[tuple[str, Any]] = []
        if isinstance(obj, dict):
            children = [(str(k), v) for k, v in obj.items()]
        elif isinstance(obj, list | tuple):
            children = [(str(i), v) for i, v in enumerate(obj)]
        elif hasattr(obj, "__dict__") and not isinstance(obj, type | types.ModuleType):
            children = [(k.removeprefix("_sub_layers"), v) for k, v in vars(obj).items() if k not in ("fd_config", BACKEND_ATTR)]
        for name, child in reversed(children):
            if child is None or isinstance(child, (str, int, float, bool, type, types.ModuleType, *_ROUTINES)):
                continue
            if type(child).__module__.split(".")[0] == "paddle" and not hasattr(child, "_sub_layers"):
                continue  # tensors, parameters, Paddle internals: never a FastDeploy backend holder
            stack.append((f"{path}.{name}".strip(".") if name else path, child, depth + 1))


def _piecewise(backend: Any) -> Any:
    """The backend's piecewise CUDA-graph backend: the one it has, or one made as its first
    graph step makes it (FastDeploy's own class, from the backend's module)."""
    existing = getattr(backend, PIECEWISE_ATTR, None)
    if existing is not None:
        return existing
    cls = getattr(sys.modules.get(type(backend).__module__), PIECEWISE_CLASS, None)
    if cls is None:
        raise LookupError(f"{type(backend).__qualname__} has no {PIECEWISE_ATTR} and its module no {PIECEWISE_CLASS}")
    offered = {
        "fd_config": backend.fd_config,
        "runnable": getattr(backend, "runnable", None),
        "dy_runnable": getattr(backend, "dy_runnable", getattr(backend, "runnable", None)),
    }
    accepted = inspect.signature(cls.__init__).parameters
    made = cls(**{k: v for k, v in offered.items() if k in accepted})
    setattr(backend, PIECEWISE_ATTR, made)
    return made


def _entries(piecewise: Any) -> list[Any]:
    """Where FastDeploy keeps captured graphs: entries (in a dict or list attribute) with a ``cuda_graph``."""
    found: list[Any] = []
    for value in vars(piecewise).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        found.extend(e for e in items if hasattr(e, "cuda_graph"))
    return found


def graph_entries(owner: Any) -> list[Any]:
    """The entries of ``owner``'s graph-opt backend that hold captured graphs (its piecewise
    backend made first, as the first step with graphs on makes it)."""
    return _entries(_piecewise(getattr(owner, BACKEND_ATTR)))


def record_graph(bus: EventBus, entry: Any, label: str, owner: str, **captured: Any) -> RecordedGraph:
    """A recorded graph put where FastDeploy keeps ``entry``'s captured graph; its capture and its
    death are events on ``bus`` (``captured``: the buffers and groups it captured)."""
    graph = RecordedGraph(label)
    entry.cuda_graph = graph
    if hasattr(entry, "captured"):
        entry.captured = True
    bus.emit(EventKind.GRAPH_CAPTURED, label, id(graph), owner=owner, **captured)
    weakref.finalize(graph, bus.emit, EventKind.GRAPH_DESTROYED, label, id(graph), owner=owner)
    return graph


class _Recording:
    """The recorded graphs of one wrapper and the lifecycle recorder judging them."""

    def __init__(self) -> None:
        self.bus = EventBus()
        self.recorder = LifecycleRecorder(cast("Runtime", SimpleNamespace(events=self.bus)))  # reads only .events
        self.recorder.start()

    def plant(self, path: str, owner: Any) -> int:
        entries = graph_entries(owner)
        for index, entry in enumerate(entries):
            record_graph(self.bus, entry, f"{path}:{getattr(entry, 'real_shape', index)}", path)
        return len(entries)


def clear_method(cls: type) -> tuple[str | None, Any]:
    """The clear the engine's call reaches on ``cls`` (either spelling, canonical first) and its function."""
    for name in (CANONICAL, LEGACY):
        if callable(getattr(cls, name, None)):
            return name, getattr(cls, name)
    return None, None


def _needs_arguments(method: Any) -> list[str]:
    try:
        parameters = list(inspect.signature(method).parameters.values())[1:]  # unbound: skip self
    except (TypeError, ValueError):
        return []
    return [
        p.name
        for p in parameters
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]


def uncallable_clear(cls: type) -> list[Finding]:
    """FDC001 (no clear) or FDC005 (a clear the engine's argument-less call cannot reach), judged
    by class: such a wrapper is never built (building one may fetch a checkpoint's config)."""
    spelling, method = clear_method(cls)
    if spelling is None:
        message = f"{cls.__qualname__} has no clear method: its recorded graphs cannot be cleared"
        return [make_finding("FDC001", message, cls=cls.__qualname__)]
    if needed := _needs_arguments(method):
        message = f"{cls.__qualname__}.{spelling}() requires {', '.join(needed)}; the engine passes none"
        return [make_finding("FDC005", message, params=", ".join(needed))]
    return []


def check_wrapper(cls: type, name: str, build: Callable[[type], Any], checkout: Checkout) -> WrapperRow:
    """Build one wrapper, record graphs in its backends, run its real clear before capture,
    after it and twice; one row (a raise before capture in ``before_capture``, not its verdict)."""
    row = WrapperRow(name, f"{cls.__module__}.{cls.__qualname__}")
    spelling, _ = clear_method(cls)
    row.findings.extend(uncallable_clear(cls))
    if row.findings:  # judged by class: there is no clear the engine could call
        row.verdict, row.reason = "FAIL", "not built: the engine's call cannot reach a clear"
        return row
    try:
        wrapper = build(cls)
    except MissingDependency:
        raise
    except Exception as err:  # one wrapper that will not build on CPU is its row, never the table
        row.verdict, row.reason = "not built", f"does not build on CPU: {describe(err, checkout)}"
        return row
    holders = list(backends_of(wrapper))
    if not holders:
        row.verdict, row.reason = "ERROR", "built, but no graph_opt_backend reachable from it with graphs on"
        return row
    assert spelling is not None
    recording = _Recording()
    clear = getattr(wrapper, spelling)

    def call(when: str) -> bool:
        try:
            clear()
        except MissingDependency:
            raise
        except CompiledOpCalled as err:
            row.verdict, row.reason = "ERROR", f"{spelling}() {when} calls a compiled op, cannot run on CPU: {err}"
            return False
        except Exception as err:
            finding = make_finding(
                "FDC303",
                f"{cls.__qualname__}.{spelling}() {when} raised {describe(err, checkout)}",
                call=f"{cls.__qualname__}.{spelling}()",
            )
            if when == BEFORE_CAPTURE:  # judged apart, grouped by where it was raised (SharedRaise)
                row.before_capture, row.raised_at, row.raised = finding, raised_at(err, checkout), _raised(err)
            else:
                row.findings.append(finding)
            return False
        return True

    row.cleared_before_capture = call(BEFORE_CAPTURE)
    try:
        for path, owner in holders:
            row.graphs += recording.plant(path, owner)
            row.backends.append(path)
    except Exception as err:
        row.verdict, row.reason = "ERROR", f"could not record graphs in its backends: {describe(err, checkout)}"
        return row
    if call("after capture"):
        gc.collect()  # a graph kept only by a reference cycle would still hold its memory pool
        row.findings.extend(recording.recorder.check_cleared(after=f"{cls.__qualname__}.{spelling}()"))
        call("called twice")
    recording.recorder.stop()
    if row.verdict == "ok" and row.findings:
        row.verdict = "FAIL"
    return row


@contextmanager
def cuda_everywhere() -> Iterator[None]:
    """Every loaded ``fastdeploy`` module's ``current_platform`` reports CUDA, then is restored."""
    platforms = sys.modules.get("fastdeploy.platforms")
    real = getattr(platforms, "current_platform", None)
    patched = [
        m
        for n, m in list(sys.modules.items())
        if n.startswith("fastdeploy") and real is not None and vars(m).get("current_platform") is real
    ]
    cuda = CudaPlatform()
    for module in patched:
        module.current_platform = cuda  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in patched:
            module.current_platform = real  # type: ignore[attr-defined]


def _one_rank_group() -> Any:
    """Paddle's hybrid group of one rank, when FastDeploy's layers use fleet (None otherwise)."""
    if "paddle.distributed.fleet" not in sys.modules:
        return None
    from paddle.distributed import fleet

    try:
        return fleet.get_hybrid_communicate_group().get_model_parallel_group()
    except AttributeError:  # not initialised yet in this process
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=strategy)
        return fleet.get_hybrid_communicate_group().get_model_parallel_group()


#: Sub-configs of FDConfig that MoE layers and the piecewise backend read, left None by the config
#: table's builder (no speculative method) or absent from older trees: attribute -> class name.
DEFAULT_SUB_CONFIGS = (
    ("eplb_config", "EPLBConfig"),
    ("speculative_config", "SpeculativeConfig"),
    ("routing_replay_config", "RoutingReplayConfig"),
)


def make_fd_config(config: types.ModuleType, families: tuple[str, ...] = ()) -> Any:
    """The checkout's FDConfig with graphs on, a tiny model (of ``families``' shape) and one rank."""
    pretrained = getattr(config, "PretrainedConfig", None)
    wrap = pretrained.from_dict if pretrained is not None and hasattr(pretrained, "from_dict") else None
    fd_config = make_builder(config, lambda: tiny_model_config(families, wrap))(
        RawGraphOptConfig(use_cudagraph=True, max_num_seqs=2)
    )
    group = _one_rank_group()
    if group is not None:
        fd_config.parallel_config.tp_group = group
        fd_config.parallel_config.tensor_parallel_rank = 0
    for attr, cls_name in DEFAULT_SUB_CONFIGS:
        if getattr(fd_config, attr, None) is None and hasattr(config, cls_name):
            setattr(fd_config, attr, getattr(config, cls_name)({}))
    return fd_config


def fd_config_of(config: types.ModuleType, families: tuple[str, ...]) -> Any:
    """:func:`make_fd_config` with every module reporting CUDA (FDConfig switches graphs off elsewhere)."""
    with cuda_everywhere():
        return make_fd_config(config, families)


class WrapperBuilder:
    """Builds registered wrappers on CPU: the checkout's registry, one tiny FDConfig per family
    (made when first needed), every module reporting CUDA while a wrapper is built."""

    def __init__(self, checkout: Checkout) -> None:
        """Raises what FastDeploy raises when its config module, registry or tiny FDConfig fails."""
        self.config = import_module(CONFIG_MODULE, checkout)
        self.wrappers = registered_wrappers(checkout)
        self.configs: dict[tuple[str, ...], Any] = {(): fd_config_of(self.config, ())}

    def fd_config(self, cls: type) -> Any:
        families = families_of(cls)
        if families not in self.configs:
            self.configs[families] = fd_config_of(self.config, families)
        return self.configs[families]

    def build(self, cls: type, sharing_model: Any = None) -> Any:
        """``cls`` built; an MTP draft with ``sharing_model``, the main wrapper whose embedding and
        head it shares (FastDeploy's proposer sets it on the speculative config before loading)."""
        fd_config = self.fd_config(cls)
        speculative = getattr(fd_config, "speculative_config", None)
        before = getattr(speculative, "sharing_model", None)
        if speculative is not None and sharing_model is not None:
            speculative.sharing_model = sharing_model
        try:
            with cuda_everywhere():
                return cls(fd_config)
        finally:
            if speculative is not None and sharing_model is not None:
                speculative.sharing_model = before


def check_wrappers(checkout: Checkout) -> WrappersReport:
    """Every registered wrapper built and cleared for real; one row each."""
    report = WrappersReport("fastdeploy.model_executor.models (instances)")
    try:
        builder = WrapperBuilder(checkout)
    except MissingDependency:
        raise
    except Exception as err:
        report.error = f"could not build a tiny FDConfig: {describe(err, checkout)}"
        return report
    for cls, name in sorted(builder.wrappers.items(), key=lambda item: item[1]):
        row = check_wrapper(cls, name, builder.build, checkout)
        if row.findings and row.verdict == "ERROR":  # what was found before the bridge got stuck still fails it
            row.verdict = "FAIL"
        report.rows.append(row)
    return report
