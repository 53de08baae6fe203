"""An MLA decode core over an FP8 cache (``FamilyFit.mla_decode_fp8``, docs/kernels.md, "MLA over an FP8 cache").

The fast tests plant curves in a family's fit and check which core takes which; the ``measured`` ones read the
engines' tables (CI installs the extra) and check the fit and its held-out module rows.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from demos.vocabulary import Phase
from demos.zoo import measured
from demos.zoo.attention import attention_kind
from demos.zoo.fold import Folder
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, with_precision
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import AttentionCurve, FamilyFit, family_fit
from demos.zoo.workload import Workload, cluster_for

_skip = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
SLOW_FP8 = AttentionCurve(ceiling=0.05, mem_efficiency=0.05, latency=1e-6)  # far from any fitted curve


def _core(model: str, kv: str, phase: str = Phase.DECODE, fp8_curve: AttentionCurve | None = SLOW_FP8) -> float:
    """Seconds of the attention core of ``model``'s first sparse-or-dense layer on H200 with the cache in ``kv``,
    the family's FP8 decode curve set to ``fp8_curve``."""
    g = get_gpu("h200")
    fit = replace(family_fit(g.family), mla_decode_fp8=fp8_curve)
    profile = gpu_profile(g, fit=fit)
    spec = with_precision(get_preset(model), kv_cache=kv)
    tokens = 64 if phase == Phase.DECODE else 4096
    w = Workload(spec, cluster_for("h200", 1, 8, 8), phase=phase, tokens=tokens, context=4096, ubatches=1)
    layer = spec.first_k_dense
    return (
        attention_kind(spec.attention)
        .costs(w, spec.attention, tokens, layer, Folder(profile, KernelTimes(g, profile, fit)))
        .core.seconds
    )


def test_an_fp8_cache_takes_the_fp8_decode_curve_and_nothing_else_does():
    """The bugs this catches: an FP8 MLA decode core timed on the BF16 curve at half the bytes (on Hopper a
    third of what it measures), the FP8 curve leaking into BF16 cores, into prefill, or into DeepSeek-V4's
    compressed core (FlashMLA's sparse FP8 kernel, checked against its own modules on the BF16 curve)."""
    for model in ("deepseek-v3", "glm-5"):  # dense MLA and DeepSeek sparse attention
        assert _core(model, "fp8") > 3 * _core(model, "fp8", fp8_curve=None)  # the planted slow curve charged
        assert _core(model, "bf16") == _core(model, "bf16", fp8_curve=None)
        assert _core(model, "fp8", Phase.PREFILL) == _core(model, "fp8", Phase.PREFILL, fp8_curve=None)
    assert _core("deepseek-v4-flash", "fp8") == _core("deepseek-v4-flash", "fp8", fp8_curve=None)


def test_a_fit_file_without_the_fp8_curve_loads_and_times_fp8_on_the_bf16_curve():
    d = family_fit("hopper").to_dict()
    assert FamilyFit.from_dict(d) == family_fit("hopper")
    del d["mla_decode_fp8"]
    old = FamilyFit.from_dict(d)
    assert old.mla_decode_fp8 is None
    g = get_gpu("h200")
    kt = KernelTimes(g, gpu_profile(g, fit=old), old)
    assert kt.attention(Phase.DECODE, 1e9, 1e8, (64, 16, 4096), fp8_cache=True) == kt.attention(
        Phase.DECODE, 1e9, 1e8, (64, 16, 4096)
    )


@pytest.mark.slow
@pytest.mark.measured
@_skip
def test_hoppers_fp8_cache_is_dearer_and_the_curve_follows_it(validate_json):
    """SGLang 0.5.14's MLA decode tables: on Hopper (FlashAttention-3's FP8 path) the FP8 cache takes about twice
    the BF16 cache's time, on Blackwell (TRT-LLM's) less. The fitted FP8 curve within 20% signed median on every
    GPU with tables (H200's -17%: one curve for H100 and H200, whose FP8 kernel does not scale with the
    bandwidth); held out, SGLang's DSA modules over an FP8 cache within 10% on Hopper."""
    for gpu, lo, hi in (("h100", 1.5, 3.0), ("h200", 1.5, 3.0), ("b200", 0.6, 1.0), ("gb200", 0.6, 1.0)):
        bf16 = {(r.batch, r.heads, r.kv_len): r.seconds for r in measured.mla_rows(gpu, Phase.DECODE, "bfloat16")}
        ratios = [
            r.seconds / bf16[k]
            for r in measured.mla_rows(gpu, Phase.DECODE, "fp8")
            if (k := (r.batch, r.heads, r.kv_len)) in bf16
        ]
        assert lo < statistics.median(ratios) < hi, (gpu, statistics.median(ratios))
    summary = {(s["gpu"], s["op"]): s for s in validate_json("kernels")["summary"]}
    for gpu in ("h100", "h200", "b200", "gb200", "b300", "gb300"):
        assert abs(summary[(gpu, "mla decode fp8")]["median_error"]) <= 0.20, gpu
    for gpu in ("h100", "h200"):
        assert abs(summary[(gpu, "dsa module fp8")]["median_error"]) <= 0.10, gpu


def test_the_fit_check_compares_the_fp8_curve_and_names_it_when_it_moved():
    """``python -m demos.fits check`` must see a stored FP8 curve the tables no longer give (within its 0.5%)."""
    from demos.fits.compare import FIT_TOLERANCE, compare_fits
    from demos.zoo.rooflines import FITS

    hopper = FITS["hopper"]
    assert ("hopper", "mla decode fp8") in {
        (d.family, d.curve) for d in compare_fits(dict(FITS), dict(FITS)).differences
    }
    moved = replace(
        hopper.mla_decode_fp8, mem_efficiency=hopper.mla_decode_fp8.mem_efficiency * (1 - 4 * FIT_TOLERANCE)
    )
    far = compare_fits(dict(FITS), {**FITS, "hopper": replace(hopper, mla_decode_fp8=moved)})
    assert [(d.family, d.curve) for d in far.differences if not d.within] == [("hopper", "mla decode fp8")]


def test_an_engine_with_its_own_fp8_curve_takes_it_and_the_others_take_the_familys():
    """TRT-LLM's FP8-cache MLA decode kernel is its own (``FamilyFit.engine_mla_decode_fp8``): the bug this catches
    is an engine's curve leaking into another engine's step, into the predictor's (engine None), or into a BF16 core."""
    g = get_gpu("h200")
    fast = AttentionCurve(ceiling=0.9, mem_efficiency=0.9, latency=1e-6)
    fit = replace(family_fit(g.family), mla_decode_fp8=SLOW_FP8, engine_mla_decode_fp8={"trtllm": fast})
    profile = gpu_profile(g, fit=fit)
    shape = (64, 16, 4096)

    def core(engine, fp8=True):
        return KernelTimes(g, profile, fit, engine=engine).attention(Phase.DECODE, 1e9, 1e8, shape, fp8_cache=fp8)

    assert core("trtllm") < core("sglang") / 3
    assert core(None) == core("sglang") == core("vllm")
    assert core("trtllm", fp8=False) == core("sglang", fp8=False) == core(None, fp8=False)


@pytest.mark.measured
@_skip
def test_trtllms_hopper_fp8_cache_is_cheaper_than_its_bf16_one_where_sglangs_is_dearer():
    """The tables the two curves are fitted to (aiconfigurator-core 0.12.0): at 64 requests of 8k cached tokens
    and 128 heads, TRT-LLM's FP8-cache core on H200 takes less than its BF16 one, SGLang's several times more."""

    def at(engine, kv):
        rows = measured.mla_rows("h200", Phase.DECODE, kv, engine=engine)
        return statistics.median(r.seconds for r in rows if r.batch == 64 and r.heads == 128 and 8000 < r.kv_len < 9000)

    assert at("trtllm", "fp8") < at("trtllm", "bfloat16")
    assert at("sglang", "fp8") > 3 * at("sglang", "bfloat16")
    with pytest.raises(ValueError):
        measured.mla_rows("h200", Phase.PREFILL, "fp8", engine="trtllm")
