"""The generic transformer's cost model: the bytes and flops each kernel declares, from first principles."""

from __future__ import annotations

import math

import pytest

from dbo.costs import Work, kernel_time
from demos.zoo.attention import attention_pairs
from demos.zoo.costs import active_experts, layer_costs
from demos.zoo.fold import Folder, gemm
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import family_fit
from demos.zoo.workload import Workload, auto_imbalance, cluster_for

DSV3 = get_preset("deepseek-v3")
PROFILE = gpu_profile("h800")
KERNELS = KernelTimes(get_gpu("h800"), PROFILE)


def _w(spec=DSV3, **kw) -> Workload:
    kw.setdefault("phase", "decode")
    cluster = kw.pop("cluster", None) or cluster_for("h800", 9, 8, 72)
    return Workload(spec, cluster, **kw)


def test_mla_decode_reads_each_requests_latent_cache_once():
    w = _w(tokens=64, context=2048)
    c = layer_costs(w, 64, 5, PROFILE)
    # the latent (512) plus the RoPE key (64), BF16, for context + 1 tokens of each of 64 requests
    cache = 64 * 2049 * 576 * 2
    assert c.attn_core.bytes >= cache
    assert c.attn_core.bytes < cache * 1.2
    longer = layer_costs(_w(tokens=64, context=4096), 64, 5, PROFILE)
    assert longer.attn_core.bytes == pytest.approx(cache * 2, rel=0.1)


def test_sliding_window_layers_read_at_most_their_window():
    spec = get_preset("gpt-oss-120b")
    w = _w(spec, tokens=16, context=8192, cluster=cluster_for("h100", 1, 8, 8))
    types = spec.attention.layer_types
    full = types.index("full_attention")
    sliding = types.index("sliding_attention")
    a = layer_costs(w, 16, full, PROFILE).attn_core.bytes
    b = layer_costs(w, 16, sliding, PROFILE).attn_core.bytes
    assert b < a / 10  # a 128-token window against 8192 tokens of context


def test_prefill_attention_is_causal_within_requests():
    w = _w(phase="prefill", tokens=4096, context=1024)
    assert attention_pairs(w, 4096) == 4 * 1024 * 1025 / 2
    assert attention_pairs(w, 100) == 100 * 101 / 2
    decode = _w(tokens=8, context=1024)
    assert attention_pairs(decode, 8) == 8 * 1025


def test_active_experts_grow_with_tokens_up_to_the_local_slots():
    small = active_experts(_w(tokens=2), 1)
    big = active_experts(_w(tokens=4096), 4096)
    assert 0 < small < big
    assert big == pytest.approx(4, rel=1e-6)  # 288 slots / 72 ranks: every slot receives tokens


def test_active_experts_are_the_busiest_ranks():
    """The busiest rank's ``t x top_k x imbalance`` copies over its slots, not the mean rank's: at a few
    copies per rank the step waits for the rank that reads the most expert weights. The bug this catches:
    the mean rank's count (the imbalance left out), which reads fewer weights than the busiest rank."""
    w = Workload(DSV3, cluster_for("h200", 1, None, 8), "decode", 4, 2048, imbalance="auto")
    local, imb = w.experts_per_rank, w.imbalance_at(4)
    assert imb > 1.3
    busiest = local * (1 - (1 - 1 / local) ** (4 * 8 * imb))
    mean = local * (1 - (1 - 1 / local) ** (4 * 8))
    assert active_experts(w, 4) == pytest.approx(busiest) and busiest > mean * 1.1
    assert active_experts(w.with_(imbalance=1.0), 4) == pytest.approx(mean)


def test_decode_experts_read_every_active_experts_weights():
    w = _w(tokens=128)
    c = layer_costs(w, 128, 5, PROFILE)
    per_expert = 3 * 7168 * 2048  # FP8: one byte per weight
    assert c.experts.bytes >= active_experts(w, 128) * per_expert


def test_ht_pads_each_experts_rows_to_128():
    ll = layer_costs(_w(phase="prefill", tokens=130, schedule="ll"), 130, 5, PROFILE)
    ht = layer_costs(_w(phase="prefill", tokens=130, schedule="ht"), 130, 5, PROFILE)
    assert ht.experts.seconds > ll.experts.seconds  # the 128-row padding (and the permute) computed


def test_dense_layers_have_no_all_to_all_and_moe_layers_do():
    w = _w(tokens=32)
    dense = layer_costs(w, 32, 0, PROFILE)
    moe = layer_costs(w, 32, 3, PROFILE)
    assert dense.dense_mlp is not None and dense.dispatch is None and dense.experts is None
    assert moe.dispatch > 0 and moe.combine > moe.dispatch  # BF16 combine, FP8 dispatch


def test_one_rank_moves_nothing_over_a_link():
    w = _w(tokens=32, cluster=cluster_for("h100", 1, 1, 1))
    c = layer_costs(w, 32, 5, PROFILE)
    assert c.dispatch is None and c.combine is None


def _math_only(w):
    """``w`` without its bytes: the Folder's math time alone."""
    return Work(flops=w.flops, dtype=w.dtype, shape=w.shape)


def test_folder_times_gemm_parts_on_the_family_curve_without_its_harness_latency():
    fold = Folder(PROFILE, KERNELS)
    curve = family_fit("hopper").gemm["fp8"]
    g = gemm(64, 4096, 7168, "fp8_e4m3")
    m, n, k = g.shape
    h800 = get_gpu("h800")
    whole = curve.seconds(g.flops, g.bytes, m, n, k, PROFILE.flops_rate("fp8"), h800.hbm_bandwidth, h800.sm_count)
    assert fold.seconds(g) == pytest.approx(whole - curve.latency)
    # M counts: a 1-row GEMM is far less efficient per flop than a 1024-row one
    one, many = gemm(1, 4096, 7168, "fp8_e4m3"), gemm(1024, 4096, 7168, "fp8_e4m3")
    assert fold.seconds(_math_only(one)) / one.flops > 5 * fold.seconds(_math_only(many)) / many.flops


def test_an_ops_kernels_each_take_their_own_roofline_and_the_op_their_sum():
    fold = Folder(PROFILE, KERNELS)
    big = gemm(8192, 4096, 7168, "fp8_e4m3")  # compute-bound
    copy = Work(bytes=2e9)  # a memory pass, at a streaming kernel's share of HBM
    assert fold.seconds(copy) == pytest.approx(2e9 / KERNELS.mem_bandwidth)
    assert KERNELS.mem_bandwidth <= PROFILE.mem_bandwidth  # the folded bytes never lengthen the op
    both = fold(big, copy)
    # the virtual backend's time of the folded Work is the sum, not the max of summed flops and bytes
    assert kernel_time(both, PROFILE) == pytest.approx(fold.seconds(big) + fold.seconds(copy))
    assert kernel_time(both, PROFILE) > max(kernel_time(fold(big), PROFILE), kernel_time(fold(copy), PROFILE))


@pytest.mark.parametrize("storage", ["fp8_e4m3", "bfloat16"])
def test_a_fold_inside_a_fold_counts_its_seconds_once(storage):
    """MLA's q_a and q_b are one fold inside the attention projections' fold: the outer fold takes the
    inner one's seconds as they are. Read again as a memory pass of seconds x its math rate at the BF16
    rate (the bug), an FP8 fold counted twice."""
    fold = Folder(PROFILE, KERNELS)
    q = fold(gemm(64, 1536, 7168, storage), gemm(64, 24576, 1536, storage))
    assert fold.seconds(q) == q.seconds
    outer = fold(q, gemm(64, 576, 7168, storage))
    assert outer.seconds == pytest.approx(q.seconds + fold.seconds(gemm(64, 576, 7168, storage)))


def test_ht_permutes_the_received_tokens_and_ll_does_not():
    ll = layer_costs(_w(phase="prefill", tokens=4096, schedule="ll"), 4096, 5, PROFILE)
    ht = layer_costs(_w(phase="prefill", tokens=4096, schedule="ht"), 4096, 5, PROFILE)
    rows = 4096 * 8 * ht_imbalance(4096)
    msg = 7168 + 7168 // 128 * 4
    assert ht.experts.bytes - ll.experts.bytes >= rows * (2 * msg + 4 * 7168) * 0.99


def ht_imbalance(t: int) -> float:
    return _w(phase="prefill", tokens=t, schedule="ht").imbalance_at(t)


def test_attention_core_takes_the_family_mla_curve_not_the_gemm_one():
    w = _w(tokens=64, context=4096)
    c = layer_costs(w, 64, 5, PROFILE)
    curve = family_fit("hopper").mla_decode
    flops_s = 2.0 * 128 * 64 * 4097 * (512 + 64 + 512) / (PROFILE.flops_rate("bfloat16") * curve.ceiling)
    module = family_fit("hopper").mla_module  # the decode module's fixed time rides on its core
    assert kernel_time(c.attn_core, PROFILE, kernels=0) == pytest.approx(flops_s + module, rel=1e-6)  # compute-bound


def test_auto_imbalance_is_the_fluctuation_of_uniform_routing():
    assert auto_imbalance(128, 8, 1) == 1.0
    assert auto_imbalance(128, 8, 72) == pytest.approx(1 + math.sqrt(2 * math.log(72) / 1024))
    assert auto_imbalance(1, 8, 72) > auto_imbalance(1024, 8, 72) > 1.0
    w = _w(tokens=64, imbalance="auto")
    assert w.imbalance_at(64) == auto_imbalance(64, 8, 72)
