"""Fitting the kernel-time curves of ``demos.zoo.rooflines`` to measured kernel rows.

Each fit (``fit_log``) minimizes the sum over rows of ``|log(predicted / measured)|`` (every row weighs
the same whatever its size): the least-absolute fit puts the median row on the curve, which is what the
checks report, where a least-squares fit lets the tables' heavy tails (tile and wave jumps, shapes no
engine runs) pull it off the bulk of the rows. It is found by a deterministic Nelder-Mead in log
coordinates, least squares from fixed starts and then least absolute error from there (numpy only: the
same rows give the same figures on the same machine; another processor's vector units may move a figure
in its last digits, which is why ``demos.fits.compare`` compares fits within a tolerance). Rows come as
``demos.zoo.measured`` tuples with the GPU (``GpuSpec``) they ran on, so one family's curve can be fitted
on several GPUs at once, each row against its own GPU's datasheet peak and bandwidth.

Nothing here counts work or evaluates a curve by a formula of its own: a row's work is counted by the
predictor's formulas (``demos.zoo.work``: ``gemm_work`` for a GEMM row, ``mla_core_work`` for an MLA
attention-core row, ``delta_rule_work`` and ``conv_work`` for a Gated DeltaNet row, ``pass_work`` for the experts'
activation pass; ``demos.zoo.hardware.ll_bytes`` for a single-node DeepEP low-latency row) and each
candidate curve is evaluated by the curve's own method (``GemmCurve.seconds_of``, ``AttentionCurve.seconds``),
which take the rows as numpy arrays. Fitted:

* ``fit_gemm``: a ``GemmCurve`` per dtype to the GEMM tables;
* ``fit_attention``: an MLA ``AttentionCurve`` per phase to the attention-core tables (BF16 cache);
* ``fit_gdn`` (``demos.fits.linear``): a Gated DeltaNet layer's curve per kernel and phase (``GDN_CURVES``:
  the delta rule, decode's fused recurrent kernel and prefill's chunked one, a ``ChunkedCurve``; the
  causal convolution) to SGLang's kernel rows, and a Kimi Delta Attention layer's (``FamilyFit.kda``) the
  same way to its rows (``kda_perf``; ``demos.zoo.measured.kda_rows``);
* ``fit_mhc`` (``demos.fits.mhc``): a wide residual's ``AttentionCurve`` per kernel (``MHC_SITES``: DeepSeek-V4's
  hyper-connection pre and post) to SGLang's kernel rows, each row's work by ``demos.zoo.work.mhc_work``;
* ``fit_index`` (``demos.fits.index``): a lightning indexer's kernels (``FamilyFit.index``): its decode
  scores' ``AttentionCurve``, a ``TopkCurve`` per top-k kernel and score distribution, and its prefill
  scores' ``MqaLogitsCurve``, to SGLang's kernel-level tables (``demos.zoo.measured_index``);
* ``fit_experts``: the routed experts' ``GroupedCurve`` (their grouped GEMMs' share of bandwidth and the
  op's fixed time) to the uniform MoE rows, the FP8 GEMM curve held (``experts_seconds``);
* ``fit_ll_sm``: a ``LinearCost`` per DeepEP low-latency kernel to the single-node rows (a weighted
  least-squares line, each row's residual relative to its time, closed form).

``fit_family`` fits every curve of a family; the MLA decode module's fixed time is fitted on top of these
curves by ``demos.fits.module``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from demos.fits.linear import fit_gdn
from demos.fits.mhc import fit_mhc
from demos.fits.solver import ATTENTION_STARTS, attention_curve, columns, fit_log, minimize, nelder_mead, rounded
from demos.vocabulary import Phase
from demos.zoo.hardware import GpuSpec, get_gpu, ll_bytes
from demos.zoo.kernel_times import storage_curve
from demos.zoo.models.dtypes import dtype, storage_of
from demos.zoo.rooflines import (
    FIT_GPUS,
    GDN_CURVES,
    GEMM_DTYPES,
    MHC_SITES,
    MLA_KV,
    MLA_KV_FP8,
    AttentionCurve,
    FamilyFit,
    GemmCurve,
    GemmShape,
    GroupedCurve,
    LinearCost,
)
from demos.zoo.work import (
    causal_pairs,
    decode_pairs,
    gemm_work,
    mla_core_work,
    pass_work,
    table_experts,
)

__all__ = [
    "GEMM_COARSE_STRIDE",
    "MLA_DIMS",
    "PHASES",
    "experts_seconds",
    "fit_attention",
    "fit_experts",
    "fit_family",
    "fit_gemm",
    "fit_ll_sm",
    "ll_line",
    "fit_log",
    "minimize",
    "mla_kv_bytes",
    "mla_row_work",
    "nelder_mead",
]

MLA_DIMS = {"latent": 512, "rope": 64, "nope": 128, "v": 128}
"""DeepSeek-V3's MLA dimensions, the shape every measured MLA table was taken at."""

PHASES = tuple(Phase)


GEMM_COARSE_STRIDE = 8
"""The GEMM fit's least-squares stage runs on every 8th row in the tables' order (on the stored tables that
subsample holds every m, n, k and GPU the rows hold; each row keeps its own GPU): that stage only picks
the basin, and the least-absolute polish on every row sets the figures (``fit_log``). It cut the fit from
about 47 s to about 20 s per family; its curves are within 0.014% of the all-rows stage's on the check's
grid (docs/kernels.md)."""

_GEMM_STARTS = (
    (0.9, 64, 256, 256, 0.9, 3e-6, 0.5),
    (0.9, 8, 1000, 300, 0.8, 4e-6, 0.2),
    (0.75, 10, 100, 80, 0.45, 3e-6, 0.03),
)


def _gemm_curve(u: np.ndarray) -> GemmCurve:
    e = np.exp(u)
    return GemmCurve(min(1.0, e[0]), e[1], e[2], e[3], min(1.0, e[4]), e[5], e[6])


def fit_gemm(rows_by_gpu: Sequence[tuple[GpuSpec, list]], math: str) -> GemmCurve:
    """The ``GemmCurve`` of the ``math`` dtype ("fp8", "bfloat16") fitted to ``[(gpu, rows)]``
    (``demos.zoo.measured.GemmRow``), each row's work that of ``storage_of(math)`` weights."""
    data, peak, hbm, t = columns([(g, math, rows) for g, rows in rows_by_gpu], ("m", "n", "k"))
    if len(t) < 7:
        raise ValueError(f"need at least 7 rows to fit 7 parameters, got {len(t)}")
    m, n, k, sms = data["m"], data["n"], data["k"], data["sms"]
    flops, nbytes = gemm_work(m, n, k, storage_of(math))

    def residuals_of(rows: slice) -> Callable[[np.ndarray], np.ndarray]:
        shape = GemmShape.of(flops[rows], nbytes[rows], m[rows], n[rows], k[rows])  # once for every candidate
        p, h, s, logt = peak[rows], hbm[rows], sms[rows], np.log(t[rows])
        return lambda u: np.log(_gemm_curve(u).seconds_of(shape, p, h, s)) - logt

    coarse = residuals_of(slice(None, None, GEMM_COARSE_STRIDE)) if len(t) >= 7 * GEMM_COARSE_STRIDE else None
    return rounded(_gemm_curve(fit_log(residuals_of(slice(None)), _GEMM_STARTS, coarse)))


def mla_kv_bytes(kv: str) -> int:
    """Bytes a value of an MLA table's ``kv_cache_dtype`` ``kv`` (``MLA_KV``, or ``MLA_KV_FP8``: E4M3)."""
    return dtype("fp8_e4m3" if kv == MLA_KV_FP8 else kv).bytes


def mla_row_work(phase: str, batch, heads, kv_len, kv_bytes):
    """(flops, bytes) of an MLA attention-core row (arrays or numbers) as the predictor counts it
    (``demos.zoo.work.mla_core_work`` at ``MLA_DIMS``): decode, ``batch`` tokens of ``kv_len`` cached
    tokens each; prefill, ``batch`` requests of ``kv_len`` prompt tokens, causal within each."""
    if phase == Phase.DECODE:
        tokens, pairs = batch, decode_pairs(batch, kv_len)
    else:
        tokens = batch * kv_len
        pairs = causal_pairs(tokens, kv_len)
    d = MLA_DIMS
    return mla_core_work(
        phase, tokens, heads, pairs, latent=d["latent"], rope=d["rope"], nope=d["nope"], v=d["v"], kv_bytes=kv_bytes
    )


def fit_attention(rows_by_gpu: Sequence[tuple[GpuSpec, list]], phase: str, kv: str = MLA_KV) -> AttentionCurve:
    """The MLA ``AttentionCurve`` of ``phase`` fitted to ``[(gpu, rows)]`` (``demos.zoo.measured.MlaRow``
    with a ``kv`` cache: ``MLA_KV``, or ``MLA_KV_FP8`` for ``FamilyFit.mla_decode_fp8``), each row's bytes
    its cache's."""
    kinds = {r.kv_dtype for _, rows in rows_by_gpu for r in rows}
    if kinds - {kv}:
        raise ValueError(f"this attention curve is fitted to {kv} caches, got {sorted(kinds)}")
    data, peak, hbm, t = columns([(g, "bfloat16", rows) for g, rows in rows_by_gpu], ("batch", "heads", "kv_len"))
    flops, nbytes = mla_row_work(phase, data["batch"], data["heads"], data["kv_len"], mla_kv_bytes(kv))
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        return np.log(attention_curve(u).seconds(flops, nbytes, peak, hbm)) - logt

    return rounded(attention_curve(fit_log(residuals, ATTENTION_STARTS)))


_EXPERTS_STORAGE = storage_of("fp8")  # the MoE tables' grouped GEMMs: FP8 block weights

LOCAL_MIN_ROWS = 200
"""The fewest rows of one expert dtype, on every GPU of a family, its local fused MoE curve is fitted to."""

ENGINE_LOCAL_MIN_ROWS = 12
"""The same for an engine's own local kernel (``engine_local_experts``): TRT-LLM's table times its W4A16 MXFP4
kernel at MoE TP 1 only, 14 rows on H100 and 28 on H200 up to 256 tokens."""


def _experts_parts(
    gemm: GemmCurve, g: GpuSpec, r, storage: str = _EXPERTS_STORAGE
) -> tuple[float, list[tuple[float, float]]]:
    """(the activation pass's seconds, [(math seconds, bytes)] of the two grouped GEMMs) of MoE row ``r``,
    its experts stored as ``storage`` (their math on ``gemm``, at the GPU's rate of that storage's math): its
    active experts and token copies as the tables route them (``demos.zoo.work.table_experts``), each active
    expert with ``copies / active`` rows."""
    active, copies = table_experts(r.experts, r.ep, r.tokens, r.top_k)
    per, peak, hbm = copies / active, g.flops(dtype(storage).math), g.hbm_bandwidth
    _, act_bytes = pass_work(copies, r.inter, 1.5)
    act = act_bytes / (hbm * gemm.mem_efficiency)
    gemms = []
    for n, k in ((2 * r.inter, r.hidden), (r.hidden, r.inter)):
        flops, nbytes = gemm_work(copies, n, k, storage, weights=active)
        math_s, _ = gemm.parts(flops, nbytes, per, n, k, peak, hbm, g.sm_count)  # groups: active
        gemms.append((math_s, nbytes))
    return act, gemms


def experts_seconds(gemm: GemmCurve, grouped: GroupedCurve, g: GpuSpec, r, storage: str = _EXPERTS_STORAGE) -> float:
    """Seconds of the routed experts of a measured MoE row ``r`` (``demos.zoo.measured.MoeRow``, uniform
    routing, or an ``EngineMoeRow``) on ``g``, counted as ``demos.zoo.costs`` counts them: two grouped GEMMs
    (``demos.zoo.rooflines``, "The routed experts": the math on ``gemm``, the curve of the experts'
    ``storage``'s math, the bytes at the grouped share of bandwidth) and the activation pass (1.5 BF16
    read-and-write passes over the up GEMM's output at ``gemm``'s bandwidth), plus ``grouped.latency``, the
    op's fixed time as the table's harness timed it alone."""
    act, gemms = _experts_parts(gemm, g, r, storage)
    bw = g.hbm_bandwidth * grouped.mem_efficiency
    return grouped.latency + act + sum(max(m, b / bw) for m, b in gemms)


def fit_experts(
    rows_by_gpu: Sequence[tuple[GpuSpec, list]], gemm: GemmCurve, storage: str = _EXPERTS_STORAGE
) -> GroupedCurve:
    """The ``GroupedCurve`` fitted to ``[(gpu, rows)]`` of evenly routed MoE rows of experts stored as
    ``storage``, with ``gemm`` (the curve of that storage's math) held."""
    parts = [(g.hbm_bandwidth, *_experts_parts(gemm, g, r, storage), r.seconds) for g, rs in rows_by_gpu for r in rs]
    if len(parts) < 2:
        raise ValueError(f"need at least 2 MoE rows to fit 2 parameters, got {len(parts)}")
    hbm, act, logt = (np.array([p[i] for p in parts]) for i in (0, 1, 3))
    logt = np.log(logt)
    maths = [np.array([p[2][j][0] for p in parts]) for j in (0, 1)]
    nbytes = [np.array([p[2][j][1] for p in parts]) for j in (0, 1)]

    def residuals(u: np.ndarray) -> np.ndarray:
        bw = hbm * min(1.0, math.exp(u[0]))
        pred = math.exp(u[1]) + act + sum(np.maximum(m, b / bw) for m, b in zip(maths, nbytes))
        return np.log(pred) - logt

    u = fit_log(residuals, ((0.7, 1e-5), (0.9, 3e-5)))
    return rounded(GroupedCurve(min(1.0, math.exp(u[0])), math.exp(u[1])))


def fit_ll_sm(rows: Sequence, kernel: str) -> LinearCost:
    """The line ``fixed + per_byte x ll_bytes + per_peer x (gpus - 1)`` through single-node DeepEP
    low-latency rows (``demos.zoo.measured.AllToAllRow``) of ``kernel``, residuals relative to each row's
    time; ``per_peer`` 0 when the rows hold one node size only."""
    x = [ll_bytes(kernel, r.tokens, r.hidden, r.top_k) for r in rows]
    y = [r.dispatch_s if kernel == "dispatch" else r.combine_s for r in rows]
    return ll_line(x, [r.gpus - 1 for r in rows], y)


def ll_line(nbytes: Sequence[float], peers: Sequence[float], seconds: Sequence[float]) -> LinearCost:
    """The ``LinearCost`` ``fixed + per_byte x bytes + per_peer x peers`` through the rows (each row's residual
    relative to its time, closed form); ``per_peer`` 0 when the rows hold one peer count only."""
    x, peers, y = (np.asarray(v, dtype=float) for v in (nbytes, peers, seconds))
    cols = [np.ones_like(x), x] + ([peers] if len(set(peers.tolist())) > 1 else [])
    a = np.stack(cols, axis=1) / y[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    fixed, per_byte, per_peer = (*coef.tolist(), 0.0)[:3]
    return LinearCost(float(f"{fixed:.4g}"), float(f"{per_byte:.4g}"), float(f"{per_peer:.4g}"))


def allreduce_line(rows: Sequence) -> LinearCost:
    """The ``ll_line`` through measured all-reduce rows (``demos.zoo.measured_comm.AllReduceRow``): peers are the
    group's other GPUs."""
    return ll_line([r.nbytes for r in rows], [r.gpus - 1 for r in rows], [r.seconds for r in rows])


def _engine_local_curves(specs, gemm: dict) -> dict:
    """{engine: {storage: GroupedCurve}}: each engine's own local kernel of each ``ENGINE_LOCAL_STORAGE`` storage,
    fitted as the family's ``local_experts`` are to that engine's rows (``engine_local_moe_rows``) where every GPU
    of ``specs`` has ``ENGINE_LOCAL_MIN_ROWS`` of them; fitted for a family without FP4 tensor cores only, the
    one whose MXFP4 experts take them (``FamilyFit.local_curve``)."""
    from demos.zoo import measured_moe

    out = {}
    for engine in measured_moe.ENGINE_MOE_TABLES:
        rows = {g: measured_moe.engine_local_moe_rows(g, engine) for _, g in specs}
        storages = measured_moe.ENGINE_LOCAL_STORAGE.values()
        if curves := _local_curves(specs, rows, storages, gemm, ENGINE_LOCAL_MIN_ROWS):
            out[engine] = curves
    return out


def _local_curves(specs, rows: dict, storages, gemm: dict, min_rows: int) -> dict:
    """{storage: GroupedCurve}: a local fused MoE curve for each of ``storages`` whose rows (``rows``: GPU ->
    ``EngineMoeRow``s) every GPU of ``specs`` has at least ``min_rows`` of (every GPU of the family has the dtype's
    kernel), fitted to them (``fit_experts``) with the math on the family's GEMM curve of the storage."""
    fp4 = all(spec.has_fp4 for spec, _ in specs)
    out = {}
    for storage in storages:
        mine = [(spec, [r for r in rows[g] if r.storage == storage]) for spec, g in specs]
        if all(len(rs) >= min_rows for _, rs in mine):
            out[storage] = fit_experts(mine, storage_curve(gemm, storage, fp4), storage)
    return out


def fit_family(family: str, gpus: Sequence[str] | None = None) -> FamilyFit:
    """``family``'s curves fitted to the measured tables of ``gpus`` (default ``FIT_GPUS[family]``), the
    MLA module's fixed time left at 0 (``demos.fits.module.fitted_family`` adds it); needs the
    ``measured`` extra."""
    from demos.fits.gqa import gqa_curves
    from demos.fits.index import fit_index
    from demos.zoo import measured, measured_attention, measured_comm, measured_index, measured_moe

    names = tuple(gpus or FIT_GPUS[family])
    specs = [(get_gpu(g), g) for g in names]
    gemm = {
        ours: fit_gemm([(spec, measured.gemm_rows(g, theirs)) for spec, g in specs], ours)
        for ours, theirs in GEMM_DTYPES.items()
        if ours != "fp4" or all(spec.has_fp4 for spec, _ in specs)  # FP4: only a family with FP4 tensor cores
    }
    attn = {
        phase: fit_attention([(spec, measured.mla_rows(g, phase, MLA_KV)) for spec, g in specs], phase)
        for phase in PHASES
    }
    fp8 = [(spec, measured.mla_rows(g, Phase.DECODE, MLA_KV_FP8)) for spec, g in specs]
    mla_decode_fp8 = fit_attention(fp8, Phase.DECODE, MLA_KV_FP8) if all(rows for _, rows in fp8) else None
    # TRT-LLM's own FP8-cache MLA decode kernel: on Hopper far from SGLang's (docs/kernels.md)
    trt = [(spec, measured.mla_rows(g, Phase.DECODE, MLA_KV_FP8, engine="trtllm")) for spec, g in specs]
    engine_fp8 = {"trtllm": fit_attention(trt, Phase.DECODE, MLA_KV_FP8)} if all(rows for _, rows in trt) else {}
    gqa = gqa_curves(specs)
    moe = [(spec, [r for r in measured.moe_rows(g) if r.distribution == "uniform"]) for spec, g in specs]
    experts = fit_experts(moe, gemm["fp8"])
    local_rows = {g: measured_moe.sglang_moe_rows(g) for _, g in specs}
    local_experts = _local_curves(specs, local_rows, measured_moe.LOCAL_MOE_STORAGE.values(), gemm, LOCAL_MIN_ROWS)
    engine_local = {} if all(spec.has_fp4 for spec, _ in specs) else _engine_local_curves(specs, gemm)
    gdn_rows = [(spec, measured.gdn_rows(g)) for spec, g in specs]
    gdn = {curve: fit_gdn(gdn_rows, curve) for curve in GDN_CURVES}
    kda_rows = [(spec, measured.kda_rows(g)) for spec, g in specs]
    kda = {curve: fit_gdn(kda_rows, curve) for curve in GDN_CURVES}
    mhc_rows = [(spec, measured.mhc_rows(g)) for spec, g in specs]
    mhc = {site: fit_mhc(mhc_rows, site) for site in MHC_SITES}
    index = fit_index(
        [(spec, measured_index.index_score_rows(g)) for spec, g in specs],
        [(spec, measured_index.index_topk_rows(g)) for spec, g in specs],
        [(spec, measured_index.prefill_score_rows(g)) for spec, g in specs],
    )
    builds = (*measured_comm.ALLREDUCE_TABLES, *measured_comm.ALLREDUCE_BUILDS)
    ar = {e: [r for g in names for r in measured_comm.custom_allreduce_rows(g, e)] for e in builds}
    custom_all_reduce = allreduce_line([r for e in measured_comm.ALLREDUCE_TABLES for r in ar[e]])
    engine_all_reduce = {e: allreduce_line(rows) for e, rows in ar.items() if rows}
    ll = [r for g in names for r in measured.alltoall_rows(g) if r.gpus <= get_gpu(g).gpus_per_node]
    ll_sm = {kernel: fit_ll_sm(ll, kernel) for kernel in ("dispatch", "combine")}
    tables = ", ".join(
        f"{t[3]} ({t[1]} {t[2]})"
        for k, t in measured.TABLES.items()
        if k in ("gemm", "mla_decode", "mla_prefill", "moe_decode", "deepep_ll", "gdn", "kda", "mhc")
    )
    tables += f", {measured_index.index_tables()}"
    local = measured_moe.MOE_TABLES["moe_sglang"]
    tables += f", {local[3]} ({local[1]} {local[2]}, the local fused MoE)"
    tables += ", " + ", ".join(f"{t[3]} ({t[1]} {t[2]})" for t in measured_comm.ALLREDUCE_TABLES.values())
    tables += ", " + ", ".join(f"{t[3]} ({t[1]} {t[2]}, GQA)" for t in measured_attention.GQA_TABLES.values())
    source = f"aiconfigurator-core {measured.package_version()}: {tables} on {', '.join(names)}"
    return FamilyFit(
        family,
        gemm,
        attn[Phase.DECODE],
        attn[Phase.PREFILL],
        ll_sm,
        names,
        source,
        experts,
        gdn=gdn,
        mhc=mhc,
        kda=kda,
        index=index,
        local_experts=local_experts,
        engine_local_experts=engine_local,
        custom_all_reduce=custom_all_reduce,
        engine_all_reduce=engine_all_reduce,
        mla_decode_fp8=mla_decode_fp8,
        engine_mla_decode_fp8=engine_fp8,
        gqa=gqa,
    )
