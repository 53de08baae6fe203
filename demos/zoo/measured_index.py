"""The measured tables of a lightning indexer's decode kernels (the ``measured`` extra), read as
``demos.zoo.measured`` reads the others (its own module only for length): SGLang 0.5.14's kernel-level
collection beside its whole DeepSeek-V4 and DSA decode modules.

* ``index_score_rows(gpu)``: DeepGEMM's ``fp8_paged_mqa_logits`` (``dsv4_paged_mqa_logits_module_perf``,
  DeepSeek-V4-Flash's indexer: 64 heads of 128, FP8 keys) at one query per request (``isl`` 1: decode),
  ``batch`` requests of ``context`` cached tokens (the table's ``step``), each scoring ``(context + 1) / 4``
  compressed keys (``demos.zoo.work.index_entries``).
* ``index_topk_rows(gpu)``: the top-k over those scores, decode rows only: DeepSeek-V4's
  ``topk_transform_v2`` (``dsv4_csa_topk_calib_perf``, kernel "csa"; Flash's top 512 and Pro's top 1,024
  of ``(context + 1) / 4`` entries) and GLM-5's ``fast_topk_transform_fused`` (``glm5_topk_module_perf``,
  kernel "dsa"; top 2,048 of ``context + 1`` entries), each at the table's two score distributions
  (``demos.zoo.rooflines.INDEX_SCORES``). The V4 table's ``topk_transform_v1`` rows are left out: SGLang's
  V4 decode runs v2 (the module tables' step up at ``index_topk`` entries and down past 16,384 is v2's),
  and v2 is measured at one query per request only, so the table's ``isl`` > 1 rows are v1's.

* ``prefill_score_rows(gpu)``: DeepGEMM's ``fp8_mqa_logits`` (``glm5_mqa_logits_module_perf``, GLM-5's
  prefill indexer: 32 heads of 128, FP8 keys; the table's ``num_heads``, 64, is GLM-5's attention heads, a
  column every table of the collection carries), the rows of more than one query per request (``isl`` > 1:
  prefill): ``batch`` requests of ``queries`` prompt tokens (``isl``) after ``prefix`` cached ones
  (``step``), ragged and causal (a query at position ``i`` scores ``prefix + i`` keys).

A row's time is 0 where the entries are at most the top-k (the harness skips the kernel: every entry is
picked). A kernel source or score mode the readers do not know is an error (the upstream layout changed).
"""

from __future__ import annotations

from typing import NamedTuple

from demos.zoo.measured import MeasuredTablesError, package_version, read_table

__all__ = [
    "INDEX_TABLES",
    "IndexScoreRow",
    "PrefillScoreRow",
    "TopkRow",
    "index_score_rows",
    "index_tables",
    "index_topk_rows",
    "prefill_score_rows",
]

INDEX_TABLES = {
    "index_scores": ("sparse_attention", "sglang", "0.5.14", "dsv4_paged_mqa_logits_module_perf"),
    "csa_topk": ("sparse_attention", "sglang", "0.5.14", "dsv4_csa_topk_calib_perf"),
    "dsa_topk": ("sparse_attention", "sglang", "0.5.14", "glm5_topk_module_perf"),
    "prefill_scores": ("sparse_attention", "sglang", "0.5.14", "glm5_mqa_logits_module_perf"),
}
"""Table -> (family, framework, version, file stem), as ``demos.zoo.measured.TABLES``."""

_SCORES = {
    "csa_topk": {"v2_flat": "flat", "v2_top_last": "top_last"},
    "dsa_topk": {"flat": "flat", "top_last": "top_last"},
}
_KERNELS = {
    "csa_topk": {"topk_transform_v2": "csa", "topk_transform_v1": None},
    "dsa_topk": {"fast_topk_transform_fused": "dsa"},
}


class IndexScoreRow(NamedTuple):
    """The indexer's scores of ``batch`` decode requests of ``context`` cached tokens, ``heads`` index heads."""

    model: str
    batch: int
    heads: int
    context: int
    seconds: float


class PrefillScoreRow(NamedTuple):
    """The prefill indexer's scores of ``batch`` requests of ``queries`` prompt tokens after ``prefix``."""

    model: str
    batch: int
    queries: int
    prefix: int
    seconds: float


class TopkRow(NamedTuple):
    """The top-k of ``batch`` decode requests of ``context`` cached tokens: ``kernel`` "csa" or "dsa",
    ``scores`` the score distribution ("flat" or "top_last"), ``model`` the table's repository id."""

    kernel: str
    model: str
    scores: str
    batch: int
    context: int
    seconds: float


def index_tables() -> str:
    """The tables read here, as ``FamilyFit.source`` names tables: ``stem (framework version)``."""
    return ", ".join(f"{t[3]} ({t[1]} {t[2]})" for t in INDEX_TABLES.values())


def _frame(gpu: str, table: str):
    return read_table(gpu, table, tuple(INDEX_TABLES.items()))


def _decode(gpu: str, table: str):
    package_version()  # the extra, or MeasuredTablesError with the install hint
    d = _frame(gpu, table)
    return d[d.isl == 1]


def index_score_rows(gpu: str) -> list[IndexScoreRow]:
    """``gpu``'s decode rows of DeepGEMM's paged indexer scores (module docstring), latency in seconds."""
    d = _decode(gpu, "index_scores")
    cols = zip(d.model.tolist(), d.batch_size.tolist(), d.num_heads.tolist(), d.step.tolist(), d.latency.tolist())
    return [IndexScoreRow(m, b, h, s, ms * 1e-3) for m, b, h, s, ms in cols]


def prefill_score_rows(gpu: str) -> list[PrefillScoreRow]:
    """``gpu``'s prefill rows of DeepGEMM's ragged indexer scores (module docstring), latency in seconds."""
    package_version()
    d = _frame(gpu, "prefill_scores")
    unknown = set(d.kernel_source.unique()) - {"deep_gemm.fp8_mqa_logits"}
    if unknown:
        raise MeasuredTablesError(
            f"{INDEX_TABLES['prefill_scores'][3]} on {gpu}: unknown kernel_source {sorted(unknown)}"
        )
    d = d[d.isl > 1]
    cols = zip(d.model.tolist(), d.batch_size.tolist(), d.isl.tolist(), d.step.tolist(), d.latency.tolist())
    return [PrefillScoreRow(m, b, q, s, ms * 1e-3) for m, b, q, s, ms in cols]


def index_topk_rows(gpu: str) -> list[TopkRow]:
    """``gpu``'s decode rows of both top-k kernels at both score distributions (module docstring)."""
    out = []
    for table in ("csa_topk", "dsa_topk"):
        d = _decode(gpu, table)
        stem = INDEX_TABLES[table][3]
        unknown = set(d.kernel_source.unique()) - set(_KERNELS[table])
        if unknown:
            raise MeasuredTablesError(f"{stem} on {gpu}: unknown kernel_source {sorted(unknown)}")
        for src, kernel in _KERNELS[table].items():
            if kernel is None:
                continue
            k = d[d.kernel_source == src]
            unknown = set(k.score_mode.unique()) - set(_SCORES[table])
            if unknown:
                raise MeasuredTablesError(f"{stem} on {gpu}: unknown {src} score_mode {sorted(unknown)}")
            cols = zip(
                k.model.tolist(), k.score_mode.tolist(), k.batch_size.tolist(), k.step.tolist(), k.latency.tolist()
            )
            out += [TopkRow(kernel, m, _SCORES[table][s], b, c, ms * 1e-3) for m, s, b, c, ms in cols]
    return out
