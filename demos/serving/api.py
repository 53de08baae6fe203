"""``simulate(model, ...) -> ServingRun``: DBO over a serving run, from Python (docs/serving.md).

Its keyword arguments are ``python -m demos.serving``'s flags with underscores; the model and cluster
ones are ``predict``'s. The arrivals are one of: a closed loop (``concurrency``, ``isl``, ``osl``), an
open-loop Poisson rate (``rate``, ``isl``, ``osl``), or a trace (``trace`` PATH, ``trace_format`` azure or
mooncake, ``rate`` then scaling it: ``scale``). ``requests``: how many are measured (a closed loop also
sends ``warmup`` first, left out of the figures). ``overlap``: the strategies to run (default: every one
the engine has for the model: vLLM none and dbo; SGLang none, dbo (two-batch overlap) and sbo where its
release runs them for the architecture; TensorRT-LLM none). Every bad argument is a ``ConfigError``, one
line naming it, before any step runs.

The run per strategy is ``demos.serving.run.serve`` over the engine's schedulers, its split rule and the
step pricer; for vLLM's DBO the thresholds given (default the release's, 32 and 512), and the best decode
threshold for this workload is searched over ``THRESHOLDS`` (by throughput, and by p99 inter-token latency
among the runs within ``FLOOR`` of the best throughput) with the engine lines that set it.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from demos.errors import ConfigError, field_ref
from demos.prediction.engines import (
    SGLANG_SBO_MODEL_TYPES,
    SGLANG_TBO_MODEL_TYPES,
    VLLM_DBO_REFUSED_MODEL_TYPES,
    VLLM_DEFAULT_THRESHOLDS,
    Deployment,
    serve_lines,
    served_model,
)
from demos.serving import arrivals, split_rules
from demos.serving.host import HOST_STEP_S, check_radix_cache, check_release, overlap_off_reason
from demos.serving.ranks import prepare
from demos.serving.result import CSV_COLUMNS, FLOOR, ServingRun
from demos.serving.run import OverlapRun, PoolKind, ServingError, metrics, serve
from demos.serving.step_times import StepPricer
from demos.vocabulary import Overlap, Phase
from demos.zoo.engine_allreduce import allreduce_source
from demos.zoo.loading import load_model
from demos.zoo.memory import serving_limits

__all__ = ["CSV_COLUMNS", "ENGINES", "FLOOR", "THRESHOLDS", "ServingRun", "simulate"]  # ServingRun, its CSV
# columns and FLOOR live in demos.serving.result; api re-exports them

ENGINES = ("vllm", "sglang", "trtllm")
THRESHOLDS = (2, 8, 16, 32, 64, 128, 256, 512, 1024)
"""The vLLM decode thresholds the best-threshold search runs (the release's default, 32, among them)."""


def _positive(name: str, value: Any, kind: type = int) -> Any:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    if not ok or (kind is int and not isinstance(value, int)):
        what = "a positive integer" if kind is int else "a positive number"
        raise ConfigError(f"{field_ref(name)} must be {what}, got {value!r}")
    return value


def _source(
    *, concurrency, isl, osl, rate, trace, trace_format, requests, warmup, seed, range_ratio=1.0
) -> arrivals.ArrivalSource:
    """The arrival source the arguments name (module docstring), checked."""
    for name, v in (("concurrency", concurrency), ("isl", isl), ("osl", osl), ("requests", requests)):
        _positive(name, v)
    _positive("rate", rate, float)
    if trace is not None:
        if concurrency is not None:
            raise ConfigError(f"{field_ref('trace')} is an open loop: it takes no {field_ref('concurrency')}")
        fmt = trace_format or ("mooncake" if os.fspath(trace).endswith(".jsonl") else "azure")
        if fmt not in ("azure", "mooncake"):
            raise ConfigError(f"{field_ref('trace_format')} must be azure or mooncake, got {fmt!r}")
        read = arrivals.read_azure if fmt == "azure" else arrivals.read_mooncake
        try:
            return read(trace, scale=rate or 1.0, limit=requests)
        except (OSError, ValueError) as e:
            raise ConfigError(f"{field_ref('trace')} {trace}: {e}") from None
    if isl is None or osl is None:
        raise ConfigError(
            f"give {field_ref('isl')} and {field_ref('osl')} with {field_ref('concurrency')} or {field_ref('rate')}, "
            f"or a {field_ref('trace')}"
        )
    n = requests or 1000
    if concurrency is not None and rate is not None:
        raise ConfigError(f"{field_ref('concurrency')} (a closed loop) and {field_ref('rate')} (an open one): give one")
    if not arrivals.valid_range_ratio(range_ratio):
        raise ConfigError(f"{field_ref('range_ratio')} must be a number in (0, 1], got {range_ratio!r}")
    if range_ratio != 1 and concurrency is None:
        raise ConfigError(f"{field_ref('range_ratio')} draws a closed loop's lengths: give {field_ref('concurrency')}")
    if concurrency is not None:  # aiperf's default warm-up, as aiconfigurator's benchmark script runs it: 2C
        warm = 2 * concurrency if warmup is None else warmup
        return arrivals.ClosedLoop(concurrency, isl, osl, n, warm, range_ratio=range_ratio, seed=seed)
    if rate is not None:
        return arrivals.Poisson(rate, isl, osl, n, seed)
    raise ConfigError(f"give {field_ref('concurrency')} (a closed loop) or {field_ref('rate')} (an open loop)")


def _overlaps(engine: str, model_type: str, asked: Any) -> tuple[Overlap, ...]:
    has = [Overlap.NONE]
    if engine == "vllm":
        if model_type not in VLLM_DBO_REFUSED_MODEL_TYPES:
            has.append(Overlap.DBO)
    elif engine == "sglang":
        if model_type in SGLANG_TBO_MODEL_TYPES:
            has.append(Overlap.DBO)
        if model_type in SGLANG_SBO_MODEL_TYPES:
            has.append(Overlap.SBO)
    if asked is None:
        return tuple(has)
    items = [asked] if isinstance(asked, str) else list(asked)
    out = []
    for x in items:
        o = Overlap.parse(x, "overlap") if x in Overlap.choices() else None
        if o is None:
            raise ConfigError(f"{field_ref('overlap')} must be among none, dbo, sbo, got {x!r}")
        if o not in has:
            raise ConfigError(
                f"{field_ref('overlap')} {o}: {engine} has no {o} for {model_type} (it has {', '.join(has)})"
            )
        out.append(o)
    return tuple(dict.fromkeys(out))


def simulate(
    model: Any,
    *,
    engine: str = "vllm",
    pool: str = "colocated",
    concurrency: int | None = None,
    isl: int | None = None,
    osl: int | None = None,
    rate: float | None = None,
    trace: str | os.PathLike | None = None,
    trace_format: str | None = None,
    requests: int | None = None,
    warmup: int | None = None,
    overlap: Any = None,
    dbo_decode_token_threshold: int | None = None,
    dbo_prefill_token_threshold: int | None = None,
    gpu: Any = "h100",
    nodes: int = 1,
    gpus_per_node: int | None = None,
    network: str = "ib",
    ep: int | None = None,
    attention_tp: int = 1,
    imbalance: Any = "auto",
    weights: str | None = None,
    kv_cache_dtype: str | None = None,
    kernels: str = "roofline",
    max_seqs: int | None = None,
    search: bool = True,
    seed: int = 0,
    range_ratio: float = 1.0,
    progress: Callable[[int, int, str], None] | None = None,
    pricers: dict | None = None,
    moe_tp: int = 1,
    release: str | None = None,
    disable_radix_cache: bool = False,
) -> ServingRun:
    """The serving run (module docstring). ``pricers``: a dict the step pricers are kept in by deployment,
    so runs of one deployment share their grid points (None: one pricer for this run). ``release``: the
    engine's release whose host behaviour and all-reduce kernel the steps take (``demos.serving.host``,
    ``demos.zoo.engine_allreduce``; None: the pinned one);
    ``disable_radix_cache``: SGLang's server runs without its radix cache (``--disable-radix-cache``), which
    keeps the overlap schedule on where the release would turn it off and admits requests by their exact
    peak (``demos.serving.sglang_rank.SGLangRank``)."""
    if engine not in ENGINES:
        raise ConfigError(f"{field_ref('engine')} must be one of {', '.join(ENGINES)}, got {engine!r}")
    if pool not in PoolKind.choices():
        raise ConfigError(f"{field_ref('pool')} must be one of {', '.join(PoolKind.choices())}, got {pool!r}")
    pool_kind = PoolKind(pool)
    check_release(engine, release)
    check_radix_cache(engine, disable_radix_cache)
    for name, v in (("dbo_decode_token_threshold", dbo_decode_token_threshold), ("max_seqs", max_seqs)):
        _positive(name, v)
    _positive("dbo_prefill_token_threshold", dbo_prefill_token_threshold)
    thresholds_given = {
        "dbo_decode_token_threshold": dbo_decode_token_threshold,
        "dbo_prefill_token_threshold": dbo_prefill_token_threshold,
    }
    for name, v in thresholds_given.items():
        if v is not None and v < 2:  # vLLM 0.34.0 refuses a threshold below its two micro-batches
            raise ConfigError(f"{field_ref(name)} must be at least 2 (vLLM's two micro-batches), got {v}")
    source = _source(
        concurrency=concurrency,
        isl=isl,
        osl=osl,
        rate=rate,
        trace=trace,
        trace_format=trace_format,
        requests=requests,
        warmup=warmup,
        seed=seed,
        range_ratio=range_ratio,
    )
    native = load_model(model)
    overlaps = _overlaps(engine, native.model_type, overlap)
    phase = Phase.PREFILL if pool_kind == PoolKind.PREFILL else Phase.DECODE
    setup = prepare(
        native,
        engine,
        phase,
        gpu=gpu,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        ep=ep,
        attention_tp=attention_tp,
        imbalance=imbalance,
        weights=weights,
        kv_cache_dtype=kv_cache_dtype,
        kernels=kernels,
        max_seqs=max_seqs,
        pricers=pricers,
        moe_tp=moe_tp,
        network=network,
        release=release,
    )
    base, pricer, dp, kv = setup.base, setup.pricer, setup.dp, setup.kv
    c = base.cluster
    host_off = overlap_off_reason(engine, release, base.spec, not disable_radix_cache)
    host_s = HOST_STEP_S if host_off else 0.0  # host_step_seconds, its reason kept for the sources
    thresholds = (
        dbo_decode_token_threshold or VLLM_DEFAULT_THRESHOLDS[Phase.DECODE],
        dbo_prefill_token_threshold or VLLM_DEFAULT_THRESHOLDS[Phase.PREFILL],
    )
    total = len(source) * (len(overlaps) + (len(THRESHOLDS) if search and engine == "vllm" else 0))
    done = [0]

    raw: dict[str, Any] = {}

    def run(o: Overlap, decode_threshold: int, keep: bool = False) -> OverlapRun:
        p = setup.pool(pool_kind, radix_cache=not disable_radix_cache)
        decide = split_rules.split_rule(engine, o, decode_threshold, thresholds[1], setup.graphs)
        sbo = o == Overlap.SBO

        def tick(finished: int, _: int) -> None:
            done[0] += 1
            if progress is not None and done[0] % 50 == 0:
                progress(done[0], total, f"{o} run")

        try:
            lives, rec = serve(
                p,
                source,
                decide=decide,
                price=lambda b, d: pricer.seconds(b, d, sbo=sbo) + host_s,
                concurrency=source.concurrency if source.closed else None,
                progress=tick,
                total=total,
            )
        except ServingError as e:
            raise ConfigError(f"{field_ref('model')} {native.name}: {e}") from None
        if keep:
            raw[str(o)] = (lives, rec)
        return metrics(str(o), lives, rec, gpus=c.world, warmup=source.warmup)

    runs = tuple(run(o, thresholds[0], keep=True) for o in overlaps)
    best: dict[str, Any] = {}
    if search and engine == "vllm" and Overlap.DBO in overlaps:
        best = _best(lambda t: run(Overlap.DBO, t), model, native, base)
    probes = _probe(pricer)
    interp = pricer.interpolation_error(probes) if probes else {"samples": 0, "median": None, "max": None}
    title = (
        f"{native.name} serving on {engine}, {pool} pool, {c.nodes} x {c.gpus_per_node} {base.gpu.name}, EP {c.ep}"
        + (f", attention TP {base.attention_tp}" if base.attention_tp > 1 else "")
        + f"; {dp} data-parallel ranks, KV cache {kv:,} tokens per rank"
    )
    return ServingRun(
        title=title,
        model=native.name,
        engine=engine,
        pool=str(pool_kind),
        workload=source.describe(),
        setup={
            "gpu": base.gpu.name,
            "nodes": c.nodes,
            "gpus_per_node": c.gpus_per_node,
            "ep": c.ep,
            "attention_tp": base.attention_tp,
            "data_parallel": dp,
            "kv_tokens_per_rank": kv,
            "thresholds": {"decode": thresholds[0], "prefill": thresholds[1]},
        },
        runs=runs,
        best=best,
        pricer={"grid_points": pricer.runs, "interpolation": interp},
        _raw=raw,
        _warmup=source.warmup,
        sources=(
            f"model: {native.source}",
            f"step times: python -m demos.predict's model ({kernels} kernels), interpolated over a grid",
            f"scheduler and split rule: {engine}'s release as docs/serving.md names them",
        )
        + ((allreduce_source(engine, pricer.allreduce),) if base.attention_tp > 1 else ())
        + ((f"host between steps: {host_off} (demos.serving.host)",) if host_off else ()),
    )


def _best(run_at: Callable[[int], OverlapRun], given: Any, native: Any, base: Any) -> dict[str, Any]:
    """The best vLLM decode threshold for this workload (module docstring) and the lines that set it."""
    results = {t: run_at(t) for t in THRESHOLDS}
    top = max(results, key=lambda t: results[t].output_tokens_per_s)
    floor = FLOOR * results[top].output_tokens_per_s
    ok = [t for t in THRESHOLDS if results[t].output_tokens_per_s >= floor and results[t].itl_ms.p99 is not None]
    calm = min(ok, key=lambda t: results[t].itl_ms.p99) if ok else top
    model_id, served = served_model(given, native, base.spec)
    limits = serving_limits(base.with_(tokens=64))
    d = Deployment.of(base, model_id, served=served, limits=limits)
    lines = serve_lines(d, Overlap.DBO, top)
    return {
        "by_throughput": {"decode_threshold": top, "output_tokens_per_s": results[top].output_tokens_per_s},
        "by_p99_itl": {"decode_threshold": calm, "itl_p99_ms": results[calm].itl_ms.p99, "floor": FLOOR},
        "thresholds": {
            str(t): {"output_tokens_per_s": r.output_tokens_per_s, "itl_p99_ms": r.itl_ms.p99, "split": r.split_share}
            for t, r in results.items()
        },
        "vllm": lines.vllm,
        "sglang": lines.sglang,
    }


def _probe(pricer: StepPricer, most: int = 4) -> list[tuple]:
    """Up to ``most`` points between the grid points the run used (the middle of two neighbouring token
    counts, half-way to the next context), to check the interpolation against direct runs."""
    by: dict[tuple, list[int]] = {}
    for phase, t, c, mode in pricer._points:
        by.setdefault((phase, c, mode), []).append(t)
    out = []
    for (phase, c, mode), ts in sorted(by.items()):
        ts = sorted(ts)
        out += [(phase, (a + b) // 2, c + c // 2, mode) for a, b in zip(ts, ts[1:]) if b > a + 1]
    return out[:most]
