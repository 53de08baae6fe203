"""demos.zoo.models.shrink: small specs keep the architecture, divide the widths, stay valid for every factor."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demos.zoo.models.params import count_params
from demos.zoo.models.presets import PRESET_NAMES, get_preset
from demos.zoo.models.shrink import shrink
from demos.zoo.models.spec import CompressedAttention, MLAAttention, ModelSpec, ModelSpecError


def check_shrunk(original: ModelSpec, small: ModelSpec, factor: int, min_experts: int = 1) -> None:
    # Layer structure, kinds, flags and precision kept.
    for name in ("num_layers", "first_k_dense", "mtp_layers", "model_type", "tie_embeddings", "precision", "hc_mult"):
        assert getattr(small, name) == getattr(original, name), name
    assert small.attention.kind == original.attention.kind
    # Widths divided (floor, at least 1).
    assert small.hidden_size == max(1, original.hidden_size // factor)
    assert small.vocab_size == max(1, original.vocab_size // factor)
    if original.dense_intermediate_size is None:
        assert small.dense_intermediate_size is None
    else:
        assert small.dense_intermediate_size == max(1, original.dense_intermediate_size // factor)
    a, b = original.attention, small.attention
    assert b.heads == max(1, a.heads // factor)
    if isinstance(a, MLAAttention):
        assert b.kv_lora_rank == max(1, a.kv_lora_rank // factor)
        assert (b.q_lora_rank is None) == (a.q_lora_rank is None)
        dims = (b.qk_nope_head_dim, b.qk_rope_head_dim, b.v_head_dim)
    elif isinstance(a, CompressedAttention):
        assert (b.compress_ratios, b.sliding_window) == (a.compress_ratios, a.sliding_window)
        assert b.heads % b.o_groups == 0 and b.o_groups <= max(1, a.o_groups // factor)
        assert b.qk_rope_head_dim < b.head_dim
        dims = (b.head_dim, b.index_head_dim)
    else:
        assert b.heads % b.kv_heads == 0 and b.kv_heads <= max(1, a.kv_heads // factor)
        assert (b.bias, b.qk_norm, b.sinks, b.sliding_window, b.layer_types) == (
            a.bias,
            a.qk_norm,
            a.sinks,
            a.sliding_window,
            a.layer_types,
        )
        dims = (b.head_dim,)
    assert all(d >= 2 and d % 2 == 0 for d in dims)
    m, n = original.moe, small.moe
    assert n.routed_experts == min(m.routed_experts, max(min_experts, m.routed_experts // factor))
    assert n.top_k == min(m.top_k, n.routed_experts)
    assert n.shared_experts == m.shared_experts
    assert n.intermediate_size == max(1, m.intermediate_size // factor)
    assert n.routed_experts % n.n_group == 0 and n.topk_group <= n.n_group
    assert n.top_k <= n.topk_group * (n.routed_experts // n.n_group)
    assert (n.scoring, n.norm_topk_prob, n.router_bias, n.expert_bias, n.score_correction_bias) == (
        m.scoring,
        m.norm_topk_prob,
        m.router_bias,
        m.expert_bias,
        m.score_correction_bias,
    )
    assert small.name == f"{original.name}/{factor}" and small.source.startswith(original.source)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_factor_32(name):
    original = get_preset(name)
    small = shrink(original, 32)
    check_shrunk(original, small, 32)
    assert count_params(small).total < count_params(original).total / 32**2


def test_deepseek_v3_by_32_in_numbers():
    s = shrink(get_preset("deepseek-v3"), 32)
    assert (s.hidden_size, s.vocab_size, s.dense_intermediate_size, s.moe.intermediate_size) == (224, 4040, 576, 64)
    assert s.attention == MLAAttention(
        heads=4, q_lora_rank=48, kv_lora_rank=16, qk_nope_head_dim=4, qk_rope_head_dim=2, v_head_dim=4
    )
    # 256 experts / 32 = 8, top-8 kept, groups 8 // 32 -> 1 group: every expert reachable.
    assert (s.moe.routed_experts, s.moe.top_k, s.moe.n_group, s.moe.topk_group) == (8, 8, 1, 1)


def test_groups_that_still_reach_top_k():
    s = shrink(get_preset("deepseek-v3"), 2)  # 128 experts in 8 // 2 = 4 groups, topk_group min(4, 4)
    assert (s.moe.routed_experts, s.moe.n_group, s.moe.topk_group, s.moe.top_k) == (128, 4, 4, 8)


def test_factor_1_keeps_everything_but_the_name():
    original = get_preset("gpt-oss-120b")
    small = shrink(original, 1)
    assert dataclasses.replace(small, name=original.name, source=original.source) == original


def test_min_experts_keeps_routing_sparse():
    mixtral = get_preset("mixtral-8x7b")
    assert shrink(mixtral, 8).moe.routed_experts == 1 and shrink(mixtral, 8).moe.top_k == 1
    kept = shrink(mixtral, 8, min_experts=4)
    assert (kept.moe.routed_experts, kept.moe.top_k) == (4, 2)
    assert shrink(mixtral, 8, min_experts=64).moe.routed_experts == 8  # never more than the original
    check_shrunk(mixtral, kept, 8, min_experts=4)


@pytest.mark.parametrize(
    "field,kwargs",
    [("factor", {"factor": v}) for v in (0, -2, 2.0, True, "2", None)]
    + [("min_experts", {"factor": 2, "min_experts": v}) for v in (0, 1.5, False)],
)
def test_bad_arguments(field, kwargs):
    with pytest.raises(ModelSpecError) as info:
        shrink(get_preset("qwen3-30b-a3b"), **kwargs)
    assert str(info.value).startswith(f"shrink.{field}: must be an int >= 1, got ") and "\n" not in str(info.value)


def test_shrink_wants_a_spec():
    with pytest.raises(ModelSpecError, match="^shrink.spec: must be a ModelSpec"):
        shrink("deepseek-v3", 2)


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from(PRESET_NAMES),
    factor=st.integers(min_value=1, max_value=100_000),
    min_experts=st.integers(min_value=1, max_value=400),
)
def test_every_factor_gives_a_valid_small_spec(name, factor, min_experts):
    original = get_preset(name)
    small = shrink(original, factor, min_experts=min_experts)  # ModelSpec.__post_init__ validated it
    check_shrunk(original, small, factor, min_experts)
    assert count_params(small).total <= count_params(original).total
