"""Named real models: ``get_preset(name) -> ModelSpec`` over embedded copies of their public config.json.

Each preset is the subset of a published HuggingFace ``config.json`` that the loader reads (plus
``architectures`` and ``model_type``), kept here as a dict and turned into a spec by the same
``demos.zoo.models.hf_config.spec_from_config`` that reads files, so every preset exercises the loader. The
spec's ``source`` names the HuggingFace repository and file the values come from; docs/models.md says,
per preset, where the copy was read and what could not be checked.

Contract: ``get_preset`` returns a frozen ``ModelSpec``; an unknown name raises ``UnknownPresetError``, one
line listing the known names (aliases included). ``PRESET_NAMES`` lists canonical names, ``ALIASES`` maps
alias -> canonical name. ``preset_config(name)`` returns a copy of the embedded dict (to write a config.json).

``checkpoints(name)``: the published checkpoints of a preset or alias by weight precision ("bf16", "fp8",
"fp4": what ``--weights`` names; "int4": an INT4 checkpoint a config ships), each a Hugging Face repository id
(``CHECKPOINTS``). An alias is a model
of its own (DeepSeek-R1 is not DeepSeek-V3's checkpoint) with its canonical preset's architecture; a name
no preset knows has none.
"""

from __future__ import annotations

import copy
from typing import Any

from demos.zoo.models.hf_config import spec_from_config
from demos.zoo.models.spec import ModelSpec

__all__ = [
    "ALIASES",
    "CHECKPOINTS",
    "PRESET_NAMES",
    "UnknownPresetError",
    "checkpoints",
    "get_preset",
    "preset_config",
    "preset_source",
]


class UnknownPresetError(ValueError):
    """No preset has that name; the message lists the known ones."""


_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 129280,
    "first_k_dense_replace": 3,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "attention_bias": False,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}

_KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "vocab_size": 163840,
    "first_k_dense_replace": 1,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.827,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "attention_bias": False,
    "num_nextn_predict_layers": 0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}

_DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "vocab_size": 102400,
    "first_k_dense_replace": 1,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "moe_layer_freq": 1,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "n_group": 1,
    "topk_group": 1,
    "topk_method": "greedy",
    "scoring_func": "softmax",
    "norm_topk_prob": False,
    "routed_scaling_factor": 1.0,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "attention_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

_QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "vocab_size": 151936,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "attention_bias": False,
    "use_sliding_window": False,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

_QWEN3_235B_A22B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 94,
    "vocab_size": 151936,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "num_attention_heads": 64,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "attention_bias": False,
    "use_sliding_window": False,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

_MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "vocab_size": 32000,
    "intermediate_size": 14336,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

_GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 2880,
    "num_hidden_layers": 36,
    "vocab_size": 201088,
    "intermediate_size": 2880,
    "num_local_experts": 128,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "attention_bias": True,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "tie_word_embeddings": False,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
}
# gpt-oss-120b's config.json has no torch_dtype: the loader's default (bfloat16) applies.

_GLM_4_5 = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 5120,
    "num_hidden_layers": 92,
    "vocab_size": 151552,
    "first_k_dense_replace": 3,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "attention_bias": True,
    "use_qk_norm": True,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

_GLM_4_5_AIR = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "num_hidden_layers": 46,
    "vocab_size": 151552,
    "first_k_dense_replace": 1,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "attention_bias": True,
    "use_qk_norm": False,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
# Neither GLM config names scoring_func or topk_method: transformers' Glm4MoeMoE always routes by sigmoid with
# the selection-only correction bias (noaux_tc), which the loader applies. Their partial_rotary_factor (0.5) and
# max_position_embeddings (131072) are not read.

_KIMI_K2_5 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "dtype": "bfloat16",
    "tie_word_embeddings": False,
    "text_config": {
        **{k: v for k, v in _KIMI_K2.items() if k not in ("torch_dtype", "quantization_config")},
        "model_type": "kimi_k2",
        "dtype": "bfloat16",
        "quantization_config": {
            "config_groups": {
                "group_0": {
                    "input_activations": None,
                    "output_activations": None,
                    "targets": ["Linear"],
                    "weights": {
                        "actorder": None,
                        "block_structure": None,
                        "dynamic": False,
                        "group_size": 32,
                        "num_bits": 4,
                        "observer": "minmax",
                        "observer_kwargs": {},
                        "strategy": "group",
                        "symmetric": True,
                        "type": "int",
                    },
                }
            },
            "format": "pack-quantized",
            "ignore": [
                "lm_head",
                "re:.*self_attn.*",
                "re:.*shared_experts.*",
                "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
            ],
            "kv_cache_scheme": None,
            "quant_method": "compressed-tensors",
            "quantization_status": "compressed",
        },
    },
}
# Kimi-K2.5's text model has Kimi K2's shapes field for field (its text_config is Kimi-K2-Instruct's config
# with model_type kimi_k2); the vision tower (vision_config: 27 layers of 1152) is not modelled.

_MINIMAX_M2_5 = {
    "architectures": ["MiniMaxM2ForCausalLM"],
    "model_type": "minimax_m2",
    "hidden_size": 3072,
    "num_hidden_layers": 62,
    "vocab_size": 200064,
    "intermediate_size": 1536,
    "num_local_experts": 256,
    "num_experts_per_tok": 8,
    "shared_intermediate_size": 0,
    "scoring_func": "sigmoid",
    "use_routing_bias": True,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rotary_dim": 64,
    "use_qk_norm": True,
    "qk_norm_type": "per_layer",
    "use_mtp": True,
    "num_mtp_modules": 3,
    "mtp_transformer_layers": 1,
    "tie_word_embeddings": False,
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "float8_e4m3fn",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": ["gate", "e_score_correction_bias", "lm_head"],
    },
}
# MiniMax-M2.5's config.json has no torch_dtype (M2.7's says bfloat16): the loader's default, bfloat16, applies.
# rotary_dim (64 of 128: partial RoPE) and the MTP fields are not read.

_GPT_OSS_20B = {
    **_GPT_OSS_120B,
    "num_hidden_layers": 24,
    "num_local_experts": 32,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
}

_PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-v3": ("huggingface.co/deepseek-ai/DeepSeek-V3 config.json", _DEEPSEEK_V3),
    "kimi-k2": ("huggingface.co/moonshotai/Kimi-K2-Instruct config.json", _KIMI_K2),
    "deepseek-v2-lite": ("huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json", _DEEPSEEK_V2_LITE),
    "qwen3-30b-a3b": ("huggingface.co/Qwen/Qwen3-30B-A3B config.json", _QWEN3_30B_A3B),
    "qwen3-235b-a22b": ("huggingface.co/Qwen/Qwen3-235B-A22B config.json", _QWEN3_235B_A22B),
    "mixtral-8x7b": ("huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json", _MIXTRAL_8X7B),
    "gpt-oss-120b": ("huggingface.co/openai/gpt-oss-120b config.json", _GPT_OSS_120B),
    "glm-4.5": ("huggingface.co/zai-org/GLM-4.5 config.json", _GLM_4_5),
    "glm-4.5-air": ("huggingface.co/zai-org/GLM-4.5-Air config.json", _GLM_4_5_AIR),
    "kimi-k2.5": ("huggingface.co/moonshotai/Kimi-K2.5 config.json", _KIMI_K2_5),
    "minimax-m2.5": ("huggingface.co/MiniMaxAI/MiniMax-M2.5 config.json", _MINIMAX_M2_5),
    "gpt-oss-20b": ("huggingface.co/openai/gpt-oss-20b config.json", _GPT_OSS_20B),
}

PRESET_NAMES = tuple(_PRESETS)
ALIASES = {"deepseek-r1": "deepseek-v3", "glm-4.6": "glm-4.5", "minimax-m2.7": "minimax-m2.5"}
"""DeepSeek-R1 is post-trained from DeepSeek-V3-Base and keeps its architecture (same shapes, same spec);
GLM-4.6's config.json differs from GLM-4.5's only in fields the loader does not read (a 200K context);
MiniMax-M2.7's config.json differs from M2.5's in fields the loader does not read (a 200K context, an
explicit dtype bfloat16) and in ``attn_type_list``, all 1 (softmax attention in every layer, as M2.5's
implicitly). Kimi-K2.6 and K2.7-Code are no aliases: their text_config (in NVIDIA's NVFP4 copies) has
Kimi-K2.5's shapes, but an alias runs its canonical preset's weights (Kimi-K2.5's INT4 experts) and the
extra holds no INT4 checkpoint of them; their NVFP4 config.json loads as it is (``--model``)."""


CHECKPOINTS: dict[str, dict[str, str]] = {
    "deepseek-v3": {"fp8": "deepseek-ai/DeepSeek-V3"},
    "deepseek-r1": {"fp8": "deepseek-ai/DeepSeek-R1", "fp4": "nvidia/DeepSeek-R1-NVFP4"},
    "kimi-k2": {"fp8": "moonshotai/Kimi-K2-Instruct"},
    "deepseek-v2-lite": {"bf16": "deepseek-ai/DeepSeek-V2-Lite"},
    "qwen3-30b-a3b": {"bf16": "Qwen/Qwen3-30B-A3B", "fp8": "Qwen/Qwen3-30B-A3B-FP8"},
    "qwen3-235b-a22b": {
        "bf16": "Qwen/Qwen3-235B-A22B",
        "fp8": "Qwen/Qwen3-235B-A22B-FP8",
        "fp4": "nvidia/Qwen3-235B-A22B-NVFP4",
    },
    "mixtral-8x7b": {"bf16": "mistralai/Mixtral-8x7B-v0.1"},
    "gpt-oss-120b": {"fp4": "openai/gpt-oss-120b"},
    "glm-4.5": {"bf16": "zai-org/GLM-4.5", "fp8": "zai-org/GLM-4.5-FP8"},
    "glm-4.5-air": {"bf16": "zai-org/GLM-4.5-Air", "fp8": "zai-org/GLM-4.5-Air-FP8"},
    "glm-4.6": {"bf16": "zai-org/GLM-4.6", "fp8": "zai-org/GLM-4.6-FP8"},
    "kimi-k2.5": {"int4": "moonshotai/Kimi-K2.5", "fp4": "nvidia/Kimi-K2.5-NVFP4"},
    "minimax-m2.5": {"fp8": "MiniMaxAI/MiniMax-M2.5", "fp4": "nvidia/MiniMax-M2.5-NVFP4"},
    "minimax-m2.7": {"fp8": "MiniMaxAI/MiniMax-M2.7", "fp4": "nvidia/MiniMax-M2.7-NVFP4"},
    "gpt-oss-20b": {"fp4": "openai/gpt-oss-20b"},
}
"""Published checkpoints per preset or alias and weight precision (module docstring). Sources: the config
each preset copies (its own repository: ``preset_source``); the FP8 and FP4 repositories as the measured
extra ships their configs or serving runs (aiconfigurator-core 0.12.0: ``model_configs/`` holds
Qwen3-235B-A22B-FP8, Qwen3-30B-A3B-FP8 and nvidia/Qwen3-235B-A22B-NVFP4; ``silicon_sample.csv`` serves
nvidia/DeepSeek-R1-NVFP4) or as the model's own README lists them (GLM-4.5: GLM-4.5-FP8, GLM-4.5-Air-FP8;
GLM-4.6-FP8 likewise). NVIDIA's FP4 checkpoints are NVFP4 (an FP8 scale per 16 values, 18/32 bytes per
weight against the MXFP4 17/32 the predictor charges for ``--weights fp4``; their own config.json, where it
holds its ``quantization_config``, loads as ``nvfp4``). The 2026 families: the config copies of the measured
extra (``model_configs/``: moonshotai/Kimi-K2.5, nvidia/Kimi-K2.5-NVFP4, -K2.6-NVFP4 and -K2.7-Code-NVFP4,
MiniMaxAI/MiniMax-M2.5 and -M2.7 with their nvidia/...-NVFP4 copies, openai/gpt-oss-20b), the same
repositories its ``silicon_sample.csv`` serves. ``int4`` is Kimi-K2.5's own INT4 checkpoint
(``demos.zoo.models.precision.weights_name``: not a ``--weights`` choice)."""


def checkpoints(name: str) -> dict[str, str]:
    """The published checkpoints of preset or alias ``name`` by weight precision (``CHECKPOINTS``); ``{}``
    for any other name (a config.json, a spec built in code)."""
    if not isinstance(name, str):
        return {}
    return dict(CHECKPOINTS.get(name.strip().lower(), {}))


def _canonical(name: Any) -> str:
    if isinstance(name, str):
        key = name.strip().lower()
        key = ALIASES.get(key, key)
        if key in _PRESETS:
            return key
    known = ", ".join(sorted((*PRESET_NAMES, *ALIASES)))
    raise UnknownPresetError(f"unknown model preset {name!r}; known: {known}")


def preset_config(name: str) -> dict[str, Any]:
    """A deep copy of the embedded config.json fields of preset ``name`` (alias accepted)."""
    return copy.deepcopy(_PRESETS[_canonical(name)][1])


def preset_source(name: str) -> str:
    """The HuggingFace repository and file preset ``name``'s fields come from."""
    return _PRESETS[_canonical(name)][0]


def get_preset(name: str) -> ModelSpec:
    """The ``ModelSpec`` of preset ``name`` (case-insensitive; aliases map to their canonical preset)."""
    key = _canonical(name)
    return spec_from_config(preset_config(key), source=preset_source(key), name=key)
