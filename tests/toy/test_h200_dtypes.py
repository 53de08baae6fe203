"""The built-in h200 profile's dtype rates: float32 is not the bf16 mix's share of its peak (SIMT FP32
GEMMs reach far more of theirs), and the figure follows from the derivation docs/fidelity.md gives."""

from __future__ import annotations

import pytest

from dbo.costs import get_profile
from demos.fits.h800 import DTYPE_CEILING


def test_float32_is_its_gemms_at_the_sgemm_share_plus_the_mixs_memory_work_twice():
    h200 = get_profile("h200")
    bf16 = h200.dtype_flops["bfloat16"]
    large_bf16 = 790e12  # what large bf16 GEMMs reach on the H200 (fidelity.md)
    other = 1 / bf16 - 1 / large_bf16  # the bf16 mix's non-GEMM seconds per flop
    expected = 1 / (1 / (DTYPE_CEILING["float32"] * 67e12) + 2 * other)
    assert h200.dtype_flops["float32"] == pytest.approx(expected, rel=0.01)


def test_float32_is_not_the_bf16_share_of_its_peak():
    h200 = get_profile("h200")
    same_share = h200.dtype_flops["bfloat16"] * 67 / 989.5  # what keeping the bf16 ratio gives: ~20 TFLOP/s
    assert h200.dtype_flops["float32"] > 2 * same_share
    assert h200.dtype_flops["float32"] < 67e12  # and still below the SIMT peak
