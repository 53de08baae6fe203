"""Predicted against measured kernel times, per GPU and op family (``python -m demos.validate --kernels``).

Every row of the measured tables this project reads (``demos.zoo.measured.TABLES``) is predicted the
way the predictor times that kernel, on the curves it takes for the GPU (``gpu_fit``: the GPU's own, fitted
to these rows; ``validate kernels --family``: the family's pooled curves, B300's and GB300's rows held out
of them), and compared ("the family's curve" below is whichever of the two):

* ``gemm fp8`` / ``gemm bf16`` / ``gemm fp4``: each GEMM row on its family's fitted curve
  (``demos.zoo.kernel_times``; NVFP4 on Blackwell only, the family with FP4 tensor cores and tables);
* ``mla decode`` / ``mla prefill``: each MLA attention-core row with a BF16 cache (the engines'
  default) on its family's attention curve, its work counted as the predictor counts it
  (``demos.fits.rooflines.mla_row_work``: ``demos.zoo.work.mla_core_work``); ``mla decode fp8``: the decode
  rows with an FP8 cache on the family's curve of them (``FamilyFit.mla_decode_fp8``), ``mla decode fp8 trtllm``
  TRT-LLM's own on its curve (``FamilyFit.engine_mla_decode_fp8``);
* ``mla module``, ``dsa module`` / ``dsa module fp8`` (each also ``... no indexer``), ``dsa indexer``, ``csa
  module`` / ``hca module`` and ``msa module``: whole attention modules (TRT-LLM's MLA, SGLang's sparse MLA,
  DeepSeek-V4's and MiniMax-M3's) against the predictor's attention op (``demos.fidelity.module_kernels``);
* ``megamoe module``: SGLang's measured DeepGEMM fused MoE kernel (Kimi-K3's shapes on B200, DeepSeek-V4-Pro's
  on GB200 and GB300, balanced routing) against the predictor's ``fused_moe`` op, fitted to nothing
  (``demos.fidelity.fused_moe.megamoe_module_rows``);
* ``mhc pre`` / ``mhc post``: SGLang's DeepSeek-V4 hyper-connection kernels on the family's fitted curve
  (``FamilyFit.mhc``), their work counted as the predictor counts it (``demos.zoo.work.mhc_work``);
* ``gdn decode`` / ``gdn prefill`` and ``gdn conv decode`` / ``gdn conv prefill``: SGLang's Gated DeltaNet
  kernels (Qwen3.5's shapes, 0.8B to 397B, at several head splits), the delta rule and the causal
  convolution, each on the family's fitted curve (``FamilyFit.gdn``), their work counted as the predictor
  counts it (``demos.fits.linear.gdn_row_work``: ``demos.zoo.work.delta_rule_work``, ``conv_work``);
* ``kda decode`` / ``kda prefill`` and ``kda conv decode`` / ``kda conv prefill``: SGLang 0.5.16's Kimi Delta
  Attention kernels (Kimi-K3's shapes, 12 to 96 heads of 128), the delta rule (``chunk_kda``,
  ``fused_recurrent_kda_packed_decode``) and the causal convolution, each on the family's fitted curve
  (``FamilyFit.kda``), their work counted as a Gated DeltaNet layer's of as many key heads as value heads
  (``gdn_row_work``); the fused ``kda_fused_decode`` and the speculative ``verify`` rows are not read
  (``demos.zoo.measured.kda_rows``);
* ``index scores``, ``csa topk`` / ``csa topk flat``, ``dsa topk`` / ``dsa topk flat``: SGLang 0.5.14's
  decode indexer kernels (``demos.zoo.measured_index``): DeepGEMM's paged scores (DeepSeek-V4-Flash's
  indexer), DeepSeek-V4's ``topk_transform_v2`` and GLM-5's ``fast_topk_transform_fused`` at distinct
  ("top_last": what the predictor charges) and tied ("flat": what the module tables' harness ran) scores,
  each on the family's fitted curve (``FamilyFit.index``), the top-k rows with something to select only;
* ``index prefill scores``: SGLang 0.5.14's prefill indexer scores (DeepGEMM's ragged ``fp8_mqa_logits``,
  GLM-5's indexer: ``demos.zoo.measured_index.prefill_score_rows``) on the family's fitted
  ``MqaLogitsCurve`` (``FamilyFit.index["prefill scores"]``);
* ``experts``: DeepEP MoE's expert compute (uniform routing rows) as ``demos.zoo.costs`` folds the
  routed experts (``demos.fits.rooflines.experts_seconds``: two grouped GEMMs on the family's
  grouped curve, their weights once per active expert, the activation pass), with the table's routing:
  ``tokens x top_k / ep`` copies per rank spread over distinct experts (its "uniform" is an even
  spread, so ``min(local experts, copies)`` are active);
* ``local experts fp8`` ... ``local experts w4a8`` and ``experts vllm fp8|nvfp4|int4``: SGLang 0.5.14's local fused
  MoE kernels per expert dtype (up to 256 tokens; the family's ``local_experts`` curves are fitted to them) and
  vLLM 0.24.0's (held out), each timed as the step times a local fused MoE (``demos.fidelity.engine_experts``);
* ``gqa decode|prefill sglang|vllm|trtllm`` (and ``... fp8``): each engine's GQA kernels on the family's curve
  of them (``demos.fidelity.gqa_kernels``);
* ``dispatch`` / ``combine``: DeepEP low-latency rows (one node) against the family's single-node line
  (``FamilyFit.ll_sm``, fitted to these rows of both GPUs of the family): how the predictor times a
  low-latency kernel whose EP group is one node (``demos.zoo.costs``);
* ``all-reduce sglang|vllm|trtllm``: the engines' custom all-reduce (``demos.fidelity.engine_comm``);
* on ``h800`` (no tables): ``gemm fp8`` against DeepGEMM's published H800 rows (``demos.fits.h800``),
  the check of the Hopper curve's extrapolation to a GPU it was not fitted on.

``kernel_rows(gpu, fit)`` gives ``CheckRow``s; ``summaries`` the per (gpu, op) statistics
(``demos.fidelity.stats.error_stats``); ``cross_validation`` fits on one GPU (``demos.fits``) and predicts
the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from demos.fidelity.engine_comm import ALLREDUCE_OPS, allreduce_rows
from demos.fidelity.engine_experts import ENGINE_MOE_OPS, LOCAL_MOE_OPS, engine_experts_rows, local_experts_rows
from demos.fidelity.gqa_kernels import GQA_OPS, gqa_check_rows
from demos.fidelity.module_kernels import MODULE_OPS, module_check_rows
from demos.fidelity.stats import error_stats
from demos.fits.linear import GDN_FIELDS, gdn_row_work
from demos.fits.rooflines import experts_seconds, mla_kv_bytes, mla_row_work
from demos.vocabulary import Phase
from demos.zoo.hardware import get_gpu
from demos.zoo.models.dtypes import storage_of
from demos.zoo.overlap_costs import ll_node_seconds
from demos.zoo.rooflines import GEMM_DTYPES, GPU_FITS, MLA_KV, MLA_KV_FP8, FamilyFit, gpu_fit, linear_seconds
from demos.zoo.work import delta_rule_chunks, gemm_work, index_entries, mhc_work

__all__ = ["OPS", "CheckRow", "cross_validation", "kernel_rows", "summaries"]

OPS = (
    "gemm fp8",
    "gemm bf16",
    "gemm fp4",
    "mla decode",
    "mla prefill",
    "mla decode fp8",
    "mla decode fp8 trtllm",
    *MODULE_OPS,
    "megamoe module",
    "mhc pre",
    "mhc post",
    "gdn decode",
    "gdn prefill",
    "gdn conv decode",
    "gdn conv prefill",
    "kda decode",
    "kda prefill",
    "kda conv decode",
    "kda conv prefill",
    "index scores",
    "csa topk",
    "csa topk flat",
    "dsa topk",
    "dsa topk flat",
    "index prefill scores",
    "experts",
    *LOCAL_MOE_OPS.values(),
    *ENGINE_MOE_OPS.values(),
    *GQA_OPS.values(),
    "dispatch",
    "combine",
    *ALLREDUCE_OPS.values(),
)


_LINEAR_OPS = {
    "gdn": ("gdn decode", "gdn prefill", "gdn conv decode", "gdn conv prefill"),
    "kda": ("kda decode", "kda prefill", "kda conv decode", "kda conv prefill"),
}
"""A linear-attention kind's ops (Gated DeltaNet's, Kimi Delta Attention's): the delta rule and the
causal convolution, per phase."""

_INDEX_OPS = ("index scores", "csa topk", "csa topk flat", "dsa topk", "dsa topk flat", "index prefill scores")
"""A lightning indexer's kernels: the decode scores, each top-k at distinct and at tied scores, the prefill
scores."""


class CheckRow(NamedTuple):
    gpu: str
    op: str
    shape: str
    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict:
        return {**self._asdict(), "error": self.error}


GEMM_OPS = {"fp8": "gemm fp8", "bfloat16": "gemm bf16", "fp4": "gemm fp4"}
"""The check's op of each GEMM math dtype."""


def gemm_check_rows(gpu: str, fit: FamilyFit, ours: str, rows: Iterable) -> Iterable[CheckRow]:
    """Measured GEMM ``rows`` (``m``, ``n``, ``k``, ``seconds``) of ``gpu`` against ``fit``'s curve of math dtype
    ``ours``, each row's work that of ``storage_of(ours)`` weights."""
    g = get_gpu(gpu)
    curve, peak = fit.gemm[ours], g.flops(ours)
    for r in rows:
        flops, nbytes = gemm_work(r.m, r.n, r.k, storage_of(ours))
        pred = curve.seconds(flops, nbytes, r.m, r.n, r.k, peak, g.hbm_bandwidth, g.sm_count)
        yield CheckRow(gpu, GEMM_OPS[ours], f"m={r.m} n={r.n} k={r.k}", pred, r.seconds)


def _gemm_rows(gpu: str, fit: FamilyFit) -> Iterable[CheckRow]:
    from demos.zoo import measured

    for ours, theirs in GEMM_DTYPES.items():
        if ours in fit.gemm:  # FP4: a family without FP4 tensor cores has no curve (nor tables) of it
            yield from gemm_check_rows(gpu, fit, ours, measured.gemm_rows(gpu, theirs))


def _mla_rows(gpu: str, fit: FamilyFit) -> Iterable[CheckRow]:
    from demos.zoo import measured

    g = get_gpu(gpu)
    for phase, kv, curve, op, engine in (
        (Phase.DECODE, MLA_KV, fit.mla_decode, "mla decode", "sglang"),
        (Phase.PREFILL, MLA_KV, fit.mla_prefill, "mla prefill", "sglang"),
        (Phase.DECODE, MLA_KV_FP8, fit.mla_decode_fp8, "mla decode fp8", "sglang"),  # None in an older fit file
        (Phase.DECODE, MLA_KV_FP8, fit.engine_mla_decode_fp8.get("trtllm"), "mla decode fp8 trtllm", "trtllm"),
    ):
        for r in measured.mla_rows(gpu, phase, kv, engine) if curve is not None else ():
            flops, nbytes = mla_row_work(phase, r.batch, r.heads, r.kv_len, mla_kv_bytes(kv))
            pred = curve.seconds(flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth)
            yield CheckRow(gpu, op, f"batch={r.batch} heads={r.heads} kv={r.kv_len}", pred, r.seconds)


def _mhc_rows(gpu: str, fit: FamilyFit) -> Iterable[CheckRow]:
    from demos.zoo import measured

    g = get_gpu(gpu)
    for r in measured.mhc_rows(gpu):
        flops, nbytes = mhc_work(r.site, r.tokens, r.hidden, r.hc)
        pred = fit.mhc[r.site].seconds(flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth)
        yield CheckRow(gpu, f"mhc {r.site}", f"tokens={r.tokens} hidden={r.hidden}", pred, r.seconds)


def _linear_rows(gpu: str, fit: FamilyFit, kind: str) -> Iterable[CheckRow]:
    """``kind``'s ("gdn": Gated DeltaNet, "kda": Kimi Delta Attention) kernel rows of ``gpu`` on ``fit``'s
    curves of that kind (``FamilyFit.gdn`` / ``.kda``)."""
    from demos.zoo import measured

    g = get_gpu(gpu)
    rows, curves = (measured.gdn_rows(gpu), fit.gdn) if kind == "gdn" else (measured.kda_rows(gpu), fit.kda)
    for r in rows:
        key = f"{r.kernel} {r.phase}"
        flops, nbytes = gdn_row_work(r.kernel, r.phase, *(getattr(r, f) for f in GDN_FIELDS))
        chunks = delta_rule_chunks(r.phase, r.batch * r.seq_len, r.seq_len)
        pred = linear_seconds(curves[key], flops, nbytes, g.flops("bfloat16"), g.hbm_bandwidth, g.sm_count, chunks)
        op = f"{kind} {r.phase}" if r.kernel == "delta_rule" else f"{kind} conv {r.phase}"
        shape = f"{r.model} batch={r.batch} seq={r.seq_len} heads={r.key_heads}/{r.value_heads}"
        yield CheckRow(gpu, op, shape, pred, r.seconds)


def _index_rows(gpu: str, fit: FamilyFit) -> Iterable[CheckRow]:
    """SGLang's decode indexer kernels of ``gpu`` on ``fit``'s curves (``FamilyFit.index``): the scores, and
    each top-k's rows with something to select (the others are 0 by rule, as the curve gives)."""
    from demos.fits.index import (
        PREFILL_HEADS,
        SCORE_DIM,
        index_row_work,
        prefill_row_work,
        row_topk,
        topk_ratio,
    )
    from demos.zoo import measured_index

    g = get_gpu(gpu)
    curve = fit.index["scores"]
    for r in measured_index.index_score_rows(gpu):
        flops, nbytes = index_row_work(r.batch, r.context, r.heads)
        pred = curve.seconds(flops, nbytes, g.flops("fp8"), g.hbm_bandwidth)
        yield CheckRow(gpu, "index scores", f"batch={r.batch} heads={r.heads} kv={r.context}", pred, r.seconds)
    for r in measured_index.index_topk_rows(gpu):
        topk, entries = row_topk(r.model), index_entries(r.context, topk_ratio(r.kernel))
        if entries > topk:
            flat = r.scores == "flat"
            pred = fit.index[f"{r.kernel} topk {r.scores}"].seconds(r.batch, entries, topk, g.sm_count, entries * flat)
            op = f"{r.kernel} topk" + (" flat" if flat else "")
            yield CheckRow(gpu, op, f"{r.model} batch={r.batch} entries={entries} top={topk}", pred, r.seconds)
    prefill = fit.index.get("prefill scores")
    if prefill is not None:
        for r in measured_index.prefill_score_rows(gpu):
            pairs, longest = prefill_row_work(prefill, r.batch, r.queries, r.prefix)
            pred = prefill.seconds(pairs, longest, 2.0 * PREFILL_HEADS * SCORE_DIM, g.flops("fp8"), g.sm_count)
            shape = f"batch={r.batch} isl={r.queries} step={r.prefix}"
            yield CheckRow(gpu, "index prefill scores", shape, pred, r.seconds)


def _experts_rows(gpu: str, fit: FamilyFit) -> Iterable[CheckRow]:
    from demos.zoo import measured

    g = get_gpu(gpu)
    for r in measured.moe_rows(gpu):
        if r.distribution == "uniform":
            t = experts_seconds(fit.gemm["fp8"], fit.experts, g, r)
            yield CheckRow(gpu, "experts", f"tokens={r.tokens} ep={r.ep}", t, r.seconds)


def _alltoall_rows(gpu: str, fit: FamilyFit) -> Iterable[CheckRow]:
    from demos.zoo import measured

    g = get_gpu(gpu)
    for r in measured.alltoall_rows(gpu):
        if r.experts % r.gpus:
            continue
        shape = f"tokens={r.tokens} hidden={r.hidden} topk={r.top_k} experts={r.experts}"
        for kernel, measured_s in (("dispatch", r.dispatch_s), ("combine", r.combine_s)):
            pred = ll_node_seconds(g, kernel, r.tokens, r.hidden, r.top_k, r.gpus - 1, fit=fit)
            yield CheckRow(gpu, kernel, shape, pred, measured_s)


def _h800_rows(fit: FamilyFit) -> Iterable[CheckRow]:
    from demos.fits.h800 import DEEPGEMM_H800

    g = get_gpu("h800")
    for r in DEEPGEMM_H800:
        pred = fit.gemm["fp8"].seconds(r.flops, r.nbytes(), r.m, r.n, r.k, g.flops("fp8"), g.hbm_bandwidth, g.sm_count)
        yield CheckRow("h800", "gemm fp8", f"{r.layout} groups={r.groups} m={r.m} n={r.n} k={r.k}", pred, r.seconds)


def kernel_rows(gpu: str, fit: FamilyFit | None = None, ops: Iterable[str] = OPS) -> list[CheckRow]:
    """Predicted against measured rows of ``gpu`` for ``ops``, on ``fit`` (default: the predictor's, ``gpu_fit``)."""
    fit = fit or gpu_fit(get_gpu(gpu))
    ops = set(ops)
    if gpu == "h800":
        return list(_h800_rows(fit)) if "gemm fp8" in ops else []
    out: list[CheckRow] = []
    if ops & {"gemm fp8", "gemm bf16", "gemm fp4"}:
        out += [r for r in _gemm_rows(gpu, fit) if r.op in ops]
    if ops & {"mla decode", "mla prefill", "mla decode fp8", "mla decode fp8 trtllm"}:
        out += [r for r in _mla_rows(gpu, fit) if r.op in ops]
    if ops & set(MODULE_OPS):
        out += [CheckRow(gpu, *row) for row in module_check_rows(gpu, fit, ops)]
    if "megamoe module" in ops:
        from demos.fidelity.fused_moe import megamoe_module_rows

        out += [CheckRow(gpu, "megamoe module", *row) for row in megamoe_module_rows(gpu, fit)]
    if ops & {"mhc pre", "mhc post"} and fit.mhc:
        out += [r for r in _mhc_rows(gpu, fit) if r.op in ops]
    for kind, curves in (("gdn", fit.gdn), ("kda", fit.kda)):
        if ops & set(_LINEAR_OPS[kind]) and curves:
            out += [r for r in _linear_rows(gpu, fit, kind) if r.op in ops]
    if ops & set(_INDEX_OPS) and fit.index:
        out += [r for r in _index_rows(gpu, fit) if r.op in ops]
    if "experts" in ops:
        out += list(_experts_rows(gpu, fit))
    checks = (LOCAL_MOE_OPS, local_experts_rows), (ENGINE_MOE_OPS, engine_experts_rows), (GQA_OPS, gqa_check_rows)
    for names, rows_of in checks:
        if ops & set(names.values()):
            out += [CheckRow(gpu, *row) for row in rows_of(gpu, fit) if row[0] in ops]
    if ops & {"dispatch", "combine"}:
        out += [r for r in _alltoall_rows(gpu, fit) if r.op in ops]
    if ops & set(ALLREDUCE_OPS.values()):
        out += [CheckRow(gpu, *row) for row in allreduce_rows(gpu, fit, ops)]
    return out


def summaries(rows: Iterable[CheckRow]) -> list[dict]:
    """Per (gpu, op), in order of appearance: ``{"gpu", "op", "rows", "median_error", "median_abs_error",
    "max_error", "worst"}`` (``demos.fidelity.stats.error_stats``; ``worst``: the worst row)."""
    groups: dict[tuple[str, str], list[CheckRow]] = {}
    for r in rows:
        groups.setdefault((r.gpu, r.op), []).append(r)
    out = []
    for (gpu, op), rs in groups.items():
        stats, worst = error_stats(rs)
        out.append({"gpu": gpu, "op": op, **stats, "worst": worst.to_dict()})
    return out


def cross_validation() -> list[str]:
    """Each GPU's own curves (``GPU_FITS``: fitted on its tables alone) predicting every GPU with tables: one
    line per (fitted on, predicted) pair and op family (GEMMs, MLA cores and module)."""
    lines = []
    for source, fit in GPU_FITS.items():
        for target in GPU_FITS:
            rows = kernel_rows(target, fit, ("gemm fp8", "gemm bf16", "mla decode", "mla prefill", "mla module"))
            for s in summaries(rows):
                lines.append(
                    f"fit {source:5} -> {target:5} {s['op']:11} median |err| {s['median_abs_error']:6.1%}  "
                    f"median {s['median_error']:+6.1%}  max {s['max_error']:+7.1%}  ({s['rows']} rows)"
                )
    return lines
