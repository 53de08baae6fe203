"""The readers of the GQA families with routed experts only (``demos.zoo.models.hf_config``): ``qwen3_moe``,
``mixtral``, ``minimax_m2`` and ``gpt_oss``, each with every layer an MoE layer, the hybrid ones with Gated
DeltaNet layers between them (``qwen3_next``, ``qwen3_5_moe``), and ``minimax_m3`` (block-sparse attention,
dense first layers, a shared expert).
"""

from __future__ import annotations

from dataclasses import replace

from demos.zoo.models.hf_config._fields import Fields, is_one
from demos.zoo.models.hf_config._quantization import read_precision
from demos.zoo.models.hf_config._trunk import trunk
from demos.zoo.models.spec import SCORING_FUNCS, BlockSparse, GatedDeltaNet, GQAAttention, ModelSpec, MoESpec


def qwen3_moe(f: Fields, name: str, source: str) -> ModelSpec:
    """qwen3_moe: every layer MoE (mlp_only_layers empty, decoder_sparse_step 1), GQA with q/k norms."""
    f.unsupported_unless("mlp_only_layers", [], lambda v: v == [], "dense layers between MoE layers")
    f.unsupported_unless("decoder_sparse_step", 1, is_one, "an MoE layer other than every layer")
    f.unsupported_unless("use_sliding_window", False, lambda v: v is False, "Qwen sliding-window layers")
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", False),
        qk_norm=True,
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("moe_intermediate_size"),
        norm_topk_prob=f.get_bool("norm_topk_prob"),
    )
    return trunk(f, name, source, attention, moe, dense_first=False)


def mixtral(f: Fields, name: str, source: str) -> ModelSpec:
    """mixtral: every layer MoE with experts of intermediate_size; head_dim defaults to hidden / heads."""
    hidden, heads = f.get_int("hidden_size"), f.get_int("num_attention_heads")
    if f.config.get("head_dim") is not None:
        head_dim = f.get_int("head_dim")
    elif hidden < 1:
        raise f.fail("hidden_size", f"is invalid: must be >= 1, got {hidden}")
    elif heads < 1 or hidden % heads:
        raise f.fail("num_attention_heads", f"must divide hidden_size ({hidden}) when head_dim is absent, got {heads}")
    else:
        head_dim = hidden // heads
    attention = GQAAttention(
        heads=heads,
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=head_dim,
        sliding_window=f.get_int("sliding_window", None, nullable=True),
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("intermediate_size"),
    )
    return trunk(f, name, source, attention, moe, dense_first=False)


def minimax_m2(f: Fields, name: str, source: str) -> ModelSpec:
    """minimax_m2 (MiniMax-M2 to M2.7): softmax GQA in every layer (``attn_type_list`` all 1, where given),
    q and k RMS-normed over all their heads, 256 experts of ``intermediate_size`` routed by sigmoid with the
    selection-only correction bias (``use_routing_bias``) and renormalized (vLLM's and SGLang's MiniMaxM2MoE
    do), no shared expert. Not read: ``rotary_dim`` (partial RoPE: no shape or cost) and the MTP modules
    (``num_mtp_modules``: the engines skip them; the published total leaves them out)."""
    f.unsupported_unless(
        "attn_type_list", [], lambda v: isinstance(v, list) and all(t == 1 for t in v), "lightning (linear) attention"
    )
    f.unsupported_unless("shared_intermediate_size", 0, lambda v: v == 0, "a shared expert")
    qk_norm = f.get_bool("use_qk_norm", False)
    if qk_norm:
        f.unsupported_unless("qk_norm_type", "per_layer", lambda v: v == "per_layer", "a q/k norm other than per_layer")
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", False),
        qk_norm=qk_norm,
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("intermediate_size"),
        scoring=f.get_choice("scoring_func", SCORING_FUNCS),
        score_correction_bias=f.get_bool("use_routing_bias", False),
    )
    return trunk(f, name, source, attention, moe, dense_first=False)


def gpt_oss(f: Fields, name: str, source: str) -> ModelSpec:
    """gpt_oss: biased GQA with sinks over layer_types, biased router and experts, MXFP4 experts only."""
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        bias=f.get_bool("attention_bias", True),
        sinks=True,
        sliding_window=f.get_int("sliding_window"),
        layer_types=f.get_str_list("layer_types"),
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=f.get_int("intermediate_size"),
        router_bias=True,
        expert_bias=True,
    )
    return trunk(f, name, source, attention, moe, dense_first=False)


def qwen3_next(f: Fields, name: str, source: str) -> ModelSpec:
    """qwen3_next (Qwen3-Next) and qwen3_5_moe (Qwen3.5 and Qwen3.6's MoE, whose text model is nested in
    ``text_config`` beside a vision tower that is not modelled): every layer an MoE layer with one shared
    expert of ``shared_expert_intermediate_size`` (which must equal the routed experts'), and hybrid
    attention: ``layer_types`` (or, where absent, every ``full_attention_interval``-th layer full) of Gated
    DeltaNet layers (``linear_*``) and gated GQA layers (``attn_output_gate``, q/k norms). The MTP layers
    (``mtp_num_hidden_layers``) count in memory as DeepSeek's do. A quantization is read at the top level
    (NVIDIA's NVFP4 copies) or in the text model."""
    text = f.nested("text_config", f.get_object("text_config")) if f.model_type == "qwen3_5_moe" else f
    text.unsupported_unless("mlp_only_layers", [], lambda v: v == [], "dense layers between MoE layers")
    text.unsupported_unless("decoder_sparse_step", 1, is_one, "an MoE layer other than every layer")
    routed = text.get_int("moe_intermediate_size")
    shared = text.get_int("shared_expert_intermediate_size", 0)
    if shared not in (0, routed) and routed >= 1:  # a bad routed size is named by MoESpec
        raise text.fail("shared_expert_intermediate_size", f"must equal moe_intermediate_size ({routed}), got {shared}")
    layers = text.get_int("num_hidden_layers")
    if text.has("layer_types"):
        types = text.get_str_list("layer_types")
    else:
        every = text.get_int("full_attention_interval")
        types = tuple("full_attention" if (i + 1) % max(1, every) == 0 else "linear_attention" for i in range(layers))
    linear = GatedDeltaNet(
        key_heads=text.get_int("linear_num_key_heads"),
        value_heads=text.get_int("linear_num_value_heads"),
        key_head_dim=text.get_int("linear_key_head_dim"),
        value_head_dim=text.get_int("linear_value_head_dim"),
        conv_kernel=text.get_int("linear_conv_kernel_dim", 4),
    )
    attention = GQAAttention(
        heads=text.get_int("num_attention_heads"),
        kv_heads=text.get_int("num_key_value_heads"),
        head_dim=text.get_int("head_dim"),
        bias=text.get_bool("attention_bias", False),
        qk_norm=True,
        output_gate=text.get_bool("attn_output_gate", True),
        layer_types=types,
        linear=linear if "linear_attention" in types else None,
    )
    moe = MoESpec(
        routed_experts=text.get_int("num_experts"),
        top_k=text.get_int("num_experts_per_tok"),
        intermediate_size=routed,
        shared_experts=1 if shared else 0,
        norm_topk_prob=text.get_bool("norm_topk_prob", True),
    )
    quant = f if f.get_object("quantization_config", None) is not None else text
    precision = read_precision(text, expert_only_quant=False, quant=quant)
    spec = trunk(text, name, source, attention, moe, dense_first=False, precision=precision)
    tied = f.get_bool("tie_word_embeddings", False) or text.get_bool("tie_word_embeddings", False)
    return replace(
        spec, model_type=f.model_type, tie_embeddings=tied, mtp_layers=text.get_int("mtp_num_hidden_layers", 0)
    )


def minimax_m3(f: Fields, name: str, source: str) -> ModelSpec:
    """minimax_m3 (MiniMax-M3): MiniMax-M2's GQA (q/k norms per head) with block-sparse attention in the layers
    ``sparse_attention_config.sparse_attention_freq`` marks (``BlockSparse``: the index's heads and dim, the
    block size, the top blocks, the local and first blocks), the first layers dense (``moe_layer_freq``
    zeros, of ``dense_intermediate_size``), then MoE layers of ``num_local_experts`` routed experts and
    ``n_shared_experts`` shared ones of ``moe_intermediate_size``. Not read, as for M2: the partial RoPE and
    the MTP modules."""
    layers = f.get_int("num_hidden_layers")
    if layers < 1:
        raise f.fail("num_hidden_layers", f"must be >= 1, got {layers}")
    freq = f.get_int_list("moe_layer_freq")
    first_k = next((i for i, v in enumerate(freq) if v), len(freq))
    if len(freq) != layers or any(v != 1 for v in freq[first_k:]) or any(freq[:first_k]):
        raise f.fail("moe_layer_freq", "must be dense layers (0) first, then MoE layers (1), one per layer")
    routed = f.get_int("moe_intermediate_size")
    shared = f.get_int("shared_intermediate_size", routed)
    if shared != routed and routed >= 1:
        raise f.fail("shared_intermediate_size", f"must equal moe_intermediate_size ({routed}), got {shared}")
    f.unsupported_unless("attention_output_gate", False, lambda v: v is False, "an attention output gate")
    sparse = f.nested("sparse_attention_config", f.get_object("sparse_attention_config"))
    sparse.unsupported_unless("sparse_score_type", "max", lambda v: v == "max", "a block score other than max")
    on = sparse.get_int_list("sparse_attention_freq") if sparse.get_bool("use_sparse_attention", True) else ()
    types = tuple("block_sparse_attention" if v else "full_attention" for v in on) or None
    block = BlockSparse(
        index_heads=sparse.get_int("sparse_num_index_heads"),
        index_head_dim=sparse.get_int("sparse_index_dim"),
        block_size=sparse.get_int("sparse_block_size"),
        topk_blocks=sparse.get_int("sparse_topk_blocks"),
        local_blocks=sparse.get_int("sparse_local_block", 1),
        init_blocks=sparse.get_int("sparse_init_block", 0),
    )
    attention = GQAAttention(
        heads=f.get_int("num_attention_heads"),
        kv_heads=f.get_int("num_key_value_heads"),
        head_dim=f.get_int("head_dim"),
        qk_norm=f.get_bool("use_qk_norm", False),
        layer_types=types,
        block_sparse=block if types and "block_sparse_attention" in types else None,
    )
    moe = MoESpec(
        routed_experts=f.get_int("num_local_experts"),
        top_k=f.get_int("num_experts_per_tok"),
        intermediate_size=routed,
        shared_experts=f.get_int("n_shared_experts", 0),
        scoring=f.get_choice("scoring_func", SCORING_FUNCS),
        score_correction_bias=f.get_bool("use_routing_bias", False),
        routed_scaling_factor=f.get_float("routed_scaling_factor", 1.0),
    )
    spec = trunk(f, name, source, attention, moe, dense_first=False)
    dense = f.get_int("dense_intermediate_size") if first_k else None
    return replace(spec, first_k_dense=first_k, dense_intermediate_size=dense)
