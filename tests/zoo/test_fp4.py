"""FP4 math (issues 45 and 46): NVFP4 weights multiply at the GPU's FP4 tensor-core rate on Blackwell, on the
family's FP4 GEMM curve fitted to the measured NVFP4 tables, and at the BF16 rate (dequantized) on a GPU
without FP4 tensor cores; ``--weights fp4`` is NVFP4, the format of the FP4 checkpoints it names."""

from __future__ import annotations

import pytest

from demos.zoo import measured
from demos.zoo.fold import gemm
from demos.zoo.hardware import GpuSpec, get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, with_precision
from demos.zoo.models.dtypes import dtype, storage_of
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS

P = 1e15
needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def test_the_dense_fp4_rates_and_hopper_running_4_bit_weights_at_its_bf16_rate():
    rates = {name: get_gpu(name).flops("fp4") for name in ("b200", "gb200", "b300", "gb300", "h100", "h200")}
    assert rates == {
        "b200": 9 * P,
        "gb200": 10 * P,
        "b300": 14 * P,
        "gb300": 15 * P,
        "h100": 989.5e12,
        "h200": 989.5e12,
    }
    assert get_gpu("b200").has_fp4 and not get_gpu("h200").has_fp4
    assert get_gpu("b200").dtype_flops["fp4"] == 9 * P and get_gpu("h100").dtype_flops["fp4"] == 989.5e12


def test_a_gpu_refuses_an_fp4_rate_below_its_fp8_rate():
    h = get_gpu("h100")
    fields = {f: getattr(h, f) for f in h.__dataclass_fields__}
    with pytest.raises(ValueError, match="GpuSpec.fp4 must be 0 .none. or a rate >= fp8"):
        GpuSpec(**{**fields, "fp4": 1e15})


def test_nvfp4_multiplies_in_fp4_with_nvfp4_activations_and_weights_fp4_is_nvfp4():
    assert (dtype("nvfp4").math, dtype("nvfp4").activation_bytes) == ("fp4", 18 / 32)
    assert dtype("mxfp4").math == "w4a8"  # MXFP4 (gpt-oss, DeepSeek-V4) against FP8 activations
    assert dtype("mxfp4_w4a16").math == "bfloat16"  # Kimi-K3's, its activations BF16
    assert storage_of("fp4") == "nvfp4"
    assert with_precision(get_preset("deepseek-v3"), weights="fp4").precision.experts == "nvfp4"
    assert with_precision(get_preset("gpt-oss-120b"), weights="fp4").precision.experts == "nvfp4"


def test_only_blackwell_has_an_fp4_gemm_curve():
    assert "fp4" in FITS["blackwell"].gemm and "fp4" not in FITS["hopper"].gemm


@pytest.mark.parametrize("gpu,faster", [("b200", True), ("h200", False)])
def test_an_nvfp4_gemm_is_timed_on_the_fp4_curve_where_there_is_one_and_as_bf16_where_not(gpu, faster):
    g = get_gpu(gpu)
    kt = KernelTimes(g, gpu_profile(g))
    m, n, k = 4096, 7168, 2048  # compute-bound: the math rate decides
    fp4, bf16 = gemm(m, n, k, "nvfp4"), gemm(m, n, k, "bfloat16")
    t4 = kt.gemm("x", m, n, k, fp4.dtype, fp4.flops, fp4.bytes)
    t16 = kt.gemm("x", m, n, k, bf16.dtype, bf16.flops, bf16.bytes)
    if faster:
        assert t4 < 0.5 * t16
        curve = kt.fit.gemm["fp4"]  # on the FP4 curve, at the FP4 rate
        fp4_s = curve.seconds(fp4.flops, fp4.bytes, m, n, k, g.fp4, g.hbm_bandwidth, g.sm_count) - curve.latency
        assert t4 == pytest.approx(fp4_s)
    else:
        curve = kt.fit.gemm["bfloat16"]  # its fixed time is the op's floor's, as for every GEMM part
        bf16_s = curve.seconds(fp4.flops, fp4.bytes, m, n, k, g.bf16, g.hbm_bandwidth, g.sm_count) - curve.latency
        assert t4 == pytest.approx(bf16_s)


@needs_extra
def test_the_fp4_gemm_curve_holds_its_tables_and_the_blackwell_ultra_ones_held_out():
    from demos.fidelity.kernels import kernel_rows, summaries

    for gpu in ("b200", "gb200", "b300", "gb300"):
        (s,) = summaries(kernel_rows(gpu, ops=("gemm fp4",)))
        assert s["rows"] == 29526 and abs(s["median_error"]) < 0.1, (gpu, s["median_error"])
    assert kernel_rows("h200", ops=("gemm fp4",)) == []


@pytest.mark.parametrize("gpu,rate", [("b200", "fp8"), ("h200", "bfloat16")])
def test_mxfp4_w4a8_runs_at_the_fp8_rate_on_fp4_tensor_cores_and_dequantized_on_hopper(gpu, rate):
    """W4A8 (MXFP4 weights, FP8 activations) on the FP8 curve at the FP8 rate where the MMA takes FP4 operands;
    on Hopper the weights dequantized at the BF16 rate; a W4A16 checkpoint's at the BF16 rate everywhere."""
    g = get_gpu(gpu)
    kt = KernelTimes(g, gpu_profile(g))
    assert kt.gemm_math("w4a8") == rate and g.flops("w4a8") == g.flops(rate)
    m, n, k = 4096, 7168, 2048  # compute-bound
    w4a8, w4a16 = gemm(m, n, k, "mxfp4"), gemm(m, n, k, "mxfp4_w4a16")
    t8 = kt.gemm("x", m, n, k, w4a8.dtype, w4a8.flops, w4a8.bytes)
    t16 = kt.gemm("x", m, n, k, w4a16.dtype, w4a16.flops, w4a16.bytes)
    assert (t8 < 0.7 * t16) if rate == "fp8" else t8 == pytest.approx(t16)
