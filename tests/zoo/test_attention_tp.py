"""Attention tensor parallelism beside DP attention (docs/clusters.md, "Attention tensor parallelism"):
what one rank computes and moves when ``attention_tp`` GPUs run attention together and each runs the MoE
on its share of their tokens; ``attention_tp=1`` is today's DP attention, unchanged."""

from __future__ import annotations

import math

import pytest
import torch

from dbo.costs import Work
from demos.errors import ConfigError
from demos.zoo.attention import GQA, MLA
from demos.zoo.costs import layer_costs
from demos.zoo.hardware import deepep_low_latency
from demos.zoo.hardware.collectives import tp_collective
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, shrink
from demos.zoo.models.hf_config import spec_from_config
from demos.zoo.models.presets import preset_config
from demos.zoo.profile import gpu_profile
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

DSV3 = get_preset("deepseek-v3")
PROFILE = gpu_profile("h100")
CLUSTER = cluster_for("h100", 9, 8, 72)


def _w(tp: int = 1, spec=DSV3, **kw) -> Workload:
    kw.setdefault("tokens", 128)
    kw.setdefault("context", 2000)
    return Workload(spec, kw.pop("cluster", CLUSTER), attention_tp=tp, **kw)


class _Raw:
    """A folder that adds the parts' raw flops and bytes (no timing), to count what a rank computes."""

    class kernels:  # the core's time is not what these tests count
        @staticmethod
        def attention(phase, flops, nbytes, shape, fp8_cache=False, units=0.0, module="mla"):
            return 0.0

    def named(self, op: str) -> "_Raw":
        return self

    def __call__(self, *works: Work) -> Work:
        return Work(flops=sum(x.flops for x in works), bytes=sum(x.bytes for x in works))


def _parts(kind, w: Workload, a, t: int, layer: int = 0):
    """(proj, out, core flops, core bytes) of attention ``kind`` on one rank, its parts' raw work."""
    c = kind.costs(w, a, t, layer, _Raw())
    return c.proj, c.out, *c.core_work


def _mla_parts(tp: int, t: int = 128, phase: str = "decode"):
    proj, out, flops, nbytes = _parts(MLA(), _w(tp, phase=phase, tokens=t), DSV3.attention, t)
    return proj, None, out, flops, nbytes


def test_the_default_is_data_parallel_attention_and_adds_nothing():
    w = _w()
    assert w.attention_tp == 1 and w.moe_tokens(77) == 77 and w.tokens_per_gpu == 128
    for layer in (0, 5):  # dense, MoE
        c = layer_costs(w, 128, layer, PROFILE)
        assert (c.tp_attn_reduce, c.tp_moe_gather, c.tp_mlp_reduce, c.moe_t) == (None, None, None, None)
        assert c == layer_costs(w.with_(attention_tp=1), 128, layer, PROFILE)  # bitwise: dataclass equality


def test_attention_tp_1_is_todays_mla_arithmetic_bitwise():
    """Every GEMM of MLA's decode projections at the full 128 heads, as written before attention TP."""
    t, H, h = 128, 7168, 128
    proj, _, out, flops, nbytes = _mla_parts(1, t)
    q = 2.0 * t * 1536 * H + 2.0 * t * h * 192 * 1536
    kv_a = 2.0 * t * 576 * H
    absorb = h * 2.0 * t * 512 * 128
    norm = 2.0 * t * H
    assert proj.flops == q + kv_a + absorb + norm
    assert out.flops == 2.0 * t * H * h * 128 + h * 2.0 * t * 128 * 512
    pairs = t * 2001.0
    assert flops == 2.0 * h * pairs * 576 + 2.0 * h * pairs * 512


def test_attention_tp_8_splits_the_heads_of_deepseek_v3_and_replicates_the_down_projections():
    t, H = 128, 7168
    one, _, out1, f1, b1 = _mla_parts(1, t)
    eight, _, out8, f8, b8 = _mla_parts(8, t)
    replicated = 2.0 * t * 1536 * H + 2.0 * t * 576 * H + 2.0 * t * H  # q_a, kv_a, the input norm
    split = one.flops - replicated  # q_b and the absorption, by heads
    assert eight.flops == pytest.approx(replicated + split / 8, rel=1e-12)
    assert out8.flops == pytest.approx(out1.flops / 8, rel=1e-12)  # o_proj and the value un-absorption
    assert f8 == pytest.approx(f1 / 8, rel=1e-12)  # scores and values of 16 heads per rank
    cache = t * 2001.0 * 576 * 2  # every TP rank reads the whole latent cache of its requests
    assert b8 - cache == pytest.approx((b1 - cache) / 8, rel=1e-12)
    # prefill: kv_b expands the latent into this rank's heads only
    t = 4096
    p1, _, _, _, _ = _mla_parts(1, t, "prefill")
    p8, _, _, _, _ = _mla_parts(8, t, "prefill")
    replicated = 2.0 * t * 1536 * H + 2.0 * t * 576 * H + 2.0 * t * H
    assert p8.flops == pytest.approx(replicated + (p1.flops - replicated) / 8, rel=1e-12)


def test_gqa_splits_the_kv_heads_and_replicates_them_when_fewer_than_the_group():
    spec = get_preset("qwen3-30b-a3b")  # 32 query heads, 4 KV heads of 128
    a, t = spec.attention, 64
    cluster = cluster_for("h100", 1, 8, 8)
    parts = {}
    for tp in (1, 2, 8):
        w = _w(tp, spec, cluster=cluster, tokens=t)
        parts[tp] = _parts(GQA(), w, a, t)
    qkv = {tp: parts[tp][0].flops - 2.0 * t * spec.hidden_size for tp in parts}  # less the input norm
    assert qkv[1] == 2.0 * t * (32 + 8) * 128 * spec.hidden_size
    assert qkv[2] == 2.0 * t * (16 + 4) * 128 * spec.hidden_size  # 2 of the 4 KV heads each
    assert qkv[8] == 2.0 * t * (4 + 2) * 128 * spec.hidden_size  # 1 KV head each, replicated on 2 ranks
    assert parts[8][2] == pytest.approx(parts[1][2] / 8)  # attention flops by query heads


def test_attention_tp_8_adds_its_collectives_and_runs_the_moe_on_a_share_of_the_tokens():
    t, H, tp = 100, 7168, 8
    w = _w(tp, tokens=t)
    m = math.ceil(t / tp)
    moe = layer_costs(w, t, 5, PROFILE)
    assert moe.t == t and moe.moe_t == m == w.moe_tokens(t)
    padded = m * tp * H * 2  # the group's BF16 rows, padded to a multiple of the group
    assert moe.tp_attn_reduce == tp_collective(w.gpu, "reduce_scatter", padded, tp) > 0
    assert moe.tp_moe_gather == tp_collective(w.gpu, "all_gather", padded, tp)
    routing = w.routing(m)
    # the kernel (its SM-held send half and its flight) is that of this rank's 13 tokens, not 100
    assert moe.dispatch + moe.dispatch_send == pytest.approx(
        deepep_low_latency(w.cluster, routing, m, H, "dispatch").seconds
    )
    whole = layer_costs(_w(tokens=t), t, 5, PROFILE)
    assert moe.dispatch + moe.dispatch_send < whole.dispatch + whole.dispatch_send
    dense = layer_costs(w, t, 0, PROFILE)
    ar = KernelTimes(w.gpu, PROFILE).all_reduce(t * H * 2, tp)  # the engines' kernel (ring model beyond it)
    assert ar < tp_collective(w.gpu, "all_reduce", t * H * 2, tp)
    assert dense.tp_attn_reduce == dense.tp_mlp_reduce == ar and dense.tp_moe_gather is None


def test_a_step_with_attention_tp_runs_every_collective_on_the_compute_stream():
    w = _w(8, tokens=64)
    s = w.spec
    with ZooRun(w, mode="graph") as r:
        base = r.step(False).kernels
        dbo_step = r.step(True)
    with ZooRun(_w(tokens=64), mode="graph") as r:
        dp = r.step(False)
    extra = 1 + s.num_layers + s.moe_layers + s.first_k_dense  # embedding, o_proj, MoE gather, dense MLP
    assert base == dp.kernels + extra
    ops = {k.op for k in dbo_step.records if k.op and k.op.startswith("tp_")}
    assert ops == {"tp_embed_reduce", "tp_attn_reduce", "tp_moe_gather", "tp_mlp_reduce"}
    assert all(k.kind == "compute" for k in dbo_step.records if k.op in ops)


def test_bad_values_are_one_config_error_naming_the_field():
    gb200 = cluster_for("gb200", 18, 4, 72)  # one NVLink domain of 72
    small = shrink(DSV3, 32)  # 4 heads
    cfg = preset_config("qwen3-30b-a3b")
    cfg.update(num_attention_heads=24, num_key_value_heads=8)
    odd_kv = spec_from_config(cfg, source="test")
    bad = [
        (dict(tp=0), "int >= 1"),
        (dict(tp=True), "int >= 1"),
        (dict(tp="8"), "int >= 1"),
        (dict(tp=3), "NVLink domain"),
        (dict(tp=16, cluster=cluster_for("h100", 2, 8, 16)), "NVLink domain"),
        (dict(tp=3, cluster=gb200), "heads"),
        (dict(tp=8, spec=small), "heads"),
        (dict(tp=3, spec=odd_kv, cluster=gb200), "KV heads"),
    ]
    for kw, what in bad:
        with pytest.raises(ConfigError) as info:
            _w(**kw)
        msg = str(info.value)
        assert msg.startswith("attention_tp") and what in msg and "\n" not in msg, msg


@pytest.mark.slow
def test_the_real_math_with_attention_tp_stays_bitwise_exact_on_threads():
    w = _w(4, shrink(DSV3, 32), cluster=cluster_for("h100", 2, 8, 16), tokens=12, context=8)  # 4 heads, 1 per rank
    with ZooRun(w, backend="threads") as r:
        same, diff = r.check_exact()
        ops = {k.op for k in r.step(True).records}
    assert same and diff == 0.0
    assert {"tp_attn_reduce", "tp_moe_gather"} <= ops


def test_attention_tp_equal_to_ep_replicates_the_tokens_and_all_reduces_the_moe():
    """One attention group per EP group (DP 1): no all-to-all (vLLM's all-to-all kernels need DP > 1; TRT-LLM's
    attention TP runs so): every rank runs the group's tokens through the router, its experts take the copies
    routed to them, the shared experts are TP-sharded, and o_proj's and the MoE's sums are all-reduced. The bug
    this catches: DeepEP's kernels (and their fixed latency) charged where the engines run none."""
    t, H, tp = 100, 7168, 8
    node = cluster_for("h100", 1, 8, 8)
    w = _w(tp, tokens=t, cluster=node)
    assert not w.alltoall and w.moe_tokens(t) == t and w.routed_tokens(t) == t / tp
    assert _w(tp, tokens=t).alltoall  # 9 groups of 8 in EP 72: the sequence-parallel path, as before
    moe = layer_costs(w, t, 5, PROFILE)
    ar = KernelTimes(w.gpu, PROFILE).all_reduce(t * H * 2, tp)
    assert (moe.dispatch, moe.combine, moe.dispatch_send, moe.tp_moe_gather) == (None, None, None, None)
    assert moe.tp_attn_reduce == moe.tp_mlp_reduce == ar and moe.moe_t == t == moe.t
    dp = layer_costs(_w(1, tokens=t, cluster=node), t, 5, PROFILE)
    assert moe.router.bytes == dp.router.bytes  # the router runs every token of the group
    assert moe.shared.bytes < dp.shared.bytes / 4  # TP-sharded shared experts
    # the local fused MoE gathers and sums inside its own call: no receive copies where the family has its curve
    assert moe.dispatch_recv is None and moe.combine_recv is None
    # without the curve the copies stand for them: the group's copies spread over its ranks, 100 x 8 / 8 per
    # rank, imbalanced
    from dataclasses import replace

    fit = replace(KernelTimes(w.gpu, PROFILE).fit, local_experts={})
    bare = layer_costs(w, t, 5, PROFILE, KernelTimes(w.gpu, PROFILE, fit))
    rows = t / tp * 8 * w.imbalance_at(t / tp)
    assert bare.dispatch_recv.bytes == pytest.approx(rows * (H + H // 128 * 4 + 2 * H))


@pytest.mark.slow
def test_the_real_math_of_a_tp_equals_ep_step_is_the_same_without_the_copies():
    """The local fused MoE's step launches no receive copies: the experts' kernel reads the tokens in place and
    writes the MoE's output itself. Its real math is exact on threads and bitwise the output of the same step
    with the copies (a family without the local curve), so nothing the copies carried is lost."""
    from dataclasses import replace

    w = _w(4, shrink(DSV3, 32), cluster=cluster_for("h200", 1, 4, 4), tokens=12, context=8)  # 4 heads, 1 per rank
    assert not w.alltoall
    profile = gpu_profile(w.gpu)
    shipped = KernelTimes(w.gpu, profile)
    outs, ops = [], []
    for kt in (shipped, KernelTimes(w.gpu, profile, replace(shipped.fit, local_experts={}))):
        with ZooRun(w, backend="threads", profile=profile, kernels=kt) as r:
            same, diff = r.check_exact()
            assert same and diff == 0.0
            outs.append(r.model.hidden.clone())
            ops.append({k.op for k in r.step(True).records})
    assert not ops[0] & {"dispatch_recv", "combine_recv"} and {"dispatch_recv", "combine_recv"} <= ops[1]
    assert bool(outs[0].isfinite().all()) and float(outs[0].abs().max()) > 0
    assert torch.equal(outs[0], outs[1])


def test_a_tp_equals_ep_step_runs_no_all_to_all_and_no_overlap_applies():
    from demos.prediction.sweep import applicable_overlaps

    w = _w(8, tokens=16, cluster=cluster_for("h200", 1, 8, 8))
    with ZooRun(w, mode="graph") as r:
        ops = {k.op for k in r.step(False).records if k.op}
    assert not ops & {"dispatch_ll", "combine_ll", "dispatch_send", "combine_send", "tp_moe_gather"}
    assert {"tp_attn_reduce", "tp_mlp_reduce", "experts_ll"} <= ops
    assert applicable_overlaps(w) == ("none",)
