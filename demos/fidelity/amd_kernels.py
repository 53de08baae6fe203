"""The AMD GPUs' rows of ``validate kernels`` (docs/kernels.md, "AMD Instinct"): aiter's GEMM and fused-MoE tables
and MoRI's one-node low-latency tables against the CDNA families' curves."""

from __future__ import annotations

from demos.fidelity.kernels import CheckRow, gemm_check_rows
from demos.fits.rooflines import experts_seconds
from demos.zoo.hardware import get_gpu
from demos.zoo.overlap_costs import ll_node_seconds
from demos.zoo.rooflines import FamilyFit, gpu_fit

__all__ = ["AMD_GPUS", "amd_rows"]

AMD_GPUS = ("mi300x", "mi325x", "mi350x", "mi355x")
"""The AMD GPUs checked (``amd_rows``): each against its arch's aiter and MoRI tables."""

_AITER_DTYPES = {"fp8_block": "fp8", "bf16": "bfloat16", "mxfp4": "fp4"}
"""aiter's GEMM dtype -> the curve's math dtype it is checked on."""


def amd_rows(gpu: str, fit: FamilyFit | None = None) -> list[CheckRow]:
    """An AMD GPU's rows (docs/kernels.md, "AMD Instinct"): every screened aiter GEMM row of its arch on the
    family's curve of its dtype (the fit took one row per shape and doubling of m: the others are checks), the
    FP8 fused-MoE rows on the experts' curve, MoRI's IntraNodeLL rows on the one-node all-to-all line (each at its
    own dispatch dtype); MI325X and MI350X read their arch's tables, which do not say which of the pair ran."""
    from demos.fits.amd import ll_rows, moe_rows
    from demos.zoo.vendor_data import aiter

    g = get_gpu(gpu)
    fit = fit or gpu_fit(g)
    out = []
    for theirs, ours in _AITER_DTYPES.items():
        if ours not in fit.gemm or (ours == "bfloat16" and fit.gemm["bfloat16"] is fit.gemm["fp8"]):
            continue
        out += gemm_check_rows(gpu, fit, ours, aiter.gemm_rows(gpu, theirs))
    for r in moe_rows(gpu):
        t = experts_seconds(fit.gemm["fp8"], fit.experts, g, r)
        out.append(CheckRow(gpu, "experts", f"tokens={r.tokens} experts={r.experts} inter={r.inter}", t, r.seconds))
    for r in ll_rows(g.family):
        pred = ll_node_seconds(g, r.kernel, r.tokens, r.hidden, r.top_k, r.gpus - 1, fp8=r.fp8, fit=fit)
        out.append(CheckRow(gpu, r.kernel, f"tokens={r.tokens} hidden={r.hidden} (MoRI IntraNodeLL)", pred, r.seconds))
    return out
