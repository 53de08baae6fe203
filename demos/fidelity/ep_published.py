"""The all-to-all model against the published EP tables of other libraries and networks: AMD's MoRI (its measured
tuning tables) and AWS EFA (UCCL-EP's tables through CPU proxies; DeepEP V2's over NCCL GIN, GPU-initiated).

Each measured latency is a ``Case``: a dispatch or combine of ``tokens`` tokens a rank (``hidden`` channels, top-k of
``experts``, FP8 or BF16) over ``ep`` ranks of one GPU on one network, predicted by the model the simulator runs
(``demos.zoo.hardware.deepep_low_latency`` / ``deepep_normal`` on the ``ClusterSpec`` of that GPU and network).
Per group (``GROUPS``: "mori", "efa", "efa-gda") the model's parameters were fitted to the group's fitted cases
(``fit``: a robust loss of log(predicted / published), ``ROBUST_SCALE``, deterministic Nelder-Mead) and are stored
as the constants
``demos.zoo.hardware.alltoall.MORI``, ``EFA_PROXY`` and ``EFA_GDA``; the other cases of the group are held out:

* "mori": MoRI's tuning tables (``demos.zoo.vendor_data.ep_tables.mori_rows``: IntraNode at EP 2, 4 and 8,
  InterNodeV1 and InterNodeV1LL at EP 16; FP8 dispatch, BF16 combine without quantization; 64 tokens and up a
  rank, the kernels' own fixed costs below that; a combine with its input copied into MoRI's buffer or already
  there, "zero-copy"), fitted on MI355X (RoCE: AMD's Pollara NICs), held out on MI300X
  and MI350X (one node each: IntraNode only); the BF16 dispatch rows (IntraNode, EP 8: the same bytes as a
  combine, labelled "BF16") held out on every GPU. A one-node EP 2 or EP 4 crosses 1 or 3 of the 7 Infinity Fabric links
  (``GpuSpec.scaleup_bandwidth``): the rows at EP 2, 4 and 8 check the full mesh.
* "efa": UCCL-EP's README tables (4,096 tokens normal, 128 low-latency; latency only), fitted on p6-b200 (8 B200,
  8 x 400 Gb/s EFA), held out on p5en (8 H200, 16 x 200 Gb/s): p5en's normal combine takes 3.2-5.3 times its
  dispatch and is slower at EP 16 than at EP 32, where p6-b200's takes 1.7-1.8 times at the same line rate a
  GPU, so the self-consistent instance is fitted and p5en's rows are reported as held out.
* "efa-gda": DeepEP V2's operation table on p6-b200 (transcribed, ``README-ep.md``), fitted at EP 16, held out at
  EP 32.

Routing as the benchmarks draw it: uniform top-k of ``experts`` (256 where the source gives none that shards);
a normal kernel's test limits each token to 4 nodes where it spans more (DeepEP's ``test_internode``).
``compare(group)`` gives one record per case; ``format_table`` prints them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

from demos.fidelity.deepep import nelder_mead
from demos.zoo.hardware import ClusterSpec, DeepEPParams, Routing, deepep_low_latency, deepep_normal
from demos.zoo.hardware.alltoall import EFA_GDA, EFA_PROXY, MORI

__all__ = ["GROUPS", "Case", "cases", "compare", "fit", "format_table", "summary"]

GROUPS = {"mori": MORI, "efa": EFA_PROXY, "efa-gda": EFA_GDA}
"""Each group's stored parameters."""

_MIN_TOKENS = 64  # below this MoRI's tuned launch shapes (1 block at 1 token) are their own story
_SHARDABLE = 256  # experts when a row's own count does not shard over its ranks (288 over 64)
_NORMAL_SMS = 64
_LL_MAX_TOKENS = 256  # SGLang runs MoRI's low-latency kernel up to 256 tokens a rank, its normal one above


@dataclass(frozen=True)
class Case:
    """One published latency: ``group``; the ``gpu`` profile and ``network``; ``mode`` ("normal" or
    "low-latency"); ``ep`` ranks of ``per_node`` a node; ``tokens`` a rank, ``hidden``, ``top_k`` of ``experts``;
    ``kernel``; ``fp8`` dispatch; ``seconds`` published; ``fitted`` (else held out); ``label`` its source."""

    group: str
    gpu: str
    network: str
    mode: str
    ep: int
    per_node: int
    tokens: int
    hidden: int
    top_k: int
    experts: int
    kernel: str
    fp8: bool
    seconds: float
    fitted: bool
    label: str
    zero_copy: bool = False


def _mori_cases() -> list[Case]:
    from demos.zoo.vendor_data.ep_tables import mori_rows, unquantized

    modes = {"IntraNode": "normal", "InterNodeV1": "normal", "InterNodeV1LL": "low-latency"}
    out = []
    for r in mori_rows():
        if r.gpu not in ("mi300x", "mi350x", "mi355x") or r.kernel_type not in modes or r.tokens < _MIN_TOKENS:
            continue
        if r.kernel_type == "InterNodeV1LL" and r.tokens > _LL_MAX_TOKENS:
            continue
        if r.phase == "dispatch":
            if not (r.dtype.startswith("fp8") or r.dtype == "bf16"):
                continue
            fp8 = r.dtype != "bf16"
        elif r.dtype != "bf16" or not unquantized(r):
            continue
        else:
            fp8 = False
        bf16_dispatch = r.phase == "dispatch" and not fp8
        out.append(
            Case(
                "mori",
                r.gpu,
                "roce",
                modes[r.kernel_type],
                r.ep,
                min(8, r.ep),
                r.tokens,
                r.hidden,
                r.top_k or 8,
                _SHARDABLE,
                r.phase,
                fp8,
                r.seconds,
                r.gpu == "mi355x" and not bf16_dispatch,
                f"MoRI {r.kernel_type}" + (" BF16" if bf16_dispatch else " zero-copy" if r.zero_copy else ""),
                bool(r.zero_copy),
            )
        )
    return out


def _published_cases(network: str, library: str, fitted) -> list[Case]:
    from demos.zoo.vendor_data.ep_tables import published_rows

    out = []
    for r in published_rows(network=network, library=library):
        if r.seconds is None or r.kernel not in ("dispatch", "combine"):
            continue
        experts = r.experts if r.experts and r.experts % r.ep == 0 else _SHARDABLE
        fp8 = r.kernel == "dispatch" and r.dispatch_dtype != "bf16"
        out.append(
            Case(
                network,
                r.gpu,
                network,
                r.mode,
                r.ep,
                8,
                r.tokens,
                r.hidden,
                r.top_k,
                experts,
                r.kernel,
                fp8,
                r.seconds,
                fitted(r),
                f"{r.library} {r.instance}",
            )
        )
    return out


def cases(group: str) -> list[Case]:
    """Every case of ``group`` (one of ``GROUPS``)."""
    if group == "mori":
        return _mori_cases()
    if group == "efa":
        return _published_cases("efa", "uccl-ep", lambda r: r.instance == "p6-b200")
    if group == "efa-gda":
        return _published_cases("efa-gda", "deepep-v2", lambda r: r.ep == 16)
    raise ValueError(f"unknown group {group!r}; known: {', '.join(GROUPS)}")


def predicted_seconds(case: Case, params: DeepEPParams) -> float:
    """The model's seconds for ``case`` with ``params``."""
    nodes = max(1, case.ep // case.per_node)
    c = ClusterSpec(nodes, min(case.per_node, case.ep), case.ep, case.gpu, network=case.network)
    if case.mode == "low-latency":
        routing = Routing(experts=case.experts, top_k=case.top_k)
        a = deepep_low_latency(
            c, routing, case.tokens, case.hidden, case.kernel, fp8=case.fp8, params=params, zero_copy=case.zero_copy
        )
    else:
        routing = Routing(experts=case.experts, top_k=case.top_k, max_domains=4 if nodes > 4 else None)
        a = deepep_normal(
            c,
            routing,
            case.tokens,
            case.hidden,
            case.kernel,
            fp8=case.fp8,
            comm_sms=_NORMAL_SMS,
            params=params,
            zero_copy=case.zero_copy,
        )
    return a.seconds


def compare(group: str, params: DeepEPParams | None = None) -> list[dict]:
    """One record per case of ``group`` with ``params`` (None: the stored ones): the case's fields, ``predicted``
    and ``published`` seconds, ``error`` (predicted / published - 1)."""
    params = params or GROUPS[group]
    out = []
    for c in cases(group):
        pred = predicted_seconds(c, params)
        out.append({**asdict(c), "predicted": pred, "published": c.seconds, "error": pred / c.seconds - 1})
    return out


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def summary(records: Sequence[dict]) -> dict:
    """Per fitted / held-out: rows, signed median error, median |error|, share of rows within 15%."""
    out = {}
    for tag, fitted in (("fitted", True), ("held out", False)):
        errs = [r["error"] for r in records if r["fitted"] is fitted]
        if errs:
            within = sum(abs(e) <= 0.15 for e in errs) / len(errs)
            out[tag] = {
                "rows": len(errs),
                "median": _median(errs),
                "median_abs": _median([abs(e) for e in errs]),
                "within_15": within,
            }
    return out


_FREE = {
    "mori": (
        "rdma_efficiency",
        "nvlink_efficiency",
        "ll_latency",
        "normal_latency",
        "rdma_latency",
        "dispatch_copy_latency",
        "combine_rdma_latency",
        "combine_copy_bandwidth",
    ),
    "efa": ("rdma_efficiency", "ll_latency", "normal_latency", "rdma_latency", "rdma_peer_latency", "pair_bandwidth"),
    "efa-gda": ("rdma_efficiency", "ll_latency", "normal_latency"),
}
"""The parameters fitted per group; the others stay DeepEP's (the NVLink share of the NVIDIA groups)."""


_SCALE = {"dispatch_copy_latency": 1e-9}
"""A parameter's unit in the fit and as stored, where it is not its kind's (efficiency 1, latency us, bandwidth GB/s):
the per-copy latency is nanoseconds, stored to 0.01 ns."""


_START = {"pair_bandwidth": 50.0, "combine_copy_bandwidth": 1000.0}
"""Where a parameter is 0 in DeepEP's fit, the fit starts it here (GB/s); another such: an efficiency at 0.5,
a latency at 5 (us, or ns)."""

_RESTARTS = 3
"""Nelder-Mead runs a fit chains, each from the last one's best point."""


ROBUST_SCALE = 0.15
"""The scale of the fit's robust loss: a case's log error ``e`` costs ``s^2 log(1 + (e / s)^2)``, about ``e^2``
within ``s`` and growing only logarithmically beyond it, so one case the model cannot follow (a table's outlier)
does not pull the parameters off the others; ``s`` is the target's 15%."""


def _case_loss(err: float, robust: bool) -> float:
    e = math.log1p(err)
    return ROBUST_SCALE**2 * math.log1p((e / ROBUST_SCALE) ** 2) if robust else e * e


def fit(
    group: str, iters: int = 800, *, robust: bool = True, without: Sequence[str] = ()
) -> tuple[DeepEPParams, float]:
    """``group``'s parameters fitted to its fitted cases from DeepEP's H800 fit, minimizing the robust loss of
    log(predicted / published) (``ROBUST_SCALE``; ``robust=False``: its plain squares); (params, rms of the log
    errors over those cases). ``without``: parameters of the group held at 0 and not fitted (an ablation)."""
    from demos.zoo.hardware import DEEPEP_H800

    fitted = [c for c in cases(group) if c.fitted]
    unknown = set(without) - set(_FREE[group])
    if unknown:
        raise ValueError(f"{group} fits no {', '.join(sorted(unknown))}; it fits {', '.join(_FREE[group])}")
    names = [n for n in _FREE[group] if n not in without]
    scale = {
        n: _SCALE.get(n, 1.0 if n.endswith("efficiency") else 1e9 if n.endswith("bandwidth") else 1e-6) for n in names
    }
    base = {**asdict(DEEPEP_H800), **{n: 0.0 for n in without}}

    base["ll_two_level"] = GROUPS[group].ll_two_level  # a kernel's form, not a fitted number

    def make(x: list[float]) -> DeepEPParams | None:
        try:
            return DeepEPParams(**{**base, **{n: v * scale[n] for n, v in zip(names, x)}})
        except ValueError:
            return None

    def loss(x: list[float]) -> float:
        p = make(x)
        if p is None:
            return math.inf
        return sum(_case_loss(predicted_seconds(c, p) / c.seconds - 1, robust) for c in fitted)

    x0 = [base[n] / scale[n] if base[n] > 0 else _START.get(n, 0.5 if scale[n] == 1.0 else 5.0) for n in names]
    step = [0.1 if scale[n] == 1.0 else 10.0 for n in names]
    for _ in range(_RESTARTS):  # a fresh simplex around the best point: one run can stall in a long valley
        x0 = nelder_mead(loss, x0, step, iters)
    best = make(x0)
    assert best is not None
    rms = math.sqrt(sum(math.log(predicted_seconds(c, best) / c.seconds) ** 2 for c in fitted) / len(fitted))
    return _rounded(best), rms


def _rounded(p: DeepEPParams) -> DeepEPParams:
    """Efficiencies to 3 digits, latencies to 0.1 us, bandwidths to 0.1 GB/s, as stored."""
    out = {}
    for f in fields(p):
        v = getattr(p, f.name)
        if f.name.endswith("efficiency"):
            out[f.name] = round(v, 3)
        elif f.name in _SCALE:
            out[f.name] = float(f"{round(v / _SCALE[f.name], 2)}e{round(math.log10(_SCALE[f.name]))}")
        elif f.name.endswith("latency"):
            out[f.name] = float(f"{round(v * 1e6, 1)}e-6")
        elif f.name.endswith("bandwidth"):
            out[f.name] = float(f"{round(v / 1e9, 1)}e9")
        else:
            out[f.name] = v
    return DeepEPParams(**out)


def format_table(group: str, records: Sequence[dict], params: DeepEPParams | None = None) -> str:
    """The records of ``group`` as a text table, with the parameters and the summary per fitted / held out."""
    p = params or GROUPS[group]
    lines = [
        f"{group}: rdma_efficiency {p.rdma_efficiency:.3f}, nvlink_efficiency {p.nvlink_efficiency:.3f}, "
        f"ll_latency {p.ll_latency * 1e6:.1f} us, normal_latency {p.normal_latency * 1e6:.1f} us, rdma_latency "
        f"{p.rdma_latency * 1e6:.1f} us, rdma_peer_latency {p.rdma_peer_latency * 1e6:.1f} us"
        + (f", pair_bandwidth {p.pair_bandwidth / 1e9:.1f} GB/s" if p.pair_bandwidth else "")
        + (f", dispatch_copy_latency {p.dispatch_copy_latency * 1e9:.2f} ns" if p.dispatch_copy_latency else "")
        + (f", combine_rdma_latency {p.combine_rdma_latency * 1e6:.1f} us" if p.combine_rdma_latency else "")
        + (f", combine_copy_bandwidth {p.combine_copy_bandwidth / 1e9:.0f} GB/s" if p.combine_copy_bandwidth else ""),
        f"{'source':<25}{'gpu':<8}{'mode':<12}{'kernel':<9}{'EP':>4}{'tokens':>7}{'predicted':>11}{'published':>11}"
        f"{'error':>8}",
    ]
    for r in records:
        tag = "" if r["fitted"] else "  (held out)"
        lines.append(
            f"{r['label']:<25}{r['gpu']:<8}{r['mode']:<12}{r['kernel']:<9}{r['ep']:>4}{r['tokens']:>7}"
            f"{r['predicted'] * 1e6:>9.1f}us{r['published'] * 1e6:>9.1f}us{r['error'] * 100:>+7.1f}%{tag}"
        )
    for tag, s in summary(records).items():
        lines.append(
            f"{tag}: {s['rows']} rows, signed median {s['median'] * 100:+.1f}%, median |error| "
            f"{s['median_abs'] * 100:.1f}%, {s['within_15'] * 100:.0f}% of rows within 15%"
        )
    return "\n".join(lines)
