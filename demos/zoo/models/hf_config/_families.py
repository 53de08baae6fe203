"""The ``model_type`` values the loader reads, each with its reader and its spec field -> config.json field
names, and those it knows and refuses (``NOT_EXPRESSIBLE``) (``demos.zoo.models.hf_config``).
"""

from __future__ import annotations

from collections.abc import Callable

from demos.zoo.models.hf_config._deepseek import deepseek, deepseek_sparse, deepseek_v4, glm4_moe, kimi_k25
from demos.zoo.models.hf_config._fields import Fields
from demos.zoo.models.hf_config._gqa import gpt_oss, minimax_m2, minimax_m3, mixtral, qwen3_moe, qwen3_next
from demos.zoo.models.hf_config._kimi_linear import kimi_k3, kimi_linear_text
from demos.zoo.models.spec import ModelSpec

FAMILIES: dict[str, Callable[[Fields, str, str], ModelSpec]] = {
    "deepseek_v2": deepseek,
    "deepseek_v3": deepseek,
    "kimi_k2": deepseek,
    "deepseek_v32": deepseek_sparse,
    "glm_moe_dsa": deepseek_sparse,
    "deepseek_v4": deepseek_v4,
    "deepseek_ref": deepseek_v4,
    "kimi_k25": kimi_k25,
    "kimi_k3": kimi_k3,
    "kimi_linear": kimi_linear_text,
    "glm4_moe": glm4_moe,
    "qwen3_moe": qwen3_moe,
    "qwen3_next": qwen3_next,
    "qwen3_5_moe": qwen3_next,
    "mixtral": mixtral,
    "gpt_oss": gpt_oss,
    "minimax_m2": minimax_m2,
    "minimax_m3": minimax_m3,
}
SUPPORTED_MODEL_TYPES = tuple(sorted(FAMILIES))

_M3_VL = "multimodal wrapper (a text_config without model_type beside a vision tower; MiniMaxAI/MiniMax-M3 loads)"
NOT_EXPRESSIBLE: dict[str, tuple[str, str]] = {
    "minimax_m3_vl": ("MiniMax-M3's NVFP4 copy", _M3_VL),
    "minimax": ("MiniMax-Text-01 and -M1", "lightning (linear) attention in seven of every eight layers"),
}
"""MoE families whose ``model_type`` the loader knows and refuses: the model, and what the spec cannot express
of it (docs/models.md, "Families"); any other unknown ``model_type`` is refused listing the supported ones."""

_COMMON_NAMES = {
    "ModelSpec.hidden_size": "hidden_size",
    "ModelSpec.num_layers": "num_hidden_layers",
    "ModelSpec.vocab_size": "vocab_size",
    "MoESpec.top_k": "num_experts_per_tok",
    "MoESpec.intermediate_size": "moe_intermediate_size",
}
_DEEPSEEK_MOE_NAMES = {
    **_COMMON_NAMES,
    "MoESpec.routed_experts": "n_routed_experts",
    "MoESpec.shared_experts": "n_shared_experts",
    "MoESpec.routed_scaling_factor": "routed_scaling_factor",
    "MoESpec.n_group": "n_group",
    "MoESpec.topk_group": "topk_group",
    "ModelSpec.first_k_dense": "first_k_dense_replace",
    "ModelSpec.dense_intermediate_size": "intermediate_size",
    "ModelSpec.mtp_layers": "num_nextn_predict_layers",
}
_MLA_NAMES = {
    "MLAAttention.heads": "num_attention_heads",
    "MLAAttention.q_lora_rank": "q_lora_rank",
    "MLAAttention.kv_lora_rank": "kv_lora_rank",
    "MLAAttention.qk_nope_head_dim": "qk_nope_head_dim",
    "MLAAttention.qk_rope_head_dim": "qk_rope_head_dim",
    "MLAAttention.v_head_dim": "v_head_dim",
}
_GQA_NAMES = {
    "GQAAttention.heads": "num_attention_heads",
    "GQAAttention.kv_heads": "num_key_value_heads",
    "GQAAttention.head_dim": "head_dim",
    "GQAAttention.sliding_window": "sliding_window",
    "GQAAttention.layer_types": "layer_types",
}
_LOCAL_EXPERTS = {"MoESpec.routed_experts": "num_local_experts", "MoESpec.intermediate_size": "intermediate_size"}
_DSA_NAMES = {
    "SparseMLAAttention.index_heads": "index_n_heads",
    "SparseMLAAttention.index_head_dim": "index_head_dim",
    "SparseMLAAttention.index_topk": "index_topk",
}
_QWEN3_NEXT_NAMES = {
    **_COMMON_NAMES,
    **_GQA_NAMES,
    "MoESpec.routed_experts": "num_experts",
    "ModelSpec.mtp_layers": "mtp_num_hidden_layers",
    "GQAAttention.output_gate": "attn_output_gate",
    "GatedDeltaNet.key_heads": "linear_num_key_heads",
    "GatedDeltaNet.value_heads": "linear_num_value_heads",
    "GatedDeltaNet.key_head_dim": "linear_key_head_dim",
    "GatedDeltaNet.value_head_dim": "linear_value_head_dim",
    "GatedDeltaNet.conv_kernel": "linear_conv_kernel_dim",
}
_V4_NAMES = {
    **_COMMON_NAMES,
    "MoESpec.routed_experts": "n_routed_experts",
    "MoESpec.shared_experts": "n_shared_experts",
    "MoESpec.routed_scaling_factor": "routed_scaling_factor",
    "MoESpec.hash_layers": "num_hash_layers",
    "ModelSpec.mtp_layers": "num_nextn_predict_layers",
    "ModelSpec.hc_mult": "hc_mult",
    "CompressedAttention.heads": "num_attention_heads",
    "CompressedAttention.head_dim": "head_dim",
    "CompressedAttention.qk_rope_head_dim": "qk_rope_head_dim",
    "CompressedAttention.q_lora_rank": "q_lora_rank",
    "CompressedAttention.o_groups": "o_groups",
    "CompressedAttention.o_lora_rank": "o_lora_rank",
    "CompressedAttention.sliding_window": "sliding_window",
    "CompressedAttention.compress_ratios": "compress_ratios",
    "CompressedAttention.index_heads": "index_n_heads",
    "CompressedAttention.index_head_dim": "index_head_dim",
    "CompressedAttention.index_topk": "index_topk",
}
_KIMI_LINEAR_NAMES = {
    **_COMMON_NAMES,
    **_MLA_NAMES,
    "MoESpec.routed_experts": "num_experts",
    "MoESpec.top_k": "num_experts_per_token",
    "MoESpec.shared_experts": "num_shared_experts",
    "MoESpec.routed_scaling_factor": "routed_scaling_factor",
    "MoESpec.n_group": "num_expert_group",
    "MoESpec.topk_group": "topk_group",
    "MoESpec.latent_size": "routed_expert_hidden_size",
    "ModelSpec.first_k_dense": "first_k_dense_replace",
    "ModelSpec.dense_intermediate_size": "intermediate_size",
    "ModelSpec.attn_res_block": "attn_res_block_size",
    "ModelSpec.mtp_layers": "num_nextn_predict_layers",
    "KimiDeltaAttention.heads": "linear_attn_config.num_heads",
    "KimiDeltaAttention.head_dim": "linear_attn_config.head_dim",
    "KimiDeltaAttention.conv_kernel": "linear_attn_config.short_conv_kernel_size",
}
_KIMI_K25_NAMES = {k: f"text_config.{v}" for k, v in {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES}.items()}
FIELD_NAMES: dict[str, dict[str, str]] = {
    "deepseek_v2": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "deepseek_v3": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "kimi_k2": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES},
    "deepseek_v32": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES, **_DSA_NAMES},
    "glm_moe_dsa": {**_DEEPSEEK_MOE_NAMES, **_MLA_NAMES, **_DSA_NAMES},
    "glm4_moe": {**_DEEPSEEK_MOE_NAMES, **_GQA_NAMES},
    "deepseek_v4": _V4_NAMES,
    "deepseek_ref": _V4_NAMES,
    "qwen3_moe": {**_COMMON_NAMES, **_GQA_NAMES, "MoESpec.routed_experts": "num_experts"},
    "mixtral": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
    "gpt_oss": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
    "kimi_k25": _KIMI_K25_NAMES,
    "kimi_linear": _KIMI_LINEAR_NAMES,
    "kimi_k3": {k: f"text_config.{v}" for k, v in _KIMI_LINEAR_NAMES.items()},
    "minimax_m2": {**_COMMON_NAMES, **_GQA_NAMES, **_LOCAL_EXPERTS},
    "minimax_m3": {
        **_COMMON_NAMES,
        **_GQA_NAMES,
        "MoESpec.routed_experts": "num_local_experts",
        "MoESpec.shared_experts": "n_shared_experts",
        "MoESpec.routed_scaling_factor": "routed_scaling_factor",
        "ModelSpec.dense_intermediate_size": "dense_intermediate_size",
        "BlockSparse.index_heads": "sparse_attention_config.sparse_num_index_heads",
        "BlockSparse.index_head_dim": "sparse_attention_config.sparse_index_dim",
        "BlockSparse.block_size": "sparse_attention_config.sparse_block_size",
        "BlockSparse.topk_blocks": "sparse_attention_config.sparse_topk_blocks",
        "BlockSparse.local_blocks": "sparse_attention_config.sparse_local_block",
        "BlockSparse.init_blocks": "sparse_attention_config.sparse_init_block",
    },
    "qwen3_next": _QWEN3_NEXT_NAMES,
    "qwen3_5_moe": {k: f"text_config.{v}" for k, v in _QWEN3_NEXT_NAMES.items()},
}
"""Spec field -> config.json field per family, so that a value the spec rejects is named as in the file."""
