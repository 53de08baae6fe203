"""Fitting the attention modules' fixed times: what an engine's whole module takes beyond the kernels the
predictor composes it of (``demos.zoo.attention_module`` says why each exists and how the predictor charges
it).

``fit_module_extra(fit, gpus)`` is the MLA decode module's constant per GPU family (TRT-LLM's), fitted as every
curve is (the median row on the curve: ``median((composed + extra) / measured) = 1``) over the family's module
rows (``demos.zoo.attention_module.module_rows``), the op composed by the predictor itself (``composed_seconds``).
``fit_sglang_dsa_extra(fit, gpus)`` is SGLang's own per KV-cache dtype, the same way over its sparse-MLA modules
run without their indexer (``skip_rows``, the op less its indexer: ``skip_composed_seconds``).
``fit_module_gemm_extra(fit, gpus)`` is TRT-LLM's per other GEMM dtype of its tables (BF16 projections), the same
way over those rows, composed at BF16 weights.
``fit_index_extra(fit, gpus)`` is a DeepSeek sparse attention decode indexer's, the same way over the indexer's
share of SGLang's GLM-5 modules below ``INDEX_FIT_BELOW`` cached tokens (``index_rows``, the op composed by
``index_composed_seconds``). ``fitted_family(family, gpus)`` is a family's curves (``demos.fits.rooflines``) with
the three fitted on top: what ``python -m demos.fits write`` stores per family (``FIT_GPUS``) and per GPU
(``demos.zoo.measured.SYSTEMS``: ``own_fit`` gives a GPU whose tables hold no module without its indexer its
family's DSA indexer extra).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from demos.fits.rooflines import fit_family
from demos.zoo.attention_module import (
    INDEX_FIT_BELOW,
    MODULE_GEMMS,
    composed_seconds,
    index_composed_seconds,
    index_rows,
    module_rows,
    skip_composed_seconds,
    skip_rows,
)
from demos.zoo.rooflines import FIT_GPUS, FamilyFit

__all__ = [
    "composed_lines",
    "fit_index_extra",
    "fit_module_extra",
    "fit_module_gemm_extra",
    "fit_sglang_dsa_extra",
    "fitted_family",
    "own_fit",
]

_Compose = Callable[[str, Any, FamilyFit], float]


def fit_module_extra(fit: FamilyFit, gpus: Sequence[str]) -> float:
    """The family's MLA module extra (module docstring): the constant ``c`` that puts the median row of
    ``gpus`` on the curve, ``median((composed + c) / measured) = 1``, the op composed with ``fit``'s curves and
    ``c`` (which covers the per-kernel floors at small shapes), as every curve is fitted (least
    absolute log error, ``demos.fits.rooflines``); 0 when the op is not short; found by regula falsi
    (Illinois) to 1e-5 of itself, rounded to 4 significant figures.

    The extra enters the composed op as ``max(floors, kernels + c)`` (``KernelTimes.module_extra``, covered
    by ``demos.zoo.attention_base.module_costs``: a floor of the module's three ops, the core's share cut by
    the floors' slack in the projections and the output), so each row's composed time at any ``c >= 0`` is
    ``max(at 0, at B - B + c)`` for a ``B`` past every floor: the op is composed twice per row
    (``composed_lines``) instead of once per step of the search, and a third time at the root to hold the
    line to the predictor's own composition (``_check_line``)."""
    rows = [(g, r) for g in gpus for r in module_rows(g)]
    return _fit_extra(fit, "mla_module", rows, composed_seconds, "the MLA module extra")


def fit_module_gemm_extra(fit: FamilyFit, gpus: Sequence[str]) -> dict[str, float]:
    """TRT-LLM's MLA module extra per other GEMM dtype of its tables (``MODULE_GEMMS``: the module of BF16
    projections): as ``fit_module_extra``, over the family's rows of that dtype, each composed at its weights
    (``composed_seconds``); a dtype without rows on ``gpus`` is left out (``mla_module`` then applies)."""
    rows = {gemm: [(g, r) for g in gpus for r in module_rows(g, gemm)] for gemm in MODULE_GEMMS}
    return _fit_extras(fit, "mla_module_gemm", rows, composed_seconds, "the {} MLA module extra")


def fit_index_extra(fit: FamilyFit, gpus: Sequence[str]) -> float:
    """The family's DSA indexer extra (module docstring): as ``fit_module_extra``, over the indexer share rows of
    ``gpus`` below ``INDEX_FIT_BELOW`` cached tokens, the ``attn_index`` op composed alone, the extra entering it
    as ``max(floors, kernels + c)`` (one part of the op's fold: ``KernelTimes.index_extra``); 0 where ``gpus``
    have no such rows (the family's GPUs measure no module without its indexer)."""
    rows = _index_fit_rows(gpus)
    return _fit_extra(fit, "dsa_index", rows, index_composed_seconds, "the DSA indexer extra") if rows else 0.0


SGLANG_KV = ("bfloat16", "fp8")
"""The KV-cache dtypes SGLang's module fixed time is fitted for (``FamilyFit.sglang_dsa_module``' keys)."""


def fit_sglang_dsa_extra(fit: FamilyFit, gpus: Sequence[str]) -> dict[str, float]:
    """SGLang's own MLA decode module extra per KV-cache dtype (``SGLANG_KV``; module docstring): as
    ``fit_module_extra``, over SGLang's modules without their indexer of ``gpus`` (``skip_rows``), each composed
    less its indexer as SGLang's step composes it (``skip_composed_seconds``); a dtype without rows is left out
    (TRT-LLM's ``mla_module`` then applies)."""
    rows = {kv: [(g, r) for g in gpus for r in skip_rows(g, kv)] for kv in SGLANG_KV}
    return _fit_extras(fit, "sglang_dsa_module", rows, skip_composed_seconds, "SGLang's {} MLA module extra")


def _fit_extras(
    fit: FamilyFit, field: str, rows: dict[str, list[tuple[str, Any]]], compose: _Compose, what: str
) -> dict[str, float]:
    """One constant per key of ``fit``'s dict ``field`` (``fit_module_extra``), each over that key's ``rows`` (``what``
    formatted with the key names it in an error); a key without rows is left out."""
    return {
        key: _fit_extra(fit, f"{field}.{key}", keyed, compose, what.format(key)) for key, keyed in rows.items() if keyed
    }


def _with_extra(fit: FamilyFit, field: str, extra: float) -> FamilyFit:
    """``fit`` with ``field`` at ``extra``: a float field by name, or one key of a dict field ("field.key")."""
    name, _, key = field.partition(".")
    value = {**getattr(fit, name), key: extra} if key else extra
    return replace(fit, **{name: value})


def _index_fit_rows(gpus: Sequence[str]) -> list[tuple[str, Any]]:
    return [(g, r) for g in gpus for r in index_rows(g) if r.kv_len < INDEX_FIT_BELOW]


def _fit_extra(fit: FamilyFit, field: str, rows: Sequence[tuple[str, Any]], compose: _Compose, what: str) -> float:
    """The constant of ``fit``'s ``field`` that puts the median of ``rows`` on the curve (``fit_module_extra``),
    each row composed by ``compose``."""
    hi = statistics.median(r.seconds for _, r in rows)  # an extra of a whole median row: long
    lines = composed_lines(fit, rows, hi, field, compose)

    def excess(extra: float) -> float:  # increasing in ``extra``; its root is the fit
        return statistics.median(max(at0, rise + extra) / r.seconds for (at0, rise), (_, r) in zip(lines, rows)) - 1.0

    c = _root(excess, hi)
    _check_line(fit, rows, lines, c, field, compose, what)
    return float(f"{c:.4g}")


def _root(excess: Callable[[float], float], hi: float) -> float:
    """The root of ``excess`` (increasing) in ``[0, hi]`` by regula falsi (Illinois) to 1e-5 of ``hi``;
    0 where ``excess(0) >= 0``."""
    lo, f_lo = 0.0, excess(0.0)
    if f_lo >= 0.0:
        return 0.0
    f_hi = excess(hi)
    side = 0
    while hi - lo > 1e-5 * hi:
        c = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        f_c = excess(c)
        if f_c == 0.0:
            return c
        if f_c > 0.0:
            hi, f_hi = c, f_c
            f_lo, side = (f_lo / 2.0 if side == 1 else f_lo), 1
        else:
            lo, f_lo = c, f_c
            f_hi, side = (f_hi / 2.0 if side == -1 else f_hi), -1
    return 0.5 * (lo + hi)


def composed_lines(
    fit: FamilyFit,
    rows: Sequence[tuple[str, Any]],
    big: float,
    field: str = "mla_module",
    compose: _Compose = composed_seconds,
) -> list[tuple[float, float]]:
    """Each row's composed op as a line in the extra ``c`` of ``fit``'s ``field`` (``_with_extra``): ``(at 0,
    at big - big)``, its time at ``c`` being ``max(at 0, at big - big + c)`` (``fit_module_extra``); ``big`` must
    reach past every kernel floor."""
    f0, fb = _with_extra(fit, field, 0.0), _with_extra(fit, field, big)
    return [(compose(g, r, f0), compose(g, r, fb) - big) for g, r in rows]


def _check_line(fit: FamilyFit, rows, lines, extra: float, field: str, compose: _Compose, what: str) -> None:
    """Raise if any row's composed op at ``extra`` is not what its line says (to 1e-9 of it): the
    composition has changed how it charges the extra, and the line search would fit the wrong constant."""
    f = _with_extra(fit, field, extra)
    for (g, r), (at0, rise) in zip(rows, lines):
        want, line = compose(g, r, f), max(at0, rise + extra)
        if abs(line - want) > 1e-9 * want:
            raise RuntimeError(
                f"{what} no longer enters the composed op as max(floor, kernels + extra): {g} "
                f"batch {r.batch} kv {r.kv_len} heads {r.heads}: composed {want:.6g} s, the line {line:.6g} s"
            )


def fitted_family(family: str, gpus: Sequence[str] | None = None) -> FamilyFit:
    """``family``'s curves fitted to the tables of ``gpus`` (default ``FIT_GPUS[family]``,
    ``demos.fits.rooflines.fit_family``) and, composed with them, the MLA decode module's (TRT-LLM's and SGLang's)
    and the DSA indexer's fixed times; their tables named in ``source``."""
    from demos.zoo import measured

    names = tuple(gpus or FIT_GPUS[family])
    fit = fit_family(family, names)
    module, dsa = measured.TABLES["mla_module"], measured.TABLES["dsa_module"]
    source = (
        f"{fit.source}; the MLA decode module's fixed time: {module[3]} ({module[1]} {module[2]}); SGLang's, and "
        f"the DSA indexer's: {dsa[3]} ({dsa[1]} {dsa[2]}, with and without the indexer)"
    )
    fit = replace(fit, source=source, mla_module=fit_module_extra(fit, names))
    fit = replace(fit, mla_module_gemm=fit_module_gemm_extra(fit, names))
    fit = replace(fit, sglang_dsa_module=fit_sglang_dsa_extra(fit, names))
    return replace(fit, dsa_index=fit_index_extra(fit, names))


def own_fit(fit: FamilyFit, family: FamilyFit) -> FamilyFit:
    """``fit`` (``fitted_family`` on one GPU's tables alone) with the DSA indexer extra of ``family`` (its
    family's pooled fit) where that GPU's tables hold no module without its indexer (GB200, B300, GB300:
    ``fit_index_extra`` gives 0 there, which would drop the indexer's fixed time from the GPU)."""
    if _index_fit_rows(fit.fitted_on):
        return fit
    source = f"{fit.source}; no module without the indexer on {', '.join(fit.fitted_on)}: the DSA indexer extra "
    source += f"is {family.family}'s, fitted on {', '.join(family.fitted_on)}"
    return replace(fit, dsa_index=family.dsa_index, source=source)
