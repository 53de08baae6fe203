"""Predicted no-DBO steps against measured end-to-end steps (``python -m demos.validate silicon``).

The measured deployments are ``aiconfigurator-core``'s ``silicon_sample.csv`` (``demos.zoo.measured``):
SGLang, vLLM and TRT-LLM serving real models on H100, H200, B200 and GB200, each row one
configuration's measured TTFT and TPOT (each run once however many rows copy it:
``demos.zoo.measured_copies``). A row is predicted when the predictor can express it:

* the model is one of the zoo's presets at the row's precision, run at the weights and KV cache the row ran
  (``demos.fidelity.served``: the mapping ``validate serving`` reads too, so both checks express the same
  rows; DeepSeek-R1 at FP4 is the ``deepseek-r1`` preset with FP4 experts) and on its engine's own kernels
  where they differ (``demos.zoo.kernel_times``: TRT-LLM's FP8-cache MLA decode core);
* its GPU has a profile, and its parallelism is DP attention with expert-parallel MoE (attention DP
  = EP), attention TP with expert-parallel MoE (TP = EP, MoE TP 1) or attention TP with tensor-parallel
  MoE over the same GPUs (MoE TP = TP, EP 1: ``Workload.moe_tp``); MoE tensor parallelism beside expert or
  data parallelism is not modelled, and those rows are skipped with that reason;
* decode: disaggregated decode workers (an aggregated worker's TPOT mixes prefill chunks into its
  decode steps), with the expert slots its recipe deployed without EPLB (``SiliconRow.redundant_slots``: SGLang's
  data-parallel decode recipes on GB200 and GB300, ``Workload.redundant_slots``); the row's ``batch`` is the
  requests each attention rank is configured for (the
  concurrency over the decode workers' attention DP ranks), the context the mean over the output,
  ``isl + osl / 2``. The tokens predicted are the requests a rank decodes on average
  (``decode_tokens``): the benchmark keeps ``batch`` requests per rank in flight, and each spends its
  TTFT (queued for and in prefill) before it decodes for ``(osl - 1) x TPOT``, so by Little's law the
  decode side holds ``batch x decode time / (TTFT + decode time)`` of them. Where prefill keeps up this
  is most of ``batch``; where it does not (a TTFT longer than the decode), the decode batch is what
  prefill feeds, not what was configured. The predicted step
  is the no-DBO forward in graph mode plus the LM head; the serving loop between forwards (scheduler,
  sampling, detokenization) is part of a measured TPOT and is not modelled: each row reports the
  forward and the ``gap_s`` (measured - predicted), so it is visible, not absorbed.
* prefill: disaggregated prefill workers; ``batch`` requests of ``isl`` tokens on each attention
  rank, eager. A measured TTFT also holds queueing, the KV transfer and the first decode step, so
  these rows are reported with the same statistics, not held to the decode targets.

``silicon_rows(progress)`` returns ``(rows, skipped)``: ``SiliconCheck`` rows and ``{reason: count}``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import NamedTuple

from demos.errors import ConfigError
from demos.fidelity.served import row_kv, served_as
from demos.fidelity.stats import error_stats
from demos.vocabulary import Mode, Phase
from demos.zoo.engine_allreduce import allreduce_kernel
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import kernel_times
from demos.zoo.loading import precise_spec
from demos.zoo.measured import SYSTEMS
from demos.zoo.measured_rows import speculative_reason
from demos.zoo.models import get_preset
from demos.zoo.overlap_costs import step_profile
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

__all__ = [
    "SYSTEM_GPUS",
    "SiliconCheck",
    "decode_tokens",
    "engine_summaries",
    "format_kernels",
    "format_silicon",
    "gap_fits",
    "silicon_rows",
    "silicon_summaries",
    "worker_layout",
]

SYSTEM_GPUS = {system: gpu for gpu, system in SYSTEMS.items()}
"""A measured row's system directory -> our GPU name (``demos.zoo.measured.SYSTEMS`` backwards)."""


class SiliconCheck(NamedTuple):
    """One measured row predicted: ``tokens`` predicted per attention rank (decode: ``decode_tokens``;
    prefill: requests x prompt), ``batch`` the requests per rank the row was configured for."""

    id: str
    gpu: str
    engine: str
    phase: str
    model: str
    tokens: int
    context: int
    ep: int
    attention_tp: int
    predicted_s: float
    measured_s: float
    batch: int = 0

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict:
        return {**self._asdict(), "error": self.error, "gap_s": self.measured_s - self.predicted_s}


def worker_layout(tp: int, dp: int, ep: int, moe_tp: int) -> tuple[int, ...] | str:
    """(ep, attention_tp) of a worker, ``(tp, tp, moe_tp)`` for one whose MoE is tensor parallel over its
    attention TP group (``demos.zoo.workload.Workload.moe_tp``), or why it cannot be expressed."""
    tp, dp = max(tp, 1), max(dp, 1)
    if moe_tp not in (0, 1):
        if moe_tp == tp and dp == 1 and ep in (0, 1):
            return tp, tp, moe_tp
        return "MoE tensor parallelism beside expert or data parallelism is not modelled"
    if ep != tp * dp:
        return "EP must span the worker's GPUs (attention TP x DP)"
    if tp > 1 and dp > 1:
        return "attention TP and DP together are not modelled"
    return ep, tp


def _plan(r) -> dict | str:
    """The decode workload fields of a measured row, or why it is skipped."""
    served = served_as(r)
    if isinstance(served, str):
        return served
    gpu = SYSTEM_GPUS.get(r.system)
    if gpu is None:
        return f"no GPU profile for {r.system}"
    if why := speculative_reason(r):
        return why
    if r.mode != "disagg":
        return "aggregated worker (its TPOT mixes prefill chunks into decode steps)"
    if r.batch < 1:
        return "no decode batch size recorded"
    layout = worker_layout(r.tp, r.attention_dp, r.moe_ep, r.moe_tp)
    if isinstance(layout, str):
        return layout
    ep, tp, *moe = layout
    plan = dict(_precision(r, served, gpu), gpu=gpu, ep=ep, tp=tp, tokens=decode_tokens(r), context=r.isl + r.osl // 2)
    if r.redundant_slots:  # the decode recipe's expert slots placed without EPLB
        plan["redundant_slots"] = r.redundant_slots
    return {**plan, "moe_tp": moe[0]} if moe else plan


def decode_tokens(r) -> int:
    """The requests each attention rank of measured row ``r`` decodes on average (module docstring):
    ``batch x D / (TTFT + D)`` with ``D = (osl - 1) x TPOT``, rounded, at least 1; ``batch`` when the
    row has no TTFT or TPOT."""
    if r.tpot_s is None or r.ttft_s is None:
        return r.batch
    decode = (r.osl - 1) * r.tpot_s
    return max(1, round(r.batch * decode / (decode + r.ttft_s)))


def _prefill_plan(r) -> dict | str:
    if r.mode != "disagg" or r.prefill is None or r.ttft_s is None:
        return "no disaggregated prefill worker"
    tp, dp, ep, moe_tp, batch = r.prefill
    layout = worker_layout(tp, dp, ep, moe_tp)
    if isinstance(layout, str):
        return layout
    ep, tp, *moe = layout
    gpu = SYSTEM_GPUS[r.system]
    plan = dict(
        _precision(r, served_as(r), gpu),
        gpu=gpu,
        ep=ep,
        tp=tp,
        tokens=max(1, batch) * r.isl,
        context=r.isl,
    )
    return {**plan, "moe_tp": moe[0]} if moe else plan


def _precision(r, served: tuple[str, str | None], gpu: str) -> dict:
    """The plan's preset, weights and KV cache dtype for row ``r`` served as ``served`` on ``gpu``, its engine
    (whose own kernels a step takes where they differ: ``demos.zoo.kernel_times``) and SGLang's release (whose
    all-reduce kernel it takes: ``demos.zoo.engine_allreduce``)."""
    release = r.release if r.engine == "sglang" else None
    return dict(
        preset=served[0], weights=served[1], kv_cache_dtype=row_kv(r, served, gpu), engine=r.engine, release=release
    )


def _step_seconds(phase: str, p: dict, kernels: str = "roofline", imbalance: str = "auto") -> float:
    spec = precise_spec(get_preset(p["preset"]), weights=p.get("weights"), kv_cache_dtype=p.get("kv_cache_dtype"))
    per_node = min(p["ep"], get_gpu(p["gpu"]).gpus_per_node)
    cluster = cluster_for(p["gpu"], p["ep"] // per_node, per_node, p["ep"])
    w = Workload(
        spec,
        cluster,
        phase=phase,
        tokens=p["tokens"],
        context=p["context"],
        ubatches=1,
        imbalance=imbalance,
        attention_tp=p["tp"],
        moe_tp=p.get("moe_tp", 1),
        redundant_slots=p.get("redundant_slots", 0),
    )
    mode = Mode.GRAPH if phase == Phase.DECODE else Mode.EAGER
    profile = step_profile(w)
    engine = p.get("engine")
    times = kernel_times(kernels, w.gpu, profile, engine, allreduce_kernel(engine, p.get("release"), w))
    with ZooRun(w, mode=mode, profile=profile, kernels=times) as run:
        return run.step(False).seconds


def silicon_rows(
    progress: Callable[[int, int, str], None] | None = None, *, kernels: str = "roofline", imbalance: str = "auto"
):
    """(checks, skipped): every expressible measured row predicted (module docstring), its kernel times
    from ``kernels`` ("roofline" or "measured", ``demos.zoo.kernel_times``), its expert load from ``imbalance``
    (a routing model, ``demos.zoo.workload.IMBALANCE_MODELS``), and ``{reason: rows}`` for the rest. Needs the
    ``measured`` extra."""
    from demos.zoo.measured_copies import checked_runs

    plans, skipped = [], {}
    for r, plan in checked_runs(_plan, skipped):
        if r.tpot_s is not None:
            plans.append((r, Phase.DECODE, plan, r.tpot_s))
        pre = _prefill_plan(r)
        if isinstance(pre, str):
            skipped[f"prefill: {pre}"] = skipped.get(f"prefill: {pre}", 0) + 1
        else:
            plans.append((r, Phase.PREFILL, pre, r.ttft_s))
    cache: dict[tuple, float] = {}
    out = []
    for i, (r, phase, p, measured_s) in enumerate(plans):
        key = (phase, tuple(sorted(p.items())))
        if key not in cache:
            try:
                cache[key] = _step_seconds(phase, p, kernels, imbalance)
            except ConfigError as e:
                cache[key] = e
        got = cache[key]
        if isinstance(got, ConfigError):
            reason = f"{phase}: not expressible ({got})"
            skipped[reason] = skipped.get(reason, 0) + 1
        else:
            out.append(
                SiliconCheck(
                    r.id,
                    p["gpu"],
                    r.engine,
                    phase,
                    r.model,
                    p["tokens"],
                    p["context"],
                    p["ep"],
                    p["tp"],
                    got,
                    measured_s,
                    r.batch if phase == Phase.DECODE else max(1, r.prefill[4]),
                )
            )
        if progress is not None:
            progress(i + 1, len(plans), r.id)
    return out, skipped


def _grouped(rows: list[SiliconCheck], key: Callable[[SiliconCheck], tuple]) -> list[tuple[tuple, list[SiliconCheck]]]:
    """``rows`` grouped by ``key``, in key order, each group in the rows' order."""
    groups: dict[tuple, list[SiliconCheck]] = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    return sorted(groups.items())


def silicon_summaries(rows: list[SiliconCheck]) -> list[dict]:
    """Per (gpu, phase): rows, signed median and max error, median |error|
    (``demos.fidelity.stats.error_stats``), and the engines seen (``engine_summaries``: per engine too)."""
    out = []
    for (gpu, phase), rs in _grouped(rows, lambda r: (r.gpu, r.phase)):
        stats, _ = error_stats(rs)
        out.append({"gpu": gpu, "phase": phase, **stats, "engines": sorted({r.engine for r in rs})})
    return out


def engine_summaries(rows: list[SiliconCheck]) -> list[dict]:
    """Per (gpu, engine) of the decode rows: rows and the error statistics, as ``silicon_summaries``'s."""
    groups = _grouped([r for r in rows if r.phase == Phase.DECODE], lambda r: (r.gpu, r.engine))
    return [{"gpu": g, "engine": e, **error_stats(rs)[0]} for (g, e), rs in groups]


def gap_fits(rows: list[SiliconCheck], min_batches: int = 3) -> list[dict]:
    """The shape of the decode gap (measured - predicted): per class of rows (GPU, engine, attention TP,
    EP, context) with at least ``min_batches`` distinct predicted batches, the least-squares line
    ``gap = per_step_s + per_token_s x tokens``. A per-step term is time every step pays whatever its
    batch (kernels or host work the model does not count); a per-token term grows with the requests a
    rank decodes (docs/fidelity.md, "Real models")."""
    decode = [r for r in rows if r.phase == Phase.DECODE]
    out = []
    for (gpu, engine, tp, ep, context), rs in _grouped(
        decode, lambda r: (r.gpu, r.engine, r.attention_tp, r.ep, r.context)
    ):
        ts = [float(r.tokens) for r in rs]
        if len(set(ts)) < min_batches:
            continue
        slope, per_step = statistics.linear_regression(ts, [r.measured_s - r.predicted_s for r in rs])
        out.append(
            {
                "gpu": gpu,
                "engine": engine,
                "attention_tp": tp,
                "ep": ep,
                "context": context,
                "rows": len(rs),
                "tokens": [int(min(ts)), int(max(ts))],
                "per_step_s": per_step,
                "per_token_s": slope,
            }
        )
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def format_kernels(summaries: list[dict], family: bool = False) -> str:
    """The ``--kernels`` table: per GPU and op family, signed median and max error, median |error|, worst row;
    ``family``: the rows were predicted on each GPU's family's pooled curves, not the predictor's own."""
    op = max([12, *(len(s["op"]) for s in summaries)])  # the op column as wide as its longest name
    curves = "the fitted roofline (python -m demos.predict's default: a GPU's own curves where it has tables)"
    if family:
        curves = "each family's pooled curves (what a GPU without tables takes; B300 and GB300 held out)"
    lines = [
        f"Kernel times: {curves} against the measured tables",
        f"{'gpu':6} {'op':{op}} {'rows':>6} {'median':>8} {'|median|':>9} {'max':>8}  worst row",
    ]
    for s in summaries:
        w = s["worst"]
        lines.append(
            f"{s['gpu']:6} {s['op']:{op}} {s['rows']:6d} {_pct(s['median_error']):>8} {s['median_abs_error']:8.1%} "
            f"{_pct(s['max_error']):>8}  {w['shape']} "
            f"({w['predicted_s'] * 1e6:.1f} us vs {w['measured_s'] * 1e6:.1f} us)"
        )
    lines.append("errors: predicted / measured - 1; median: of the signed errors; |median|: of their sizes")
    return "\n".join(lines)


def format_silicon(
    summaries: list[dict], skipped: dict[str, int], gaps: list[dict] = (), engines: list[dict] = ()
) -> str:
    """The ``--silicon`` table, its decode rows per engine (``engine_summaries``), the decode gap's shape per row
    class (``gap_fits``) and the skipped rows with their reasons."""
    lines = [
        "No-DBO steps predicted against measured deployments (decode: TPOT; prefill: TTFT, reported only)",
        f"{'gpu':6} {'phase':8} {'rows':>5} {'median':>8} {'|median|':>9} {'max':>8}  engines",
    ]
    for s in summaries:
        lines.append(
            f"{s['gpu']:6} {s['phase']:8} {s['rows']:5d} {_pct(s['median_error']):>8} {s['median_abs_error']:8.1%} "
            f"{_pct(s['max_error']):>8}  {', '.join(s['engines'])}"
        )
    if engines:
        lines.append("decode per engine:")
        for s in engines:
            lines.append(
                f"  {s['gpu']:6} {s['engine']:7} {s['rows']:5d} {_pct(s['median_error']):>8} "
                f"{s['median_abs_error']:8.1%} {_pct(s['max_error']):>8}"
            )
    if gaps:
        lines.append("decode gap (measured - predicted) = per step + per token x tokens, per row class:")
        lines.append(
            f"  {'gpu':6} {'engine':7} {'attention':9} {'ep':>3} {'context':>7} {'rows':>4} {'tokens':>8}  gap"
        )
        for g in gaps:
            att = "dp" if g["attention_tp"] == 1 else f"tp {g['attention_tp']}"
            lo, hi = g["tokens"]
            lines.append(
                f"  {g['gpu']:6} {g['engine']:7} {att:9} {g['ep']:3d} {g['context']:7d} {g['rows']:4d} "
                f"{f'{lo}-{hi}':>8}  {g['per_step_s'] * 1e3:+.2f} ms {g['per_token_s'] * 1e6:+.0f} us per token"
            )
    lines.append(f"skipped {sum(skipped.values())} rows:")
    for reason, n in sorted(skipped.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {n:5d}  {reason}")
    return "\n".join(lines)
