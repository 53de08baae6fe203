"""The sparse-attention indexer's fitted kernel curves (``FamilyFit.index``; docs/kernels.md): the decode
top-k (``TopkCurve``) and the prefill scores (``MqaLogitsCurve``), with the keys they are stored under.

A top-k selects nothing where a row's entries are at most the top-k (every entry is picked), else runs one
thread block per row (``waves`` of the GPU's SMs), each its fixed time, ``per_entry`` per entry it
histograms and ``per_tie`` per squared tie it ranks (a threshold bin of equal scores, at most ``TIE_CAP``:
every entry when all scores are equal); a row of more than ``small_max`` entries takes the kernel's other
path (``large_fixed`` more, ``large_per_entry`` per entry). One top-k curve per kernel (DeepSeek-V4's
``topk_transform_v2``, "csa"; the DSA models' ``fast_topk_transform_fused``, "dsa") and score distribution
(``INDEX_SCORES``)."""

from __future__ import annotations

from dataclasses import dataclass

from demos.zoo.elementwise import ceil_ as _ceil
from demos.zoo.elementwise import max_ as _max
from demos.zoo.elementwise import min_ as _min
from demos.zoo.elementwise import where_ as _where

__all__ = ["INDEX_CURVES", "INDEX_SCORES", "TIE_CAP", "MqaLogitsCurve", "TopkCurve"]

INDEX_SCORES = ("top_last", "flat")
"""The score distributions the top-k tables were measured at (their ``score_mode``): "top_last", distinct
scores (the top ones last), what a served model's indexer gives and what the predictor charges; "flat",
every score equal, what a harness of dummy weights gives (the whole decode modules were measured so:
``demos.zoo.attention_module``), where SGLang's V4 kernel ranks a bin of ties one by one."""

INDEX_CURVES = ("scores", *(f"{k} topk {s}" for k in ("csa", "dsa") for s in INDEX_SCORES), "prefill scores")
"""The keys of ``FamilyFit.index``: the decode scores, the top-k of each kernel ("csa": DeepSeek-V4's, "dsa":
DeepSeek-V3.2's and GLM-5's) at each score distribution, and the prefill scores (DeepGEMM's ``fp8_mqa_logits``,
a ``MqaLogitsCurve``)."""

TIE_CAP = 1024
"""The most tied scores the V4 top-k ranks (its tie buffer: one per thread of its 1,024-thread block)."""


@dataclass(frozen=True)
class TopkCurve:
    """A top-k selection kernel's time (module docstring): ``latency`` the fixed time of the kernel as a
    harness times it alone; per wave of rows ``per_entry`` seconds per entry and ``per_tie`` per squared tie;
    beyond ``small_max`` entries a row (0: no other path) ``large_fixed`` more and ``large_per_entry`` per
    entry instead."""

    latency: float
    per_entry: float
    per_tie: float = 0.0
    small_max: float = 0.0
    large_fixed: float = 0.0
    large_per_entry: float = 0.0

    def seconds(self, rows, entries, topk, sms: int, ties=0.0):
        """Seconds of the top-``topk`` of ``rows`` rows of ``entries`` scores each on a GPU of ``sms`` SMs,
        ``ties`` of them equal (at most ``TIE_CAP`` count); 0 where ``entries <= topk``."""
        waves = _ceil(rows / sms)
        tied = _min(ties, TIE_CAP)
        t = self.latency + waves * (self.per_entry * entries + self.per_tie * tied * tied)
        if self.small_max:
            t = _where(
                entries <= self.small_max, t, self.latency + self.large_fixed + waves * self.large_per_entry * entries
            )
        return _where(entries <= topk, 0.0, t)


@dataclass(frozen=True)
class MqaLogitsCurve:
    """A prefill indexer's scores (DeepGEMM's ``fp8_mqa_logits``: every prompt token's query against the keys
    of its causal prefix, ragged over the requests): each query row is computed in key tiles, so a row
    costs at least ``min_keys`` keys; the padded pairs run at ``ceiling`` of the FP8 peak, and the longest
    row, which one SM computes alone, at ``row_share`` of one SM's share of the peak (``peak / sms``);
    ``latency`` the kernel's fixed time as a harness times it alone."""

    latency: float
    ceiling: float
    min_keys: float
    row_share: float

    def pairs(self, queries, prefix):
        """Padded query-key pairs of a request of ``queries`` prompt tokens after ``prefix`` cached ones:
        the query at position ``i`` (1-based) reads ``prefix + i`` keys, at least ``min_keys``."""
        k = self.min_keys
        short = _max(0.0, _min(queries, k - prefix - 1.0))  # rows padded up to min_keys
        full = queries - short
        return short * k + full * prefix + (queries * (queries + 1.0) - short * (short + 1.0)) / 2.0

    def seconds(self, pairs, longest, flops_per_pair: float, peak: float, sms: int):
        """Seconds of ``pairs`` padded pairs (``pairs``, summed over the requests) whose longest row reads
        ``longest`` keys, ``flops_per_pair`` each (``2 x heads x head_dim``), on a GPU of ``peak`` FP8 FLOP/s
        and ``sms`` SMs."""
        whole = pairs * flops_per_pair / (peak * self.ceiling)
        row = longest * flops_per_pair * sms / (peak * self.row_share)
        return self.latency + _max(whole, row)
