"""The MLA decode module's fixed time: what an engine's whole attention module takes beyond its composed kernels.

The predictor builds a layer's attention from its kernels (``demos.zoo.costs``): the projections and
absorptions on the family's fitted GEMM curves, the core on its MLA curve, and every kernel of the op at
least the per-kernel floor (``demos.zoo.profile``). Each of those curves is fitted to a table of one
kernel. TRT-LLM's collection also measures the whole decode module as the engine runs it, from the input
norm to ``o_proj`` (``demos.zoo.measured.MlaModuleRow``), on every GPU with tables; against it the
composed op runs short at the batches decode serves, by a near-constant 15-40 us per layer (the
module's small kernels, its quantizations and the gaps between its kernels cost more than the floors
say; the composition cannot tell which).

``fit_module_extra(fit, gpus)`` is that constant per GPU family, fitted as every curve is (the median row
on the curve: ``median((composed + extra) / measured) = 1``) over the family's module rows (``FIT_ROWS``:
FP8 block GEMMs and a BF16 cache, DeepSeek-V3's checkpoint and the predictor's default cache, at 16 to
128 heads per GPU: attention TP 8 to 1). ``FamilyFit.mla_module``
stores it, and ``KernelTimes.attention`` adds it to every MLA decode core, so each ubatch of a DBO step
pays it again, as it pays each kernel's floor. ``composed_seconds(gpu, row, fit)`` is the composed op of
one row (with ``fit``'s extra), ``fitted_family(family, gpus)`` the family's curves
(``demos.zoo.rooflines_fit.fit_family``) with the extra fitted on top (what ``scripts/fit_rooflines.py``
writes), ``module_rows(gpu)`` the rows fitted and checked (``validate --kernels``,
op ``mla module``). Prefill modules, other attention and other engines' modules are not fitted (vLLM's
measures a median 46-55 us longer at up to 64 requests on H100, H200 and GB200: docs/kernels.md).
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from dataclasses import replace

from demos.zoo.breakdown import layer_breakdown
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, with_precision
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FamilyFit
from demos.zoo.rooflines_fit import FIT_GPUS, fit_family
from demos.zoo.workload import Workload, cluster_for

__all__ = ["FIT_ROWS", "composed_seconds", "fit_module_extra", "fitted_family", "module_rows"]

FIT_ROWS = {"gemm_dtype": "fp8_block", "kv_dtype": "bfloat16", "heads": (16, 32, 64, 128)}
"""The module rows fitted and checked: FP8 block GEMMs, a BF16 cache, 16 to 128 query heads per GPU."""

_MODEL = "deepseek-v3"  # the architecture every module table was measured on
_EP = 8  # any EP group whose NVLink domain holds attention TP 8; the attention op does not depend on it


def module_rows(gpu: str) -> list:
    """``gpu``'s measured module rows of ``FIT_ROWS`` (needs the ``measured`` extra)."""
    from demos.zoo import measured

    return [
        r
        for r in measured.mla_module_rows(gpu)
        if r.gemm_dtype == FIT_ROWS["gemm_dtype"]
        and r.kv_dtype == FIT_ROWS["kv_dtype"]
        and r.heads in FIT_ROWS["heads"]
    ]


@functools.lru_cache(maxsize=4)
def _spec(kv_cache: str):
    """DeepSeek-V3 with its KV cache in ``kv_cache`` (built once: a fit composes every row many times)."""
    return with_precision(get_preset(_MODEL), kv_cache=kv_cache)


def composed_seconds(gpu: str, row, fit: FamilyFit) -> float:
    """The predictor's attention op (``moe_layer_s["attention"]``) for module row ``row`` on ``gpu``, its
    kernels timed with ``fit`` (its ``mla_module`` included): DeepSeek-V3 with the row's cache dtype,
    ``row.batch`` requests of ``row.kv_len`` cached tokens, attention TP ``128 / row.heads``."""
    g = get_gpu(gpu)
    spec = _spec("fp8" if row.kv_dtype.startswith("fp8") else "bf16")
    per = min(_EP, g.gpus_per_node)
    w = Workload(
        spec,
        cluster_for(gpu, _EP // per, per, _EP),
        tokens=row.batch,
        context=max(1, row.kv_len),
        ubatches=1,
        attention_tp=spec.attention.heads // row.heads,
    )
    profile = gpu_profile(g, fit=fit)
    ops = layer_breakdown(w, row.batch, profile, KernelTimes(g, profile, fit))["moe_layer_s"]
    return ops["attention"]


def fit_module_extra(fit: FamilyFit, gpus: Sequence[str]) -> float:
    """The family's module extra (module docstring): the constant ``c`` that puts the median row of
    ``gpus`` on the curve, ``median((composed + c) / measured) = 1``, the op composed with ``fit``'s curves and
    ``c`` (which the per-kernel floors partly absorb at small shapes), as every curve is fitted (least
    absolute log error, ``demos.zoo.rooflines_fit``); 0 when the op is not short; found by regula falsi
    (Illinois) to 1e-5 of itself, rounded to 4 significant figures."""
    rows = [(g, r) for g in gpus for r in module_rows(g)]

    def excess(extra: float) -> float:  # increasing in ``extra``; its root is the fit
        f = replace(fit, mla_module=extra)
        return statistics.median(composed_seconds(g, r, f) / r.seconds for g, r in rows) - 1.0

    lo, f_lo = 0.0, excess(0.0)
    if f_lo >= 0.0:
        return 0.0
    hi = statistics.median(r.seconds for _, r in rows)  # an extra of a whole median module: long
    f_hi = excess(hi)
    side = 0
    while hi - lo > 1e-5 * hi:  # regula falsi, Illinois: a few compositions of every row, not a dozen
        c = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        f_c = excess(c)
        if f_c == 0.0:
            return float(f"{c:.4g}")
        if f_c > 0.0:
            hi, f_hi = c, f_c
            f_lo, side = (f_lo / 2.0 if side == 1 else f_lo), 1
        else:
            lo, f_lo = c, f_c
            f_hi, side = (f_hi / 2.0 if side == -1 else f_hi), -1
    return float(f"{0.5 * (lo + hi):.4g}")


def fitted_family(family: str, gpus: Sequence[str] | None = None) -> FamilyFit:
    """``family``'s curves fitted to the tables of ``gpus`` (default ``FIT_GPUS[family]``) and, composed
    with them, the MLA decode module's fixed time; its table named in ``source``."""
    from demos.zoo import measured

    names = tuple(gpus or FIT_GPUS[family])
    fit = fit_family(family, names)
    module = measured.TABLES["mla_module"]
    source = f"{fit.source}; the MLA decode module's fixed time: {module[3]} ({module[1]} {module[2]})"
    return replace(fit, source=source, mla_module=fit_module_extra(fit, names))
