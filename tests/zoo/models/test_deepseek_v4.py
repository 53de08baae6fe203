"""DeepSeek-V4 (issue 45): its compressed attention per layer (SWA, CSA, HCA), the wide residual's kernels, hash
routing, the published parameter counts, its cache per kind, its ops per layer, SGLang's prefill-only
two-batch overlap, and the held-out checks against its measured decode modules.

Published figures: DeepSeek-V4-Flash 284B total / 13B active, DeepSeek-V4-Pro 1.6T / 49B (the model cards,
as ATOM's V4 support thread quotes them). Active parameters in DeepSeek's convention (``ParamCount.active``:
what a token multiplies through, the LM head included, the input table not).
"""

from __future__ import annotations

import dataclasses

import pytest

from demos.prediction.engines import Deployment, serve_lines, served_model
from demos.zoo import measured
from demos.zoo.attention import layer_attention
from demos.zoo.compressed_attention import KERNEL_HEADS, decode_slots, entries_read, kernel_heads
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.memory import kv_bytes_per_token, kv_cache_bytes, state_bytes_per_request
from demos.zoo.models import CompressedAttention, count_params, get_preset, load_config, spec_from_config
from demos.zoo.models.presets import preset_config
from demos.zoo.plan import StepPlan
from demos.zoo.profile import gpu_profile
from demos.zoo.work import mhc_work
from demos.zoo.workload import Workload, cluster_for

B = 1e9
needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
CLUSTER = cluster_for("b200", 2, 8, 16)


@pytest.mark.parametrize(
    "name,total,active", [("deepseek-v4-flash", 284 * B, 13 * B), ("deepseek-v4-pro", 1600 * B, 49 * B)]
)
def test_total_and_active_parameters_within_3_percent_of_the_published(name, total, active):
    c = count_params(get_preset(name))
    assert abs(c.total - total) <= 0.03 * total, c.total
    assert abs(c.active - active) <= 0.03 * active, c.active


def test_the_layers_by_kind_as_deepseek_describes_them():
    """Flash: 2 sliding-window only, 21 CSA, 20 HCA; Pro: 30 CSA, 31 HCA (the configs' compress_ratios)."""
    for name, counts in (("deepseek-v4-flash", (2, 21, 20)), ("deepseek-v4-pro", (0, 30, 31))):
        a = get_preset(name).attention
        labels = [a.label(i) for i in range(len(a.compress_ratios))]
        assert (labels.count("SWA"), labels.count("CSA"), labels.count("HCA")) == counts


def test_the_loader_reads_every_field_and_the_residual_and_hash_layers():
    s = get_preset("deepseek-v4-flash")
    a = s.attention
    assert isinstance(a, CompressedAttention)
    assert (a.heads, a.head_dim, a.qk_rope_head_dim, a.q_lora_rank, a.o_groups, a.o_lora_rank) == (
        64,
        512,
        64,
        1024,
        8,
        1024,
    )
    assert (a.sliding_window, a.index_heads, a.index_head_dim, a.index_topk) == (128, 64, 128, 512)
    assert (s.hc_mult, s.moe.hash_layers, s.moe.scoring, s.first_k_dense, s.mtp_layers) == (4, 3, "sqrtsoftplus", 0, 1)
    assert (s.precision.weights, s.precision.experts) == ("fp8_e4m3", "mxfp4")
    assert len(a.compress_ratios) == s.num_layers == 43  # the MTP layer's entry is not the trunk's


def test_the_compressor_is_twice_as_wide_where_its_windows_overlap():
    a = get_preset("deepseek-v4-pro").attention
    assert (a.compressor_width(4, 512), a.compressor_width(128, 512), a.compressor_width(0, 512)) == (1024, 512, 0)


@needs_extra
@pytest.mark.parametrize("stem", ["sgl-project--DeepSeek-V4-Flash-FP8", "sgl-project--DeepSeek-V4-Pro-FP8"])
def test_sglangs_fp8_copies_load_as_the_same_architecture_with_fp8_experts(stem):
    spec = load_config(measured.data_root().parent / "model_configs" / f"{stem}_config.json")
    preset = get_preset("deepseek-v4-flash" if "Flash" in stem else "deepseek-v4-pro")
    assert spec.model_type == "deepseek_ref" and spec.precision.experts == "fp8_e4m3"
    assert spec.attention == preset.attention and spec.hc_mult == preset.hc_mult
    same = {"routed_experts", "top_k", "intermediate_size", "shared_experts", "scoring", "hash_layers"}
    assert {k: getattr(spec.moe, k) for k in same} == {k: getattr(preset.moe, k) for k in same}


def test_a_bad_compress_ratio_or_too_few_is_one_line_naming_the_field():
    config = preset_config("deepseek-v4-flash")
    with pytest.raises(Exception) as info:
        spec_from_config({**config, "compress_ratios": [4] * 10}, source="config.json")
    assert str(info.value) == (
        "config.json: field 'compress_ratios' has 10 entries, fewer than num_hidden_layers (43) "
        "(model_type deepseek_v4)"
    )
    with pytest.raises(Exception) as info:
        spec_from_config({**config, "compress_ratios": [0, 8] + [4] * 42}, source="config.json")
    assert "\n" not in str(info.value) and "'compress_ratios'" in str(info.value) and "entry 1" in str(info.value)


# ---- the cost of a layer by its ratio ----


def _workload(phase="decode", tokens=64, context=8192, **kw):
    return Workload(get_preset("deepseek-v4-flash"), CLUSTER, phase=phase, tokens=tokens, context=context, **kw)


def test_a_decode_token_reads_its_window_and_its_compressed_entries():
    """CSA stops growing at index_topk entries (the indexer's pick), HCA grows by one entry per 128 tokens,
    a sliding-window layer reads its window only."""
    a = get_preset("deepseek-v4-flash").attention
    assert entries_read(a, 0, 100_000) == 128
    assert entries_read(a, 4, 1024) == 128 + 256 and entries_read(a, 4, 100_000) == 128 + 512
    assert entries_read(a, 128, 128_000) == 128 + 1000
    assert entries_read(a, 0, 10) == 11  # a short request: its own tokens and itself


def test_the_sparse_kernel_computes_at_least_64_heads_under_attention_tp():
    """SGLang pads a rank's query heads to 64 for FlashMLA's sparse kernels at attention TP above 1: Flash's 64
    heads at TP 2 and at TP 8 cost the core the same flops; at TP 1 the rank's own heads."""
    assert kernel_heads(64, 1) == 64 and kernel_heads(128, 1) == 128
    assert kernel_heads(64, 8) == kernel_heads(64, 2) == kernel_heads(128, 4) == KERNEL_HEADS == 64
    core = {}
    for tp in (1, 2, 8):
        w = _workload(tokens=64, context=4096, attention_tp=tp)
        # the core's own time, without the module's fixed time (which covers the projections' floors, a
        # share that differs with the TP: demos.zoo.attention_base.module_costs)
        kt = KernelTimes(w.gpu, gpu_profile(w.gpu))
        kt = KernelTimes(w.gpu, gpu_profile(w.gpu), dataclasses.replace(kt.fit, mla_module=0.0))
        core[tp] = StepPlan(w, gpu_profile(w.gpu), kt).ubatch(64).layers[2].costs.attn_core
    assert core[2].seconds == core[8].seconds  # both 64 kernel heads
    assert core[1].seconds == core[2].seconds  # Flash at TP 1: its own 64


def test_a_decode_request_costs_the_sparse_kernel_whole_blocks_and_a_fixed_overhead():
    """FlashMLA's sparse decode takes entries in blocks of 64 and its scheduler counts each request 5 blocks
    more: the window and the compressed entries each rounded up to whole blocks."""
    a = get_preset("deepseek-v4-flash").attention
    assert decode_slots(a, 0, 0) == 64 * (1 + 5)  # one token of window
    assert decode_slots(a, 0, 100_000) == 64 * (2 + 5)  # the full 128-token window
    assert decode_slots(a, 4, 100_000) == 64 * (2 + 8 + 5)  # and the top 512
    assert decode_slots(a, 4, 4 * 64) == 64 * (2 + 1 + 5) and decode_slots(a, 4, 4 * 65) == 64 * (2 + 2 + 5)
    assert decode_slots(a, 128, 128 * 1000) == 64 * (2 + 16 + 5)
    assert all(decode_slots(a, r, c) >= entries_read(a, r, c) for r in (0, 4, 128) for c in (1, 300, 70_000))


def test_each_ratio_launches_its_own_ops_and_the_wide_residual_wraps_both_sublayers():
    w = _workload()
    plan = StepPlan(w, gpu_profile(w.gpu))
    layers = plan.ubatch(64).layers
    by_ratio = {w.spec.attention.ratio_of(i): list(layers[i].plain) for i in range(w.spec.num_layers)}
    wide = ["mhc_attn_pre", "mhc_attn_post", "mhc_mlp_pre", "mhc_mlp_post"]
    for ratio, ops in by_ratio.items():
        assert all(op in ops for op in wide)
        assert ops.index("mhc_attn_pre") < ops.index("attn_proj") < ops.index("attn_out") < ops.index("mhc_attn_post")
        assert ops.index("mhc_mlp_pre") < ops.index("router") and ops.index("finalize") < ops.index("mhc_mlp_post")
        assert ("attn_compress" in ops) == (ratio > 0) and ("attn_index" in ops) == (ratio == 4)
    # a model with a plain residual launches none of them
    plain = Workload(get_preset("deepseek-v3"), CLUSTER, tokens=64, context=8192)
    assert not any(op.startswith("mhc") for op in StepPlan(plain, gpu_profile(plain.gpu)).ubatch(64).layers[5].plain)


def test_the_indexer_grows_with_the_context_and_the_core_stops_at_its_top_k():
    short, long = _workload(context=4096), _workload(context=65536)
    costs = {}
    for w in (short, long):
        plan = StepPlan(w, gpu_profile(w.gpu))
        csa = plan.ubatch(64).layers[2].costs  # layer 2: ratio 4
        ops = dict(csa.attention_ops)
        costs[w.context] = (ops["attn_index"].seconds, csa.attn_core.bytes)
    keys = 64 * ((65536 + 1) // 4 - (4096 + 1) // 4)  # 16x the compressed keys scored, per token
    assert costs[65536][0] - costs[4096][0] >= keys * 132 / get_gpu("b200").hbm_bandwidth  # their FP8 bytes
    assert costs[65536][1] == costs[4096][1]  # both past 4 x 512 tokens: the same entries read


def test_the_hyper_connection_kernels_are_timed_on_the_fitted_curve_with_their_fixed_time():
    g = get_gpu("b200")
    kt = KernelTimes(g, gpu_profile(g))
    pre = kt.mhc("pre", *mhc_work("pre", 1, 4096, 4))
    post = kt.mhc("post", *mhc_work("post", 1, 4096, 4))
    assert 10e-6 < pre < 30e-6 and 3e-6 < post < 15e-6  # B200's measured 19 and 8 us at one token
    big = kt.mhc("post", *mhc_work("post", 65536, 4096, 4))
    flops, nbytes = mhc_work("post", 65536, 4096, 4)
    assert big == pytest.approx(kt.fit.mhc["post"].seconds(flops, nbytes, 2.25e15, g.hbm_bandwidth), rel=1e-9)


# ---- memory per kind ----


def test_the_compressed_cache_grows_by_one_entry_per_ratio_and_the_windows_do_not():
    w = _workload()
    a, kvb = w.spec.attention, w.spec.precision.bytes_of("kv_cache")
    csa, hca = a.compress_ratios.count(4), a.compress_ratios.count(128)
    per_token = csa * (512 * kvb + a.index_key_bytes) / 4 + hca * 512 * kvb / 128
    assert kv_bytes_per_token(w) == pytest.approx(per_token)
    windows = 43 * 128 * 512 * kvb
    states = csa * (2 * 4 * 1024 * 4 + 2 * 4 * 256 * 4) + hca * 128 * 512 * 4
    assert state_bytes_per_request(w) == pytest.approx(windows + states)
    a_lot, twice = kv_cache_bytes(w.with_(context=100_000)), kv_cache_bytes(w.with_(context=200_000))
    assert twice - a_lot == pytest.approx(64 * 100_000 * per_token)  # grows by entries only, not by windows


# ---- the engines: SGLang's two-batch overlap for V4 in prefill only ----


@pytest.mark.parametrize("phase,refused", [("decode", True), ("prefill", False)])
def test_sglang_offers_two_batch_overlap_for_v4_in_prefill_only(phase, refused):
    spec = get_preset("deepseek-v4-pro")
    w = Workload(spec, CLUSTER, phase=phase, tokens=256, context=4096)
    model_id, served = served_model("deepseek-v4-pro", spec, spec)
    lines = serve_lines(Deployment.of(w, model_id, served=served), "dbo", 256)
    assert ("--enable-two-batch-overlap" in lines.sglang) == (not refused)
    assert lines.sglang.startswith("# SGLang 0.5.23 runs two-batch overlap for DeepSeek-V4") == refused
    assert "--enable-dbo" in lines.vllm


# ---- held-out checks against SGLang's measured V4 modules (nothing fitted to them) ----


@needs_extra
def test_the_v4_decode_modules_and_hyper_connection_kernels_are_checked_on_every_gpu_with_tables():
    from demos.fidelity.kernels import kernel_rows, summaries

    for gpu in ("h200", "b200"):
        rows = kernel_rows(gpu, ops=("csa module", "hca module", "mhc pre", "mhc post"))
        got = {s["op"]: s for s in summaries(rows)}
        assert set(got) == {"csa module", "hca module", "mhc pre", "mhc post"}
        assert got["csa module"]["rows"] == got["hca module"]["rows"] == 1600  # Flash and Pro, TP 1 to 8
        assert abs(got["mhc pre"]["median_error"]) < 0.08 and abs(got["mhc post"]["median_error"]) < 0.05
        assert abs(got["hca module"]["median_error"]) < 0.15 and abs(got["csa module"]["median_error"]) < 0.2


def test_the_fitted_families_carry_both_hyper_connection_curves():
    for gpu in ("h200", "b200"):
        fit = KernelTimes(get_gpu(gpu), gpu_profile(get_gpu(gpu))).fit
        assert set(fit.mhc) == {"pre", "post"}
        assert fit.mhc["pre"].latency > fit.mhc["post"].latency  # the Sinkhorn iterations
        assert "mhc_module_perf" in fit.source


def test_a_v4_layers_attention_kind_is_named_by_its_ratio():
    a = get_preset("deepseek-v4-flash").attention
    kinds = {layer_attention(a, i)[0].layer_label(a, i) for i in range(43)}
    assert kinds == {"SWA", "CSA", "HCA"}
    assert dataclasses.replace(a, compress_ratios=(0,) * 43).label(5) == "SWA"


def test_prefill_reads_each_query_s_window_and_entries_causally():
    w = _workload(phase="prefill", tokens=8192, context=8192)
    plan = StepPlan(w, gpu_profile(w.gpu))
    layers = plan.ubatch(8192).layers
    core = {w.spec.attention.ratio_of(i): layers[i].costs.attn_core for i in (0, 2, 3)}
    # the window layer attends least, CSA's selection caps its entries, HCA's entries are few
    assert core[0].seconds < core[128].seconds < core[4].seconds
