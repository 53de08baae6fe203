"""Fitting a lightning indexer's decode kernel curves (``demos.zoo.rooflines.FamilyFit.index``) to SGLang's
kernel-level tables (``demos.zoo.measured_index``): ``fit_index`` gives every ``INDEX_CURVES`` key.

* "scores": DeepGEMM's ``fp8_paged_mqa_logits`` rows, an ``AttentionCurve`` over the FP8 peak (least
  absolute log error, as every curve), each row's work counted by the predictor's formula
  (``index_row_work``: ``demos.zoo.work.index_score_work`` over ``index_entries(context, 4)`` keys per request,
  the V4 table's 64 heads of 128, keys of 132 bytes: 128 FP8 values and their scale).
* "<kernel> topk <scores>": a ``TopkCurve`` per kernel and score distribution, fitted to the rows whose
  entries exceed the top-k (the others are 0, which the curve gives by rule): "csa" (DeepSeek-V4's
  ``topk_transform_v2``) with its second path past ``CSA_SMALL_MAX`` entries and, at flat scores, the tie
  ranking (every entry tied); "dsa" (``fast_topk_transform_fused``) one path, a time per entry.
* "prefill scores": DeepGEMM's ``fp8_mqa_logits`` rows (GLM-5's prefill indexer, ``PREFILL_HEADS`` heads of
  ``SCORE_DIM``), a ``MqaLogitsCurve`` over the FP8 peak (``fit_prefill_scores``): each row's padded causal
  pairs and its longest query row (``prefill_row_work``).

Each row's top-k is its model's (``INDEX_MODELS``: the presets' ``index_topk``), its entries
``demos.zoo.work.index_entries`` of its context (compressed by 4 for V4, every token for DSA).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from demos.fits.solver import ATTENTION_STARTS, attention_curve, fit_log, rounded
from demos.zoo.attention_module import V4_MODELS
from demos.zoo.hardware import GpuSpec
from demos.zoo.rooflines import INDEX_SCORES, AttentionCurve, MqaLogitsCurve, TopkCurve
from demos.zoo.work import index_entries, index_score_work

__all__ = [
    "CSA_SMALL_MAX",
    "INDEX_MODELS",
    "PREFILL_HEADS",
    "SCORE_HEADS",
    "fit_index",
    "fit_prefill_scores",
    "fit_scores",
    "fit_topk",
    "index_row_work",
    "prefill_row_work",
    "row_topk",
    "topk_ratio",
]

CSA_SMALL_MAX = 16384
"""Entries up to which DeepSeek-V4's top-k runs its one-block-per-row path (the kernel's register-resident
``4 x 4 x 1,024`` scores); longer rows take its other path (the tables' step down past 65,536 tokens)."""

SCORE_HEADS, SCORE_DIM, SCORE_KEY_BYTES = 64, 128, 132
"""The scores table's indexer: DeepSeek-V4-Flash's 64 heads of 128, FP8 keys with a 4-byte scale."""

PREFILL_HEADS = 32
"""The prefill scores table's indexer: GLM-5's 32 heads (of ``SCORE_DIM``; the preset's ``index_heads``)."""

INDEX_MODELS = {**V4_MODELS, "zai-org/GLM-5": "glm-5", "nvidia/GLM-5.2-NVFP4": "glm-5"}
"""The top-k tables' models -> the preset whose ``index_topk`` a row selects (the V4 module tables' models;
GLM-5.2's indexer is GLM-5's: 32 heads of 128, top 2,048, in the extra's copy of its config)."""


def row_topk(model: str) -> int:
    """The top-k of a table's ``model`` (``INDEX_MODELS``); another model is a ``ValueError``."""
    from demos.zoo.models import get_preset

    if model not in INDEX_MODELS:
        raise ValueError(f"no preset known for the top-k table's model {model!r} (demos.fits.index.INDEX_MODELS)")
    return get_preset(INDEX_MODELS[model]).attention.index_topk


def topk_ratio(kernel: str) -> int:
    """Cached tokens per entry the ``kernel``'s top-k selects from: "csa" 4 (V4's compressed cache), "dsa" 1."""
    return 4 if kernel == "csa" else 1


def index_row_work(batch, context, heads=SCORE_HEADS):
    """(flops, bytes) of a scores row (arrays or numbers) as the predictor counts a decode ubatch's: ``batch``
    requests of ``context`` cached tokens, each query against its request's ``index_entries(context, 4)``."""
    keys = batch * index_entries(context, 4)
    return index_score_work(batch, keys, keys, heads, SCORE_DIM, key_bytes=SCORE_KEY_BYTES)


def fit_scores(rows_by_gpu: Sequence[tuple[GpuSpec, list]]) -> AttentionCurve:
    """The "scores" curve fitted to ``[(gpu, rows)]`` (``demos.zoo.measured_index.IndexScoreRow``)."""
    rows = [(g, r) for g, rs in rows_by_gpu for r in rs]
    if len(rows) < 3:
        raise ValueError(f"need at least 3 index score rows to fit 3 parameters, got {len(rows)}")
    batch, context, heads, peak, hbm, t = (
        np.array(c, dtype=float)
        for c in zip(*((r.batch, r.context, r.heads, g.flops("fp8"), g.hbm_bandwidth, r.seconds) for g, r in rows))
    )
    flops, nbytes = index_row_work(batch, context, heads)
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(attention_curve(u).seconds(flops, nbytes, peak, hbm)) - logt

    return rounded(attention_curve(fit_log(residuals, ATTENTION_STARTS)))


def prefill_row_work(curve: MqaLogitsCurve, batch, queries, prefix):
    """(padded pairs, longest row's keys) of a prefill scores row (arrays or numbers): ``batch`` requests of
    ``queries`` prompt tokens after ``prefix`` cached ones, on ``curve``'s key tile (``MqaLogitsCurve.pairs``)."""
    return batch * curve.pairs(queries, prefix), prefix + queries


def _mqa_curve(u: np.ndarray) -> MqaLogitsCurve:
    """The ``MqaLogitsCurve`` of log parameters ``u`` (shares of the peak at most 1)."""
    e = np.exp(u)
    return MqaLogitsCurve(e[0], min(1.0, e[1]), e[2], min(1.0, e[3]))


def fit_prefill_scores(rows_by_gpu: Sequence[tuple[GpuSpec, list]]) -> MqaLogitsCurve:
    """The "prefill scores" curve fitted to ``[(gpu, rows)]`` (``demos.zoo.measured_index.PrefillScoreRow``)."""
    rows = [(g, r) for g, rs in rows_by_gpu for r in rs]
    if len(rows) < 8:
        raise ValueError(f"need at least 8 prefill index score rows to fit 4 parameters, got {len(rows)}")
    batch, queries, prefix, peak, sms, t = (
        np.array(c, dtype=float)
        for c in zip(*((r.batch, r.queries, r.prefix, g.flops("fp8"), g.sm_count, r.seconds) for g, r in rows))
    )
    per_pair = 2.0 * PREFILL_HEADS * SCORE_DIM
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        c = _mqa_curve(u)
        pairs, longest = prefill_row_work(c, batch, queries, prefix)
        return np.log(c.seconds(pairs, longest, per_pair, peak, sms)) - logt

    return rounded(_mqa_curve(fit_log(residuals, ((4e-6, 0.5, 256.0, 0.3), (3e-6, 0.3, 128.0, 0.1)))))


def _topk_curve(u: np.ndarray, kernel: str, scores: str) -> TopkCurve:
    """The ``TopkCurve`` of log parameters ``u``: latency and per entry; the tie ranking at flat scores and
    the second path of the "csa" kernel."""
    e = np.exp(u)
    tie = kernel == "csa" and scores == "flat"
    large = (CSA_SMALL_MAX, *e[2 + tie : 4 + tie]) if kernel == "csa" else (0.0, 0.0, 0.0)
    return TopkCurve(e[0], e[1], e[2] if tie else 0.0, *large)


def fit_topk(rows_by_gpu: Sequence[tuple[GpuSpec, list]], kernel: str, scores: str) -> TopkCurve:
    """The top-k curve of ``kernel`` ("csa", "dsa") at ``scores`` (``INDEX_SCORES``) fitted to ``[(gpu, rows)]``
    (``demos.zoo.measured_index.TopkRow``; other kernels' and distributions' rows, and those with nothing
    to select, left out)."""
    ratio, flat = topk_ratio(kernel), scores == "flat"
    picked = []
    for g, rs in rows_by_gpu:
        for r in rs:
            if r.kernel == kernel and r.scores == scores:
                topk, entries = row_topk(r.model), index_entries(r.context, ratio)
                if entries > topk:
                    picked.append((r.batch, entries, topk, g.sm_count, r.seconds))
    start = [3e-6, 1e-10] + ([8e-11] if kernel == "csa" and flat else []) + ([5e-6, 2e-11] if kernel == "csa" else [])
    if len(picked) < 2 * len(start):
        raise ValueError(f"need at least {2 * len(start)} {kernel} top-k {scores} rows, got {len(picked)}")
    batch, entries, topk, sms, t = (np.array(c, dtype=float) for c in zip(*picked))
    ties = entries if flat else 0.0
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(_topk_curve(u, kernel, scores).seconds(batch, entries, topk, sms, ties)) - logt

    starts = (tuple(start), tuple(3 * v for v in start), tuple(v / 3 for v in start))
    curve = _topk_curve(fit_log(residuals, starts), kernel, scores)
    return replace(rounded(curve), small_max=curve.small_max)  # the kernel's constant, not a figure to round


def fit_index(
    score_rows: Sequence[tuple[GpuSpec, list]],
    topk_rows: Sequence[tuple[GpuSpec, list]],
    prefill_rows: Sequence[tuple[GpuSpec, list]],
) -> dict:
    """Every ``INDEX_CURVES`` curve: "scores" from ``score_rows``, each top-k from ``topk_rows``, "prefill
    scores" from ``prefill_rows``."""
    out: dict = {"scores": fit_scores(score_rows)}
    for kernel in ("csa", "dsa"):
        for scores in INDEX_SCORES:
            out[f"{kernel} topk {scores}"] = fit_topk(topk_rows, kernel, scores)
    out["prefill scores"] = fit_prefill_scores(prefill_rows)
    return out
