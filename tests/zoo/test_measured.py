"""The measured-tables adapter, the fitted curves and the kernel-time seam (docs/kernels.md).

Tests marked ``measured`` read aiconfigurator-core's real tables (CI installs the extra) and are
skipped without it; the rest need nothing beyond the default install.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from demos.errors import ConfigError
from demos.zoo import measured
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes, kernel_times
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS, GemmCurve, GroupedCurve, family_fit
from demos.zoo.rooflines_fit import experts_seconds, fit_experts, fit_gemm

ROOT = Path(__file__).resolve().parents[2]
_skip = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def needs_tables(f):
    """Reads the real tables (seconds to load): slow, and skipped without the extra."""
    return pytest.mark.measured(pytest.mark.slow(_skip(f)))


def test_every_gpu_has_a_fitted_family():
    from demos.zoo.hardware import GPUS

    assert set(FITS) == {"hopper", "blackwell"}
    for g in GPUS.values():
        fit = family_fit(g.family)
        for c in fit.gemm.values():
            assert 0 < c.ceiling <= 1 and 0 < c.mem_efficiency <= 1 and c.latency > 0
    assert get_gpu("b200").family == get_gpu("gb200").family == "blackwell"
    assert get_gpu("h20").family == "hopper"


def test_fit_gemm_recovers_a_known_curve_from_its_own_rows():
    truth = GemmCurve(ceiling=0.8, m0=20.0, n0=900.0, k0=300.0, mem_efficiency=0.75, latency=4e-6, mem_tiles=0.2)
    g = get_gpu("h100")
    rows = []
    for m in (1, 8, 64, 256, 1024, 4096, 16384):
        for n in (512, 2048, 7168, 24576):
            for k in (512, 2048, 7168):
                flops, nbytes = 2.0 * m * n * k, n * k + m * k + 2.0 * m * n
                t = truth.seconds(flops, nbytes, m, n, k, g.fp8, g.hbm_bandwidth, g.sm_count)
                rows.append(measured.GemmRow(m, n, k, "fp8_block", t))
    got = fit_gemm([(g, rows)], "fp8")
    pred = [
        got.seconds(
            2.0 * r.m * r.n * r.k,
            r.n * r.k + r.m * r.k + 2.0 * r.m * r.n,
            r.m,
            r.n,
            r.k,
            g.fp8,
            g.hbm_bandwidth,
            g.sm_count,
        )
        for r in rows
    ]
    assert np.max(np.abs(np.array(pred) / np.array([r.seconds for r in rows]) - 1)) < 0.02


def test_fit_experts_recovers_a_known_grouped_curve_and_the_step_times_grouped_gemms_on_it():
    """The grouped curve is fitted with the FP8 GEMM curve held; the step's routed experts (op "experts")
    move their bytes at its share of bandwidth, every other GEMM at the dense curve's."""
    g, gemm = get_gpu("h200"), family_fit("hopper").gemm["fp8"]
    truth = GroupedCurve(mem_efficiency=0.8, latency=2e-5)
    rows = [
        measured.MoeRow(t, 7168, 2048, 8, 256, ep, "uniform", 0.0)
        for ep in (4, 16, 64, 256)
        for t in (ep // 2 or 1, 4 * ep, 64 * ep)
    ]
    rows = [r._replace(seconds=experts_seconds(gemm, truth, g, r)) for r in rows]
    got = fit_experts([(g, rows)], gemm)
    assert (got.mem_efficiency, got.latency) == pytest.approx((0.8, 2e-5), rel=1e-3)
    kt = KernelTimes(g, gpu_profile("h200"))
    args = (4.0, 4096, 7168, "fp8", 2.0 * 64 * 4 * 4096 * 7168, 64 * 4096 * 7168.0)  # 64 experts x 4 rows
    grouped, dense = kt.gemm("experts", *args), kt.gemm("attn_proj", *args)
    assert grouped == pytest.approx(args[-1] / (g.hbm_bandwidth * family_fit("hopper").experts.mem_efficiency))
    assert grouped < dense  # the grouped share of bandwidth is above one dense GEMM's


def test_measured_source_without_the_extra_is_one_line_naming_the_install(monkeypatch):
    def missing():
        raise measured.MeasuredTablesError(measured.INSTALL_HINT)

    monkeypatch.setattr(measured, "_modules", missing)
    with pytest.raises(ConfigError) as e:
        kernel_times("measured", get_gpu("h200"), gpu_profile("h200"))
    assert "\n" not in str(e.value) and "pip install -e '.[measured]'" in str(e.value)
    with pytest.raises(ConfigError, match="kernels must be one of roofline, measured"):
        kernel_times("tables", get_gpu("h200"), gpu_profile("h200"))


@needs_tables
def test_the_adapter_reads_a_known_row_in_seconds():
    rows = measured.gemm_rows("h200", "fp8")
    hit = [r for r in rows if (r.m, r.n, r.k) == (4096, 65536, 3072)]
    assert hit and hit[0].seconds == pytest.approx(1.481596e-3, rel=1e-5)
    mla = measured.mla_rows("h200", "decode", "bfloat16")
    assert mla and all(r.kv_dtype == "bfloat16" and r.seconds > 0 for r in mla)
    with pytest.raises(measured.MeasuredTablesError, match="no measured tables for GPU 'h20'"):
        measured.gemm_rows("h20")


@needs_tables
def test_the_silicon_sample_keeps_each_workers_parallelism():
    rows = measured.silicon_rows()
    assert len(rows) > 5000
    disagg = [r for r in rows if r.mode == "disagg" and r.prefill is not None]
    assert disagg and all(len(r.prefill) == 5 for r in disagg)
    assert all(r.tpot_s is None or 0 < r.tpot_s < 1 for r in rows)  # seconds, not ms


@needs_tables
def test_measured_source_reproduces_a_table_row_and_names_what_fell_back():
    g = get_gpu("h200")
    kt = kernel_times("measured", g, gpu_profile("h200"))
    row = next(r for r in measured.gemm_rows("h200", "fp8_block") if (r.m, r.n, r.k) == (64, 7168, 2048))
    flops, nbytes = 2.0 * 64 * 7168 * 2048, 7168 * 2048 + 64 * 2048 + 2 * 64 * 7168
    got = kt.gemm("attn_out", 64, 7168, 2048, "fp8", flops, nbytes)
    roof = KernelTimes(g, kt.profile).gemm("attn_out", 64, 7168, 2048, "fp8", flops, nbytes)
    assert got == pytest.approx(max(roof, row.seconds - kt.fit.gemm["fp8"].latency))
    assert kt.fallbacks == {}
    kt.gemm("router", 8, 257, 7168, "bfloat16", 2.0 * 8 * 257 * 7168, 257 * 7168 * 2.0)
    assert "router" in kt.fallbacks and "n=257" in kt.fallbacks["router"]


@needs_tables
def test_rooflines_json_is_what_the_fitting_script_gives():
    out = subprocess.run(
        [sys.executable, "scripts/fit_rooflines.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
