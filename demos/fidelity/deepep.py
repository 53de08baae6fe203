"""DeepEP's published H800 tables against the all-to-all model (``demos.zoo.hardware.alltoall``).

The published figures (deepseek-ai/DeepEP, README from 2025-06-05, kept in docs/legacy.md): H800
GPUs, one 400 Gb/s ConnectX-7 per GPU, NVLink within a node of 8.

* Normal kernels: 4096 tokens per rank, hidden 7168, 256 experts, top-8 with top-4 groups (one
  group per node, so at most 4 nodes per token), FP8 dispatch, BF16 combine, 24 SMs; reported as
  "bottleneck bandwidth" in GB/s the way DeepEP's tests count it: intranode, the bytes a rank
  receives (its own tokens included) over the kernel time; internode, one token per (token,
  destination node) pair, the own node included, over the kernel time.
* Low-latency kernels: 128 tokens per rank, hidden 7168, top-8, FP8 dispatch, BF16 combine; kernel
  latency in us. The rows since 2025-06-05 use NVLink within a node; the earlier pure-RDMA rows
  (README until 2025-06-04) are compared too, as a check out of the fit.

``compare()`` gives one record per row; ``format_table`` prints them; ``fit()`` refits the model's
four parameters to the current rows (least squares of log(predicted / published)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields

from demos.zoo.hardware import (
    DEEPEP_H800,
    ClusterSpec,
    DeepEPParams,
    Routing,
    deepep_low_latency,
    deepep_normal,
    message_bytes,
)

__all__ = [
    "LEGACY_SOURCE",
    "PUBLISHED_LL",
    "PUBLISHED_LL_RDMA",
    "PUBLISHED_NORMAL",
    "SOURCE",
    "TOLERANCE",
    "compare",
    "fit",
    "format_table",
    "max_error",
    "nelder_mead",
]

SOURCE = "deepseek-ai/DeepEP README (2025-06-05; docs/legacy.md)"
LEGACY_SOURCE = "deepseek-ai/DeepEP README (until 2025-06-04, pure RDMA)"
TOLERANCE = 0.15
"""The target: every current row within 15% of its published figure."""

# (kernel, ep, figure): normal in GB/s of DeepEP's bottleneck bandwidth, low-latency in us.
PUBLISHED_NORMAL = (
    ("dispatch", 8, 153.0),
    ("combine", 8, 158.0),
    ("dispatch", 16, 43.0),
    ("combine", 16, 43.0),
    ("dispatch", 32, 58.0),
    ("combine", 32, 57.0),
    ("dispatch", 64, 51.0),
    ("combine", 64, 50.0),
)
PUBLISHED_LL = tuple(
    ("dispatch", ep, us) for ep, us in zip((8, 16, 32, 64, 128, 256), (77, 118, 155, 173, 192, 194))
) + tuple(("combine", ep, us) for ep, us in zip((8, 16, 32, 64, 128, 256), (114, 195, 273, 314, 369, 360)))
PUBLISHED_LL_RDMA = tuple(("dispatch", ep, us) for ep, us in zip((8, 16, 32, 64), (163, 173, 182, 186))) + tuple(
    ("combine", ep, us) for ep, us in zip((8, 16, 32, 64), (318, 329, 350, 353))
)

_GPU = "h800"
_GPUS_PER_NODE = 8
_HIDDEN = 7168
_EXPERTS = 256  # DeepSeek-V3's routed experts (DeepEP's low-latency test script used 288, which
#                 does not shard over 64+ ranks; the copy shares do not depend on the count)
_NORMAL_TOKENS, _NORMAL_SMS = 4096, 24
_LL_TOKENS = 128
_NORMAL_ROUTING = Routing(experts=_EXPERTS, top_k=8, max_domains=4)
_LL_ROUTING = Routing(experts=_EXPERTS, top_k=8)


def _cluster(ep: int) -> ClusterSpec:
    return ClusterSpec(nodes=max(1, ep // _GPUS_PER_NODE), gpus_per_node=_GPUS_PER_NODE, ep=ep, gpu=_GPU)


def _normal(kernel: str, ep: int, params: DeepEPParams) -> tuple[float, str, str]:
    """DeepEP's bottleneck bandwidth (GB/s) as the model predicts it, the bottleneck, the links."""
    c = _cluster(ep)
    a = deepep_normal(c, _NORMAL_ROUTING, _NORMAL_TOKENS, _HIDDEN, kernel, comm_sms=_NORMAL_SMS, params=params)
    t = c.traffic(_NORMAL_ROUTING)
    per_token = t.ranks if c.domains == 1 else t.domains  # what DeepEP's tests count
    counted = _NORMAL_TOKENS * per_token * message_bytes(kernel, _HIDDEN)
    return counted / a.seconds / 1e9, a.bottleneck, "nvlink" if c.domains == 1 else "nvlink+rdma"


def _ll(kernel: str, ep: int, params: DeepEPParams, nvlink: bool = True) -> tuple[float, str, str]:
    """The low-latency kernel's modelled latency (us), the bottleneck, the links."""
    a = deepep_low_latency(_cluster(ep), _LL_ROUTING, _LL_TOKENS, _HIDDEN, kernel, nvlink=nvlink, params=params)
    return a.seconds * 1e6, a.bottleneck, "nvlink+rdma" if nvlink else "rdma"


def _record(
    kernel: str, mode: str, ep: int, published: float, got: tuple[float, str, str], unit: str, source: str
) -> dict:
    predicted, bottleneck, links = got
    return {
        "kernel": kernel,
        "mode": mode,
        "ep": ep,
        "predicted": predicted,
        "published": published,
        "unit": unit,
        "error": predicted / published - 1,
        "bottleneck": bottleneck,
        "links": links,
        "source": source,
    }


def compare(params: DeepEPParams = DEEPEP_H800, *, legacy: bool = True) -> list[dict]:
    """One record per published row: ``kernel`` ("dispatch"/"combine"), ``mode`` ("normal"/
    "low-latency"), ``ep``, ``predicted`` and ``published`` (GB/s for normal, us for low-latency;
    ``unit`` says which), ``error`` (predicted / published - 1), the modelled ``bottleneck``, the
    ``links`` the kernel used and the ``source`` of the figure. ``legacy``: also the pure-RDMA
    low-latency rows of the earlier README (source says so)."""
    rows = [_record(k, "normal", ep, v, _normal(k, ep, params), "GB/s", SOURCE) for k, ep, v in PUBLISHED_NORMAL]
    rows += [_record(k, "low-latency", ep, v, _ll(k, ep, params), "us", SOURCE) for k, ep, v in PUBLISHED_LL]
    if legacy:
        rows += [
            _record(k, "low-latency", ep, v, _ll(k, ep, params, nvlink=False), "us", LEGACY_SOURCE)
            for k, ep, v in PUBLISHED_LL_RDMA
        ]
    return rows


def max_error(rows: Sequence[dict], source: str = SOURCE) -> float:
    """The largest |error| of the rows from ``source``."""
    errs = [abs(r["error"]) for r in rows if r["source"] == source]
    if not errs:
        raise ValueError(f"no rows from {source!r}")
    return max(errs)


def format_table(rows: Sequence[dict], params: DeepEPParams = DEEPEP_H800) -> str:
    """The records as a text table, with the parameters and the largest error per source."""
    p = params
    lines = [
        "DeepEP on H800 (one 400 Gb/s CX7 per GPU, NVLink 200 GB/s per direction): model vs published",
        (
            f"model: rdma_efficiency {p.rdma_efficiency:.3f}, nvlink_efficiency {p.nvlink_efficiency:.3f}, "
            f"ll_latency {p.ll_latency * 1e6:.1f} us, normal_latency {p.normal_latency * 1e6:.1f} us"
        ),
        "",
        (
            f"{'mode':<12}{'kernel':<10}{'EP':>5}  {'links':<12}{'predicted':>10}{'published':>10}  {'unit':<5}"
            f"{'error':>8}  bottleneck"
        ),
    ]
    for r in rows:
        tag = "  (fitted)" if r["source"] == SOURCE else "  (held out)"
        lines.append(
            f"{r['mode']:<12}{r['kernel']:<10}{r['ep']:>5}  {r['links']:<12}{r['predicted']:>10.1f}"
            f"{r['published']:>10.1f}  {r['unit']:<5}{r['error'] * 100:>+7.1f}%  {r['bottleneck']}{tag}"
        )
    lines.append("")
    for src in dict.fromkeys(r["source"] for r in rows):
        lines.append(f"max |error| {max_error(rows, src) * 100:.1f}% over {src}")
    lines.append(
        "fitted: the model's 4 parameters above were fitted to the current rows (fit()), so their errors "
        "show the fit, not a prediction; held out: the earlier pure-RDMA rows, which no parameter saw"
    )
    return "\n".join(lines)


def _loss(params: DeepEPParams) -> float:
    rows = compare(params, legacy=False)
    return sum(math.log(r["predicted"] / r["published"]) ** 2 for r in rows)


def _towards(centroid: list[float], worst: list[float], t: float) -> list[float]:
    """The point ``centroid + t * (worst - centroid)``."""
    return [c + t * (w - c) for c, w in zip(centroid, worst)]


def nelder_mead(f: Callable[[list[float]], float], x0: list[float], step: list[float], iters: int) -> list[float]:
    """Minimise ``f`` from ``x0`` (deterministic Nelder-Mead, standard coefficients)."""
    n = len(x0)
    simplex = [list(x0)] + [[x0[j] + (step[j] if j == i else 0.0) for j in range(n)] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iters):
        order = sorted(range(n + 1), key=values.__getitem__)
        simplex, values = [simplex[i] for i in order], [values[i] for i in order]
        centroid = [sum(x[j] for x in simplex[:-1]) / n for j in range(n)]

        worst = simplex[-1]
        r = _towards(centroid, worst, -1.0)
        fr = f(r)
        if fr < values[0]:
            e = _towards(centroid, worst, -2.0)
            fe = f(e)
            simplex[-1], values[-1] = (e, fe) if fe < fr else (r, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = r, fr
        else:
            c = _towards(centroid, worst, 0.5)
            fc = f(c)
            if fc < values[-1]:
                simplex[-1], values[-1] = c, fc
            else:
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, s)] for s in simplex[1:]]
                values = [values[0]] + [f(s) for s in simplex[1:]]
    return simplex[min(range(n + 1), key=values.__getitem__)]


_FIT_START = DeepEPParams(rdma_efficiency=0.8, nvlink_efficiency=0.8, ll_latency=20e-6, normal_latency=20e-6)


def fit(start: DeepEPParams = _FIT_START, iters: int = 300) -> tuple[DeepEPParams, float]:
    """Refit the four parameters to the current published rows (both tables); (params, rms of
    log(predicted / published)). Latencies are searched in microseconds; a point outside the
    parameters' ranges scores infinity."""
    names = [f.name for f in fields(DeepEPParams)]
    scale = [1.0, 1.0, 1e-6, 1e-6]

    def make(x: list[float]) -> DeepEPParams | None:
        try:
            return DeepEPParams(**{n: v * s for n, v, s in zip(names, x, scale)})
        except ValueError:
            return None

    def f(x: list[float]) -> float:
        p = make(x)
        return math.inf if p is None else _loss(p)

    x0 = [v / s for v, s in zip(asdict(start).values(), scale)]
    best = make(nelder_mead(f, x0, [0.05, 0.05, 5.0, 5.0], iters))
    if best is None:
        raise ValueError(f"fit: the start {start} lies outside the parameters' ranges")
    n_rows = len(PUBLISHED_NORMAL) + len(PUBLISHED_LL)
    return best, math.sqrt(_loss(best) / n_rows)
