"""demos.zoo.models.spec: every field is checked, errors are one line naming the field, the helpers' contracts."""

from __future__ import annotations

import dataclasses

import pytest

from demos.zoo.models.dtypes import DTYPES, dtype, storage_of
from demos.zoo.models.hybrid_spec import HybridMLAAttention
from demos.zoo.models.linear_spec import KimiDeltaAttention
from demos.zoo.models.spec import (
    BlockSparse,
    CompressedAttention,
    GatedDeltaNet,
    GQAAttention,
    MLAAttention,
    ModelSpec,
    ModelSpecError,
    MoESpec,
    Precision,
)

MLA = {
    "heads": 8,
    "q_lora_rank": 64,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
}
GQA = {"heads": 8, "kv_heads": 2, "head_dim": 16}
BSA = {"index_heads": 4, "index_head_dim": 16, "block_size": 8, "topk_blocks": 2}
GDN = {"key_heads": 4, "value_heads": 8, "key_head_dim": 16, "value_head_dim": 16}
KDA = {"heads": 4, "head_dim": 16}
HYBRID = {**MLA, "layer_types": ("linear_attention", "full_attention"), "linear": KimiDeltaAttention(**KDA)}
V4 = {
    "heads": 8,
    "head_dim": 32,
    "qk_rope_head_dim": 8,
    "q_lora_rank": 16,
    "o_groups": 2,
    "o_lora_rank": 16,
    "sliding_window": 8,
    "compress_ratios": (0, 4, 128, 4),
    "index_heads": 4,
    "index_head_dim": 16,
    "index_topk": 8,
}
MOE = {"routed_experts": 16, "top_k": 4, "intermediate_size": 32, "shared_experts": 1, "n_group": 4, "topk_group": 2}


def spec(**overrides) -> ModelSpec:
    base = {
        "name": "tiny",
        "source": "test",
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "num_layers": 4,
        "vocab_size": 100,
        "first_k_dense": 1,
        "dense_intermediate_size": 128,
        "attention": MLAAttention(**MLA),
        "moe": MoESpec(**MOE),
    }
    base.update(overrides)
    return ModelSpec(**base)


def test_a_valid_spec_and_its_helpers():
    s = spec()
    assert s.moe_layers == 3
    assert [s.is_moe_layer(i) for i in range(4)] == [False, True, True, True]
    assert s.attention.kind == "mla" and s.attention.kv_cache_width == 32 + 8
    assert s.precision == Precision()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.hidden_size = 1  # type: ignore[misc]


@pytest.mark.parametrize("layer", [-1, 4, 1.0, True])
def test_is_moe_layer_rejects_layers_out_of_range(layer):
    with pytest.raises(ModelSpecError, match=r"^ModelSpec\.layer: must be an int in \[0, 4\)"):
        spec().is_moe_layer(layer)


def test_gqa_window_per_layer():
    alternating = GQAAttention(
        **GQA, sliding_window=128, layer_types=("sliding_attention", "full_attention", "sliding_attention")
    )
    assert [alternating.window_of(i) for i in range(3)] == [128, None, 128]
    assert GQAAttention(**GQA, sliding_window=4096).window_of(7) == 4096  # no layer_types: every layer slides
    assert GQAAttention(**GQA).window_of(0) is None


def test_dense_model_and_no_dense_layers():
    dense = spec(moe=None, first_k_dense=4)
    assert dense.moe_layers == 0 and not dense.is_moe_layer(3)
    all_moe = spec(first_k_dense=0, dense_intermediate_size=None)
    assert all_moe.moe_layers == 4


def test_precision_bytes():
    p = Precision(experts="mxfp4", dispatch="fp8_e4m3")
    assert p.bytes_of("experts") == 17 / 32 and p.bytes_of("dispatch") == 1.0 and p.bytes_of("combine") == 2.0
    assert set(DTYPES) >= {"bfloat16", "fp8_e4m3", "mxfp4"}
    with pytest.raises(ModelSpecError, match=r"^Precision\.part:"):
        p.bytes_of("activations")


def test_the_dtype_table_gives_bytes_and_the_math_rate_of_each_storage():
    """One table: FP8 weights multiply in FP8 with FP8 activations, NVFP4 in FP4 with NVFP4 activations, MXFP4
    as W4A8 (the FP8 rate where the GPU has FP4 tensor cores); every other storage at the BF16 rate with BF16
    activations (a W4A16 MXFP4 checkpoint's scales in its bytes)."""
    assert dtype("fp8_e4m3") == dtype("fp8_e4m3") and dtype("fp8_e4m3").math == "fp8"
    assert (dtype("fp8_e5m2").bytes, dtype("fp8_e5m2").activation_bytes) == (1.0, 1.0)
    assert (dtype("mxfp4").bytes, dtype("mxfp4").math, dtype("mxfp4").activation_bytes) == (17 / 32, "w4a8", 2.0)
    assert (dtype("mxfp4_w4a16").bytes, dtype("mxfp4_w4a16").math) == (17 / 32, "bfloat16")
    assert (dtype("nvfp4").bytes, dtype("nvfp4").math, dtype("nvfp4").activation_bytes) == (18 / 32, "fp4", 18 / 32)
    others = (d for n, d in DTYPES.items() if not n.startswith("fp8") and n not in ("nvfp4", "mxfp4"))
    assert all(d.math == "bfloat16" and d.activation_bytes == 2.0 for d in others)
    assert storage_of("fp8") == "fp8_e4m3" and storage_of("bfloat16") == "bfloat16" and storage_of("fp4") == "nvfp4"
    with pytest.raises(KeyError, match="unknown dtype 'fp6'; known: float32"):
        dtype("fp6")
    with pytest.raises(KeyError, match="no storage dtype multiplies at 'float32'"):
        storage_of("float32")


# (constructor, keyword overrides, the field the error must name, a fragment of the reason)
BAD = [
    (Precision, {"dispatch": "fp6"}, "Precision.dispatch", "must be one of"),
    (MLAAttention, {**MLA, "heads": 0}, "MLAAttention.heads", "must be >= 1"),
    (MLAAttention, {**MLA, "heads": True}, "MLAAttention.heads", "must be an int, got bool"),
    (MLAAttention, {**MLA, "q_lora_rank": 0}, "MLAAttention.q_lora_rank", "must be >= 1"),
    (MLAAttention, {**MLA, "kv_lora_rank": 32.0}, "MLAAttention.kv_lora_rank", "must be an int, got float"),
    (MLAAttention, {**MLA, "qk_rope_head_dim": 7}, "MLAAttention.qk_rope_head_dim", "must be even"),
    (MLAAttention, {**MLA, "qk_nope_head_dim": -1}, "MLAAttention.qk_nope_head_dim", "must be >= 1"),
    (MLAAttention, {**MLA, "v_head_dim": "16"}, "MLAAttention.v_head_dim", "must be an int, got str"),
    (GQAAttention, {**GQA, "heads": 0}, "GQAAttention.heads", "must be >= 1"),
    (GQAAttention, {**GQA, "kv_heads": 3}, "GQAAttention.kv_heads", "must divide heads (8)"),
    (GQAAttention, {**GQA, "qk_norm": "on"}, "GQAAttention.qk_norm", "must be a bool"),
    (GQAAttention, {**GQA, "head_dim": 15}, "GQAAttention.head_dim", "must be even"),
    (GQAAttention, {**GQA, "bias": 1}, "GQAAttention.bias", "must be a bool"),
    (GQAAttention, {**GQA, "sinks": None}, "GQAAttention.sinks", "must be a bool"),
    (GQAAttention, {**GQA, "sliding_window": 0}, "GQAAttention.sliding_window", "must be >= 1"),
    (GQAAttention, {**GQA, "layer_types": ["full_attention"]}, "GQAAttention.layer_types", "non-empty tuple"),
    (GQAAttention, {**GQA, "layer_types": ("local",)}, "GQAAttention.layer_types", "entry 0 must be one of"),
    (
        GQAAttention,
        {**GQA, "layer_types": ("sliding_attention",)},
        "GQAAttention.sliding_window",
        "must be set when layer_types",
    ),
    (GQAAttention, {**GQA, "output_gate": "yes"}, "GQAAttention.output_gate", "must be a bool"),
    (GQAAttention, {**GQA, "linear": dict(GDN)}, "GQAAttention.linear", "must be a GatedDeltaNet or None"),
    (
        GQAAttention,
        {**GQA, "layer_types": ("linear_attention", "full_attention")},
        "GQAAttention.linear",
        "must be set exactly when layer_types has linear_attention layers, got None",
    ),
    (
        GQAAttention,
        {**GQA, "linear": GatedDeltaNet(**GDN)},
        "GQAAttention.linear",
        "must be set exactly when layer_types has linear_attention layers, got a GatedDeltaNet",
    ),
    (GQAAttention, {**GQA, "block_sparse": dict(BSA)}, "GQAAttention.block_sparse", "must be a BlockSparse or None"),
    (
        GQAAttention,
        {**GQA, "block_sparse": BlockSparse(**BSA)},
        "GQAAttention.block_sparse",
        "must be set exactly when layer_types has block_sparse_attention layers, got a BlockSparse",
    ),
    (BlockSparse, {**BSA, "index_heads": 0}, "BlockSparse.index_heads", "must be >= 1"),
    (BlockSparse, {**BSA, "index_head_dim": 0}, "BlockSparse.index_head_dim", "must be >= 1"),
    (BlockSparse, {**BSA, "block_size": 0}, "BlockSparse.block_size", "must be >= 1"),
    (BlockSparse, {**BSA, "topk_blocks": 1.5}, "BlockSparse.topk_blocks", "must be an int"),
    (BlockSparse, {**BSA, "local_blocks": -1}, "BlockSparse.local_blocks", "must be >= 0"),
    (BlockSparse, {**BSA, "init_blocks": -1}, "BlockSparse.init_blocks", "must be >= 0"),
    (GatedDeltaNet, {**GDN, "key_heads": 0}, "GatedDeltaNet.key_heads", "must be >= 1"),
    (GatedDeltaNet, {**GDN, "value_heads": 6}, "GatedDeltaNet.value_heads", "must be a multiple of key_heads (4)"),
    (GatedDeltaNet, {**GDN, "key_head_dim": 1.5}, "GatedDeltaNet.key_head_dim", "must be an int, got float"),
    (GatedDeltaNet, {**GDN, "value_head_dim": 0}, "GatedDeltaNet.value_head_dim", "must be >= 1"),
    (GatedDeltaNet, {**GDN, "conv_kernel": 0}, "GatedDeltaNet.conv_kernel", "must be >= 1"),
    (MoESpec, {**MOE, "routed_experts": 0}, "MoESpec.routed_experts", "must be >= 1"),
    (MoESpec, {**MOE, "top_k": 17}, "MoESpec.top_k", "must be <= routed_experts (16)"),
    (MoESpec, {**MOE, "intermediate_size": 0}, "MoESpec.intermediate_size", "must be >= 1"),
    (MoESpec, {**MOE, "shared_experts": -1}, "MoESpec.shared_experts", "must be >= 0"),
    (MoESpec, {**MOE, "scoring": "relu"}, "MoESpec.scoring", "must be one of softmax, sigmoid"),
    (MoESpec, {**MOE, "norm_topk_prob": "yes"}, "MoESpec.norm_topk_prob", "must be a bool"),
    (MoESpec, {**MOE, "routed_scaling_factor": 0.0}, "MoESpec.routed_scaling_factor", "must be a number > 0"),
    (MoESpec, {**MOE, "routed_scaling_factor": True}, "MoESpec.routed_scaling_factor", "must be a number > 0"),
    (MoESpec, {**MOE, "n_group": 5}, "MoESpec.n_group", "must divide routed_experts (16)"),
    (MoESpec, {**MOE, "topk_group": 5}, "MoESpec.topk_group", "must be <= n_group (4)"),
    (MoESpec, {**MOE, "top_k": 9}, "MoESpec.top_k", "must be <= the 8 experts of topk_group (2) groups"),
    (MoESpec, {**MOE, "router_bias": 0}, "MoESpec.router_bias", "must be a bool"),
    (MoESpec, {**MOE, "score_correction_bias": None}, "MoESpec.score_correction_bias", "must be a bool"),
    (MoESpec, {**MOE, "expert_bias": "no"}, "MoESpec.expert_bias", "must be a bool"),
    (MoESpec, {**MOE, "hash_layers": -1}, "MoESpec.hash_layers", "must be >= 0"),
    (MoESpec, {**MOE, "latent_size": 0}, "MoESpec.latent_size", "must be >= 1"),
    (KimiDeltaAttention, {**KDA, "heads": 0}, "KimiDeltaAttention.heads", "must be >= 1"),
    (KimiDeltaAttention, {**KDA, "head_dim": 2.0}, "KimiDeltaAttention.head_dim", "must be an int, got float"),
    (KimiDeltaAttention, {**KDA, "conv_kernel": 0}, "KimiDeltaAttention.conv_kernel", "must be >= 1"),
    (KimiDeltaAttention, {**KDA, "full_rank_gate": 1}, "KimiDeltaAttention.full_rank_gate", "must be a bool"),
    (HybridMLAAttention, {**HYBRID, "heads": 0}, "MLAAttention.heads", "must be >= 1"),
    (HybridMLAAttention, {**HYBRID, "layer_types": ()}, "HybridMLAAttention.layer_types", "must be a non-empty tuple"),
    (
        HybridMLAAttention,
        {**HYBRID, "layer_types": ("sliding_attention",)},
        "HybridMLAAttention.layer_types",
        "entry 0 must be one of full_attention, linear_attention",
    ),
    (HybridMLAAttention, {**HYBRID, "linear": None}, "HybridMLAAttention.linear", "must be a KimiDeltaAttention"),
    (HybridMLAAttention, {**HYBRID, "output_gate": "no"}, "HybridMLAAttention.output_gate", "must be a bool"),
    (CompressedAttention, {**V4, "heads": 0}, "CompressedAttention.heads", "must be >= 1"),
    (CompressedAttention, {**V4, "head_dim": 0}, "CompressedAttention.head_dim", "must be >= 1"),
    (CompressedAttention, {**V4, "qk_rope_head_dim": 7}, "CompressedAttention.qk_rope_head_dim", "must be even"),
    (CompressedAttention, {**V4, "qk_rope_head_dim": 32}, "CompressedAttention.qk_rope_head_dim", "below head_dim"),
    (CompressedAttention, {**V4, "q_lora_rank": 0}, "CompressedAttention.q_lora_rank", "must be >= 1"),
    (CompressedAttention, {**V4, "o_groups": 3}, "CompressedAttention.o_groups", "must divide heads (8)"),
    (CompressedAttention, {**V4, "o_lora_rank": 1.0}, "CompressedAttention.o_lora_rank", "must be an int"),
    (CompressedAttention, {**V4, "sliding_window": 0}, "CompressedAttention.sliding_window", "must be >= 1"),
    (CompressedAttention, {**V4, "compress_ratios": [4]}, "CompressedAttention.compress_ratios", "non-empty tuple"),
    (CompressedAttention, {**V4, "compress_ratios": (8,)}, "CompressedAttention.compress_ratios", "entry 0 must be"),
    (CompressedAttention, {**V4, "index_heads": 0}, "CompressedAttention.index_heads", "must be >= 1"),
    (CompressedAttention, {**V4, "index_head_dim": 0}, "CompressedAttention.index_head_dim", "must be >= 1"),
    (CompressedAttention, {**V4, "index_topk": 0}, "CompressedAttention.index_topk", "must be >= 1"),
]


@pytest.mark.parametrize("cls,kwargs,field,reason", BAD, ids=[f"{b[2]}-{i}" for i, b in enumerate(BAD)])
def test_every_part_rejects_bad_fields_in_one_line(cls, kwargs, field, reason):
    with pytest.raises(ModelSpecError) as info:
        cls(**kwargs)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{field}: ")
    assert reason in message
    assert info.value.field == field


BAD_SPEC = [
    ({"name": ""}, "ModelSpec.name", "non-empty str"),
    ({"source": None}, "ModelSpec.source", "non-empty str"),
    ({"model_type": "  "}, "ModelSpec.model_type", "non-empty str"),
    ({"hidden_size": 0}, "ModelSpec.hidden_size", "must be >= 1"),
    ({"num_layers": 2.5}, "ModelSpec.num_layers", "must be an int, got float"),
    ({"vocab_size": -3}, "ModelSpec.vocab_size", "must be >= 1"),
    ({"first_k_dense": 5}, "ModelSpec.first_k_dense", "must be <= num_layers (4)"),
    ({"first_k_dense": -1}, "ModelSpec.first_k_dense", "must be >= 0"),
    ({"moe": None}, "ModelSpec.first_k_dense", "a dense model (moe None) has every layer dense: must be 4"),
    ({"moe": {"routed_experts": 4}}, "ModelSpec.moe", "must be a MoESpec or None"),
    ({"dense_intermediate_size": None}, "ModelSpec.dense_intermediate_size", "must be an int, got NoneType"),
    ({"first_k_dense": 0}, "ModelSpec.dense_intermediate_size", "must be None without dense layers"),
    ({"attention": dict(MLA)}, "ModelSpec.attention", "must be an MLAAttention, GQAAttention or CompressedAttention"),
    (
        {"attention": CompressedAttention(**{**V4, "compress_ratios": (4, 4)})},
        "CompressedAttention.compress_ratios",
        "must have num_layers (4) entries, got 2",
    ),
    ({"hc_mult": 0}, "ModelSpec.hc_mult", "must be >= 1"),
    ({"hc_mult": 4}, "ModelSpec.hc_mult", "modelled around MoE layers only, got 1 dense"),
    (
        {"moe": MoESpec(**MOE, hash_layers=4)},
        "MoESpec.hash_layers",
        "must be <= the 3 MoE layers, got 4",
    ),
    (
        {"attention": GQAAttention(**GQA, sliding_window=8, layer_types=("sliding_attention",) * 3)},
        "GQAAttention.layer_types",
        "must have num_layers (4) entries, got 3",
    ),
    ({"tie_embeddings": "false"}, "ModelSpec.tie_embeddings", "must be a bool"),
    ({"precision": "bfloat16"}, "ModelSpec.precision", "must be a Precision"),
    ({"mtp_layers": -1}, "ModelSpec.mtp_layers", "must be >= 0"),
    ({"attn_res_block": -1}, "ModelSpec.attn_res_block", "must be >= 0"),
    (
        {"attention": HybridMLAAttention(**{**HYBRID, "layer_types": ("full_attention",)})},
        "HybridMLAAttention.layer_types",
        "must have num_layers",
    ),
]


@pytest.mark.parametrize("overrides,field,reason", BAD_SPEC, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD_SPEC)])
def test_model_spec_rejects_bad_fields_in_one_line(overrides, field, reason):
    with pytest.raises(ModelSpecError) as info:
        spec(**overrides)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{field}: ") and reason in message
    assert info.value.field == field


def test_every_field_of_every_part_is_covered_by_a_rejection_case():
    """A field added without a check (and without a case above) fails here."""
    named = {b[2] for b in BAD} | {b[1] for b in BAD_SPEC}
    parts = (Precision, MLAAttention, GQAAttention, GatedDeltaNet, BlockSparse, CompressedAttention, MoESpec, ModelSpec)
    parts += (KimiDeltaAttention, HybridMLAAttention)
    for cls in parts:
        for f in dataclasses.fields(cls):
            if cls is HybridMLAAttention and f.name in MLA:
                continue  # MLA's fields, checked (and named) as MLAAttention's
            qualified = f"{cls.__name__}.{f.name}"
            assert qualified in named or cls is Precision, f"no rejection case names {qualified}"
    names = ("weights", "experts", "dispatch", "combine", "kv_cache", "mlp", "attention_out")
    assert {f.name for f in dataclasses.fields(Precision)} == set(names)
    for name in names:
        with pytest.raises(ModelSpecError, match=rf"^Precision\.{name}: must be one of"):
            Precision(**{name: "int3"})
    for name in ("weights", "experts", "dispatch", "combine", "kv_cache"):  # only the two overrides may be None
        with pytest.raises(ModelSpecError, match=rf"^Precision\.{name}: must be one of"):
            Precision(**{name: None})
