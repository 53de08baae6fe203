"""Fits against the model's own kernels and whole steps (``dbo.costs`` re-exports these): per-op
device corrections, the slowdown of their fixed part while ubatch threads run, and one scalar
parameter against a costly loss. Pure functions, numpy only."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from dbo.costs._profiles import OpCost


class FitError(ValueError):
    """The samples cannot determine the model (too few, bad values, no convergence)."""


MEMORY_GAIN = 0.25
MEMORY_FLOOR = 0.03
"""The memory term (``OpCost.memory_scale``) is fitted only when the fit without it misses the
samples by more than ``MEMORY_FLOOR`` (rms relative error: more than measurement noise) and the
term cuts the weighted residual by at least ``MEMORY_GAIN`` (a memory-bound op's model time *is*
its memory time: the two would otherwise trade places on noise)."""


def _op_rows(samples: Iterable[Sequence[Any]]) -> dict[str, list[tuple[float, float, bool, float]]]:
    by_op: dict[str, list[tuple[float, float, bool, float]]] = {}
    for i, s in enumerate(samples):
        if len(s) not in (3, 4, 5):
            raise FitError(
                f"op sample {i}: expected (op, model seconds, measured seconds[, threaded[, memory seconds]]), "
                f"got {s!r}"
            )
        op, m, t = s[0], s[1], s[2]
        threaded = bool(s[3]) if len(s) >= 4 else False
        mem = s[4] if len(s) == 5 else 0.0
        if not isinstance(op, str) or not op:
            raise FitError(f"op sample {i}: op must be a non-empty string, got {op!r}")
        for what, v in (("model", m), ("measured", t), ("memory", mem)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
                raise FitError(f"op sample {i} ({op}): {what} seconds must be a finite number >= 0, got {v!r}")
        by_op.setdefault(op, []).append((float(m), float(t), threaded, float(mem)))
    if not by_op:
        raise FitError("no op samples to fit")
    return by_op


def _nonneg_lstsq(A: np.ndarray, y: np.ndarray, cols: Sequence[int]) -> tuple[np.ndarray, float] | None:
    """Least squares of ``y`` on the columns ``cols`` of ``A`` with every coefficient >= 0: the
    best of the unconstrained solutions over the subsets of ``cols`` that come out non-negative
    (exact for a handful of columns). None when no subset does."""
    best = None
    n = len(cols)
    for mask in range(1, 1 << n):
        sub = [cols[j] for j in range(n) if mask >> j & 1]
        x, *_ = np.linalg.lstsq(A[:, sub], y, rcond=None)
        if np.any(x < 0):
            continue
        full = np.zeros(A.shape[1])
        full[sub] = x
        r = A @ full - y
        v = float(r @ r)
        if best is None or v < best[1] - 1e-30:
            best = (full, v)
    return best


def _fit_one(
    raw: list[tuple[float, float, bool, float]], factor: float, memory: bool = True
) -> tuple[float, float, float, float]:
    """(device, scale, memory_scale, weighted squared relative residual) of one op, its threaded
    samples' fixed part multiplied by ``factor``; ``memory``: whether the memory term may be used.
    One point per (shape, threaded) at its median."""
    groups: dict[tuple[float, bool, float], list[float]] = {}
    for mi, ti, th, bi in raw:
        groups.setdefault((float(f"{mi:.9g}"), th, float(f"{bi:.9g}")), []).append(ti)
    rows = [(mi, th, bi, float(np.median(ts)), len(ts)) for (mi, th, bi), ts in sorted(groups.items())]
    m = np.array([r[0] for r in rows])
    f = np.array([factor if r[1] else 1.0 for r in rows])
    b = np.array([r[2] for r in rows])
    t = np.array([r[3] for r in rows])
    w = np.sqrt(np.array([r[4] for r in rows], dtype=float)) / np.maximum(t, 1e-12)  # relative error
    device, scale, mem = 0.0, 1.0, 0.0
    if np.ptp(m) > 1e-12 * max(float(m.max()), 1e-30) and len(rows) >= 2:
        A = np.stack([f, m, b], axis=1) * w[:, None]
        y = t * w
        two = _nonneg_lstsq(A, y, [0, 1])
        three = _nonneg_lstsq(A, y, [0, 1, 2]) if memory and len(rows) >= 4 and np.ptp(b) > 0 else None
        pick = two
        if (
            three is not None
            and three[0][2] > 0
            and two is not None
            and two[1] > MEMORY_FLOOR**2 * len(rows)
            and three[1] <= (1 - MEMORY_GAIN) * two[1]
        ):
            pick = three
        if pick is not None:
            device, scale, mem = (float(x) for x in pick[0])
        if scale <= 0:  # no usable slope: a constant (plus the memory term, if it won)
            if mem == 0:
                device = float(np.average(t / f, weights=w))
            scale = 1e-9
    else:
        device = max(
            0.0,
            float(
                np.median(
                    (np.array([ti for _, ti, _, _ in raw]) - m[0])
                    / np.array([factor if th else 1.0 for _, _, th, _ in raw])
                )
            ),
        )
    device, scale, mem = max(0.0, device), max(scale, 1e-9), max(0.0, mem)
    res = (device * f + scale * m + mem * b - t) * w
    return device, scale, mem, float(res @ res)


def fit_op_costs(
    samples: Iterable[Sequence[Any]], *, kernels: Mapping[str, int] | None = None, threaded_factor: float = 1.0
) -> dict[str, OpCost]:
    """Per-op device corrections from ``(op, model seconds, measured seconds[, threaded[, memory
    seconds]])`` samples: for each op, non-negative least squares on relative error of
    ``measured = device * f + scale * model + memory_scale * memory`` (``OpCost.device``,
    ``OpCost.scale``, ``OpCost.memory_scale``; f = ``threaded_factor`` for samples measured while
    ubatch threads ran, else 1). ``model`` is the device model's time of the op's declared cost,
    ``memory`` its memory part (``dbo.costs.memory_seconds``); the memory term is kept only when it
    cuts the residual by ``MEMORY_GAIN``. Samples of one shape count as one point at their median
    (outliers do not pull the fit). An op with one distinct model time gets ``scale`` 1 and the
    median excess as ``device``. ``kernels``: ``OpCost.kernels`` per op (default 1;
    ``"<op>/<fn>"`` falls back to ``"<op>"``)."""
    by_op = _op_rows(samples)
    out = {}
    kk = kernels or {}
    for op, raw in sorted(by_op.items()):
        device, scale, mem, _ = _fit_one(raw, threaded_factor)
        out[op] = OpCost(
            kernels=kk.get(op, kk.get(op.split("/", 1)[0], 1)), device=device, scale=scale, memory_scale=mem
        )
    return out


def fit_threaded_ops(
    samples: Iterable[Sequence[Any]], *, kernels: Mapping[str, int] | None = None, hi: float = 20.0
) -> tuple[dict[str, OpCost], float]:
    """``fit_op_costs`` and the factor f in [1, hi] on the ops' fixed part while ubatch threads
    run (``DeviceProfile.fixed_threaded``) that together fit the samples best."""
    by_op = _op_rows(samples)
    if not any(th for raw in by_op.values() for _, _, th, _ in raw):
        return fit_op_costs(samples, kernels=kernels), 1.0

    # an op that also has per-function entries ("<op>/<fn>") mixes two kernels in its samples; the
    # backend uses the per-function entries, so the mixed one does not steer the factor
    steering = [raw for op, raw in by_op.items() if not any(k.startswith(op + "/") for k in by_op)]

    def loss(g: float) -> float:  # the factor from the two-term fits (a memory term could stand in for it)
        return sum(_fit_one(raw, g, memory=False)[3] for raw in steering)

    g = fit_scalar(lambda x: loss(1.0 + x), 0.0, hi - 1.0, points=12, refine=10) + 1.0
    rows = [(op, m, t, th, b) for op, raw in by_op.items() for m, t, th, b in raw]
    return fit_op_costs(rows, kernels=kernels, threaded_factor=g), g


def fit_scalar(loss: Any, lo: float, hi: float, *, points: int = 8, refine: int = 6) -> float:
    """The value in [lo, hi] that minimizes ``loss(value)``: a grid of ``points`` (lo, then
    geometric up to hi), then golden-section steps between the best point's neighbours. For one
    parameter fitted against whole simulated steps (each loss call may be costly)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
        raise FitError(f"fit_scalar needs 0 <= lo <= hi, got {lo!r}, {hi!r}")
    if hi == lo:
        return lo
    start = max(lo, hi * 1e-3)
    grid = sorted({lo, *np.geomspace(start, hi, max(2, points - 1)).tolist()})
    vals = [loss(x) for x in grid]
    k = int(np.argmin(vals))
    a, b = grid[max(0, k - 1)], grid[min(len(grid) - 1, k + 1)]
    best_x, best_v = grid[k], vals[k]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = loss(c), loss(d)
    for _ in range(refine):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = loss(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = loss(d)
    for x, v in ((c, fc), (d, fd)):
        if v < best_v:
            best_x, best_v = x, v
    return float(best_x)
