"""Fitting the MLA decode module's fixed time: what an engine's whole attention module takes beyond the
kernels the predictor composes it of (``demos.zoo.attention_module`` says why it exists and how the
predictor charges it).

``fit_module_extra(fit, gpus)`` is that constant per GPU family, fitted as every curve is (the median row
on the curve: ``median((composed + extra) / measured) = 1``) over the family's module rows
(``demos.zoo.attention_module.module_rows``), the op composed by the predictor itself
(``composed_seconds``). ``fitted_family(family, gpus)`` is a family's curves (``demos.fits.rooflines``)
with the extra fitted on top: what ``python -m demos.fits write`` stores.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace

from demos.fits.rooflines import fit_family
from demos.zoo.attention_module import composed_seconds, module_rows
from demos.zoo.rooflines import FIT_GPUS, FamilyFit

__all__ = ["fit_module_extra", "fitted_family"]


def fit_module_extra(fit: FamilyFit, gpus: Sequence[str]) -> float:
    """The family's module extra (module docstring): the constant ``c`` that puts the median row of
    ``gpus`` on the curve, ``median((composed + c) / measured) = 1``, the op composed with ``fit``'s curves and
    ``c`` (which the per-kernel floors partly absorb at small shapes), as every curve is fitted (least
    absolute log error, ``demos.fits.rooflines``); 0 when the op is not short; found by regula falsi
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
    """``family``'s curves fitted to the tables of ``gpus`` (default ``FIT_GPUS[family]``,
    ``demos.fits.rooflines.fit_family``) and, composed with them, the MLA decode module's fixed time; its
    table named in ``source``."""
    from demos.zoo import measured

    names = tuple(gpus or FIT_GPUS[family])
    fit = fit_family(family, names)
    module = measured.TABLES["mla_module"]
    source = f"{fit.source}; the MLA decode module's fixed time: {module[3]} ({module[1]} {module[2]})"
    return replace(fit, source=source, mla_module=fit_module_extra(fit, names))
