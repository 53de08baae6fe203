"""What a GPU holds: weights sharded as DP attention + EP deploys them, the KV cache of the step's
requests, the workspace slots, DeepEP's buffers, and what DBO adds."""

from __future__ import annotations

import pytest

from demos.zoo.memory import RESERVE, kv_cache_bytes, memory_estimate, serving_limits
from demos.zoo.models import count_params, get_preset
from demos.zoo.models.params import expert_params
from demos.zoo.workload import Workload, cluster_for

DSV3 = get_preset("deepseek-v3")


def test_deepseek_v3_at_ep72_holds_four_expert_slots_and_the_rest_replicated():
    w = Workload(DSV3, cluster_for("h800", 9, 8, 72), tokens=128, context=2048)
    m = memory_estimate(w, [100, 100])
    c = count_params(DSV3)
    replicated = (c.attention + c.norms + c.dense_mlp + c.shared_experts + c.router) * 1.0  # FP8
    tables = (c.embedding + c.lm_head) * 2.0  # BF16
    experts = 4 * 58 * expert_params(DSV3) * 1.0
    assert m.weights == pytest.approx(replicated + tables + experts)
    assert 25e9 < m.weights < 35e9
    assert w.redundant_experts == 32


def test_kv_cache_of_mla_decode_is_576_bf16_values_per_token_and_layer():
    w = Workload(DSV3, cluster_for("h800", 9, 8, 72), tokens=100, context=1000)
    assert kv_cache_bytes(w) == 100 * 1000 * 576 * 2 * 61


def test_sliding_window_layers_hold_only_their_window():
    spec = get_preset("gpt-oss-120b")
    w = Workload(spec, cluster_for("h100", 1, 8, 8), tokens=10, context=100_000)
    types = spec.attention.layer_types
    per_layer = 2 * spec.attention.kv_heads * spec.attention.head_dim * 2
    held = sum(128 if t == "sliding_attention" else 100_000 for t in types)
    assert kv_cache_bytes(w) == pytest.approx(10 * held * per_layer)


def test_more_experts_per_gpu_at_a_smaller_ep():
    small = memory_estimate(Workload(DSV3, cluster_for("h800", 4, 8, 32), tokens=64))
    big = memory_estimate(Workload(DSV3, cluster_for("h800", 9, 8, 72), tokens=64))
    assert small.weights > big.weights


def test_dbo_costs_its_second_slot_and_buffers():
    cl = cluster_for("h800", 9, 8, 72)
    two = memory_estimate(Workload(DSV3, cl, tokens=256, ubatches=2), [64 << 20, 64 << 20])
    one = memory_estimate(Workload(DSV3, cl, tokens=256, ubatches=1), [64 << 20])
    assert two.dbo_extra >= 64 << 20
    assert one.dbo_extra == 0
    assert two.total_without_dbo == pytest.approx(two.total - two.dbo_extra)


def test_a_context_that_cannot_fit_says_so():
    w = Workload(DSV3, cluster_for("h800", 9, 8, 72), tokens=512, context=128_000)
    m = memory_estimate(w)
    assert not m.fits and m.total > m.capacity
    d = m.as_dict()
    assert d["fits"] is False and d["total"] == m.total


def test_attention_tp_shards_what_vllm_shards_and_keeps_the_rest_whole():
    one = Workload(DSV3, cluster_for("h200", 1, 8, 8), tokens=64, context=2048)
    eight = one.with_(attention_tp=8)
    c, a, H = count_params(DSV3), DSV3.attention, DSV3.hidden_size
    replicated = DSV3.num_layers * H * (a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim)
    sharded = (c.attention - replicated) + c.dense_mlp + c.shared_experts  # FP8 weights, 1 byte each
    table = (c.embedding + c.lm_head) * 2.0  # BF16
    saved = memory_estimate(one).weights - memory_estimate(eight).weights
    assert saved == pytest.approx((sharded + table) * (1 - 1 / 8))
    # MLA: every rank of the group holds the whole latent cache of the group's requests
    assert kv_cache_bytes(eight) == kv_cache_bytes(one)


def test_attention_tp_splits_a_gqa_cache_over_its_kv_heads():
    qwen = get_preset("qwen3-235b-a22b")  # 4 KV heads
    one = Workload(qwen, cluster_for("h200", 1, 8, 8), tokens=64, context=2048)
    assert kv_cache_bytes(one.with_(attention_tp=2)) == pytest.approx(kv_cache_bytes(one) / 2)
    assert kv_cache_bytes(one.with_(attention_tp=8)) == pytest.approx(kv_cache_bytes(one) / 4)  # one head each


@pytest.mark.parametrize("phase, context", [("decode", 2048), ("decode", 32_000), ("prefill", 4096)])
def test_the_serving_limit_is_the_last_count_that_fits_with_and_without_dbo(phase, context):
    """``serving_limits``: at its count the step fits and one more does not (each step by its own rule,
    the workspace scaled from the measured slots); DBO's step holds more, so its limit is not above the
    plain step's; the static share is what the reserve and the step's other parts leave at the limit."""
    w = Workload(DSV3, cluster_for("h200", 4, 8, 32), phase=phase, tokens=256, context=context)
    slots, at = [40 << 20, 40 << 20], 256
    lim = serving_limits(w, slots, at)

    def estimate(n: int):
        return memory_estimate(w.with_(tokens=n), [b * n / at for b in slots])

    for dbo, one in ((False, lim.without_dbo), (True, lim.with_dbo)):
        assert one.tokens >= w.ubatches
        here, more = estimate(one.tokens), estimate(one.tokens + 1)
        assert (here.fits if dbo else here.fits_without_dbo) and not (more.fits if dbo else more.fits_without_dbo)
        held = here.total if dbo else here.total_without_dbo
        assert one.static_fraction == pytest.approx((here.usable - held + here.weights + here.kv_cache) / here.capacity)
        assert (here.weights + here.kv_cache) / here.capacity <= one.static_fraction < 1 - RESERVE
    assert lim.with_dbo.tokens <= lim.without_dbo.tokens
    assert lim.utilization == pytest.approx(1 - RESERVE) and lim.of(True) is lim.with_dbo


def test_a_model_that_fits_at_no_count_has_a_limit_of_none():
    w = Workload(DSV3, cluster_for("h100", 1, 8, 8), tokens=64, context=2048)  # 671B on 8 x 80 GB
    lim = serving_limits(w)
    assert lim.without_dbo.tokens == lim.with_dbo.tokens == 0
    assert lim.without_dbo.static_fraction == 0.0


def test_the_estimate_fills_the_devices_reported_memory_and_the_kv_pool_grows_with_it():
    """The capacity is ``GpuSpec.memory_total`` (H200: 143,771 MiB), not the datasheet's 141 GB: what the engines'
    fractions multiply. Read as SI gigabytes the KV cache a serving rank holds here was an eighth smaller."""
    import dataclasses

    from demos.serving.step_times import kv_capacity_tokens
    from demos.zoo.hardware import get_gpu

    h200 = get_gpu("h200")
    w = Workload(DSV3, cluster_for("h200", 2, 8, 16), tokens=64, context=2048)
    assert memory_estimate(w).capacity == h200.memory_total == 143771 * 2**20
    as_si = dataclasses.replace(h200, device_memory=h200.hbm_capacity)
    w_si = Workload(DSV3, cluster_for(as_si, 2, 8, 16), tokens=64, context=2048)
    kv, kv_si = kv_capacity_tokens(w, 8192), kv_capacity_tokens(w_si, 8192)
    assert kv > 1.12 * kv_si  # 982,260 against 857,326 tokens
