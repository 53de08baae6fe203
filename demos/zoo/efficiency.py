"""Published Hopper kernel benchmarks and the GEMM efficiency curve fitted to them (docs/kernels.md).

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
``ceiling * eff`` over the published shapes is well determined (docs/kernels.md, "The fit").

Attention: FlashMLA's headline figures (``FLASHMLA_H800``) give ``ATTENTION_MEM_EFFICIENCY`` (its
memory-bound GB/s over HBM bandwidth) and ``ATTENTION_COMPUTE_CEILING`` (its compute-bound TFLOPS
over the BF16 dense peak); they are maxima quoted in prose, not tables.

Per-dtype ceilings (``DTYPE_CEILING``): FP8 is the fit's. BF16 and FP32 are the ceilings that make the
formula, with the FP8 knees, reproduce one published cuBLAS measurement on H100 SXM (same SMs, clock
and HBM as H800 SXM5), capped at 1 (``implied_ceiling``). The FP32 figure rests on one third-party
benchmark; see docs/kernels.md for what each number is and how sure it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from demos.zoo.rooflines_fit import minimize

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


# --- published tables ---------------------------------------------------------------------------

_DG_FINAL = (
    "deepseek-ai/DeepGEMM README.md @ 327ec92f6977e7fee022cb76a8f273b75483c3d8 (2025-04-09; "
    "last version with the tables, removed in 37aa1274 on 2025-04-14); H800 SXM5, NVCC 12.8, FP8"
)
_DG_INITIAL = (
    "deepseek-ai/DeepGEMM README.md @ a6d97a1c1b48a7a9d7994d0e155ee6f11d0a3f07 (2025-02-25, initial); H800, FP8"
)

# (groups, m per group, n, k, TFLOPS, GB/s), copied from the README tables.
_DENSE_COMMON = (
    (1, 64, 2112, 7168, 206, 1688),
    (1, 64, 24576, 1536, 289, 2455),
    (1, 64, 32768, 512, 219, 2143),
    (1, 64, 7168, 16384, 336, 2668),
    (1, 64, 4096, 7168, 287, 2320),
    (1, 64, 7168, 2048, 295, 2470),
    (1, 128, 2112, 7168, 352, 1509),
    (1, 128, 24576, 1536, 535, 2448),
    (1, 128, 32768, 512, 358, 2103),
    (1, 128, 7168, 16384, 645, 2604),
    (1, 128, 4096, 7168, 533, 2221),
    (1, 128, 7168, 2048, 510, 2277),
)
_DENSE_4096_FINAL = (
    (1, 4096, 2112, 7168, 1127, 562),
    (1, 4096, 24576, 1536, 1212, 962),
    (1, 4096, 32768, 512, 775, 1620),
    (1, 4096, 7168, 16384, 1520, 384),
    (1, 4096, 4096, 7168, 1410, 541),
    (1, 4096, 7168, 2048, 1168, 794),
)
_DENSE_4096_INITIAL = (
    (1, 4096, 2112, 7168, 1058, 527),
    (1, 4096, 24576, 1536, 990, 786),
    (1, 4096, 32768, 512, 590, 1232),
    (1, 4096, 7168, 16384, 1358, 343),
    (1, 4096, 4096, 7168, 1304, 500),
    (1, 4096, 7168, 2048, 1025, 697),
)
_CONTIGUOUS_FINAL = (
    (4, 8192, 4096, 7168, 1346, 434),
    (4, 8192, 7168, 2048, 1214, 752),
    (8, 4096, 4096, 7168, 1346, 516),
    (8, 4096, 7168, 2048, 1214, 826),
)
_CONTIGUOUS_INITIAL = (
    (4, 8192, 4096, 7168, 1297, 418),
    (4, 8192, 7168, 2048, 1099, 681),
    (8, 4096, 4096, 7168, 1288, 494),
    (8, 4096, 7168, 2048, 1093, 743),
)
_MASKED = (  # unchanged between the two versions
    (1, 1024, 4096, 7168, 1233, 924),
    (1, 1024, 7168, 2048, 925, 968),
    (2, 512, 4096, 7168, 1040, 1288),
    (2, 512, 7168, 2048, 916, 1405),
    (4, 256, 4096, 7168, 932, 2064),
    (4, 256, 7168, 2048, 815, 2047),
)


def _rows(layout: str, source: str, table: Iterable[tuple]) -> tuple[GemmRow, ...]:
    return tuple(GemmRow(m, n, k, g, float(t), float(bw), layout, source) for g, m, n, k, t, bw in table)


DEEPGEMM_H800: tuple[GemmRow, ...] = (
    _rows("dense", _DG_FINAL, _DENSE_COMMON + _DENSE_4096_FINAL)
    + _rows("contiguous", _DG_FINAL, _CONTIGUOUS_FINAL)
    + _rows("masked", _DG_FINAL, _MASKED)
)
DEEPGEMM_H800_INITIAL: tuple[GemmRow, ...] = (
    _rows("dense", _DG_INITIAL, _DENSE_COMMON + _DENSE_4096_INITIAL)
    + _rows("contiguous", _DG_INITIAL, _CONTIGUOUS_INITIAL)
    + _rows("masked", _DG_INITIAL, _MASKED)
)

_FM_V1 = "deepseek-ai/FlashMLA README.md @ 414a2f3eedeb5ad3c4a6e89d8641e059519cacc9 (2025-02-21, initial)"
_FM_V2 = "deepseek-ai/FlashMLA README.md @ c2067be3eaa0f2e98e10854c30898139d5d01d36 (2025-04-22, performance update)"
_FM_V3 = "deepseek-ai/FlashMLA README.md @ 1408756a88e52a25196b759eaf8db89d2b51b5a1 (2025-10-01)"
_H800 = "H800 SXM5"
FLASHMLA_H800: tuple[AttentionFigure, ...] = (
    AttentionFigure("dense MLA decode, BF16", "memory", 3000.0, "GB/s", _H800, "12.6", "2025-02-21", _FM_V1),
    AttentionFigure("dense MLA decode, BF16", "compute", 580.0, "TFLOPS", _H800, "12.6", "2025-02-21", _FM_V1),
    AttentionFigure("dense MLA decode, BF16", "memory", 3000.0, "GB/s", _H800, "12.8", "2025-04-22", _FM_V2),
    AttentionFigure("dense MLA decode, BF16", "compute", 660.0, "TFLOPS", _H800, "12.8", "2025-04-22", _FM_V2),
    AttentionFigure("sparse MLA decode, FP8 KV", "compute", 410.0, "TFLOPS", _H800, "12.8", "2025-09-29", _FM_V3),
    AttentionFigure("sparse MLA prefill", "compute", 640.0, "TFLOPS", _H800, "12.8", "2025-09-29", _FM_V3),
)
_FM_DENSE = [f for f in FLASHMLA_H800 if f.kernel.startswith("dense") and f.date == "2025-04-22"]
ATTENTION_MEM_EFFICIENCY = next(f.value for f in _FM_DENSE if f.bound == "memory") * 1e9 / H800_HBM_BANDWIDTH
ATTENTION_COMPUTE_CEILING = next(f.value for f in _FM_DENSE if f.bound == "compute") * 1e12 / H800_BF16_PEAK

_MAMF = "stas00/ml-engineering compute/accelerator/README.md @ 744d01e18b79512572f64a6bbd8b5f4a725203a7, MAMF table"
_WAYNE = "waynehacking8/blackwell-tensorcore-kernels results/bench.csv @ c289bdedb5f256fdf1351de3cacf7757564a0dd0"
REFERENCE_GEMMS: tuple[ReferenceGemm, ...] = (
    ReferenceGemm("H100 SXM", "bfloat16", 2048, 2048, 13312, 794.5, "torch 2.7.0+cu126 matmul (MAMF)", _MAMF),
    ReferenceGemm("H100 SXM", "fp8", 1024, 9216, 14336, 1402.6, "torch 2.7.0+cu126 FP8 matmul (MAMF)", _MAMF),
    ReferenceGemm("H100 80GB HBM3", "float16", 8192, 8192, 8192, 761.71, "cublasGemmEx FP16 in, FP32 acc", _WAYNE),
    ReferenceGemm("H100 80GB HBM3", "float32", 8192, 8192, 8192, 47.33, "cublasSgemm (SIMT)", _WAYNE),
)


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
# (tests/zoo/test_efficiency.py checks the fit still gives these within 2%).
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
