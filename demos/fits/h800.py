"""The legacy H800 fit: DeepGEMM's and FlashMLA's published H800 figures and the GEMM curve fitted to them
(docs/results/h800-legacy-fit.md). The published rows are data (``h800_published.json`` beside this module, each table's
source in it); the H800 kernel check (``demos.fidelity.kernels``) reads them from here.

What is modelled. A GEMM of shape (M, N, K) repeated over G groups, in a dtype with datasheet dense
peak ``R`` (FLOP/s), on HBM of bandwidth ``B`` (bytes/s), takes::

    time  = max(2 G M N K / (R * ceiling * eff(M, N, K)),  bytes / (B * mem_efficiency))
    eff   = M/(M+m0) * N/(N+n0) * K/(K+k0)          (M is the rows of one group)
    bytes = G * ((M K + K N) * a_bytes + M N * c_bytes)

the form ``dbo.costs`` uses (``gemm_knee``, per-dtype rates). ``fit_gemm`` fits the five parameters
to DeepGEMM's FP8 tables measured on H800 SXM5 (``DEEPGEMM_H800``) by least squares on the log of
the time; ``DEEPGEMM_FP8_FIT`` holds the result. The byte count above reproduces every published
GB/s column to under 1%, so the tables count traffic the same way (each group reads its own weights).

What is not modelled: wave quantization (a tile count just over a multiple of 132 SMs; likely why the
N=2112 rows miss most), split-K / stream-K, the L2 cache (weights re-read from L2, not HBM),
persistent-kernel and launch overheads, clock and power throttling, the FP8 fine-grained scaling
and promotion cost apart from what the fitted ceiling absorbs, and ragged group sizes (every group
is taken at the same M). The fit cannot tell ``ceiling`` from ``n0`` well: the published N span
(2112..32768) is explained as well by a high ceiling with a large n0 as by a lower one with a small
n0, and the least-squares optimum sits on the bound ``ceiling = 1``; only the product
``ceiling * eff`` over the published shapes is well determined (docs/results/h800-legacy-fit.md, "The fit").

Attention: FlashMLA's headline figures (``FLASHMLA_H800``) give ``ATTENTION_MEM_EFFICIENCY`` (its
memory-bound GB/s over HBM bandwidth) and ``ATTENTION_COMPUTE_CEILING`` (its compute-bound TFLOPS
over the BF16 dense peak); they are maxima quoted in prose, not tables.

Per-dtype ceilings (``DTYPE_CEILING``): FP8 is the fit's. BF16 and FP32 are the ceilings that make the
formula, with the FP8 knees, reproduce one published cuBLAS measurement on H100 SXM (same SMs, clock
and HBM as H800 SXM5), capped at 1 (``implied_ceiling``). The FP32 figure rests on one third-party
benchmark; see docs/results/h800-legacy-fit.md for what each number is and how sure it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from demos.fits.rooflines import minimize

__all__ = [
    "AttentionFigure",
    "GemmFit",
    "GemmRow",
    "ReferenceGemm",
    "ATTENTION_COMPUTE_CEILING",
    "ATTENTION_MEM_EFFICIENCY",
    "DEEPGEMM_FP8_FIT",
    "DEEPGEMM_H800",
    "DEEPGEMM_H800_INITIAL",
    "DTYPE_CEILING",
    "FLASHMLA_H800",
    "H800_BF16_PEAK",
    "H800_FP32_PEAK",
    "H800_FP8_PEAK",
    "H800_HBM_BANDWIDTH",
    "H800_SMS",
    "KNEE_FLOOR",
    "REFERENCE_GEMMS",
    "fit_gemm",
    "implied_ceiling",
    "predict_gemm_seconds",
    "residuals",
]

# H800 SXM5 datasheet figures (dense, no sparsity); the same as H100 SXM5's apart from NVLink and FP64.
H800_FP8_PEAK = 1979e12
H800_BF16_PEAK = 989.5e12
H800_FP32_PEAK = 67e12  # FP32 on the CUDA cores (SIMT), no tensor cores
H800_HBM_BANDWIDTH = 3.35e12
H800_SMS = 132

LAYOUTS = ("dense", "contiguous", "masked")


@dataclass(frozen=True)
class GemmRow:
    """One row of a published GEMM table: ``groups`` GEMMs of ``m`` x ``n`` x ``k`` at ``tflops`` and ``gbps``."""

    m: int
    n: int
    k: int
    groups: int
    tflops: float
    gbps: float
    layout: str
    source: str

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        for name in ("m", "n", "k", "groups", "tflops", "gbps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if not self.source:
            raise ValueError("every published row needs its source")

    @property
    def flops(self) -> float:
        return 2.0 * self.groups * self.m * self.n * self.k

    @property
    def seconds(self) -> float:
        """The time the published TFLOPS implies."""
        return self.flops / (self.tflops * 1e12)

    def nbytes(self, a_bytes: float = 1, c_bytes: float = 2) -> float:
        return self.groups * ((self.m * self.k + self.k * self.n) * a_bytes + self.m * self.n * c_bytes)


@dataclass(frozen=True)
class AttentionFigure:
    """A headline figure of an attention kernel: ``value`` in ``unit`` when ``bound`` ("memory"/"compute")."""

    kernel: str
    bound: str
    value: float
    unit: str
    gpu: str
    cuda: str
    date: str
    source: str


@dataclass(frozen=True)
class ReferenceGemm:
    """A published single-GEMM measurement outside the fit (cross-checks and per-dtype ceilings)."""

    gpu: str
    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    library: str
    source: str


@dataclass(frozen=True)
class GemmFit:
    """The five parameters of the GEMM time formula (module docstring)."""

    ceiling: float
    m0: float
    n0: float
    k0: float
    mem_efficiency: float


# --- published tables (h800_published.json) -----------------------------------------------------

PUBLISHED_PATH = Path(__file__).with_name("h800_published.json")
_DATA = json.loads(PUBLISHED_PATH.read_text())


def _rows(table: dict) -> tuple[GemmRow, ...]:
    cols = table["columns"]
    assert cols == ["layout", "groups", "m", "n", "k", "tflops", "gbps"], cols
    return tuple(
        GemmRow(m, n, k, g, float(t), float(bw), layout, table["source"]) for layout, g, m, n, k, t, bw in table["rows"]
    )


DEEPGEMM_H800: tuple[GemmRow, ...] = _rows(_DATA["deepgemm"]["final"])
"""DeepGEMM's FP8 tables on H800 SXM5, their last published version."""
DEEPGEMM_H800_INITIAL: tuple[GemmRow, ...] = _rows(_DATA["deepgemm"]["initial"])
"""The same tables as first published (slower 4096-row and contiguous rows; the masked rows unchanged)."""

FLASHMLA_H800: tuple[AttentionFigure, ...] = tuple(AttentionFigure(**f) for f in _DATA["flashmla"])
_FM_DENSE = [f for f in FLASHMLA_H800 if f.kernel.startswith("dense") and f.date == "2025-04-22"]
ATTENTION_MEM_EFFICIENCY = next(f.value for f in _FM_DENSE if f.bound == "memory") * 1e9 / H800_HBM_BANDWIDTH
ATTENTION_COMPUTE_CEILING = next(f.value for f in _FM_DENSE if f.bound == "compute") * 1e12 / H800_BF16_PEAK

REFERENCE_GEMMS: tuple[ReferenceGemm, ...] = tuple(ReferenceGemm(**r) for r in _DATA["reference_gemms"])


# --- the model ----------------------------------------------------------------------------------


def _eff(fit: GemmFit, m: float, n: float, k: float) -> float:
    return m / (m + fit.m0) * n / (n + fit.n0) * k / (k + fit.k0)


def predict_gemm_seconds(
    fit: GemmFit,
    m: float,
    n: float,
    k: float,
    groups: int,
    peak_flops: float,
    hbm_bandwidth: float,
    a_bytes: float = 1,
    c_bytes: float = 2,
) -> float:
    """Seconds of ``groups`` GEMMs of ``m`` x ``n`` x ``k`` under ``fit`` (the module docstring's formula)."""
    for name, v in (("m", m), ("n", n), ("k", k), ("groups", groups), ("peak_flops", peak_flops)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v!r}")
    if not hbm_bandwidth > 0:
        raise ValueError(f"hbm_bandwidth must be positive, got {hbm_bandwidth!r}")
    math_s = 2.0 * groups * m * n * k / (peak_flops * fit.ceiling * _eff(fit, m, n, k))
    mem_s = groups * ((m * k + k * n) * a_bytes + m * n * c_bytes) / (hbm_bandwidth * fit.mem_efficiency)
    return max(math_s, mem_s)


def residuals(fit: GemmFit, rows: Iterable[GemmRow], peak: float, hbm: float) -> list[tuple[GemmRow, float, float]]:
    """Per row: (row, predicted TFLOPS, predicted / published - 1)."""
    out = []
    for r in rows:
        tflops = r.flops / predict_gemm_seconds(fit, r.m, r.n, r.k, r.groups, peak, hbm) / 1e12
        out.append((r, tflops, tflops / r.tflops - 1.0))
    return out


def implied_ceiling(fit: GemmFit, tflops: float, m: float, n: float, k: float, peak: float) -> float:
    """The ceiling with which ``fit``'s knees give ``tflops`` at (m, n, k) when compute-bound."""
    return tflops * 1e12 / (peak * _eff(fit, m, n, k))


# --- the fit ------------------------------------------------------------------------------------


def _unpack(u: Sequence[float]) -> GemmFit:
    # ceiling and mem_efficiency live in (0, 1], the knees in (0, inf): log coordinates, capped at 1.
    return GemmFit(min(1.0, math.exp(u[0])), math.exp(u[1]), math.exp(u[2]), math.exp(u[3]), min(1.0, math.exp(u[4])))


# Deterministic starts (ceiling, m0, n0, k0, mem_efficiency): the objective has a local minimum per
# choice of which small-M rows are memory-bound, so a few starts on both sides are tried.
_STARTS = ((0.95, 128, 128, 512, 0.8), (0.8, 64, 1024, 256, 0.6), (0.7, 256, 256, 1024, 0.7))


def fit_gemm(rows: Iterable[GemmRow], peak_flops: float, hbm_bandwidth: float) -> GemmFit:
    """The ``GemmFit`` minimizing the sum over ``rows`` of log(predicted time / published time)^2.

    A deterministic Nelder-Mead in log coordinates from a few fixed starts, each restarted until it
    stops improving; the same rows give the same result to the last bit."""
    data = [(r.m, r.n, r.k, r.groups, r.seconds) for r in rows]
    if len(data) < 5:
        raise ValueError(f"need at least 5 rows to fit 5 parameters, got {len(data)}")

    def loss(u: list[float]) -> float:
        fit = _unpack(u)
        return sum(
            math.log(predict_gemm_seconds(fit, m, n, k, g, peak_flops, hbm_bandwidth) / t) ** 2
            for m, n, k, g, t in data
        )

    return _unpack(minimize(loss, _STARTS, restarts=4, iters=600, tol=1e-10))


# fit_gemm(DEEPGEMM_H800, H800_FP8_PEAK, H800_HBM_BANDWIDTH), rounded to 3 significant figures
# (tests/fits/test_h800.py checks the fit still gives these within 2%).
DEEPGEMM_FP8_FIT = GemmFit(ceiling=1.0, m0=203.0, n0=1430.0, k0=591.0, mem_efficiency=0.741)


def _ceiling_from(ref: ReferenceGemm, peak: float) -> float:
    return min(1.0, implied_ceiling(DEEPGEMM_FP8_FIT, ref.tflops, ref.m, ref.n, ref.k, peak))


DTYPE_CEILING: dict[str, float] = {
    "fp8": DEEPGEMM_FP8_FIT.ceiling,
    "bfloat16": _ceiling_from(REFERENCE_GEMMS[0], H800_BF16_PEAK),  # MAMF asks for 1.57: capped at 1
    "float32": _ceiling_from(REFERENCE_GEMMS[3], H800_FP32_PEAK),
}

KNEE_FLOOR = (
    min(r.n for r in DEEPGEMM_H800),
    min(r.k for r in DEEPGEMM_H800),
)
"""(N, K): the smallest N and K the fit saw. The simulator holds the N and K factors of ``eff`` at their
value at these edges for smaller dimensions (the router's N of a few hundred experts, MLA's per-head
absorptions with K 128 and N 512): outside the published range the product form has no data behind
it, and the small factors it would give there (N=128: 8%) are not what batched or memory-bound
kernels see. M is not held: rows below a 64-row tile do leave the tensor cores idle."""
