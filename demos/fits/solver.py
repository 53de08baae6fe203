"""The fitting machinery every curve of ``demos.fits`` uses: a deterministic Nelder-Mead (``nelder_mead``,
``minimize``), the least-absolute log fit (``fit_log``: least squares from fixed starts, then polished to
least absolute error), measured rows as numpy columns (``columns``), an attention-style curve from its
log parameters (``attention_curve``, with ``ATTENTION_STARTS``) and the 4-significant-figure rounding the
data file stores (``rounded``). numpy only: the same rows give the same figures on the same machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from demos.zoo.rooflines import AttentionCurve

__all__ = ["ATTENTION_STARTS", "attention_curve", "columns", "fit_log", "minimize", "nelder_mead", "rounded"]


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


def fit_log(
    residuals: Callable[[np.ndarray], np.ndarray],
    starts: Sequence[Sequence[float]],
    coarse: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """The parameters (log coordinates) that minimize the sum of ``|residuals|`` (log errors): least
    squares from each of ``starts`` first (``minimize``), then polished to least absolute error from its
    best (module docstring). ``coarse``, when given, is the residuals of a fixed subsample of the rows: the
    least-squares stage, which only picks the basin the polish starts in, runs on it (``fit_gemm``)."""
    u = minimize(lambda v: float(np.sum((coarse or residuals)(v) ** 2)), starts)
    return minimize(lambda v: float(np.sum(np.abs(residuals(v)))), [np.exp(u)], restarts=2)


def columns(rows_by_gpu, fields: Sequence[str]):
    """The rows' ``fields`` as float arrays, with each row's GPU's SMs (``sms``), datasheet peak of the
    rows' math dtype and HBM bandwidth, and the rows' seconds."""
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


ATTENTION_STARTS = ((0.5, 0.7, 1e-5), (0.8, 0.9, 3e-6), (0.3, 0.5, 2e-5))


def attention_curve(u: np.ndarray) -> AttentionCurve:
    """The ``AttentionCurve`` of log parameters ``u`` (ceiling and share of bandwidth at most 1)."""
    e = np.exp(u)
    return AttentionCurve(min(1.0, e[0]), min(1.0, e[1]), e[2])


def rounded(curve):
    """``curve`` with every figure rounded to 4 significant figures (what the data file stores)."""
    return type(curve)(**{k: float(f"{v:.4g}") for k, v in curve.__dict__.items()})
