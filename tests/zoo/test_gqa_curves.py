"""Grouped-query attention's core on the engines' own curves (``FamilyFit.gqa``, docs/kernels.md, "Grouped-query
attention").

The fast tests plant curves in a family's fit and check which core takes which, and that the fit counts a
measured row's work exactly as the step counts its own; the ``measured`` ones read the engines' tables (CI
installs the extra) and check the kernels each engine's rows are of and the fitted curves against them.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from demos.fits.gqa import gqa_row_units, gqa_row_work
from demos.vocabulary import Phase
from demos.zoo import measured
from demos.zoo.attention import attention_kind
from demos.zoo.fold import Folder
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, with_precision
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FamilyFit, GqaCurve, family_fit, gqa_key
from demos.zoo.workload import Workload, cluster_for

_skip = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
SLOW = GqaCurve(ceiling=0.05, mem_efficiency=0.05, latency=1e-6, per_unit=1e-6)  # far from any fitted curve


def _core(model: str, kv: str, engine: str | None, phase: str = Phase.DECODE, planted: dict | None = None) -> float:
    """Seconds of ``model``'s first attention core on H200 (attention TP 8) with the cache in ``kv``, timed for
    ``engine``, the family's GQA curves updated with ``planted``."""
    g = get_gpu("h200")
    base = family_fit(g.family)
    fit = replace(base, gqa={**base.gqa, **(planted or {})})
    profile = gpu_profile(g, fit=fit)
    spec = with_precision(get_preset(model), kv_cache="bf16" if kv == "bfloat16" else kv)
    tokens = 64 if phase == Phase.DECODE else 4096
    w = Workload(spec, cluster_for("h200", 1, 8, 8), phase=phase, tokens=tokens, context=4096, attention_tp=8)
    layer = spec.first_k_dense
    kernels = KernelTimes(g, profile, fit, engine=engine)
    return attention_kind(spec.attention).costs(w, spec.attention, tokens, layer, Folder(profile, kernels)).core.seconds


def test_each_engine_and_cache_dtype_takes_its_own_curve_and_nothing_else_does():
    """The bugs this catches: a GQA core timed on the MLA curve, on another engine's kernel, over the wrong
    cache dtype (an FP8 cache ignored: the step used to pass none), in the other phase, or a GQA curve
    leaking into an MLA model's core."""
    for phase in Phase:
        for engine in ("sglang", "vllm", "trtllm"):
            for kv in ("bfloat16", "fp8"):
                key = gqa_key(phase, engine, kv)
                plain = _core("minimax-m2.5", kv, engine, phase)
                assert _core("minimax-m2.5", kv, engine, phase, {key: SLOW}) > 3 * plain, key
                for other in (
                    {gqa_key(phase, e, kv): SLOW for e in ("sglang", "vllm", "trtllm") if e != engine},
                    {gqa_key(phase, engine, k): SLOW for k in ("bfloat16", "fp8") if k != kv},
                    {gqa_key(p, engine, kv): SLOW for p in Phase if p != phase},
                ):
                    assert _core("minimax-m2.5", kv, engine, phase, other) == plain, (key, other)
        everything = {k: SLOW for k in family_fit("hopper").gqa}
        assert _core("deepseek-v3", "bf16", "sglang", phase, everything) == _core(
            "deepseek-v3", "bf16", "sglang", phase
        )
    # no engine named (the predictor's sweep), or one without fitted tables (ATOM): SGLang's kernels, the family's
    assert _core("minimax-m2.5", "fp8", None) == _core("minimax-m2.5", "fp8", "sglang")
    assert _core("minimax-m2.5", "fp8", "atom") == _core("minimax-m2.5", "fp8", "sglang")
    slow_sglang = {gqa_key(Phase.DECODE, "sglang", "fp8"): SLOW}
    assert _core("minimax-m2.5", "fp8", "atom", planted=slow_sglang) > 3 * _core("minimax-m2.5", "fp8", "atom")


def test_a_fit_file_without_gqa_curves_loads_and_times_gqa_on_the_mla_curves():
    d = family_fit("hopper").to_dict()
    assert FamilyFit.from_dict(d) == family_fit("hopper")
    del d["gqa"]
    old = FamilyFit.from_dict(d)
    assert old.gqa == {}
    g = get_gpu("h200")
    kt = KernelTimes(g, gpu_profile(g, fit=old), old, engine="vllm")
    for phase, curve in ((Phase.DECODE, old.mla_decode), (Phase.PREFILL, old.mla_prefill)):
        want = curve.seconds(1e9, 1e8, kt.profile.flops_rate("bfloat16"), g.hbm_bandwidth) - curve.latency
        assert kt.attention(phase, 1e9, 1e8, None, fp8_cache=True) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("model", ["minimax-m2.5", "qwen3.5-397b-a17b", "gpt-oss-120b"])
@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_the_fit_counts_a_rows_work_as_the_step_counts_it(model, phase, kv):
    """A curve is fitted to the work ``gqa_row_work`` counts for a measured row; the step must ask it for the same
    work at the same shape (the bug: the two formulas drifting apart, e.g. a window applied in one only)."""
    spec = with_precision(get_preset(model), kv_cache=kv)
    a, tp, batch, length = spec.attention, 4, 8, 3000
    tokens = batch if phase == Phase.DECODE else batch * length
    w = Workload(spec, cluster_for("h200", 1, 8, 8), phase=phase, tokens=tokens, context=length, attention_tp=tp)

    asked: dict = {}

    class Raw:  # a folder that keeps the counted work and the core's work items, no timing
        class kernels:
            @staticmethod
            def attention(phase, flops, nbytes, shape, fp8_cache=False, units=0.0, module="mla"):
                asked.update(units=units, fp8_cache=fp8_cache)
                return 0.0

        def named(self, op):
            return lambda *works: works[0]

    kind = attention_kind(a)
    layers = sorted({0, 1} | {spec.first_k_dense})  # gpt-oss: a sliding-window layer and a full one
    heads, kv_heads = a.heads // tp, max(1, a.kv_heads // tp)
    for layer in layers:
        window = a.window_of(layer) or 0
        got = kind.costs(w, a, tokens, layer, Raw()).core_work
        cache = "fp8" if kv == "fp8" else "bfloat16"
        want = gqa_row_work(phase, cache, batch, heads, kv_heads, a.head_dim, length, window)
        assert got == pytest.approx(tuple(float(x) for x in want), rel=1e-12), (layer, window)
        units = float(gqa_row_units(phase, batch, length, kv_heads))
        assert asked == {"units": pytest.approx(units), "fp8_cache": kv == "fp8"}


@pytest.mark.measured
@_skip
def test_each_engines_rows_are_of_its_default_kernel():
    """SGLang picks FlashAttention 3 on Hopper and TRT-LLM's MHA kernels on Blackwell for a model without MLA; vLLM
    FlashAttention 3 and FlashInfer's TRT-LLM kernels; TRT-LLM its own (docs/kernels.md)."""
    from demos.zoo.measured_attention import gqa_rows

    want = {
        ("h200", "sglang"): "fa3",
        ("b200", "sglang"): "trtllm_mha",
        ("h200", "vllm"): "vllm_flash_attn_fa3",
        ("b200", "vllm"): "vllm_flashinfer_trtllmdecode",
        ("gb300", "trtllm"): "torch_flow",
    }
    for (gpu, engine), kernel in want.items():
        rows = gqa_rows(gpu, Phase.DECODE, engine, "fp8")
        assert len(rows) > 10_000 and {r.kernel for r in rows} == {kernel}, (gpu, engine)
    assert {r.kernel for r in gqa_rows("b200", Phase.PREFILL, "vllm", "bfloat16")} == {"vllm_flashinfer_trtllmprefill"}
    with pytest.raises(ValueError, match="kv_dtype"):
        gqa_rows("h200", Phase.DECODE, "sglang", "int8")
    with pytest.raises(ValueError, match="no GQA table"):
        gqa_rows("h200", Phase.DECODE, "atom", "fp8")


@pytest.mark.measured
@_skip
def test_sglangs_hopper_fp8_cache_saves_little_and_blackwells_about_half():
    """Why a curve per cache dtype: at 64 requests of 8k cached tokens (8 KV heads of 128), SGLang's Hopper FP8
    core takes more than 0.75 of its BF16 one, where half the bytes would give half; Blackwell's takes 0.4-0.75."""

    def ratio(gpu):
        def at(kv):
            rows = measured_rows(gpu, kv)
            return statistics.median(r.seconds for r in rows)

        return at("fp8") / at("bfloat16")

    def measured_rows(gpu, kv):
        from demos.zoo.measured_attention import gqa_rows

        return [
            r
            for r in gqa_rows(gpu, Phase.DECODE, "sglang", kv)
            if r.batch == 64 and r.kv_heads == 8 and r.head_dim == 128 and r.window == 0 and 8000 <= r.context < 8200
        ]

    assert ratio("h200") > 0.75
    assert 0.4 < ratio("b200") < 0.75


@pytest.mark.slow
@pytest.mark.measured
@_skip
def test_the_familys_curves_meet_the_held_out_blackwell_ultra_tables():
    """B300's and GB300's rows are held out of the Blackwell curves (fitted on B200 and GB200): at the presets' head
    shapes every decode op within 20% signed median there (B300's vLLM FP8 core +15.6%), every prefill op within 30%
    (B300's vLLM FP8 prefill +25.5%: Blackwell Ultra's attention runs faster than the family's curve); measured, the
    bounds sized to it with a margin; the predictor takes their own curves."""
    from demos.fidelity.gqa_kernels import GQA_OPS, gqa_check_rows

    fit = family_fit("blackwell")
    for gpu in ("b300", "gb300"):
        errors: dict[str, list[float]] = {}
        for op, _, predicted, measured_s in gqa_check_rows(gpu, fit):
            errors.setdefault(op, []).append(predicted / measured_s - 1)
        assert set(errors) == set(GQA_OPS.values()), gpu
        for op, e in errors.items():
            bound = 0.20 if " decode " in op else 0.30
            assert abs(statistics.median(e)) <= bound, (gpu, op, statistics.median(e))
