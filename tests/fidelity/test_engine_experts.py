"""``validate kernels``' experts per dtype: vLLM 0.24.0's fused MoE rows (``measured_moe.vllm_moe_rows``) predicted
as the step times a local fused MoE, each dtype on the curve of its math (docs/kernels.md, "Routed experts per
expert dtype")."""

from __future__ import annotations

import statistics

import pytest

from demos.fidelity.engine_experts import ENGINE_MOE_OPS
from demos.fidelity.kernels import kernel_rows
from demos.fits.rooflines import experts_seconds
from demos.zoo import measured
from demos.zoo.hardware import get_gpu
from demos.zoo.measured_moe import EngineMoeRow, vllm_moe_rows
from demos.zoo.rooflines import FITS

needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def test_the_experts_storage_sets_their_bytes_and_their_math():
    """Kimi-K2.5's 48 local experts at EP 8 on B200, 128 tokens (every local expert active): memory-bound, so
    NVFP4 takes 18/32 of FP8's weight bytes' time and INT4 (BF16 math, the same bytes) no less than NVFP4."""
    g, fit = get_gpu("b200"), FITS["blackwell"]
    row = EngineMoeRow("", "", 128, 7168, 2048, 8, 384, 8, 0.0)
    fp8 = experts_seconds(fit.gemm["fp8"], fit.experts, g, row, "fp8_e4m3")
    fp4 = experts_seconds(fit.gemm["fp4"], fit.experts, g, row, "nvfp4")
    int4 = experts_seconds(fit.gemm["bfloat16"], fit.experts, g, row, "int4_g32")
    fixed = fit.experts.latency
    assert (fp4 - fixed) / (fp8 - fixed) == pytest.approx(18 / 32, rel=0.03)
    assert int4 >= fp4 * 0.999


@needs_tables
@pytest.mark.measured
def test_each_dtype_is_read_with_one_kernel_the_engines_default():
    rows = vllm_moe_rows("b200")
    kernels = {}
    for r in rows:
        kernels.setdefault(r.storage, set()).add(r.kernel)
    assert set(kernels) == {"fp8_e4m3", "nvfp4", "int4_g32"} and all(len(k) == 1 for k in kernels.values())
    assert "trtllmnvfp4experts" in next(iter(kernels["nvfp4"])) and "marlin" in next(iter(kernels["int4_g32"]))
    assert all(sum(r.storage == s for r in rows) >= 200 for s in kernels)
    assert "nvfp4" not in {r.storage for r in vllm_moe_rows("h200")}  # Hopper: no NVFP4 rows


@needs_tables
@pytest.mark.measured
@pytest.mark.slow
def test_at_decodes_token_counts_int4_runs_short_as_documented():
    """B200, up to 256 tokens (signed median), on the local fused MoE's curve of each dtype (fitted to SGLang's
    kernels): INT4 -19.8% (vLLM's Marlin runs longer than SGLang's INT4 kernel), block FP8 -4.5%, NVFP4 +2.7%."""
    rows = kernel_rows("b200", ops=tuple(ENGINE_MOE_OPS.values()))
    small = {}
    for r in rows:
        if int(r.shape.split("tokens=")[1].split()[0]) <= 256:
            small.setdefault(r.op, []).append(r.error)
    med = {op: statistics.median(e) for op, e in small.items()}
    assert -0.02 < med["experts vllm nvfp4"] < 0.05
    assert -0.30 < med["experts vllm int4"] < -0.15
    assert -0.10 < med["experts vllm fp8"] < 0.0
