"""Measured AMD kernel times from ROCm/aiter's tuned tables: dense GEMMs and fused MoE on CDNA3 and CDNA4.

Two CSV files beside this module, written by ``scripts/extract_aiter_tables.py`` from a pinned commit of
ROCm/aiter (``README.md`` beside them has the source files, the screening rules and what each dropped):

* ``aiter_gemm.csv`` (``gemm_rows``): one GEMM shape ``m x n x k`` per row, in ``fp8_block`` (FP8 with 1x128
  activation and 128x128 weight block scales, DeepSeek's recipe), ``bf16`` or ``mxfp4`` (FP4 with 1x32 scales),
  the fastest kernel aiter's tuner found for it.
* ``aiter_moe.csv`` (``moe_rows``): one fused-MoE call per row (both grouped GEMMs and the activation, gate
  and up projections fused: g1u1) at ``tokens`` tokens, the fastest kernel pair the tuner found.

The tables key rows by chip and compute-unit count, not by product: gfx942 with 304 CUs is an MI300X or an
MI325X (the same die; the tables do not say which), gfx950 with 256 CUs an MI350X or an MI355X (likewise), so
both names of a pair read the same rows (``ARCH_OF``). Times are in seconds (the tables' microseconds x 1e-6).
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal
from functools import lru_cache
from importlib.resources import files
from typing import NamedTuple

SOURCE = "ROCm/aiter e4048607 (MIT), aiter/configs tuned tables, screened (demos/zoo/vendor_data/README.md)"

ARCH_OF = {
    "mi300x": ("gfx942", 304),
    "mi325x": ("gfx942", 304),
    "mi350x": ("gfx950", 256),
    "mi355x": ("gfx950", 256),
}
"""GPU name -> (gfx arch, compute units) of the rows it reads."""

GEMM_DTYPES = ("bf16", "fp8_block", "mxfp4")


class AiterGemmRow(NamedTuple):
    """One tuned GEMM: C[m, n] = A[m, k] @ B[k, n] (aiter's M, N, K: N x K weights), the best kernel's time."""

    arch: str  # gfx942, gfx950
    cu_num: int  # 304, 256
    dtype: str  # fp8_block, bf16, mxfp4
    m: int
    n: int
    k: int
    seconds: float
    file: str  # the source table, a path inside ROCm/aiter


class AiterMoeRow(NamedTuple):
    """One tuned fused MoE (gate/up GEMM, activation, down GEMM) over ``tokens`` tokens, the best kernels' time."""

    arch: str
    cu_num: int
    tokens: int
    hidden: int  # aiter's model_dim
    inter: int  # aiter's inter_dim: one expert's intermediate width (per TP shard, as tuned)
    experts: int  # experts held on the GPU
    top_k: int
    act: str  # aiter's ActivationType: Silu, Gelu, Swiglu, Situv2
    w_dtype: str  # weights: bfloat16, float8_e4m3fn(uz), float4_e2m1fn_x2, int4
    a_dtype: str  # activations, as w_dtype
    quant: str  # aiter's QuantType: No, per_Token, per_1x128, per_1x32
    seconds: float
    file: str


def _seconds(us: str) -> float:
    """Microseconds as written -> seconds, rounded once (11.6 us is 1.16e-05 s, not 1.1599999999999999e-05)."""
    return float(Decimal(us).scaleb(-6))


def _read(name: str) -> list[dict[str, str]]:
    text = files(__package__).joinpath(name).read_text(encoding="utf-8")
    return list(csv.DictReader(io.StringIO(text)))


@lru_cache(maxsize=None)
def _gemm() -> tuple[AiterGemmRow, ...]:
    return tuple(
        AiterGemmRow(
            arch=r["arch"],
            cu_num=int(r["cu_num"]),
            dtype=r["dtype"],
            m=int(r["m"]),
            n=int(r["n"]),
            k=int(r["k"]),
            seconds=_seconds(r["us"]),
            file=r["file"],
        )
        for r in _read("aiter_gemm.csv")
    )


@lru_cache(maxsize=None)
def _moe() -> tuple[AiterMoeRow, ...]:
    return tuple(
        AiterMoeRow(
            arch=r["arch"],
            cu_num=int(r["cu_num"]),
            tokens=int(r["tokens"]),
            hidden=int(r["hidden"]),
            inter=int(r["inter"]),
            experts=int(r["experts"]),
            top_k=int(r["top_k"]),
            act=r["act"],
            w_dtype=r["w_dtype"],
            a_dtype=r["a_dtype"],
            quant=r["quant"],
            seconds=_seconds(r["us"]),
            file=r["file"],
        )
        for r in _read("aiter_moe.csv")
    )


def _arch(gpu: str) -> tuple[str, int]:
    try:
        return ARCH_OF[gpu.strip().lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown GPU {gpu!r} for aiter's tables; known: {', '.join(ARCH_OF)}") from None


def gemm_rows(gpu: str, dtype: str | None = None) -> list[AiterGemmRow]:
    """The GEMM rows ``gpu`` (a name of ``ARCH_OF``, any case) reads, optionally of one ``dtype``
    (``GEMM_DTYPES``; a dtype the GPU's arch has no rows of gives an empty list). Unknown gpu or dtype ->
    ValueError."""
    arch, cu = _arch(gpu)
    if dtype is not None and dtype not in GEMM_DTYPES:
        raise ValueError(f"unknown GEMM dtype {dtype!r} for aiter's tables; known: {', '.join(GEMM_DTYPES)}")
    return [r for r in _gemm() if r.arch == arch and r.cu_num == cu and (dtype is None or r.dtype == dtype)]


def moe_rows(gpu: str) -> list[AiterMoeRow]:
    """The fused-MoE rows ``gpu`` (a name of ``ARCH_OF``, any case) reads. Unknown gpu -> ValueError."""
    arch, cu = _arch(gpu)
    return [r for r in _moe() if r.arch == arch and r.cu_num == cu]
