"""DeepSeek-V4's presets (``demos.zoo.models.presets``): the fields of deepseek-ai/DeepSeek-V4-Flash's and
-Pro's config.json that the loader reads, as the measured extra ships them (aiconfigurator-core 0.12.0,
``model_configs/deepseek-ai--DeepSeek-V4-Flash_config.json`` and ``-Pro``); ``compress_ratios`` keeps the
file's entry for the MTP layer after the trunk's (the loader reads the trunk's ``num_hidden_layers``)."""

from __future__ import annotations

_V4_FP8 = {
    "activation_scheme": "dynamic",
    "fmt": "e4m3",
    "quant_method": "fp8",
    "scale_fmt": "ue8m0",
    "weight_block_size": [128, 128],
}

_V4_COMMON = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "vocab_size": 129280,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "num_key_value_heads": 1,
    "o_lora_rank": 1024,
    "sliding_window": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "hc_mult": 4,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "num_hash_layers": 3,
    "num_nextn_predict_layers": 1,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "expert_dtype": "fp4",
    "quantization_config": _V4_FP8,
}

DEEPSEEK_V4_FLASH = {
    **_V4_COMMON,
    "hidden_size": 4096,
    "num_hidden_layers": 43,
    "num_attention_heads": 64,
    "q_lora_rank": 1024,
    "o_groups": 8,
    "index_topk": 512,
    "n_routed_experts": 256,
    "moe_intermediate_size": 2048,
    "routed_scaling_factor": 1.5,
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
}
"""DeepSeek-V4-Flash: 43 layers (2 sliding-window only, 21 CSA, 20 HCA), 256 experts top-6 + 1 shared."""

DEEPSEEK_V4_PRO = {
    **_V4_COMMON,
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "o_groups": 16,
    "index_topk": 1024,
    "n_routed_experts": 384,
    "moe_intermediate_size": 3072,
    "routed_scaling_factor": 2.5,
    "compress_ratios": [128, 128] + [4, 128] * 29 + [4, 0],
}
"""DeepSeek-V4-Pro: 61 layers (30 CSA, 31 HCA), 384 experts top-6 + 1 shared."""
