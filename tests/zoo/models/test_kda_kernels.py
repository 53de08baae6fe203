"""Kimi Delta Attention's kernel curves (``FamilyFit.kda``, docs/kernels.md): fitted per GPU family to
SGLang 0.5.16's measured ``kda_perf`` kernels as the Gated DeltaNet ones are to ``gdn_perf``, stored in
``rooflines.json`` beside them, timed by ``KernelTimes.kda``, and checked by ``validate kernels``' kda ops.

Tests marked ``measured`` read the real tables (CI installs the extra) and are skipped without it."""

from __future__ import annotations

import dataclasses
import functools
import statistics

import pytest

from demos.errors import ConfigError
from demos.fidelity.kernels import OPS, kernel_rows, summaries
from demos.fits.compare import FIT_TOLERANCE, compare_fits
from demos.fits.linear import gdn_row_work
from demos.vocabulary import Phase
from demos.zoo import measured
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS, GDN_CURVES, AttentionCurve, ChunkedCurve, FamilyFit, SmBoundCurve, gpu_fit
from demos.zoo.work import delta_rule_chunks

needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")

KDA_OPS = ("kda decode", "kda prefill", "kda conv decode", "kda conv prefill")


@functools.lru_cache(maxsize=None)
def _kda_rows(gpu: str) -> tuple:
    """Every Kimi Delta Attention check row of ``gpu`` (``validate kernels``' kda ops), read once per session."""
    return tuple(kernel_rows(gpu, ops=KDA_OPS))


@pytest.mark.parametrize("family", sorted(FITS))
def test_every_family_stores_the_four_kda_curves_apart_from_the_gdn_ones(family):
    fit = FITS[family]
    assert tuple(fit.kda) == GDN_CURVES
    for key, curve in fit.kda.items():
        kind = (
            ChunkedCurve if key == "delta_rule prefill" else SmBoundCurve if key.startswith("conv") else AttentionCurve
        )
        assert type(curve) is kind
        share = curve.sm_rate > 0 if kind is SmBoundCurve else 0 < curve.mem_efficiency <= 1
        assert 0 < curve.ceiling <= 1 and share and curve.latency > 0
        assert curve != fit.gdn[key]
    assert "kda_perf (sglang 0.5.16)" in fit.source


def test_a_file_written_before_the_kda_curves_loads_with_none_and_the_curves_round_trip():
    d = FITS["hopper"].to_dict()
    assert FamilyFit.from_dict(d) == FITS["hopper"]
    del d["kda"]
    old = FamilyFit.from_dict(d)
    assert old.kda == {} and old.gdn == FITS["hopper"].gdn
    assert FamilyFit.from_dict({**d, "kda": None}).kda == {}


@pytest.mark.parametrize("phase", [Phase.DECODE, Phase.PREFILL])
def test_kernel_times_kda_takes_the_families_kda_curve_less_its_fixed_time(phase):
    """Kimi-K3's 96 heads of 128: 64 decode requests, or 2 prompts of 4,096 tokens (a chain of 64 chunks)."""
    gpu = get_gpu("h200")
    times = KernelTimes(gpu, gpu_profile("h200"))
    batch, seq = (64, 1) if phase == Phase.DECODE else (2, 4096)
    chunks = float(delta_rule_chunks(phase, batch * seq, seq))
    peak, hbm = gpu.flops("bfloat16"), gpu.hbm_bandwidth
    for kernel in ("delta_rule", "conv"):
        flops, nbytes = gdn_row_work(kernel, phase, batch, seq, 96, 128, 96, 128, 4)
        curve = gpu_fit(gpu).kda[f"{kernel} {phase}"]
        if isinstance(curve, ChunkedCurve):
            want = curve.seconds(flops, nbytes, peak, hbm, chunks) - curve.latency
        elif isinstance(curve, SmBoundCurve):
            want = curve.seconds(flops, nbytes, peak, gpu.sm_count) - curve.latency
        else:
            want = curve.seconds(flops, nbytes, peak, hbm) - curve.latency
        got = times.kda(kernel, phase, flops, nbytes, chunks)
        assert got == pytest.approx(want, rel=1e-12) and got > 0
        assert got != times.gdn(kernel, phase, flops, nbytes, chunks)  # its own curve, not Gated DeltaNet's


def test_a_family_without_the_kda_curves_is_a_config_error_naming_the_refit():
    fit = dataclasses.replace(FITS["blackwell"], kda={})
    times = KernelTimes(get_gpu("b200"), gpu_profile("b200"), fit)
    with pytest.raises(ConfigError, match="no Kimi Delta Attention conv curve fitted for the blackwell family"):
        times.kda("conv", Phase.DECODE, 1e6, 1e6)
    assert times.gdn("conv", Phase.DECODE, 1e6, 1e6) > 0  # the Gated DeltaNet curves are still there


def test_the_fit_check_compares_the_kda_curves_and_names_one_that_moved():
    same = compare_fits(dict(FITS), dict(FITS))
    curves = {(d.family, d.curve) for d in same.differences}
    assert all((f, f"kda {key}") in curves for f in FITS for key in GDN_CURVES) and same.same
    hopper = FITS["hopper"]
    prefill = hopper.kda["delta_rule prefill"]
    moved = dataclasses.replace(prefill, per_chunk=prefill.per_chunk * (1 + 4 * FIT_TOLERANCE))
    far = compare_fits(
        dict(FITS), {**FITS, "hopper": dataclasses.replace(hopper, kda={**hopper.kda, "delta_rule prefill": moved})}
    )
    assert [(d.family, d.curve) for d in far.differences if not d.within] == [("hopper", "kda delta_rule prefill")]
    gone = compare_fits(dict(FITS), {**FITS, "hopper": dataclasses.replace(hopper, kda={})})
    assert not gone.same and any("hopper curves" in m for m in gone.mismatches)


def test_validate_kernels_names_the_four_kda_ops():
    assert set(KDA_OPS) <= set(OPS)


@needs_extra
@pytest.mark.measured
@pytest.mark.parametrize("gpu", sorted(measured.SYSTEMS))
def test_the_loader_reads_context_and_generation_and_leaves_out_verify_and_the_fused_decode(gpu):
    """Kimi-K3's shapes: 396 prefill rows a kernel (12 to 96 heads), 33 decode rows (24 to 96 heads; the
    11 rows of ``kda_fused_decode`` at 12 heads and the speculative ``verify`` rows are not read)."""
    rows = measured.kda_rows(gpu)
    counts = {(k, p): sum(r.kernel == k and r.phase == p for r in rows) for k in ("conv", "delta_rule") for p in Phase}
    assert counts == {
        ("conv", Phase.DECODE): 33,
        ("conv", Phase.PREFILL): 396,
        ("delta_rule", Phase.DECODE): 33,
        ("delta_rule", Phase.PREFILL): 396,
    }
    assert all(r.key_heads == r.value_heads and r.key_dim == r.value_dim == 128 and r.conv_kernel == 4 for r in rows)
    assert {r.model for r in rows} == {"moonshotai/Kimi-K3"}
    assert all(r.seq_len == 1 for r in rows if r.phase == Phase.DECODE)
    assert all(r.seconds > 0 for r in rows)


def _planted(monkeypatch, table: str, phase: str, kernel: str) -> None:
    """``table``'s frames with one row's phase and kernel_source set to ``phase`` and ``kernel``: the first
    row of that phase where the table has one (its count unchanged), else its first row."""
    read = measured.read_table

    def frame(gpu, name, tables=()):
        d = read(gpu, name, tables)
        if name != table:
            return d
        d = d.copy()
        same = d.index[d.phase == phase]
        d.loc[same[0] if len(same) else d.index[0], ["phase", "kernel_source"]] = [phase, kernel]
        return d

    monkeypatch.setattr(measured, "read_table", frame)


@needs_extra
@pytest.mark.measured
@pytest.mark.parametrize("phase", ["context", "generation"])
def test_an_unknown_kernel_in_context_or_generation_is_refused_in_one_line(monkeypatch, phase):
    _planted(monkeypatch, "kda", phase, "chunk_kda_v2")
    with pytest.raises(measured.MeasuredTablesError) as info:
        measured.kda_rows("h100")
    assert str(info.value) == "kda_perf on h100: unknown kernel_source ['chunk_kda_v2']"


@needs_extra
@pytest.mark.measured
def test_an_unknown_kernel_of_the_verify_rows_and_an_unknown_phase_of_gdn_perf(monkeypatch):
    """Verify rows are left out whatever their kernel (B200's is ``fused_kda_decode_mtp_dspark``, H100's
    ``fused_sigmoid_gating_delta_rule_update``); ``gdn_perf`` has no verify rows, so one is refused."""
    _planted(monkeypatch, "kda", "verify", "anything_at_all")
    assert len(measured.kda_rows("h100")) == 858
    _planted(monkeypatch, "gdn", "verify", "causal_conv1d_update")
    with pytest.raises(measured.MeasuredTablesError, match=r"gdn_perf on b200: unknown phase \['verify'\]"):
        measured.gdn_rows("b200")


@needs_extra
@pytest.mark.measured
@pytest.mark.parametrize("gpu", sorted(measured.SYSTEMS))
def test_the_kda_kernels_sit_on_their_curves_on_every_gpu(gpu):
    """SGLang's measured KDA delta-rule kernels within 10% (signed median) of the GPU's curves (its own,
    fitted to these rows), the convolutions within 15% (on the pooled Hopper curve H200's prefill ones were
    -13.9%), every op's median |error| within 15%."""
    got = {s["op"]: s for s in summaries(_kda_rows(gpu))}
    assert set(got) == set(KDA_OPS)
    for op, s in got.items():
        assert s["rows"] == (33 if "decode" in op else 396)
        assert abs(s["median_error"]) < (0.10 if "conv" not in op else 0.15), s
        assert s["median_abs_error"] < 0.15, s


@needs_extra
@pytest.mark.measured
@pytest.mark.parametrize("gpu", sorted(measured.SYSTEMS))
def test_one_long_kda_prompt_takes_its_chain_of_chunks(gpu):
    """One request of 1,024 tokens or more (24 rows a GPU): within 10% (signed median) with the chain's
    time per chunk (``ChunkedCurve``)."""
    rows = [r for r in _kda_rows(gpu) if r.op == "kda prefill"]
    alone = [r for r in rows if " batch=1 " in r.shape and int(r.shape.split("seq=")[1].split()[0]) >= 1024]
    assert len(alone) == 24
    assert abs(statistics.median(r.error for r in alone)) < 0.10
