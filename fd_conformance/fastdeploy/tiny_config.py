"""The tiny model config every registered wrapper is built from on CPU.

Kept apart from the bridge that builds and clears the wrappers: it is data (the fields FastDeploy's
layers read, per model family) that grows with every new model family, and tests and docs read it
on its own (:func:`tiny_model_config`).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

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
