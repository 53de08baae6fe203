"""The readers of DeepSeek's MoE layout (``demos.zoo.models.hf_config``): dense first layers, routed + shared
experts, grouped routing, under MLA (``deepseek_v2``, ``deepseek_v3``, ``kimi_k2``, and ``kimi_k25``'s nested
text model), sparse MLA (``deepseek_v32``, ``glm_moe_dsa``), GQA (``glm4_moe``) or DeepSeek-V4's compressed
attention (``deepseek_v4``, and ``deepseek_ref``, as SGLang's FP8 copies name it).
"""

from __future__ import annotations

from dataclasses import replace

from demos.zoo.models.hf_config._fields import Fields, is_one
from demos.zoo.models.hf_config._quantization import read_precision
from demos.zoo.models.hf_config._trunk import trunk
from demos.zoo.models.spec import (
    CompressedAttention,
    GQAAttention,
    MLAAttention,
    ModelSpec,
    MoESpec,
    Precision,
    SparseMLAAttention,
)


def routed_and_shared(f: Fields, scoring: str, correction_bias: bool) -> MoESpec:
    """DeepSeek's MoE fields (deepseek_v2/v3, kimi_k2, glm4_moe): routed + shared experts, grouped routing."""
    return MoESpec(
        routed_experts=f.get_int("n_routed_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("moe_intermediate_size"),
        shared_experts=f.get_int("n_shared_experts"),
        scoring=scoring,
        norm_topk_prob=f.get_bool("norm_topk_prob"),
        routed_scaling_factor=f.get_float("routed_scaling_factor"),
        n_group=f.get_int("n_group"),
        topk_group=f.get_int("topk_group"),
        score_correction_bias=correction_bias,
    )


def deepseek(f: Fields, name: str, source: str, precision: Precision | None = None) -> ModelSpec:
    """deepseek_v2 / deepseek_v3 / kimi_k2: the fields of DeepSeek's configuration_deepseek.py."""
    f.unsupported_unless("moe_layer_freq", 1, is_one, "an MoE layer other than every layer")
    f.unsupported_unless("attention_bias", False, lambda v: v is False, "MLA with projection biases")
    topk_method = f.get_choice("topk_method", ("greedy", "group_limited_greedy", "noaux_tc"))
    moe = routed_and_shared(f, f.get_choice("scoring_func", ("softmax", "sigmoid")), topk_method == "noaux_tc")
    attention = MLAAttention(**mla_fields(f))
    return trunk(f, name, source, attention, moe, dense_first=True, precision=precision)


def mla_fields(f: Fields) -> dict:
    """``MLAAttention``'s fields as DeepSeek's configs name them (Kimi Linear's MLA layers too)."""
    return {
        "heads": f.get_int("num_attention_heads"),
        "q_lora_rank": f.get_int("q_lora_rank", nullable=True),
        "kv_lora_rank": f.get_int("kv_lora_rank"),
        "qk_nope_head_dim": f.get_int("qk_nope_head_dim"),
        "qk_rope_head_dim": f.get_int("qk_rope_head_dim"),
        "v_head_dim": f.get_int("v_head_dim"),
    }


def deepseek_sparse(f: Fields, name: str, source: str) -> ModelSpec:
    """deepseek_v32 (DeepSeek-V3.2) and glm_moe_dsa (GLM-5): DeepSeek-V3's fields under MLA behind a lightning
    indexer (``SparseMLAAttention``: ``index_n_heads``, ``index_head_dim``, ``index_topk``). GLM-5's indexer
    is taken to be DeepSeek-V3.2's (the same fields; transformers' GlmMoeDsa builds on Glm4Moe with it)."""
    spec = deepseek(f, name, source)
    a = spec.attention
    sparse = SparseMLAAttention(
        heads=a.heads,
        q_lora_rank=a.q_lora_rank,
        kv_lora_rank=a.kv_lora_rank,
        qk_nope_head_dim=a.qk_nope_head_dim,
        qk_rope_head_dim=a.qk_rope_head_dim,
        v_head_dim=a.v_head_dim,
        index_heads=f.get_int("index_n_heads"),
        index_head_dim=f.get_int("index_head_dim"),
        index_topk=f.get_int("index_topk"),
    )
    return replace(spec, attention=sparse)


def deepseek_v4(f: Fields, name: str, source: str) -> ModelSpec:
    """deepseek_v4 (DeepSeek-V4-Flash and -Pro; ``deepseek_ref`` in SGLang's FP8 copies): every layer an MoE
    layer (no dense first layers, no expert groups) with ``sqrtsoftplus`` scoring and the correction bias,
    the first ``num_hash_layers`` routed by a token-id table; ``CompressedAttention`` per layer from
    ``compress_ratios`` (the trunk's ``num_hidden_layers`` entries; the MTP layer's after them are not read);
    the residual ``hc_mult`` rows wide. Routed experts: ``expert_dtype`` ``fp4`` is MXFP4 (DeepSeek's FP4
    experts carry an E8M0 scale per 32 values), NVIDIA's copies say NVFP4 in ``moe_quant_algo``; the rest
    as ``quantization_config`` gives it (FP8 blocks)."""
    f.unsupported_unless("num_key_value_heads", 1, is_one, "DeepSeek-V4 attention with more than one KV head")
    f.unsupported_unless("topk_method", "noaux_tc", lambda v: v == "noaux_tc", "routing other than noaux_tc")
    ratios = f.get_int_list("compress_ratios")
    layers = f.get_int("num_hidden_layers")
    if len(ratios) < layers:
        raise f.fail("compress_ratios", f"has {len(ratios)} entries, fewer than num_hidden_layers ({layers})")
    attention = CompressedAttention(
        heads=f.get_int("num_attention_heads"),
        head_dim=f.get_int("head_dim"),
        qk_rope_head_dim=f.get_int("qk_rope_head_dim"),
        q_lora_rank=f.get_int("q_lora_rank"),
        o_groups=f.get_int("o_groups"),
        o_lora_rank=f.get_int("o_lora_rank"),
        sliding_window=f.get_int("sliding_window"),
        compress_ratios=ratios[:layers],
        index_heads=f.get_int("index_n_heads"),
        index_head_dim=f.get_int("index_head_dim"),
        index_topk=f.get_int("index_topk"),
    )
    moe = MoESpec(
        routed_experts=f.get_int("n_routed_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("moe_intermediate_size"),
        shared_experts=f.get_int("n_shared_experts"),
        scoring=f.get_choice("scoring_func", ("softmax", "sigmoid", "sqrtsoftplus")),
        # SGLang's copies omit these two (DeepSeek's say true, and 1.5 or 2.5: a weight, not a cost)
        norm_topk_prob=f.get_bool("norm_topk_prob", True),
        routed_scaling_factor=f.get_float("routed_scaling_factor", 1.0),
        score_correction_bias=True,
        hash_layers=f.get_int("num_hash_layers", 0),
    )
    precision = read_precision(f, expert_only_quant=False)
    quant = f.get_object("quantization_config", None) or {}
    if quant.get("moe_quant_algo") == "NVFP4":
        precision = replace(precision, experts="nvfp4")
    elif f.has("expert_dtype"):
        kind = f.get_choice("expert_dtype", ("fp4", "fp8"))
        precision = replace(precision, experts="mxfp4" if kind == "fp4" else precision.experts)
    spec = trunk(f, name, source, attention, moe, dense_first=False, precision=precision)
    return replace(spec, mtp_layers=f.get_int("num_nextn_predict_layers", 0), hc_mult=f.get_int("hc_mult", 1))


def kimi_k25(f: Fields, name: str, source: str) -> ModelSpec:
    """kimi_k25 (Kimi-K2.5, and NVIDIA's NVFP4 copies of K2.5 to K2.7): a vision tower (not modelled) before
    Kimi K2's text model, whose DeepSeek-V3 fields are nested in ``text_config`` (``model_type`` kimi_k2 or
    deepseek_v3); ``quantization_config`` is read in ``text_config`` (Moonshot's INT4 experts) or, where the
    text model has none, at the top level (NVIDIA's NVFP4)."""
    text = f.nested("text_config", f.get_object("text_config"))
    text.get_choice("model_type", KIMI_TEXT_TYPES)  # Kimi K2's text model, as Moonshot and NVIDIA name it
    quant = text if text.get_object("quantization_config", None) is not None else f
    return deepseek(text, name, source, read_precision(text, expert_only_quant=False, quant=quant))


KIMI_TEXT_TYPES = ("kimi_k2", "deepseek_v3")


def glm4_moe(f: Fields, name: str, source: str) -> ModelSpec:
    """glm4_moe (GLM-4.5, -Air, -4.6): GQA over DeepSeek-V3's MoE layout; sigmoid routing with the correction
    bias is fixed by transformers' Glm4MoeMoE (the published configs mostly omit those two fields). Its
    attention has q/k/v biases but no o_proj bias, which the spec's ``bias`` counts (hidden_size a layer)."""
    f.unsupported_unless("topk_method", "noaux_tc", lambda v: v == "noaux_tc", "glm4_moe routing other than noaux_tc")
    f.unsupported_unless("scoring_func", "sigmoid", lambda v: v == "sigmoid", "glm4_moe scoring other than sigmoid")
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", False),
        qk_norm=f.get_bool("use_qk_norm", False),
    )
    return trunk(f, name, source, attention, routed_and_shared(f, "sigmoid", True), dense_first=True)
