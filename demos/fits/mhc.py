"""Fitting a wide residual's kernel curves (``demos.zoo.rooflines.FamilyFit.mhc``: DeepSeek-V4's
hyper-connections) to SGLang's measured ``mhc_module_perf`` rows: ``fit_mhc`` per ``MHC_SITES`` key, each
row's work counted by the predictor's formula (``demos.zoo.work.mhc_work``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from demos.fits.solver import ATTENTION_STARTS, attention_curve, columns, fit_log, rounded
from demos.zoo.hardware import GpuSpec
from demos.zoo.rooflines import AttentionCurve
from demos.zoo.work import mhc_work

__all__ = ["MHC_FIELDS", "fit_mhc"]

MHC_FIELDS = ("tokens", "hidden", "hc")
"""The ``MhcRow`` fields ``mhc_work`` reads, in its order."""


def fit_mhc(rows_by_gpu: Sequence[tuple[GpuSpec, list]], site: str) -> AttentionCurve:
    """The ``site`` kernel's curve ("pre" or "post") fitted to ``[(gpu, rows)]`` (``MhcRow``; the other
    site's rows left out): an ``AttentionCurve`` (a share of the BF16 peak, a share of HBM bandwidth, the
    kernel's fixed time), least absolute log error as every curve."""
    picked = [(g, "bfloat16", [r for r in rows if r.site == site]) for g, rows in rows_by_gpu]
    data, peak, hbm, t = columns(picked, MHC_FIELDS)
    if len(t) < 3:
        raise ValueError(f"need at least 3 mhc {site} rows to fit 3 parameters, got {len(t)}")
    flops, nbytes = mhc_work(site, data["tokens"], data["hidden"], data["hc"])
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(attention_curve(u).seconds(flops, nbytes, peak, hbm)) - logt

    return rounded(attention_curve(fit_log(residuals, ATTENTION_STARTS)))
