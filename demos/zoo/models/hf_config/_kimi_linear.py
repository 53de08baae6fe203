"""The reader of Kimi-K3 (``kimi_k3``, and its text model ``kimi_linear`` read alone): KDA linear attention
beside MLA, a latent MoE, block attention residuals (``demos.zoo.models.hf_config``).
"""

from __future__ import annotations

from dataclasses import replace

from demos.zoo.models.hf_config._deepseek import mla_fields
from demos.zoo.models.hf_config._fields import Fields, is_one
from demos.zoo.models.hf_config._quantization import read_precision
from demos.zoo.models.hf_config._trunk import trunk
from demos.zoo.models.hybrid_spec import HybridMLAAttention
from demos.zoo.models.linear_spec import KimiDeltaAttention
from demos.zoo.models.spec import ModelSpec, MoESpec


def _layer_types(lin: Fields, layers: int) -> tuple[str, ...]:
    """Each layer's type from ``linear_attn_config``'s 1-based ``kda_layers`` and ``full_attn_layers`` (Moonshot
    numbers them from 1): every layer in exactly one list."""
    kda, full = set(lin.get_int_list("kda_layers")), set(lin.get_int_list("full_attn_layers"))
    for field, got in (("kda_layers", kda), ("full_attn_layers", full)):
        bad = sorted(i for i in got if not 1 <= i <= layers)
        if bad:
            raise lin.fail(field, f"numbers layers from 1 to num_hidden_layers ({layers}), got {bad[:3]}")
    if kda & full or len(kda | full) != layers:
        raise lin.fail("kda_layers", f"and full_attn_layers must list each of the {layers} layers once")
    return tuple("linear_attention" if i + 1 in kda else "full_attention" for i in range(layers))


def kimi_linear_text(f: Fields, name: str, source: str) -> ModelSpec:
    """Kimi Linear's text fields (``kimi_linear``; Kimi-K3's ``text_config``): MLA (``q_lora_rank``,
    ``kv_lora_rank``...; ``mla_use_output_gate``) in the ``full_attn_layers``, KDA
    (``linear_attn_config``: ``num_heads``, ``head_dim``, ``short_conv_kernel_size``, ``use_full_rank_gate``)
    in the ``kda_layers``; ``first_k_dense_replace`` dense layers of ``intermediate_size``, then MoE layers of
    ``num_experts`` routed experts (``num_experts_per_token``, sigmoid scoring with the correction bias,
    ``moe_renormalize``) and ``num_shared_experts``, at ``routed_expert_hidden_size`` when set (a latent MoE);
    ``attn_res_block_size`` block attention residuals. Routed experts as ``quantization_config`` gives them
    (Kimi-K3: MXFP4 weights, BF16 activations); the rest BF16."""
    f.unsupported_unless("moe_layer_freq", 1, is_one, "an MoE layer other than every layer")
    f.unsupported_unless("topk_method", "noaux_tc", lambda v: v == "noaux_tc", "routing other than noaux_tc")
    layers = f.get_int("num_hidden_layers")
    if layers < 1:
        raise f.fail("num_hidden_layers", f"is invalid: must be >= 1, got {layers}")
    lin = f.nested("linear_attn_config", f.get_object("linear_attn_config"))
    kda = KimiDeltaAttention(
        heads=lin.get_int("num_heads"),
        head_dim=lin.get_int("head_dim"),
        conv_kernel=lin.get_int("short_conv_kernel_size", 4),
        full_rank_gate=lin.get_bool("use_full_rank_gate", False),
    )
    attention = HybridMLAAttention(
        **mla_fields(f),
        layer_types=_layer_types(lin, layers),
        linear=kda,
        output_gate=f.get_bool("mla_use_output_gate", False),
    )
    latent = f.get_int("routed_expert_hidden_size", None, nullable=True)
    moe = MoESpec(
        routed_experts=f.get_int("num_experts"),
        top_k=f.get_int("num_experts_per_token"),
        intermediate_size=f.get_int("moe_intermediate_size"),
        shared_experts=f.get_int("num_shared_experts", 0),
        scoring=f.get_choice("moe_router_activation_func", ("softmax", "sigmoid"), "sigmoid"),
        norm_topk_prob=f.get_bool("moe_renormalize", True),
        routed_scaling_factor=f.get_float("routed_scaling_factor", 1.0),
        n_group=f.get_int("num_expert_group", 1),
        topk_group=f.get_int("topk_group", 1),
        score_correction_bias=True,
        latent_size=latent or None,
    )
    spec = trunk(
        f, name, source, attention, moe, dense_first=True, precision=read_precision(f, expert_only_quant=False)
    )
    return replace(spec, attn_res_block=f.get_int("attn_res_block_size", 0, nullable=True) or 0)


def kimi_k3(f: Fields, name: str, source: str) -> ModelSpec:
    """kimi_k3 (Kimi-K3): a vision tower (not modelled) before Kimi Linear's text model in ``text_config``."""
    text = f.nested("text_config", f.get_object("text_config"))
    text.get_choice("model_type", ("kimi_linear",))
    return kimi_linear_text(text, name, source)
