"""The fitting (``demos.fits``, docs/kernels.md): each fit recovers a known curve from rows it generated,
and ``python -m demos.fits check`` holds ``rooflines.json`` to a fresh fit within ``FIT_TOLERANCE``, a
tolerance that a planted change beyond it breaks and a change within it does not.

Tests marked ``measured`` fit the real tables (CI installs the extra) and are skipped without it."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from demos.fits.compare import FIT_TOLERANCE, compare_fits, grid_times
from demos.fits.mhc import fit_mhc
from demos.fits.rooflines import experts_seconds, fit_experts, fit_gemm, fit_ll_sm
from demos.zoo import measured
from demos.zoo.hardware import get_gpu, ll_bytes
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.measured import AllToAllRow
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS, AttentionCurve, GemmCurve, GroupedCurve, family_fit, gpu_fit
from demos.zoo.work import gemm_work, mhc_work
from tests.support.paths import REPO

_skip = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def needs_tables(f):
    """Reads the real tables (seconds to load): slow, and skipped without the extra."""
    return pytest.mark.measured(pytest.mark.slow(_skip(f)))


@pytest.mark.parametrize(
    "ms", [(1, 8, 64, 256, 1024, 4096, 16384), (1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096, 16384)]
)
def test_fit_gemm_recovers_a_known_curve_from_its_own_rows(ms):
    """84 rows: least squares on every row; 144 rows: on every ``GEMM_COARSE_STRIDE``-th, then the polish on all."""
    truth = GemmCurve(ceiling=0.8, m0=20.0, n0=900.0, k0=300.0, mem_efficiency=0.75, latency=4e-6, mem_tiles=0.2)
    g = get_gpu("h100")
    rows = []
    for m in ms:
        for n in (512, 2048, 7168, 24576):
            for k in (512, 2048, 7168):
                flops, nbytes = gemm_work(m, n, k, "fp8_e4m3")
                t = truth.seconds(flops, nbytes, m, n, k, g.fp8, g.hbm_bandwidth, g.sm_count)
                rows.append(measured.GemmRow(m, n, k, "fp8_block", t))
    got = fit_gemm([(g, rows)], "fp8")
    pred = [
        got.seconds(*gemm_work(r.m, r.n, r.k, "fp8_e4m3"), r.m, r.n, r.k, g.fp8, g.hbm_bandwidth, g.sm_count)
        for r in rows
    ]
    assert np.max(np.abs(np.array(pred) / np.array([r.seconds for r in rows]) - 1)) < 0.02


@pytest.mark.parametrize("site", ["pre", "post"])
def test_fit_mhc_recovers_a_known_curve_and_its_fixed_time_from_its_own_rows(site):
    """A hyper-connection kernel's curve: a fixed time that dominates at a few tokens (the pre kernel's
    Sinkhorn iterations), a share of bandwidth beyond; the other site's rows are left out of the fit."""
    truth = AttentionCurve(ceiling=0.6, mem_efficiency=0.45 if site == "pre" else 0.8, latency=1.8e-5)
    g = get_gpu("b200")
    rows = []
    for tokens in (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144):
        for hidden in (4096, 7168):
            t = truth.seconds(*mhc_work(site, tokens, hidden, 4), g.bf16, g.hbm_bandwidth)
            rows.append(measured.MhcRow(site, tokens, hidden, 4, t))
            rows.append(measured.MhcRow("post" if site == "pre" else "pre", tokens, hidden, 4, 1.0))  # not read
    got = fit_mhc([(g, rows)], site)
    assert got.latency == pytest.approx(truth.latency, rel=0.02)
    assert got.mem_efficiency == pytest.approx(truth.mem_efficiency, rel=0.02)


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
    assert grouped == pytest.approx(args[-1] / (g.hbm_bandwidth * gpu_fit(g).experts.mem_efficiency))
    assert grouped < dense  # the grouped share of bandwidth is above one dense GEMM's


def test_the_ll_fit_recovers_a_line_and_a_per_peer_term_where_node_sizes_differ():
    def row(gpus: int, t: int) -> AllToAllRow:
        s = 10e-6 + 3e-12 * ll_bytes("dispatch", t, 7168, 8) + 1e-6 * (gpus - 1)
        return AllToAllRow(gpus, t, 7168, 8, 256, s, 0.0)

    line = fit_ll_sm([row(8, t) for t in (1, 8, 64)], "dispatch")  # one node size: no per-peer term
    assert line.fixed == pytest.approx(17e-6, rel=1e-3) and line.per_peer == 0.0
    assert line.per_byte == pytest.approx(3e-12, rel=1e-3)
    line = fit_ll_sm([row(g, t) for g in (4, 8) for t in (1, 8, 64)], "dispatch")
    assert (line.fixed, line.per_byte, line.per_peer) == pytest.approx((10e-6, 3e-12, 1e-6), rel=1e-3)


# --- comparing fits within the tolerance -------------------------------------------------------------


def _scaled(fit, **gemm_fp8):
    """``fit`` with its FP8 GEMM curve's figures multiplied by the given factors."""
    c = fit.gemm["fp8"]
    curve = dataclasses.replace(c, **{k: getattr(c, k) * f for k, f in gemm_fp8.items()})
    return dataclasses.replace(fit, gemm={**fit.gemm, "fp8": curve})


def test_a_fit_matches_itself_on_every_curve_of_the_grid():
    c = compare_fits(dict(FITS), dict(FITS))
    assert c.same and not c.mismatches
    curves = {(d.family, d.curve) for d in c.differences}
    for family in FITS:
        for curve in (
            "gemm fp8",
            "gemm bfloat16",
            "mla decode",
            "mla prefill",
            "experts",
            "ll dispatch",
            "mla module",
            "mhc pre",
            "mhc post",
        ):
            assert (family, curve) in curves
    assert all(d.max_relative == 0.0 for d in c.differences)


def test_a_change_inside_the_tolerance_passes_and_one_beyond_it_fails_naming_the_curve():
    """What a processor's rounding does (a knee 0.07% off) passes; a fixed time 2% off fails, on the FP8
    GEMM curve and on the routed experts that time their math on it."""
    hopper = FITS["hopper"]
    near = compare_fits(dict(FITS), {**FITS, "hopper": _scaled(hopper, n0=1.0007)})
    assert near.same and 0 < max(d.max_relative for d in near.differences) < FIT_TOLERANCE
    far = compare_fits(dict(FITS), {**FITS, "hopper": _scaled(hopper, latency=1.5)})
    assert not far.same
    failing = {(d.family, d.curve) for d in far.differences if not d.within}
    assert ("hopper", "gemm fp8") in failing and all(f == "hopper" for f, _ in failing)
    assert any("DIFFERS" in line and "gemm fp8" in line for line in far.lines())


def test_the_module_time_and_the_sources_are_compared_too():
    hopper = FITS["hopper"]
    moved = compare_fits(
        dict(FITS), {**FITS, "hopper": dataclasses.replace(hopper, mla_module=hopper.mla_module * 1.01)}
    )
    assert [d.curve for d in moved.differences if not d.within] == ["mla module"]
    other = compare_fits(dict(FITS), {**FITS, "hopper": dataclasses.replace(hopper, source="another table")})
    assert not other.same and any("hopper source" in m for m in other.mismatches)
    gone = compare_fits(dict(FITS), {"hopper": hopper})
    assert not gone.same and any("fits" in m for m in gone.mismatches)


def test_the_grid_covers_every_fitted_gpu_of_the_family():
    names, times = grid_times(FITS["blackwell"])["gemm fp8"]
    assert len(names) == len(times) and {n.split()[0] for n in names} == {"b200", "gb200"}
    assert np.all(times > 0)


@needs_tables
@pytest.mark.long(110)
@pytest.mark.timeout(600)  # two families and six GPUs fitted two at a time: about 73 s on two idle cores (the GQA
# curves, 12 a fit over every row of the engines' attention tables, are most of it), 115 s beside another worker
def test_rooflines_json_is_what_the_fit_gives_within_the_tolerance():
    out = subprocess.run(
        [sys.executable, "-m", "demos.fits", "check"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"rooflines.json matches the fit (tolerance {FIT_TOLERANCE:.1%}" in out.stdout
