"""The AMD Instinct families' curves (``FamilyFit`` "cdna3", "cdna4"): fitted where AMD publishes measured kernel
tables, borrowed from Hopper's fit where it publishes none (docs/kernels.md, "AMD Instinct").

Fitted, each on its family's GPU (``AMD_FIT_GPUS``: MI300X for CDNA3, MI355X for CDNA4; MI325X and MI350X take
their family's curves over their own datasheets):

* the GEMM curves (``fit_gemm``, the same form and fit as NVIDIA's) to aiter's tuned GEMM tables
  (``demos.zoo.vendor_data.aiter.gemm_rows``), one row per shape and doubling of m (``log_balanced``): FP8 to
  the block-scaled (1x128 activations, 128x128 weights) rows, BF16 to the BF16 rows where the arch has at
  least 7 (CDNA4; CDNA3 has none: its BF16 curve is its FP8 one, the same shares of a peak half as high, **a
  guess**), FP4 to the MXFP4 rows (CDNA4 only);
* the routed experts' grouped GEMMs (``fit_experts``) to aiter's tuned fused-MoE rows with FP8 block-scaled
  weights and activations, each row one GPU's experts (EP 1 in the fit's terms);
* the single-node low-latency all-to-all line (``ll_sm``) to MoRI's IntraNodeLL EP 8 tuning rows (BF16
  dispatch and combine: the line through their bytes, ``fit_ll_line``), MI300X's for CDNA3, MI350X's and
  MI355X's for CDNA4 (the same CUs and Infinity Fabric).

Borrowed from Hopper (``BORROWED``): the MLA decode and prefill curves, the MLA module's fixed time, the Gated
DeltaNet, KDA, hyper-connection and sparse-indexer curves: no AMD table measures them (aiter ships tuned GEMM
and MoE tables only). A curve is a share of the GPU's own peak and bandwidth, so a borrowed one puts Hopper's
reach on AMD's datasheet, which is **a guess**; ``demos.fits.amd.ablation`` and docs/kernels.md say what it
moves. ``source`` names every part.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from demos.fits.rooflines import fit_experts, fit_gemm, ll_line
from demos.zoo.hardware import get_gpu, ll_bytes
from demos.zoo.measured_moe import EngineMoeRow
from demos.zoo.rooflines import FamilyFit, LinearCost

__all__ = ["AMD_FIT_GPUS", "BORROWED", "fit_amd_family", "fit_ll_line", "ll_rows", "log_balanced", "moe_rows"]

AMD_FIT_GPUS = {"cdna3": ("mi300x",), "cdna4": ("mi355x",)}
"""The GPU whose tables fit each AMD family (``FamilyFit.fitted_on``)."""

BORROWED = "hopper"
"""The family whose fitted curves an AMD family takes where no AMD table measures the kernel."""

_LL_GPUS = {"cdna3": ("mi300x",), "cdna4": ("mi350x", "mi355x")}

_MIN_GEMM_ROWS = 7  # fit_gemm's 7 parameters


class _LLRow(NamedTuple):
    tokens: int
    hidden: int
    top_k: int
    gpus: int
    kernel: str
    fp8: bool
    seconds: float


def log_balanced(rows: list) -> list:
    """One row per weight shape (n, k) and power-of-two bucket of m (the smallest m of the bucket): aiter's tables
    sample m unevenly (some sweep it in steps of 16 to thousands), so a fit on every row would be a fit to those
    sweeps; each shape's range of m then weighs the same per doubling."""
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r.n, r.k, r.m)):
        key = (r.n, r.k, r.m.bit_length())
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def moe_rows(gpu: str) -> list[EngineMoeRow]:
    """``gpu``'s aiter fused-MoE rows with FP8 block-scaled weights and activations, as ``fit_experts`` reads an
    engine's measured MoE row: one GPU's ``experts`` (EP 1)."""
    from demos.zoo.vendor_data import aiter

    return [
        EngineMoeRow("fp8_e4m3", "aiter fused MoE", r.tokens, r.hidden, r.inter, r.top_k, r.experts, 1, r.seconds)
        for r in aiter.moe_rows(gpu)
        if r.w_dtype.startswith("float8") and r.a_dtype.startswith("float8") and r.quant == "per_1x128"
    ]


def ll_rows(family: str) -> list[_LLRow]:
    """MoRI's IntraNodeLL tuning rows of ``family``'s GPUs (BF16 dispatch, BF16 combine without quantization)."""
    from demos.zoo.vendor_data.ep_tables import mori_rows, unquantized

    out = []
    for gpu in _LL_GPUS[family]:
        for r in mori_rows(gpu=gpu, kernel_type="IntraNodeLL"):
            if r.dtype == "bf16" and unquantized(r):
                out.append(_LLRow(r.tokens, r.hidden, r.top_k or 8, r.ep, r.phase, False, r.seconds))
    return out


def fit_ll_line(rows: list[_LLRow], kernel: str) -> LinearCost:
    """The line ``fixed + per_byte x bytes`` through ``rows`` of ``kernel``, residuals relative to each row's time
    (``demos.fits.rooflines.ll_line``, as ``fit_ll_sm``; one node size, so no per-peer term), each row's bytes
    those of its own dispatch dtype."""
    rs = [r for r in rows if r.kernel == kernel]
    if len(rs) < 2:
        raise ValueError(f"need at least 2 {kernel} rows to fit a line, got {len(rs)}")
    x = [ll_bytes(kernel, r.tokens, r.hidden, r.top_k, r.fp8) for r in rs]
    return ll_line(x, [r.gpus - 1 for r in rs], [r.seconds for r in rs])


def fit_amd_family(family: str, base: FamilyFit) -> FamilyFit:
    """``family``'s curves (module docstring): fitted to AMD's tables where there are some, else ``base``'s (the
    ``BORROWED`` family's fit)."""
    from demos.zoo.vendor_data import aiter
    from demos.zoo.vendor_data.ep_tables import SOURCES

    (name,) = AMD_FIT_GPUS[family]
    spec = get_gpu(name)
    fp8 = fit_gemm([(spec, log_balanced(aiter.gemm_rows(name, "fp8_block")))], "fp8")
    gemm = {"fp8": fp8}
    bf16_rows = log_balanced(aiter.gemm_rows(name, "bf16"))
    gemm["bfloat16"] = fit_gemm([(spec, bf16_rows)], "bfloat16") if len(bf16_rows) >= _MIN_GEMM_ROWS else fp8
    fp4_rows = log_balanced(aiter.gemm_rows(name, "mxfp4"))
    if spec.has_fp4 and len(fp4_rows) >= _MIN_GEMM_ROWS:
        gemm["fp4"] = fit_gemm([(spec, fp4_rows)], "fp4")
    experts = fit_experts([(spec, moe_rows(name))], fp8)
    rows = ll_rows(family)
    ll_sm = {kernel: fit_ll_line(rows, kernel) for kernel in ("dispatch", "combine")}
    bf16_note = "BF16 GEMMs" if len(bf16_rows) >= _MIN_GEMM_ROWS else "no BF16 GEMM table (BF16 takes the FP8 curve)"
    source = (
        f"{aiter.SOURCE}: FP8 block-scaled GEMMs, {bf16_note}, fused MoE (FP8) on {name}; "
        f"{SOURCES['ROCm/mori']} IntraNodeLL on {', '.join(_LL_GPUS[family])}; the MLA, GQA, linear-attention, "
        f"hyper-connection and indexer curves and the MLA module's and DSA indexer's fixed times borrowed from "
        f"{BORROWED} ({base.source})"
    )
    # no engine's local fused MoE or custom all-reduce tables for AMD: a local MoE on ``experts`` without a fixed
    # time, the all-reduce on the ring model
    return replace(
        base,
        family=family,
        gemm=gemm,
        experts=experts,
        ll_sm=ll_sm,
        fitted_on=(name,),
        source=source,
        local_experts={},
        engine_local_experts={},
        custom_all_reduce=None,
        engine_all_reduce={},
    )
