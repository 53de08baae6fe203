"""Fitting a Gated DeltaNet layer's kernel curves (``demos.zoo.rooflines.FamilyFit.gdn``) to SGLang's
measured ``gdn_perf`` rows: ``fit_gdn`` per ``GDN_CURVES`` key, each row's work counted by the predictor's
formulas (``gdn_row_work``: ``demos.zoo.work.delta_rule_work``, ``conv_work``, ``delta_rule_chunks``).

A Kimi Delta Attention layer's curves (``FamilyFit.kda``) are fitted the same way to SGLang's ``kda_perf``
rows (``demos.zoo.measured.kda_rows``: ``GdnRow``s of as many key heads as value heads, of 128): its
recurrent state per head is ``dk x dv`` as a Gated DeltaNet head's, so ``gdn_row_work`` counts the same
data movement; the flops its per-channel decay adds (a decay per key channel, not one per head) are left
to the fitted ceiling.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from demos.fits.solver import ATTENTION_STARTS, attention_curve, columns, fit_log, rounded
from demos.vocabulary import Phase
from demos.zoo.hardware import GpuSpec
from demos.zoo.rooflines import AttentionCurve, ChunkedCurve, SmBoundCurve
from demos.zoo.work import conv_work, delta_rule_chunks, delta_rule_work

__all__ = ["GDN_FIELDS", "fit_gdn", "gdn_row_work"]


def gdn_row_work(kernel: str, phase: str, batch, seq_len, key_heads, key_dim, value_heads, value_dim, conv_kernel):
    """(flops, bytes) of a Gated DeltaNet kernel row (arrays or numbers) as the predictor counts it: decode,
    ``batch`` requests of one token; prefill, ``batch`` requests of ``seq_len`` prompt tokens; the delta rule
    by ``demos.zoo.work.delta_rule_work``, the convolution over the query, key and value channels by
    ``conv_work``."""
    tokens = batch if phase == Phase.DECODE else batch * seq_len
    if kernel == "conv":
        return conv_work(phase, tokens, seq_len, 2 * key_heads * key_dim + value_heads * value_dim, conv_kernel)
    return delta_rule_work(phase, tokens, seq_len, value_heads, key_dim, value_dim, key_heads=key_heads)


GDN_FIELDS = ("batch", "seq_len", "key_heads", "key_dim", "value_heads", "value_dim", "conv_kernel")
"""The ``GdnRow`` fields ``gdn_row_work`` reads, in its order."""


_CHUNKED_STARTS = ((0.1, 0.5, 2e-5, 5e-6), (0.05, 0.2, 2e-5, 1e-5), (0.3, 0.5, 1e-5, 2e-6))


def _chunked_curve(u: np.ndarray) -> ChunkedCurve:
    e = np.exp(u)
    return ChunkedCurve(min(1.0, e[0]), min(1.0, e[1]), e[2], e[3])


_SM_STARTS = ((0.5, 1.5e10, 3e-6), (0.1, 3e10, 1e-5), (1.0, 5e9, 2e-6))


def _sm_curve(u: np.ndarray) -> SmBoundCurve:
    e = np.exp(u)
    return SmBoundCurve(min(1.0, e[0]), e[1], e[2])


def fit_gdn(rows_by_gpu: Sequence[tuple[GpuSpec, list]], curve: str) -> AttentionCurve | ChunkedCurve | SmBoundCurve:
    """The Gated DeltaNet (or, given ``kda_rows``, Kimi Delta Attention) curve ``curve`` (a ``GDN_CURVES``
    key: "<kernel> <phase>") fitted to ``[(gpu, rows)]`` (``demos.zoo.measured.GdnRow``; the rows of other
    kernels and phases left out): an ``AttentionCurve`` for the delta rule, and for its prefill a
    ``ChunkedCurve`` over each row's chain of chunks (``demos.zoo.work.delta_rule_chunks``: a prompt's
    chunks, one after another); an ``SmBoundCurve`` for the causal convolution (its bytes at a rate per SM:
    the tables time it the same on H100 and H200, whose HBM differs)."""
    kernel, phase = curve.split()
    picked = [(g, "bfloat16", [r for r in rows if r.phase == phase and r.kernel == kernel]) for g, rows in rows_by_gpu]
    data, peak, hbm, t = columns(picked, GDN_FIELDS)
    if len(t) < 4:
        raise ValueError(f"need at least 4 {curve} rows to fit 4 parameters, got {len(t)}")
    flops, nbytes = gdn_row_work(kernel, phase, *(data[f] for f in GDN_FIELDS))
    logt = np.log(t)
    if curve == "delta_rule prefill":
        chunks = delta_rule_chunks(phase, data["batch"] * data["seq_len"], data["seq_len"])
        return rounded(
            _chunked_curve(
                fit_log(
                    lambda u: np.log(_chunked_curve(u).seconds(flops, nbytes, peak, hbm, chunks)) - logt,
                    _CHUNKED_STARTS,
                )
            )
        )

    if kernel == "conv":
        sms = data["sms"]
        return rounded(
            _sm_curve(fit_log(lambda u: np.log(_sm_curve(u).seconds(flops, nbytes, peak, sms)) - logt, _SM_STARTS))
        )

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(attention_curve(u).seconds(flops, nbytes, peak, hbm)) - logt

    return rounded(attention_curve(fit_log(residuals, ATTENTION_STARTS)))
