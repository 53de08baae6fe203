"""Fitting grouped-query attention's core (``demos.zoo.rooflines.FamilyFit.gqa``) to each engine's measured kernels
(``demos.zoo.measured_attention``): one ``GqaCurve`` per phase, engine and KV-cache dtype, each row's work counted
by the predictor's own formula (``gqa_row_work``: ``demos.zoo.work.gqa_core_work``), its work items (requests x KV
heads, ``gqa_row_units``) as the step counts them, and the curve fitted as every attention curve is (least absolute
log error, ``demos.fits.solver``).

Why a time per work item: without it (an ``AttentionCurve``'s three parameters) the fit trades the tables' two
ends against each other. Many requests at a few cached tokens take far longer than their bytes (2,048 requests of
64 KV heads at one cached token: 2.6 ms on H200), and long contexts over many requests run at a larger share of
bandwidth than the middle rows; the one share of bandwidth put the decode cores at the models' own shapes (16 or
more requests of 1k or more cached tokens) up to 46% long on Hopper and 16% on Blackwell. With it the median
|error| over every row of Hopper's decode tables drops from 14-36% to 10-26%, and the models' shapes come within
14% on every GPU, engine and dtype (docs/kernels.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from demos.fits.solver import columns, fit_log, rounded
from demos.vocabulary import Phase
from demos.zoo.hardware import GpuSpec
from demos.zoo.measured_attention import GQA_ENGINES, GQA_KV, gqa_rows
from demos.zoo.models.dtypes import dtype
from demos.zoo.rooflines import GqaCurve, gqa_key
from demos.zoo.work import causal_pairs, decode_pairs, gqa_core_work, gqa_work_items, windowed_pairs

__all__ = ["GQA_FIELDS", "fit_gqa", "gqa_curves", "gqa_row_units", "gqa_row_work"]

GQA_FIELDS = ("batch", "heads", "kv_heads", "head_dim", "context", "window")
"""The ``GqaRow`` fields ``gqa_row_work`` reads, in its order."""


def gqa_row_work(phase: str, kv_dtype: str, batch, heads, kv_heads, head_dim, context, window):
    """(flops, bytes) of GQA rows (numbers or arrays) as the predictor counts them (``demos.zoo.gqa_attention.GQA``):
    decode, ``batch`` tokens each reading its ``context`` cached tokens and itself; prefill, ``batch`` prompts of
    ``context`` tokens, causal; the pairs capped at ``window`` per token where it is not 0."""
    batch, context, window = (np.asarray(v, dtype=float) for v in (batch, context, window))
    tokens = _tokens(phase, batch, context)
    pairs = decode_pairs(tokens, context) if phase == Phase.DECODE else causal_pairs(tokens, context)
    pairs = windowed_pairs(pairs, tokens, window)
    kv_bytes = dtype("fp8_e4m3" if kv_dtype == "fp8" else "bfloat16").bytes
    return gqa_core_work(phase, tokens, pairs, heads, kv_heads, head_dim, kv_bytes)


def gqa_row_units(phase: str, batch, context, kv_heads):
    """A GQA row's work items (``GqaCurve``), counted as the step counts its own (``gqa_work_items``)."""
    batch, context = np.asarray(batch, dtype=float), np.asarray(context, dtype=float)
    return gqa_work_items(phase, _tokens(phase, batch, context), context, np.asarray(kv_heads, dtype=float))


def _tokens(phase: str, batch, context):
    """A row's tokens: a decode row's one a request, a prefill row's whole prompts."""
    return batch if phase == Phase.DECODE else batch * context


_STARTS = ((0.5, 0.7, 1e-5, 2e-8), (0.8, 0.9, 3e-6, 5e-9), (0.3, 0.5, 2e-5, 1e-7))


def _curve(u: np.ndarray) -> GqaCurve:
    """The ``GqaCurve`` of log parameters ``u`` (ceiling and share of bandwidth at most 1)."""
    e = np.exp(u)
    return GqaCurve(min(1.0, e[0]), min(1.0, e[1]), e[2], e[3])


def fit_gqa(rows_by_gpu: Sequence[tuple[GpuSpec, list]], phase: str, kv_dtype: str) -> GqaCurve:
    """The GQA curve of ``phase`` fitted to ``[(gpu, rows)]`` (``GqaRow``s over a ``kv_dtype`` cache), its work by
    ``gqa_row_work``, its work items by ``gqa_row_units``, its peak the GPU's BF16 rate (the queries' math)."""
    data, peak, hbm, t = columns([(g, "bfloat16", rows) for g, rows in rows_by_gpu], GQA_FIELDS)
    if len(t) < 4:
        raise ValueError(f"need at least 4 GQA {phase} rows to fit 4 parameters, got {len(t)}")
    flops, nbytes = gqa_row_work(phase, kv_dtype, *(data[f] for f in GQA_FIELDS))
    units, logt = gqa_row_units(phase, data["batch"], data["context"], data["kv_heads"]), np.log(t)
    u = fit_log(lambda u: np.log(_curve(u).seconds(flops, nbytes, peak, hbm, units)) - logt, _STARTS)
    return rounded(_curve(u))


def gqa_curves(specs: Sequence[tuple[GpuSpec, str]]) -> dict[str, GqaCurve]:
    """``FamilyFit.gqa`` for the GPUs of ``specs`` (``(spec, our name)``): a curve per phase, engine and dtype
    (``gqa_key``) whose tables every one of them has."""
    out = {}
    for phase in Phase:
        for engine in GQA_ENGINES:
            for kv in GQA_KV:
                rows = [(spec, gqa_rows(g, phase, engine, kv)) for spec, g in specs]
                if all(rs for _, rs in rows):
                    out[gqa_key(phase, engine, kv)] = fit_gqa(rows, phase, kv)
    return out
