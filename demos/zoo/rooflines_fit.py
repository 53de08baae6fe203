"""Fitting ``demos.zoo.rooflines``' curves to measured kernel rows, and scoring a curve against rows.

Each fit (``fit_log``) minimizes the sum over rows of ``|log(predicted / measured)|`` (every row weighs
the same whatever its size): the least-absolute fit puts the median row on the curve, which is what the
checks report (``error_stats``), where a least-squares fit lets the tables' heavy tails (tile and wave
jumps, shapes no engine runs) pull it off the bulk of the rows. It is found by a deterministic
Nelder-Mead in log coordinates, least squares from fixed starts and then least absolute error from
there (numpy only: the same rows give the same figures to the last bit). Rows come as ``demos.zoo.measured`` tuples with
the GPU (``GpuSpec``) they ran on, so one family's curve can be fitted on several GPUs at once, each
row against its own GPU's datasheet peak and bandwidth.

The work of a row is counted as the predictor counts it (docs/models.md, "What a step costs"):
``gemm_work`` for a GEMM row, ``mla_work`` for an MLA attention-core row (decode absorbed into the
512 + 64 latent space; prefill expanded, causal within each request), ``ll_bytes`` for a single-node
DeepEP low-latency row (``fit_ll_sm``: a weighted least-squares line, each row's residual relative to
its time, closed form), and the routed experts of a MoE row as ``experts_seconds`` counts them
(``fit_experts``: the grouped GEMMs' bandwidth share and the op's fixed time, the FP8 curve held).
The MLA decode module's fixed time is fitted on top of these curves, by the module that composes the
attention op (``demos.zoo.attention_module.fitted_family``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from demos.zoo.hardware import GpuSpec, get_gpu
from demos.zoo.hardware.alltoall import message_bytes
from demos.zoo.rooflines import OUT_TILE, ROW_TILE, AttentionCurve, FamilyFit, GemmCurve, GroupedCurve, LinearCost

__all__ = [
    "FIT_GPUS",
    "GEMM_DTYPES",
    "PHASES",
    "MLA_DIMS",
    "MLA_KV",
    "error_stats",
    "experts_seconds",
    "fit_attention",
    "fit_experts",
    "fit_family",
    "fit_gemm",
    "fit_ll_sm",
    "fit_log",
    "gemm_work",
    "ll_bytes",
    "minimize",
    "mla_work",
    "nelder_mead",
]

GEMM_DTYPES = {"fp8": "fp8_block", "bfloat16": "bfloat16"}
"""Our math dtype -> the measured table's dtype it is fitted to (FP8: DeepGEMM with 128-block scales,
what DeepSeek-style FP8 checkpoints run)."""

MLA_DIMS = {"latent": 512, "rope": 64, "nope": 128, "v": 128}
"""DeepSeek-V3's MLA dimensions, the shape every measured MLA table was taken at."""

_BYTES = {"fp8": (1.0, 1.0), "bfloat16": (2.0, 2.0)}  # (weight bytes, activation-in bytes); out is BF16
_KV = {"fp8": 1.0, "bfloat16": 2.0}
PHASES = ("decode", "prefill")
MLA_KV = "bfloat16"
"""The KV-cache dtype whose MLA rows the attention curves are fitted to: the engines' default ("auto")
for the FP8 DeepSeek checkpoints, and the zoo's presets' (an FP8 cache takes another kernel path)."""


def gemm_work(m, n, k, dtype: str):
    """(flops, bytes) of an m x n x k GEMM in our ``dtype`` (arrays or numbers): the weights once, the
    activations in and the BF16 output."""
    w, a = _BYTES[dtype]
    return 2.0 * m * n * k, n * k * w + m * k * a + m * n * 2.0


def mla_work(phase: str, batch, heads, kv_len, kv_dtype: str):
    """(flops, bytes) of MLA's attention core (module docstring): decode reads each request's cached
    latents once per kernel (``kv_len`` + 1 tokens); prefill is causal within each request."""
    lat, rope, nope, v = MLA_DIMS["latent"], MLA_DIMS["rope"], MLA_DIMS["nope"], MLA_DIMS["v"]
    kvb = _KV.get(kv_dtype, 2.0)
    if phase == "decode":
        pairs = batch * (kv_len + 1.0)
        flops = 2.0 * heads * pairs * (lat + rope) + 2.0 * heads * pairs * lat
        nbytes = batch * (kv_len + 1.0) * (lat + rope) * kvb + batch * heads * (lat + rope + lat) * 2.0
    else:
        pairs = batch * kv_len * (kv_len + 1.0) / 2.0
        tokens = batch * kv_len
        flops = 2.0 * heads * pairs * (nope + rope) + 2.0 * heads * pairs * v
        nbytes = tokens * heads * (2 * (nope + rope) + 2 * v) * 2.0 + tokens * (lat + rope) * kvb
    return flops, nbytes


def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], step: float = 0.5, iters: int = 2000):
    """A deterministic Nelder-Mead minimum of ``f`` from ``x0``: (point, value)."""
    n = len(x0)
    pts = [np.array(x0, dtype=float)] + [np.array(x0, dtype=float) + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals, kind="stable")
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-12:
            break
        c = sum(pts[:-1]) / n
        xr = 2 * c - pts[-1]
        fr = f(xr)
        if fr < vals[0]:
            xe = 3 * c - 2 * pts[-1]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = 0.5 * (c + pts[-1])
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, n + 1):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def minimize(
    loss: Callable[[np.ndarray], float],
    starts: Sequence[Sequence[float]],
    *,
    restarts: int = 6,
    iters: int = 2000,
    tol: float = 1e-9,
) -> np.ndarray:
    """The best of ``nelder_mead`` runs in log coordinates from each of ``starts``, each restarted (at most
    ``restarts`` times) until it improves by less than ``tol``."""
    best_u, best_v = None, math.inf
    for s in starts:
        u, v = np.log(np.array(s, dtype=float)), math.inf
        for _ in range(restarts):  # restart until it stops improving
            u, nv = nelder_mead(loss, u, iters=iters)
            if v - nv < tol:
                v = min(v, nv)
                break
            v = nv
        if v < best_v:
            best_u, best_v = u, v
    return best_u


def fit_log(residuals: Callable[[np.ndarray], np.ndarray], starts: Sequence[Sequence[float]]) -> np.ndarray:
    """The parameters (log coordinates) that minimize the sum of ``|residuals|`` (log errors): least
    squares from each of ``starts`` first (``minimize``), then polished to least absolute error from its
    best (module docstring)."""
    u = minimize(lambda v: float(np.sum(residuals(v) ** 2)), starts)
    return minimize(lambda v: float(np.sum(np.abs(residuals(v)))), [np.exp(u)], restarts=2)


def _columns(rows_by_gpu, fields: Sequence[str]):
    cols = {f: [] for f in (*fields, "sms")}
    peak, hbm, t = [], [], []
    for gpu, dtype_rate, rows in rows_by_gpu:
        for r in rows:
            for f in fields:
                cols[f].append(getattr(r, f))
            cols["sms"].append(gpu.sm_count)
            peak.append(gpu.flops(dtype_rate))
            hbm.append(gpu.hbm_bandwidth)
            t.append(r.seconds)
    return {f: np.array(v, dtype=float) for f, v in cols.items()}, np.array(peak), np.array(hbm), np.array(t)


_GEMM_STARTS = (
    (0.9, 64, 256, 256, 0.9, 3e-6, 0.5),
    (0.9, 8, 1000, 300, 0.8, 4e-6, 0.2),
    (0.75, 10, 100, 80, 0.45, 3e-6, 0.03),
)


def _gemm_curve(u: np.ndarray) -> GemmCurve:
    e = np.exp(u)
    return GemmCurve(min(1.0, e[0]), e[1], e[2], e[3], min(1.0, e[4]), e[5], e[6])


def fit_gemm(rows_by_gpu: Sequence[tuple[GpuSpec, list]], dtype: str) -> GemmCurve:
    """The ``GemmCurve`` of our ``dtype`` fitted to ``[(gpu, rows)]`` (``demos.zoo.measured.GemmRow``)."""
    data, peak, hbm, t = _columns([(g, dtype, rows) for g, rows in rows_by_gpu], ("m", "n", "k"))
    if len(t) < 7:
        raise ValueError(f"need at least 7 rows to fit 7 parameters, got {len(t)}")
    m, n, k, sms = data["m"], data["n"], data["k"], data["sms"]
    flops, nbytes = gemm_work(m, n, k, dtype)
    pad = m / (np.ceil(m / ROW_TILE) * ROW_TILE)
    tiles = np.ceil(m / OUT_TILE) * np.ceil(n / OUT_TILE)
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        c = _gemm_curve(u)
        eff = pad * m / (m + c.m0) * n / (n + c.n0) * k / (k + c.k0)
        occ = np.minimum(1.0, tiles / (c.mem_tiles * sms))
        pred = c.latency + np.maximum(flops / (peak * c.ceiling * eff), nbytes / (hbm * c.mem_efficiency * occ))
        return np.log(pred) - logt

    return _round(_gemm_curve(fit_log(residuals, _GEMM_STARTS)))


_ATTN_STARTS = ((0.5, 0.7, 1e-5), (0.8, 0.9, 3e-6), (0.3, 0.5, 2e-5))


def _attn_curve(u: np.ndarray) -> AttentionCurve:
    e = np.exp(u)
    return AttentionCurve(min(1.0, e[0]), min(1.0, e[1]), e[2])


def fit_attention(rows_by_gpu: Sequence[tuple[GpuSpec, list]], phase: str) -> AttentionCurve:
    """The MLA ``AttentionCurve`` of ``phase`` fitted to ``[(gpu, rows)]`` (``demos.zoo.measured.MlaRow``)."""
    data, peak, hbm, t = _columns([(g, "bfloat16", rows) for g, rows in rows_by_gpu], ("batch", "heads", "kv_len"))
    kv = np.array([r.kv_dtype for _, rows in rows_by_gpu for r in rows])
    flops, nbytes = mla_work(phase, data["batch"], data["heads"], data["kv_len"], "bfloat16")
    if phase == "decode":  # the KV bytes halve for an FP8 cache
        lat = MLA_DIMS["latent"] + MLA_DIMS["rope"]
        nbytes = nbytes - np.where(kv == "fp8", data["batch"] * (data["kv_len"] + 1.0) * lat, 0.0)
    logt = np.log(t)

    def residuals(u: np.ndarray) -> np.ndarray:
        c = _attn_curve(u)
        pred = c.latency + np.maximum(flops / (peak * c.ceiling), nbytes / (hbm * c.mem_efficiency))
        return np.log(pred) - logt

    return _round(_attn_curve(fit_log(residuals, _ATTN_STARTS)))


def _experts_parts(gemm: GemmCurve, g: GpuSpec, r) -> tuple[float, list[tuple[float, float]]]:
    """(the activation pass's seconds, [(math seconds, bytes)] of the two grouped GEMMs) of MoE row ``r``."""
    local, copies = r.experts / r.ep, r.tokens * r.top_k / r.ep
    active = max(1.0, min(local, copies))
    per, peak, hbm = copies / active, g.flops("fp8"), g.hbm_bandwidth
    act = 1.5 * 2 * 2.0 * copies * r.inter / (hbm * gemm.mem_efficiency)
    gemms = []
    for n, k in ((2 * r.inter, r.hidden), (r.hidden, r.inter)):
        nbytes = active * n * k + copies * k + copies * n * 2.0
        math_s, _ = gemm.parts(2.0 * copies * n * k, nbytes, per, n, k, peak, hbm, g.sm_count)  # groups: active
        gemms.append((math_s, nbytes))
    return act, gemms


def experts_seconds(gemm: GemmCurve, grouped: GroupedCurve, g: GpuSpec, r) -> float:
    """Seconds of the routed experts of a measured MoE row ``r`` (``demos.zoo.measured.MoeRow``, uniform
    routing) on ``g``, counted as ``demos.zoo.costs`` counts them: ``tokens x top_k / ep`` copies per
    rank spread evenly over its experts (``min(local experts, copies)`` active), two grouped GEMMs
    (``demos.zoo.rooflines``, "The routed experts") and the activation pass (1.5 BF16 read-and-write
    passes over the up GEMM's output at the FP8 curve's bandwidth), plus ``grouped.latency``."""
    act, gemms = _experts_parts(gemm, g, r)
    bw = g.hbm_bandwidth * grouped.mem_efficiency
    return grouped.latency + act + sum(max(m, b / bw) for m, b in gemms)


def fit_experts(rows_by_gpu: Sequence[tuple[GpuSpec, list]], gemm: GemmCurve) -> GroupedCurve:
    """The ``GroupedCurve`` fitted to ``[(gpu, rows)]`` of uniform MoE rows with the FP8 ``gemm`` held."""
    parts = [(g.hbm_bandwidth, *_experts_parts(gemm, g, r), r.seconds) for g, rs in rows_by_gpu for r in rs]
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
    return _round(GroupedCurve(min(1.0, math.exp(u[0])), math.exp(u[1])))


def _round(curve):
    """``curve`` with every figure rounded to 4 significant figures (what the data file stores)."""
    return type(curve)(**{k: float(f"{v:.4g}") for k, v in curve.__dict__.items()})


def error_stats(rows: Sequence) -> tuple[dict, object]:
    """``({"rows", "median_error", "median_abs_error", "max_error"}, worst row)`` of ``rows``, each with an
    ``error`` (predicted / measured - 1): the median of the signed errors, the median of their sizes, and
    the signed error of the row whose size is largest. ``rows`` must not be empty."""
    errs = sorted(r.error for r in rows)
    mid = len(errs) // 2
    median = errs[mid] if len(errs) % 2 else 0.5 * (errs[mid - 1] + errs[mid])
    worst = max(rows, key=lambda r: abs(r.error))
    sizes = sorted(abs(e) for e in errs)
    stats = {"rows": len(errs), "median_error": median, "median_abs_error": sizes[mid], "max_error": worst.error}
    return stats, worst


FIT_GPUS = {"hopper": ("h100", "h200"), "blackwell": ("b200", "gb200")}
"""The GPUs whose measured tables each family's curves are fitted to (every GPU with tables)."""


def ll_bytes(kernel: str, tokens: float, hidden: int, top_k: int, fp8: bool = True) -> float:
    """Bytes one rank's low-latency ``kernel`` messages carry: ``tokens x top_k`` messages, FP8 for a
    dispatch (``fp8``; the engines' default, and the tables'), BF16 for a combine
    (``demos.zoo.hardware.alltoall.message_bytes``)."""
    return tokens * top_k * message_bytes(kernel, hidden, fp8, low_latency=True)


def fit_ll_sm(rows: Sequence, kernel: str) -> LinearCost:
    """The line ``fixed + per_byte x ll_bytes + per_peer x (gpus - 1)`` through single-node DeepEP
    low-latency rows (``demos.zoo.measured.AllToAllRow``) of ``kernel``, residuals relative to each row's
    time; ``per_peer`` 0 when the rows hold one node size only."""
    x = np.array([ll_bytes(kernel, r.tokens, r.hidden, r.top_k) for r in rows], dtype=float)
    peers = np.array([r.gpus - 1 for r in rows], dtype=float)
    y = np.array([r.dispatch_s if kernel == "dispatch" else r.combine_s for r in rows], dtype=float)
    cols = [np.ones_like(x), x] + ([peers] if len(set(peers.tolist())) > 1 else [])
    a = np.stack(cols, axis=1) / y[:, None]
    coef, *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    fixed, per_byte, per_peer = (*coef.tolist(), 0.0)[:3]
    return LinearCost(float(f"{fixed:.4g}"), float(f"{per_byte:.4g}"), float(f"{per_peer:.4g}"))


def fit_family(family: str, gpus: Sequence[str] | None = None) -> FamilyFit:
    """``family``'s curves fitted to the measured tables of ``gpus`` (default ``FIT_GPUS[family]``), the
    MLA module's fixed time left at 0 (``demos.zoo.attention_module.fitted_family`` adds it); needs the
    ``measured`` extra."""
    from demos.zoo import measured

    names = tuple(gpus or FIT_GPUS[family])
    specs = [(get_gpu(g), g) for g in names]
    gemm = {
        ours: fit_gemm([(spec, measured.gemm_rows(g, theirs)) for spec, g in specs], ours)
        for ours, theirs in GEMM_DTYPES.items()
    }
    attn = {
        phase: fit_attention([(spec, measured.mla_rows(g, phase, MLA_KV)) for spec, g in specs], phase)
        for phase in PHASES
    }
    moe = [(spec, [r for r in measured.moe_rows(g) if r.distribution == "uniform"]) for spec, g in specs]
    experts = fit_experts(moe, gemm["fp8"])
    ll = [r for g in names for r in measured.alltoall_rows(g) if r.gpus <= get_gpu(g).gpus_per_node]
    ll_sm = {kernel: fit_ll_sm(ll, kernel) for kernel in ("dispatch", "combine")}
    tables = ", ".join(
        f"{t[3]} ({t[1]} {t[2]})"
        for k, t in measured.TABLES.items()
        if k in ("gemm", "mla_decode", "mla_prefill", "moe_decode", "deepep_ll")
    )
    source = f"aiconfigurator-core {measured.package_version()}: {tables} on {', '.join(names)}"
    return FamilyFit(family, gemm, attn["decode"], attn["prefill"], ll_sm, names, source, experts)
