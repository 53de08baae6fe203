"""The MLA decode module's fixed time (``demos.zoo.attention_module``, docs/kernels.md).

The fast tests plant a known extra in a family's curves and check where the predictor charges it; the
``measured`` ones read TRT-LLM's whole-module tables (CI installs the extra) and check the fit.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from demos.zoo import measured
from demos.zoo.breakdown import layer_breakdown
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import family_fit
from demos.zoo.workload import Workload, cluster_for

_skip = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def needs_tables(f):
    return pytest.mark.measured(pytest.mark.slow(_skip(f)))


def _attention(model: str, phase: str, extra: float, tokens: int = 64, context: int = 4096, tp: int = 1) -> float:
    """One layer's attention op (``moe_layer_s["attention"]``) on B200 with the family's module extra set."""
    g = get_gpu("b200")
    fit = replace(family_fit(g.family), mla_module=extra)
    w = Workload(
        get_preset(model), cluster_for("b200", 1, 8, 8), phase=phase, tokens=tokens, context=context, ubatches=1,
        attention_tp=tp,
    )  # fmt: skip
    profile = gpu_profile(g, fit=fit)
    return layer_breakdown(w, tokens, profile, KernelTimes(g, profile, fit))["moe_layer_s"]["attention"]


def _floor_slack(tokens: int, tp: int) -> float:
    """What the per-kernel floors add above their work to the module's ops, its core's included (B200,
    DeepSeek-V3, context 4096): the part of the module extra they already cover, the module taking
    ``max(its ops floored, their work + the extra)``."""
    from demos.zoo.attention import layer_attention
    from demos.zoo.attention_base import floor_slack
    from demos.zoo.fold import Folder

    g = get_gpu("b200")
    w = Workload(
        get_preset("deepseek-v3"), cluster_for("b200", 1, 8, 8), tokens=tokens, context=4096, ubatches=1,
        attention_tp=tp,
    )  # fmt: skip
    fit = replace(family_fit(g.family), mla_module=0.0)  # the ops' own work, no extra in the core
    profile = gpu_profile(g, fit=fit)
    kind, a = layer_attention(w.spec.attention, w.spec.first_k_dense)
    costs = kind.costs(w, a, tokens, w.spec.first_k_dense, Folder(profile, KernelTimes(g, profile, fit)))
    return sum(floor_slack(name, cost, profile) for name, cost in costs.ops)


def test_an_mla_decode_layer_of_128_heads_pays_the_module_extra_once():
    """64 requests at attention TP 1: no op of the module sits on its floor, so the extra is paid whole."""
    assert _floor_slack(64, 1) == 0.0
    base = _attention("deepseek-v3", "decode", 0.0, tp=1)
    assert _attention("deepseek-v3", "decode", 40e-6, tp=1) - base == pytest.approx(40e-6, rel=1e-6)


@pytest.mark.parametrize("tokens", [1, 64])
def test_the_module_extra_covers_the_floors_of_a_few_heads_projections(tokens):
    """Attention TP 8 (16 heads a GPU): the projections and the output sit on their kernels' floors; the
    module's fixed time covers those floors instead of stacking on them, so the layer grows by the extra
    less what the floors already added (docs/kernels.md). Charging it on top (the planted bug: the whole
    40 us) ran the 16-head module rows 31-47% long on Blackwell."""
    slack = _floor_slack(tokens, 8)
    assert 10e-6 < slack < 40e-6
    base = _attention("deepseek-v3", "decode", 0.0, tokens=tokens, tp=8)
    grown = _attention("deepseek-v3", "decode", 40e-6, tokens=tokens, tp=8) - base
    assert grown == pytest.approx(40e-6 - slack, rel=1e-6)
    # an extra below the floors' slack costs nothing more: the floors already charged that much
    assert _attention("deepseek-v3", "decode", 0.5 * slack, tokens=tokens, tp=8) == pytest.approx(base, rel=1e-12)


def test_each_ubatch_of_a_split_step_pays_the_module_extra_again():
    once = 40e-6 - _floor_slack(32, 1)
    halves = 2 * (
        _attention("deepseek-v3", "decode", 40e-6, tokens=32) - _attention("deepseek-v3", "decode", 0.0, tokens=32)
    )
    assert halves == pytest.approx(2 * once, rel=1e-6)


def test_prefill_and_attention_without_a_module_table_pay_no_extra():
    assert _attention("deepseek-v3", "prefill", 40e-6, tokens=2048, context=2048) == pytest.approx(
        _attention("deepseek-v3", "prefill", 0.0, tokens=2048, context=2048)
    )
    assert _attention("qwen3-235b-a22b", "decode", 40e-6) == pytest.approx(_attention("qwen3-235b-a22b", "decode", 0.0))


def test_the_shipped_extra_is_a_few_kernels_worth_per_family():
    hopper, blackwell = family_fit("hopper").mla_module, family_fit("blackwell").mla_module
    assert 5e-6 < hopper < 45e-6 and 5e-6 < blackwell < 45e-6


@needs_tables
def test_the_adapter_reads_a_known_module_row_in_seconds():
    rows = measured.mla_module_rows("gb200")
    hit = [
        r
        for r in rows
        if (r.batch, r.heads, r.kv_len, r.gemm_dtype, r.kv_dtype) == (1, 128, 2, "fp8_block", "bfloat16")
    ]
    assert len(hit) == 1 and hit[0].seconds == pytest.approx(76.7e-6, rel=1e-6)


@needs_tables
def test_the_fitted_extra_puts_the_median_module_row_on_the_curve_and_without_it_the_op_runs_short():
    from demos.zoo.attention_module import composed_seconds, module_rows

    fit = family_fit("blackwell")
    rows = [(g, r) for g in ("b200", "gb200") for r in module_rows(g)]
    assert len(rows) > 1000
    with_extra = statistics.median(composed_seconds(g, r, fit) / r.seconds for g, r in rows)
    bare = replace(fit, mla_module=0.0)
    without = statistics.median(composed_seconds(g, r, bare) / r.seconds for g, r in rows)
    assert with_extra == pytest.approx(1.0, abs=2e-3)
    assert without < 0.9  # the composed kernels alone: B200 and GB200 22% short (docs/kernels.md)


@needs_tables
def test_validate_kernels_checks_the_module_on_every_gpu_with_tables(validate_json):
    module = {s["gpu"]: s for s in validate_json("kernels")["summary"] if s["op"] == "mla module"}
    for gpu in ("h100", "h200", "b200", "gb200"):
        assert module[gpu]["rows"] > 700 and abs(module[gpu]["median_error"]) <= 0.10


@needs_tables
def test_the_composed_op_is_a_line_in_the_extra_on_every_hopper_row():
    """``demos.fits.module`` fits the extra on each row's line ``max(at 0, at B - B + c)``: the predictor's
    composition at extras the search visits is that line, on every row, floored or not."""
    from demos.fits.module import composed_lines
    from demos.zoo.attention_module import composed_seconds, module_rows

    fit = family_fit("hopper")
    rows = [(g, r) for g in ("h100", "h200") for r in module_rows(g)][::7]
    lines = composed_lines(fit, rows, 1e-4)
    assert any(at0 > rise for at0, rise in lines)  # some rows sit on their floor at a zero extra
    for c in (0.0, 3e-6, 2.863e-5, 9e-5):
        f = replace(fit, mla_module=c)
        for (g, r), (at0, rise) in zip(rows, lines):
            assert max(at0, rise + c) == pytest.approx(composed_seconds(g, r, f), rel=1e-12)


@needs_tables
def test_a_composition_that_charges_the_extra_otherwise_stops_the_fit(monkeypatch):
    import demos.fits.module as fm
    from demos.zoo.attention_module import composed_seconds, module_rows

    def twice(g, r, fit):  # the extra charged twice: no longer the line the search assumes
        return composed_seconds(g, r, fit) + fit.mla_module

    monkeypatch.setattr(fm, "composed_seconds", twice)
    monkeypatch.setattr(fm, "module_rows", lambda g: module_rows(g)[::20])
    with pytest.raises(RuntimeError, match="no longer enters the composed op"):
        fm.fit_module_extra(family_fit("hopper"), ("h100",))


@pytest.mark.parametrize(
    "model,phase,tp",
    [("deepseek-v3", "decode", 1), ("deepseek-v3", "prefill", 1), ("deepseek-v3", "decode", 8),
     ("glm-5", "decode", 2), ("qwen3-235b-a22b", "decode", 4)],
)  # fmt: skip
def test_the_attention_ops_alone_cost_what_the_breakdown_says(model, phase, tp):
    """``attention_seconds`` (what the module fit and checks compose) is the breakdown's attention group of
    the same step, without costing the rest of the layer."""
    from demos.zoo.breakdown import attention_seconds

    g = get_gpu("b200")
    tokens, context = (64, 4096) if phase == "decode" else (2048, 2048)
    w = Workload(
        get_preset(model), cluster_for("b200", 1, 8, 8), phase=phase, tokens=tokens, context=context, ubatches=1,
        attention_tp=tp,
    )  # fmt: skip
    profile = gpu_profile(g)
    kt = KernelTimes(g, profile)
    whole = layer_breakdown(w, tokens, profile, kt)["moe_layer_s"]["attention"]
    assert attention_seconds(w, tokens, w.spec.first_k_dense, profile, kt) == pytest.approx(whole, rel=1e-12)


def test_only_sglangs_sparse_mla_layers_take_sglangs_module_time():
    """``KernelTimes.module_extra``: SGLang's own fixed time (``FamilyFit.sglang_dsa_module``, per cache dtype) for
    a sparse-MLA module in a step of SGLang's; TRT-LLM's (``mla_module``) for dense MLA, for other engines and for
    a step of no named engine; nothing in prefill."""
    from demos.vocabulary import Phase

    g = get_gpu("b200")
    fit = replace(family_fit(g.family), mla_module=30e-6, sglang_dsa_module={"bfloat16": 20e-6, "fp8": 10e-6})
    profile = gpu_profile(g, fit=fit)

    def extra(engine, fp8, module, phase=Phase.DECODE):
        return KernelTimes(g, profile, fit, engine=engine).module_extra(phase, (8, 16, 64), fp8, module)

    assert extra("sglang", False, "dsa") == 20e-6 and extra("sglang", True, "dsa") == 10e-6
    assert extra("sglang", True, "mla") == 30e-6
    assert extra("trtllm", True, "dsa") == extra("vllm", True, "dsa") == extra(None, True, "dsa") == 30e-6
    assert extra("sglang", True, "dsa", Phase.PREFILL) == 0.0
    bare = replace(fit, sglang_dsa_module={"bfloat16": 20e-6})  # no FP8 fit: TRT-LLM's stands in
    assert KernelTimes(g, profile, bare, engine="sglang").module_extra(Phase.DECODE, (8, 16, 64), True, "dsa") == 30e-6


def test_a_glm5_decode_step_of_sglang_charges_its_own_module_time_once_per_layer_and_ubatch():
    """GLM-5's decode attention on B200 over an FP8 cache: a step of SGLang's and one of no named engine (the
    family's kernels, TRT-LLM's module time) differ by SGLang's module time less TRT-LLM's, at a shape whose floors
    do not bind; dense MLA takes TRT-LLM's in either."""
    from demos.zoo.breakdown import attention_seconds
    from demos.zoo.models import with_precision

    g = get_gpu("b200")
    spec = with_precision(get_preset("glm-5"), kv_cache="fp8")
    w = Workload(spec, cluster_for("b200", 1, 8, 8), tokens=256, context=4096, ubatches=1, attention_tp=1)
    fit = replace(family_fit(g.family), mla_module=30e-6, sglang_dsa_module={"bfloat16": 25e-6, "fp8": 12e-6})
    profile = gpu_profile(g, fit=fit)
    layer = spec.first_k_dense

    def at(engine):
        return attention_seconds(w, 256, layer, profile, KernelTimes(g, profile, fit, engine=engine))

    assert at("sglang") - at(None) == pytest.approx(12e-6 - 30e-6, rel=1e-6)
    dense = Workload(get_preset("deepseek-v3"), cluster_for("b200", 1, 8, 8), tokens=256, context=4096, ubatches=1)
    kt = {e: KernelTimes(g, profile, fit, engine=e) for e in ("sglang", None)}
    first = dense.spec.first_k_dense
    same = [attention_seconds(dense, 256, first, profile, kt[e]) for e in ("sglang", None)]
    assert same[0] == same[1]


@needs_tables
@pytest.mark.parametrize("kv", ["bfloat16", "fp8"])
def test_sglangs_fitted_module_time_puts_its_median_module_without_indexer_on_the_curve(kv):
    from demos.zoo.attention_module import skip_composed_seconds, skip_rows
    from demos.zoo.rooflines import gpu_fit

    for gpu in ("b200", "gb200"):
        fit = gpu_fit(get_gpu(gpu))
        rows = skip_rows(gpu, kv)
        assert len(rows) > 300 and {r.kv_dtype for r in rows} == {kv}
        at = statistics.median(skip_composed_seconds(gpu, r, fit) / r.seconds for r in rows)
        assert at == pytest.approx(1.0, abs=2e-3), (gpu, kv, at)
        trtllm = replace(fit, sglang_dsa_module={}, mla_module_gemm={})  # TRT-LLM's FP8 module time: runs long
        assert statistics.median(skip_composed_seconds(gpu, r, trtllm) / r.seconds for r in rows) > 1.05


@needs_tables
def test_sglangs_fp8_module_is_shorter_than_its_bf16_one_on_blackwell_and_longer_on_hopper():
    """The measured mechanism the fit carries (docs/kernels.md): on Blackwell SGLang's FP8-cache decode fuses the
    query's and key's RoPE with their quantization (TRT-LLM's kernel both ways); on Hopper FlashMLA's FP8 kernel
    reads the FP8 cache and its module runs longer. Both stay below TRT-LLM's module time on Blackwell."""
    from demos.zoo.rooflines import gpu_fit

    for gpu in ("b200", "gb200", "b300", "gb300"):
        f = gpu_fit(get_gpu(gpu))
        assert f.sglang_dsa_module["fp8"] + 5e-6 < f.sglang_dsa_module["bfloat16"] < f.mla_module, gpu
    for gpu in ("h100", "h200"):
        f = gpu_fit(get_gpu(gpu))
        assert f.sglang_dsa_module["bfloat16"] + 5e-6 < f.sglang_dsa_module["fp8"], gpu


def test_a_module_of_bf16_projections_takes_the_bf16_module_time():
    """``module_key``: a module all of whose projections are BF16 GEMMs (Kimi-K2.5's NVFP4 checkpoint keeps its
    attention whole) takes ``mla_module_gemm["bfloat16"]``; FP8 block projections, or one NVFP4 ``o_proj`` among
    BF16 ones (DeepSeek-R1's NVFP4 checkpoint), keep ``mla_module``; a fit without the key falls back."""
    from demos.vocabulary import Phase
    from demos.zoo.attention_base import module_key
    from demos.zoo.models import with_precision

    kimi, dsr1 = get_preset("kimi-k2.5"), get_preset("deepseek-r1")
    assert module_key("mla", with_precision(kimi, weights="fp4")) == "mla:bfloat16"
    assert module_key("mla", dsr1) == "mla"  # FP8 block GEMMs
    assert module_key("mla", with_precision(dsr1, weights="fp4")) == "mla"  # an NVFP4 o_proj: a quantized GEMM
    assert module_key("mla", with_precision(dsr1, weights="bf16")) == "mla:bfloat16"
    assert module_key(None, dsr1) is None
    g = get_gpu("b200")
    fit = replace(family_fit(g.family), mla_module=30e-6, mla_module_gemm={"bfloat16": 20e-6})
    profile = gpu_profile(g, fit=fit)
    kt = KernelTimes(g, profile, fit, engine="trtllm")
    assert kt.module_extra(Phase.DECODE, (1, 8, 64), False, "mla:bfloat16") == 20e-6
    assert kt.module_extra(Phase.DECODE, (1, 8, 64), False, "mla") == 30e-6
    assert kt.module_extra(Phase.PREFILL, (1, 8, 64), False, "mla:bfloat16") == 0.0
    bare = KernelTimes(g, profile, replace(fit, mla_module_gemm={}), engine="trtllm")
    assert bare.module_extra(Phase.DECODE, (1, 8, 64), False, "mla:bfloat16") == 30e-6


def test_a_kimi_decode_layer_of_bf16_attention_pays_the_bf16_module_time():
    """Kimi-K2.5 at NVFP4 (attention in BF16) decoding 256 requests on B200: its attention op moves by exactly the
    difference of the two module times, at a shape whose floors do not bind; DeepSeek-V3's does not move."""
    from demos.zoo.breakdown import attention_seconds
    from demos.zoo.models import with_precision

    g = get_gpu("b200")
    base = replace(family_fit(g.family), mla_module=30e-6, mla_module_gemm={"bfloat16": 30e-6})
    low = replace(base, mla_module_gemm={"bfloat16": 18e-6})
    kimi = with_precision(get_preset("kimi-k2.5"), weights="fp4")
    for spec, moved in ((kimi, -12e-6), (get_preset("deepseek-v3"), 0.0)):
        w = Workload(spec, cluster_for("b200", 1, 8, 8), tokens=256, context=4096, ubatches=1)
        times = []
        for fit in (base, low):
            profile = gpu_profile(g, fit=fit)
            times.append(attention_seconds(w, 256, spec.first_k_dense, profile, KernelTimes(g, profile, fit)))
        assert times[1] - times[0] == pytest.approx(moved, abs=1e-12)


@needs_tables
def test_the_bf16_module_time_puts_its_median_row_on_the_curve_and_blackwells_is_below_fp8s():
    """TRT-LLM's modules of BF16 GEMMs (no activation quantized) on their own fitted time: the median row on the
    curve on B200 and GB200; on Blackwell that time is below the FP8 block modules' by 7 us or more, and the FP8
    one in its place runs the BF16 rows long."""
    from demos.zoo.attention_module import composed_seconds, module_rows
    from demos.zoo.rooflines import gpu_fit

    for gpu in ("b200", "gb200"):
        fit = gpu_fit(get_gpu(gpu))
        rows = module_rows(gpu, "bfloat16")
        assert len(rows) > 700 and {r.gemm_dtype for r in rows} == {"bfloat16"}
        at = statistics.median(composed_seconds(gpu, r, fit) / r.seconds for r in rows)
        assert at == pytest.approx(1.0, abs=2e-3), (gpu, at)
        assert fit.mla_module_gemm["bfloat16"] + 7e-6 < fit.mla_module, gpu
        fp8 = replace(fit, mla_module_gemm={})
        assert statistics.median(composed_seconds(gpu, r, fp8) / r.seconds for r in rows) > 1.05, gpu


def test_deepseek_v4s_compressed_core_and_its_floor_cut_take_the_same_module_time():
    """``timed_core`` qualifies the module as ``module_costs`` does: a compressed-attention layer of BF16 projections
    moves by exactly the BF16 constant's change (its core carries it, the floors' cut reads it), and not at all
    when only the FP8 block constant moves, at a shape whose floors do not bind."""
    from demos.zoo.breakdown import attention_seconds
    from demos.zoo.models import with_precision

    g = get_gpu("b200")
    spec = with_precision(get_preset("deepseek-v4-flash"), weights="bf16")
    w = Workload(spec, cluster_for("b200", 1, 8, 8), tokens=256, context=4096, ubatches=1)
    base = replace(family_fit(g.family), mla_module=30e-6, mla_module_gemm={"bfloat16": 30e-6})

    def at(fit):
        profile = gpu_profile(g, fit=fit)
        return attention_seconds(w, 256, spec.first_k_dense, profile, KernelTimes(g, profile, fit))

    layer = at(base)
    assert at(replace(base, mla_module_gemm={"bfloat16": 18e-6})) - layer == pytest.approx(-12e-6, abs=1e-12)
    assert at(replace(base, mla_module=18e-6)) == pytest.approx(layer, abs=1e-12)
