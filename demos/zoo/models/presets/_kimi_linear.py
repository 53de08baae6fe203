"""Kimi-K3's preset (``demos.zoo.models.presets``): the fields of moonshotai/Kimi-K3's config.json that the
loader reads, as the measured extra ships it (aiconfigurator-core 0.12.0,
``model_configs/moonshotai--Kimi-K3_config.json``): Kimi Linear's text model under ``text_config`` (its
vision tower, ``vision_config``, not modelled). ``kda_layers`` and ``full_attn_layers`` number the layers
from 1: KDA in three of every four, MLA in the fourth and in the last two."""

from __future__ import annotations

_LAYERS = 93
_FULL = [*range(4, 93, 4), 93]

KIMI_K3 = {
    "architectures": ["KimiK3ForConditionalGeneration"],
    "model_type": "kimi_k3",
    "text_config": {
        "model_type": "kimi_linear",
        "dtype": "bfloat16",
        "hidden_size": 7168,
        "num_hidden_layers": _LAYERS,
        "vocab_size": 163840,
        "tie_word_embeddings": False,
        "first_k_dense_replace": 1,
        "intermediate_size": 33792,
        "moe_layer_freq": 1,
        "num_experts": 896,
        "num_experts_per_token": 16,
        "moe_intermediate_size": 3072,
        "num_shared_experts": 2,
        "routed_expert_hidden_size": 3584,
        "latent_moe_use_norm": True,
        "moe_router_activation_func": "sigmoid",
        "moe_renormalize": True,
        "routed_scaling_factor": 1.0,
        "num_expert_group": 1,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "num_nextn_predict_layers": 0,
        "num_attention_heads": 96,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "mla_use_nope": True,
        "mla_use_output_gate": True,
        "attn_res_block_size": 12,
        "linear_attn_config": {
            "full_attn_layers": _FULL,
            "kda_layers": [i for i in range(1, _LAYERS + 1) if i not in _FULL],
            "head_dim": 128,
            "num_heads": 96,
            "short_conv_kernel_size": 4,
            "use_full_rank_gate": True,
            "gate_lower_bound": -5.0,
        },
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "mxfp4-pack-quantized",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "input_activations": None,
                    "weights": {
                        "num_bits": 4,
                        "type": "float",
                        "strategy": "group",
                        "group_size": 32,
                        "symmetric": True,
                    },
                }
            },
        },
    },
}
"""Kimi-K3: 93 layers (69 KDA, 24 MLA), the first dense; 896 experts top-16 at a 3584-wide latent + 2 shared."""
