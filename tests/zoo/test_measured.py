"""The measured-tables adapter, the fitted curves and the kernel-time seam (docs/kernels.md).

Tests marked ``measured`` read aiconfigurator-core's real tables (CI installs the extra) and are
skipped without it; the rest need nothing beyond the default install.
"""

from __future__ import annotations

import dataclasses

import pytest

from demos.errors import ConfigError
from demos.zoo import measured
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes, kernel_times
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS, GPU_FITS, family_fit, gpu_fit

_skip = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def needs_tables(f):
    """Reads the real tables (seconds to load): slow, and skipped without the extra."""
    return pytest.mark.measured(pytest.mark.slow(_skip(f)))


def test_every_gpu_has_a_fitted_family():
    from demos.zoo.hardware import GPUS

    assert set(FITS) == {"hopper", "blackwell", "cdna3", "cdna4"}
    for g in GPUS.values():
        fit = family_fit(g.family)
        for c in fit.gemm.values():
            assert 0 < c.ceiling <= 1 and 0 < c.mem_efficiency <= 1 and c.latency > 0
    assert get_gpu("b200").family == get_gpu("gb200").family == "blackwell"
    assert get_gpu("h20").family == "hopper"
    assert get_gpu("mi300x").family == get_gpu("mi325x").family == "cdna3"
    assert get_gpu("mi355x").family == get_gpu("mi350x").family == "cdna4"


def test_a_gpu_with_tables_of_its_own_is_timed_on_its_own_curves_and_any_other_on_its_familys():
    """The bug this catches: a GPU timed on its family's pooled curves where its own exist (H200's GEMM and MLA
    kernels run 1.5-5% slower than the pooled Hopper curves say), or a what-if that swaps the GPU's curves for
    its family's."""
    assert set(GPU_FITS) == set(measured.SYSTEMS)
    for name in measured.SYSTEMS:
        g = get_gpu(name)
        assert gpu_fit(g) is GPU_FITS[name] and GPU_FITS[name].fitted_on == (name,)
        assert GPU_FITS[name].family == g.family and KernelTimes(g, gpu_profile(g)).fit is GPU_FITS[name]
    assert GPU_FITS["h200"].gemm["fp8"] != FITS["hopper"].gemm["fp8"]
    for name in ("h800", "h20", "mi300x", "mi355x"):  # no tables of their own
        assert gpu_fit(get_gpu(name)) is FITS[get_gpu(name).family]
    # a what-if scales one figure of the GPU (demos.prediction.sweep): the curves, shares of it, stay its own
    assert gpu_fit(dataclasses.replace(get_gpu("h200"), name="h200*", hbm_bandwidth=3.0e12)) is GPU_FITS["h200"]


def test_a_gpu_whose_tables_lack_a_fixed_time_takes_its_familys():
    """GB200, B300 and GB300 measure no DSA module without its indexer: their own fit would put the
    indexer's fixed time at 0; it is Blackwell's pooled one (B200's rows) instead, and B200's is its own."""
    blackwell = FITS["blackwell"]
    for name in ("gb200", "b300", "gb300"):
        assert GPU_FITS[name].dsa_index == blackwell.dsa_index > 0
        assert "the DSA indexer extra is blackwell's" in GPU_FITS[name].source
    assert GPU_FITS["b200"].dsa_index > 0 and "the DSA indexer extra is" not in GPU_FITS["b200"].source
    for name in ("h100", "h200"):
        assert GPU_FITS[name].dsa_index > 0 and GPU_FITS[name].dsa_index != FITS["hopper"].dsa_index


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
