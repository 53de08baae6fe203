"""Fit a ``DeviceProfile`` to measurements: pure functions, numpy only.

Device samples are ``(op_kind, shape, dtype, bytes, seconds)``:

* ``op_kind``: "gemm" (``shape`` is ``(M, N, K)`` or a dict with keys M, N, K; flops = 2MNK) or
  "elementwise" (memory-bound; ``shape`` is ignored, may be None);
* ``dtype``: a torch.dtype or a ``dbo.costs.DTYPES`` key ("float32", "bfloat16", ...);
* ``bytes``: bytes the kernel moves; ``seconds``: its measured device time (one kernel).

``fit_device`` fits, by least squares on log time (Levenberg-Marquardt on log parameters), the
parametric device model of ``dbo.costs.kernel_time``:
``max(min_kernel, flops / (rate[dtype] * M/(M+m0) * N/(N+n0) * K/(K+k0)), (bytes + b0) / bw)``.
Because it is a curve and not a table, it predicts shapes it never saw. ``fit_host`` turns host
micro-benchmarks into ``HostCosts``; ``fit_launch_costs`` fits the per-launch and per-kernel host
costs from whole steps. ``fit_profile`` puts them together.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from dbo.costs._fit_ops import FitError
from dbo.costs._profiles import DTYPES, DeviceProfile, HostCosts, OpCost, dtype_key

FIT_OP_KINDS = ("gemm", "elementwise")


def _shape(op: str, shape: Any) -> tuple[float, float, float]:
    if op != "gemm":
        return (0.0, 0.0, 0.0)
    if isinstance(shape, Mapping):
        try:
            shape = (shape["M"], shape["N"], shape["K"])
        except KeyError as e:
            raise FitError(f"a gemm sample's shape dict needs keys M, N, K; missing {e}") from None
    if not isinstance(shape, (tuple, list)) or len(shape) != 3 or not all(x > 0 for x in shape):
        raise FitError(f"a gemm sample needs shape (M, N, K) of positive sizes, got {shape!r}")
    return tuple(float(x) for x in shape)  # type: ignore[return-value]


def _table(samples: Iterable[Sequence[Any]]) -> dict:
    ops, shapes, dts, nbytes, secs = [], [], [], [], []
    for i, s in enumerate(samples):
        if len(s) != 5:
            raise FitError(f"sample {i}: expected (op_kind, shape, dtype, bytes, seconds), got {s!r}")
        op, shape, dt, b, t = s
        if op not in FIT_OP_KINDS:
            raise FitError(f"sample {i}: op_kind must be one of {FIT_OP_KINDS}, got {op!r}")
        key = dtype_key(dt)
        if op == "gemm" and key is None:
            raise FitError(f"sample {i}: unknown dtype {dt!r}; known: {', '.join(DTYPES)}")
        if not (isinstance(t, (int, float)) and t > 0 and math.isfinite(t)):
            raise FitError(f"sample {i}: seconds must be a positive finite number, got {t!r}")
        if not (isinstance(b, (int, float)) and b >= 0):
            raise FitError(f"sample {i}: bytes must be >= 0, got {b!r}")
        ops.append(op)
        shapes.append(_shape(op, shape))
        dts.append(key)
        nbytes.append(float(b))
        secs.append(float(t))
    if not secs:
        raise FitError("no samples to fit")
    sh = np.array(shapes)
    gemm = np.array([o == "gemm" for o in ops])
    return dict(
        gemm=gemm,
        shape=sh,
        flops=np.where(gemm, 2 * sh[:, 0] * sh[:, 1] * sh[:, 2], 0.0),
        dtype=dts,
        bytes=np.array(nbytes),
        seconds=np.array(secs),
    )


def _unpack(x: np.ndarray, rate_keys: list[str]) -> dict:
    e = np.exp(x)
    return dict(bw=e[0], b0=e[1], mk=e[2], knee=e[3:6], rates=dict(zip(rate_keys, e[6:])))


def _model(x: np.ndarray, d: dict, rate_keys: list[str]) -> np.ndarray:
    p = _unpack(x, rate_keys)
    mem = np.where(d["bytes"] > 0, (d["bytes"] + p["b0"]) / p["bw"], 0.0)
    t = np.maximum(p["mk"], mem)
    if d["gemm"].any():
        rate = np.array([p["rates"].get(k, 1.0) if k is not None else 1.0 for k in d["dtype"]])
        sh = np.where(d["gemm"][:, None], d["shape"], 1.0)
        eff = np.prod(sh / (sh + p["knee"]), axis=1)
        t = np.where(d["gemm"], np.maximum(t, d["flops"] / (rate * eff)), t)
    return t


def _lm(res, x0: np.ndarray, iters: int = 200) -> np.ndarray:
    """Levenberg-Marquardt on residual function ``res`` (numerical Jacobian)."""
    x, lam = x0.astype(float), 1e-2
    r = res(x)
    cost = float(r @ r)
    for _ in range(iters):
        J = np.empty((r.size, x.size))
        for j in range(x.size):
            h = 1e-6 * max(1.0, abs(x[j]))
            xp = x.copy()
            xp[j] += h
            J[:, j] = (res(xp) - r) / h
        A, g = J.T @ J, J.T @ r
        improved = False
        for _ in range(12):
            step = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            xn = x + step
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                # a trial step may overshoot to inf/nan residuals: rejected just below, not a warning
                rn = res(xn)
                cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                x, r, lam, improved = xn, rn, max(lam / 3, 1e-9), True
                break
            lam *= 4
        if not improved or abs(cost - cn) < 1e-14 * max(cost, 1e-30):
            cost = min(cost, cn) if improved else cost
            break
        cost = cn
    return x


def fit_device(
    samples: Iterable[Sequence[Any]], *, name: str = "fitted", base: DeviceProfile | None = None
) -> DeviceProfile:
    """Fit bandwidth, bytes knee, minimum kernel time, GEMM knees and a rate per GEMM dtype.

    The host costs and comm SM share are taken from ``base`` (default: none). Dtypes without GEMM
    samples keep ``base``'s rate, else are left out (``peak_flops`` is the largest fitted rate).
    Raises FitError when the samples cannot determine the model.
    """
    d = _table(samples)
    t = d["seconds"]
    rate_keys = sorted({k for k, g in zip(d["dtype"], d["gemm"]) if g})
    if not (~d["gemm"]).any() and not rate_keys:
        raise FitError("no samples")
    if len(t) < 3 + len(rate_keys) + (3 if rate_keys else 0):
        raise FitError(f"{len(t)} samples cannot determine {3 + len(rate_keys) + 3} parameters")
    has_bytes = d["bytes"] > 0
    bw0 = float(np.max(d["bytes"][has_bytes] / t[has_bytes])) if has_bytes.any() else 1e12
    x0 = [
        math.log(bw0),
        math.log(max(1.0, float(np.median(d["bytes"][has_bytes])) * 0.01) if has_bytes.any() else 1.0),
        math.log(float(np.min(t))),
        math.log(32.0),
        math.log(32.0),
        math.log(32.0),
    ]
    for k in rate_keys:
        sel = d["gemm"] & np.array([x == k for x in d["dtype"]])
        x0.append(math.log(float(np.max(d["flops"][sel] / t[sel]))))
    logt = np.log(t)

    def res(x: np.ndarray) -> np.ndarray:
        return np.log(_model(x, d, rate_keys)) - logt

    x = _lm(res, np.array(x0))
    p = _unpack(x, rate_keys)
    rms = float(np.sqrt(np.mean(res(x) ** 2)))
    if not math.isfinite(rms):
        raise FitError("the fit did not converge")
    rates = dict(base.dtype_flops) if base is not None else {}
    rates.update({k: float(v) for k, v in p["rates"].items()})
    peak = max(rates.values()) if rates else (base.peak_flops if base is not None else 1e12)
    knee = (
        tuple(float(v) for v in p["knee"]) if rate_keys else (base.gemm_knee if base is not None else (0.0, 0.0, 0.0))
    )
    return DeviceProfile(
        name,
        peak_flops=float(peak),
        mem_bandwidth=float(p["bw"]),
        launch_overhead=0.0,
        dtype_flops=rates,
        min_kernel=float(p["mk"]),
        gemm_knee=knee,  # type: ignore[arg-type]
        bytes_knee=float(p["b0"]) if has_bytes.any() else 0.0,
        comm_sm_share=base.comm_sm_share if base is not None else 0.0,
        host=base.host if base is not None else HostCosts(),
    )


def fit_dtype_rates(samples: Iterable[Sequence[Any]], profile: DeviceProfile) -> DeviceProfile:
    """``profile`` with the math rate of each dtype in the GEMM ``samples`` refitted, its GEMM knees
    and the rest kept: the rate whose model time matches the samples' median in log space (only
    samples whose math time exceeds their memory time count). For dtypes whose small-GEMM
    behaviour differs from the dtype the knees were fitted on (bfloat16 on a CPU with matrix units).
    No samples: ``profile`` unchanged."""
    samples = list(samples)
    if not samples:
        return profile
    d = _table(samples)
    rates = dict(profile.dtype_flops)
    for key in sorted({k for k, g in zip(d["dtype"], d["gemm"]) if g}):
        logs = []
        for i in range(len(d["seconds"])):
            if not d["gemm"][i] or d["dtype"][i] != key:
                continue
            eff = float(np.prod([x / (x + k0) if k0 > 0 else 1.0 for x, k0 in zip(d["shape"][i], profile.gemm_knee)]))
            rate = d["flops"][i] / (d["seconds"][i] * eff)
            mem = (d["bytes"][i] + profile.bytes_knee) / profile.mem_bandwidth
            if d["flops"][i] / (rate * eff) >= mem:
                logs.append(math.log(rate))
        if logs:
            rates[key] = float(math.exp(float(np.median(logs))))
    return replace(profile, dtype_flops=rates, peak_flops=max(rates.values()) if rates else profile.peak_flops)


def predict(profile: DeviceProfile, op_kind: str, shape: Any, dtype: Any, nbytes: float) -> float:
    """The profile's device seconds for one sample's description (same formula as kernel_time)."""
    from dbo.costs._roofline import Work, kernel_time

    sh = _shape(op_kind, shape)
    if op_kind == "gemm":
        w = Work(flops=2 * sh[0] * sh[1] * sh[2], bytes=nbytes, dtype=dtype_key(dtype), shape=tuple(int(v) for v in sh))
    else:
        w = Work(bytes=nbytes)
    return kernel_time(w, profile)


_HOST_KEYS = {
    "launch_add_us": "per eager launch of a small elementwise op -> kernel",
    "stream_ctx_us": "a stream context enter/exit -> part of launch; half -> stream_switch",
    "lock_pingpong_us": "a two-thread lock ping-pong -> handoff",
    "event_record_wait_us": "an event record + wait -> event (half each)",
    "idle_device_sync_us": "an idle device synchronize -> sync",
}


def fit_host(measured: Mapping[str, float], *, base: HostCosts | None = None, **overrides: Any) -> HostCosts:
    """``HostCosts`` from host micro-benchmarks in microseconds (keys: launch_add_us,
    stream_ctx_us, lock_pingpong_us, event_record_wait_us, idle_device_sync_us; missing keys keep
    ``base``'s value). ``overrides`` set HostCosts fields directly (seconds)."""
    b = base if base is not None else HostCosts()
    kw: dict[str, Any] = {}

    def us(key: str) -> float | None:
        v = measured.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise FitError(f"host measurement {key} must be a number >= 0 (microseconds), got {v!r}")
        return float(v) * 1e-6

    if (v := us("launch_add_us")) is not None:
        kw["kernel"] = v
    if (v := us("stream_ctx_us")) is not None:
        kw["launch"] = v
        kw["stream_switch"] = v / 2
    if (v := us("lock_pingpong_us")) is not None:
        kw["handoff"] = v
    if (v := us("event_record_wait_us")) is not None:
        kw["event"] = v / 2
    if (v := us("idle_device_sync_us")) is not None:
        kw["sync"] = v
    kw.update(overrides)
    return replace(b, **kw)


def fit_launch_costs(steps: Iterable[Sequence[float]]) -> tuple[float, float]:
    """(launch, kernel) host seconds from host-bound steps ``(launches, kernels, host seconds)``:
    non-negative least squares of ``seconds = launches * launch + kernels * kernel``."""
    rows = [tuple(float(v) for v in s) for s in steps]
    if len(rows) < 2:
        raise FitError("fit_launch_costs needs at least 2 steps")
    A = np.array([[r[0], r[1]] for r in rows])
    y = np.array([r[2] for r in rows])
    w = 1.0 / np.maximum(y, 1e-30)  # relative error
    sol, *_ = np.linalg.lstsq(A * w[:, None], y * w, rcond=None)
    if sol.min() < 0:  # one of them is not determined: fit the other alone
        best = None
        for j in range(2):
            c = float((A[:, j] * w) @ (y * w) / max((A[:, j] * w) @ (A[:, j] * w), 1e-300))
            err = float(np.sum(((A[:, j] * c - y) * w) ** 2))
            if best is None or err < best[0]:
                best = (err, j, max(c, 0.0))
        sol = np.zeros(2)
        sol[best[1]] = best[2]
    return float(sol[0]), float(sol[1])


def fit_profile(
    name: str,
    device_samples: Iterable[Sequence[Any]],
    host_measured: Mapping[str, float] | None = None,
    *,
    base: DeviceProfile | None = None,
    ops: Mapping[str, OpCost] | None = None,
    **host_overrides: Any,
) -> DeviceProfile:
    """A full profile: ``fit_device`` + ``fit_host`` (+ per-op costs ``ops``)."""
    dev = fit_device(device_samples, name=name, base=base)
    host = fit_host(host_measured or {}, base=dev.host, **host_overrides)
    if ops is not None:
        host = replace(host, ops=dict(ops))
    return replace(dev, host=host)
