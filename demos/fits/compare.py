"""Comparing two fits of the kernel-time curves within a stated tolerance: what ``python -m demos.fits
check`` asks of ``rooflines.json`` against a fresh fit.

A fit is numpy arithmetic over thousands of rows: the same rows give the same figures on one machine,
but another processor's vector units (AVX-512 against AVX2 in numpy's ``log`` and sums, OpenBLAS's
kernels in ``lstsq``) round differently, and a least-absolute-error optimum can then land a 4-significant-
figure parameter on the other side of a rounding boundary (seen: a Blackwell GEMM knee at 148.7 against
148.8). Parameters of one curve also trade against each other (a higher ceiling with a larger knee) with
no change to any time the curve gives. So two fits are compared by what the predictor uses of them, the
times each curve gives on a fixed grid of shapes (``grid_times``), each within ``FIT_TOLERANCE`` of the
other, and by their non-numeric fields (family, GPUs, source: the tables' versions), exactly.

The grid, on every GPU the family is fitted on (each point at that GPU's datasheet peak, HBM bandwidth
and SMs): GEMMs of 1 to 16,384 rows through weights of 128 to 24,576 by 512 to 18,432 in each dtype; MLA
decode cores of 1 to 512 requests, 16 to 128 heads, 256 to 32,768 cached tokens (over a BF16 cache and,
where the family has the curve, an FP8 one), and prefill cores of 1 to 8 requests of 512 to 16,384
tokens; the routed experts of DeepSeek-V3's shape at 1 to 4,096 tokens
per rank over EP 8 to 128; DeepEP's single-node low-latency kernels of 1 to 512 tokens of hidden 4,096
and 7,168 with 3 and 7 peers; Gated DeltaNet delta rules and convolutions of 1 to 512 decode requests
with 4 to 64 value heads and of 1 and 8 prompts of 512 to 16,384 tokens with 8 and 32; Kimi Delta
Attention's of 1 to 512 decode requests with 12 to 96 heads and of 1 and 8 prompts of 512 to 16,384 tokens
with 12 and 48; the hyper-connection kernels; a lightning indexer's decode scores of 1 to 512 requests of
256 to 1,048,575 cached tokens and its top-k of 1 to 512 rows of 600 to 262,144 entries (top 512, V4's
kernel) and of 4,096 to 262,144 (top 2,048, DSA's); its prefill scores of 1 to 64 prompts of 512 to 16,384
tokens after 0 to 65,536 cached; and the MLA module's and the DSA indexer's fixed times themselves.

``FIT_TOLERANCE`` (0.5%) is about 7 times the largest cross-processor spread seen (0.07% on one
parameter) and well under what any figure the project prints shows (its errors are quoted to 0.1 points
of a percent, its times to 3 significant figures, and a 0.5% kernel-time change moves a step by less).
``docs/testing.md`` says how it was checked across BLAS thread counts and numpy's CPU dispatch.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from demos.fits.gqa import gqa_row_units, gqa_row_work
from demos.fits.index import PREFILL_HEADS, SCORE_DIM, index_row_work, prefill_row_work
from demos.fits.linear import gdn_row_work
from demos.fits.rooflines import experts_seconds, mla_kv_bytes, mla_row_work
from demos.zoo.hardware import get_gpu, ll_bytes
from demos.zoo.kernel_times import storage_curve
from demos.zoo.models.dtypes import storage_of
from demos.zoo.rooflines import MLA_KV, MLA_KV_FP8, FamilyFit, linear_seconds
from demos.zoo.work import delta_rule_chunks, gemm_work, mhc_work

__all__ = ["FIT_TOLERANCE", "CurveDifference", "FitComparison", "compare_fits", "grid_times"]

FIT_TOLERANCE = 0.005
"""The largest relative difference of any grid time between two fits that still counts as the same fit."""

_GEMM_M = (1, 4, 16, 64, 256, 1024, 4096, 16384)
_GEMM_N = (128, 576, 2112, 7168, 24576)
_GEMM_K = (512, 1536, 7168, 18432)
_DECODE = ((1, 8, 32, 128, 512), (16, 32, 64, 128), (256, 2048, 8192, 32768))  # batch, heads, kv_len
_PREFILL = ((1, 2, 8), (16, 128), (512, 2048, 8192, 16384))
_AR_BYTES = (1024, 65536, 1048576, 8388608)  # an all-reduce's tensor
_GQA = {  # batch, (heads, kv heads), head dim, cached tokens (decode) or prompt tokens (prefill)
    "decode": ((1, 16, 128, 512), ((8, 1), (16, 2), (48, 8)), (128, 256), (512, 4096, 32768)),
    "prefill": ((1, 4), ((8, 1), (16, 2), (48, 8)), (128, 256), (512, 4096, 16384)),
}
_EXPERTS_TOKENS, _EXPERTS_EP = (1, 4, 16, 64, 256, 1024, 4096), (8, 16, 32, 64, 128)
_LL = ((1, 8, 32, 128, 512), (4096, 7168), (3, 7))  # tokens, hidden, peers
_GDN = {  # batch, tokens per request, value heads (4 per key head, heads of 128)
    "decode": ((1, 8, 64, 512), (1,), (4, 16, 64)),
    "prefill": ((1, 8), (512, 4096, 16384), (8, 32)),
}
_KDA = {  # batch, tokens per request, heads (as many key heads as value heads, of 128)
    "decode": ((1, 8, 64, 512), (1,), (12, 24, 48, 96)),
    "prefill": ((1, 8), (512, 4096, 16384), (12, 48)),
}
_MHC = ((1, 16, 256, 4096, 65536), (4096, 7168))  # tokens, hidden (a stream of 4 rows)
_INDEX_SCORES = ((1, 8, 64, 512), (256, 4096, 65536, 1048575))  # requests, cached tokens
_INDEX_PREFILL = ((1, 8, 64), (512, 4096, 16384), (0, 65536))  # requests, prompt tokens, cached tokens
_INDEX_TOPK = {  # rows; entries; the top-k
    "csa": ((1, 8, 128, 512), (600, 1024, 4096, 16384, 65536, 262144), 512),
    "dsa": ((1, 8, 128, 512), (4096, 32768, 262144), 2048),
}


class _MoeShape(NamedTuple):
    """A routed-experts shape as ``experts_seconds`` reads a measured MoE row (DeepSeek-V3's, FP8)."""

    tokens: int
    ep: int
    hidden: int = 7168
    inter: int = 2048
    top_k: int = 8
    experts: int = 256


def _grid(*axes):
    """Every combination of ``axes``' values, as one float array per axis."""
    points = list(itertools.product(*axes))
    return [np.array(c, dtype=float) for c in zip(*points)], points


def grid_times(fit: FamilyFit) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per curve of ``fit``: (the grid points' labels, the seconds the curve gives at each) (module docstring)."""
    out: dict[str, tuple[list[str], list[float]]] = {}

    def add(curve: str, labels, seconds) -> None:
        names, times = out.setdefault(curve, ([], []))
        names.extend(labels)
        times.extend(np.atleast_1d(np.asarray(seconds, dtype=float)).tolist())

    for name in fit.fitted_on:
        g = get_gpu(name)
        (m, n, k), pts = _grid(_GEMM_M, _GEMM_N, _GEMM_K)
        for math_dtype, curve in fit.gemm.items():
            flops, nbytes = gemm_work(m, n, k, storage_of(math_dtype))
            t = curve.seconds(flops, nbytes, m, n, k, g.flops(math_dtype), g.hbm_bandwidth, g.sm_count)
            add(f"gemm {math_dtype}", [f"{name} m={a} n={b} k={c}" for a, b, c in pts], t)
        mla = [("decode", _DECODE, fit.mla_decode, MLA_KV, ""), ("prefill", _PREFILL, fit.mla_prefill, MLA_KV, "")]
        if fit.mla_decode_fp8 is not None:
            mla.append(("decode", _DECODE, fit.mla_decode_fp8, MLA_KV_FP8, " fp8"))
        for engine, curve in fit.engine_mla_decode_fp8.items():
            mla.append(("decode", _DECODE, curve, MLA_KV_FP8, f" fp8 {engine}"))
        for phase, axes, curve, cache, tag in mla:
            (batch, heads, kv), pts = _grid(*axes)
            flops, nbytes = mla_row_work(phase, batch, heads, kv, mla_kv_bytes(cache))
            t = curve.seconds(flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth)
            add(f"mla {phase}{tag}", [f"{name} batch={a} heads={b} kv={c}" for a, b, c in pts], t)
        for key, curve in fit.gqa.items():
            phase, _, kv = key.split()
            pts = [(b, q, kvh, d, n) for b, (q, kvh), d, n in itertools.product(*_GQA[phase])]
            batch, q, kvh, dim, length = (np.array(c, dtype=float) for c in zip(*pts))
            flops, nbytes = gqa_row_work(phase, kv, batch, q, kvh, dim, length, 0)
            units = gqa_row_units(phase, batch, length, kvh)
            t = curve.seconds(flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth, units)
            add(f"gqa {key}", [f"{name} batch={b} heads={q}/{kvh} dim={d} len={n}" for b, q, kvh, d, n in pts], t)
        if fit.experts is not None:
            shapes = [_MoeShape(t, ep) for t in _EXPERTS_TOKENS for ep in _EXPERTS_EP]
            t = [experts_seconds(fit.gemm["fp8"], fit.experts, g, s) for s in shapes]
            add("experts", [f"{name} tokens={s.tokens} ep={s.ep}" for s in shapes], t)
        local = dict(fit.local_experts)
        for engine, curves in fit.engine_local_experts.items():
            local.update({f"{storage} {engine}": c for storage, c in curves.items()})
        for key, curve in local.items():
            storage = key.split()[0]
            shapes = [_MoeShape(t, ep) for t in _EXPERTS_TOKENS for ep in _EXPERTS_EP]
            math = storage_curve(fit.gemm, storage, g.has_fp4)
            t = [experts_seconds(math, curve, g, s, storage) for s in shapes]
            add(f"local experts {key}", [f"{name} tokens={s.tokens} ep={s.ep}" for s in shapes], t)
        pts = list(itertools.product(_AR_BYTES, (2, 4, 8)))
        lines = {"": fit.custom_all_reduce, **{f" {e}": line for e, line in fit.engine_all_reduce.items()}}
        for engine, line in lines.items():
            if line is not None:
                t = [line.seconds(b, n - 1) for b, n in pts]
                add(f"custom all-reduce{engine}", [f"{name} bytes={b} gpus={n}" for b, n in pts], t)
        pts = list(itertools.product(*_LL))
        labels = [f"{name} tokens={a} hidden={b} peers={c}" for a, b, c in pts]
        for kernel, line in fit.ll_sm.items():
            add(f"ll {kernel}", labels, [line.seconds(ll_bytes(kernel, a, b, 8), c) for a, b, c in pts])
        for kind, curves, axes, per_key in (("gdn", fit.gdn, _GDN, 4), ("kda", fit.kda, _KDA, 1)):
            for key, curve in curves.items():
                kernel, phase = key.split()
                (batch, seq, nv), pts = _grid(*axes[phase])
                flops, nbytes = gdn_row_work(kernel, phase, batch, seq, nv / per_key, 128, nv, 128, 4)
                chain = delta_rule_chunks(phase, batch * seq, seq)
                t = linear_seconds(curve, flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth, g.sm_count, chain)
                add(f"{kind} {key}", [f"{name} batch={a} seq={b} value_heads={c}" for a, b, c in pts], t)
        for site, curve in fit.mhc.items():
            (tokens, hidden), pts = _grid(*_MHC)
            flops, nbytes = mhc_work(site, tokens, hidden, 4)
            t = curve.seconds(flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth)
            add(f"mhc {site}", [f"{name} tokens={a} hidden={b}" for a, b in pts], t)
        for key, curve in fit.index.items():
            if key == "scores":
                (batch, context), pts = _grid(*_INDEX_SCORES)
                flops, nbytes = index_row_work(batch, context)
                t = curve.seconds(flops, nbytes, g.flops("fp8"), g.hbm_bandwidth)
                add("index scores", [f"{name} batch={a} context={b}" for a, b in pts], t)
                continue
            if key == "prefill scores":
                (batch, queries, prefix), pts = _grid(*_INDEX_PREFILL)
                pairs, longest = prefill_row_work(curve, batch, queries, prefix)
                t = curve.seconds(pairs, longest, 2.0 * PREFILL_HEADS * SCORE_DIM, g.flops("fp8"), g.sm_count)
                add("index prefill scores", [f"{name} batch={a} isl={b} step={c}" for a, b, c in pts], t)
                continue
            kernel, _, scores = key.split()
            rows, entries, topk = _INDEX_TOPK[kernel]
            (r, e), pts = _grid(rows, entries)
            t = curve.seconds(r, e, topk, g.sm_count, e if scores == "flat" else 0.0)
            add(f"index {key}", [f"{name} rows={a} entries={b}" for a, b in pts], t)
    add("mla module", ["fixed time"], fit.mla_module)
    for gemm, extra in fit.mla_module_gemm.items():
        add(f"mla module {gemm}", ["fixed time"], extra)
    for kv, extra in fit.sglang_dsa_module.items():
        add(f"sglang module {kv}", ["fixed time"], extra)
    add("dsa indexer", ["fixed time"], fit.dsa_index)
    return {curve: (names, np.array(times)) for curve, (names, times) in out.items()}


@dataclass(frozen=True)
class CurveDifference:
    """The largest relative difference of one curve's grid times between two fits, and where it is."""

    family: str
    curve: str
    max_relative: float
    worst: str
    tolerance: float

    @property
    def within(self) -> bool:
        return self.max_relative <= self.tolerance

    def line(self) -> str:
        mark = "ok" if self.within else "DIFFERS"
        return f"{self.family:9} {self.curve:12} max |diff| {self.max_relative:8.4%} at {self.worst}  {mark}"


@dataclass(frozen=True)
class FitComparison:
    """Two sets of fits compared (``compare_fits``): every curve's ``differences``, and the ``mismatches`` of
    everything that must be equal (the fits' names, families, fitted GPUs, sources, curves present)."""

    tolerance: float
    differences: tuple[CurveDifference, ...]
    mismatches: tuple[str, ...] = field(default=())

    @property
    def same(self) -> bool:
        return not self.mismatches and all(d.within for d in self.differences)

    def lines(self) -> list[str]:
        return [d.line() for d in self.differences] + [f"mismatch: {m}" for m in self.mismatches]


def _relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a / b - 1| elementwise, 0 where both are 0 and inf where only ``b`` is."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.abs(a / b - 1.0)
    return np.where((a == 0) & (b == 0), 0.0, np.where(b == 0, np.inf, r))


def compare_fits(
    stored: dict[str, FamilyFit], fresh: dict[str, FamilyFit], tolerance: float = FIT_TOLERANCE
) -> FitComparison:
    """``fresh`` against ``stored``, fit by fit (each family's and each GPU's, by name; module docstring)."""
    mismatches: list[str] = []
    diffs: list[CurveDifference] = []
    if set(stored) != set(fresh):
        mismatches.append(f"fits {sorted(stored)} against {sorted(fresh)}")
    for family in sorted(set(stored) & set(fresh)):
        a, b = stored[family], fresh[family]
        for attr in ("family", "fitted_on", "source"):
            if getattr(a, attr) != getattr(b, attr):
                mismatches.append(f"{family} {attr}: {getattr(a, attr)!r} against {getattr(b, attr)!r}")
        if a.fitted_on != b.fitted_on:
            continue  # the grids differ: nothing to compare point by point
        ga, gb = grid_times(a), grid_times(b)
        if set(ga) != set(gb):
            mismatches.append(f"{family} curves {sorted(ga)} against {sorted(gb)}")
        for curve in sorted(set(ga) & set(gb)):
            names, ta = ga[curve]
            rel = _relative(gb[curve][1], ta)
            i = int(np.argmax(rel))
            diffs.append(CurveDifference(family, curve, float(rel[i]), names[i], tolerance))
    return FitComparison(tolerance, tuple(diffs), tuple(mismatches))
