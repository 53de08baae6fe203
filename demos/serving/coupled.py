"""A disaggregated deployment run whole: its prefill workers and its decode workers coupled by the requests
(``simulate_disaggregated``; docs/serving.md, "Disaggregated deployments").

A request goes to a prefill worker (round robin over the workers; within a worker, the engine's router
over its data-parallel ranks), is prefilled there by the engine's scheduler (``PoolKind.PREFILL``: it
leaves when its first token is made), its KV cache crosses to a decode worker (round robin) in
``prompt tokens x KV bytes per token / the prefill GPU's NIC line rate`` (the transfer's bytes at line
rate, no setup cost: a stated lower bound), and decodes there (``PoolKind.DECODE``). A closed loop's
client sends its next request when its previous one has finished decoding.

Each worker is a ``demos.serving.run.Pool`` of its data-parallel ranks stepping in lockstep, priced by
its side's ``StepPricer`` (one per side, shared by the side's workers: they are the same deployment).
The workers step concurrently: the run always steps the worker whose next step starts first, so a
request handed from one worker to another arrives before the other's next step exactly when it would
have (a conservative parallel discrete-event simulation).

TTFT is counted to the first token as the decode side streams it (``demos.serving.run``: vLLM's after the
first step that recomputes it, SGLang's and TRT-LLM's at the step boundary where the decode loop takes the
transferred request in): the prefill's end, the transfer, then that wait. The rest of the handover the engines
spend (vLLM issue 50913: 197 ms p50 on its setup, 29 ms of it the transfer) is not modelled. TPOT and
inter-token latency are the decode side's.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from demos.errors import ConfigError, field_ref
from demos.prediction.engines import VLLM_DEFAULT_THRESHOLDS
from demos.serving import arrivals
from demos.serving.batch import RankBatch, SplitDecision
from demos.serving.host import check_radix_cache, check_release, host_step_seconds
from demos.serving.ranks import RankSetup, prepare
from demos.serving.requests import Request
from demos.serving.run import OverlapRun, Pool, PoolKind, ServingError, StepRecord, metrics, step_pool, stuck
from demos.serving.schedulers import Live
from demos.serving.step_times import StepPricer
from demos.vocabulary import Overlap, Phase
from demos.zoo.loading import load_model
from demos.zoo.memory import kv_bytes_per_token

__all__ = ["Side", "simulate_disaggregated"]


@dataclass(frozen=True)
class Side:
    """One side of a disaggregated deployment: ``workers`` workers, each ``nodes x gpus_per_node`` GPUs
    of ``gpu`` with expert parallelism ``ep`` and attention TP ``attention_tp`` (as ``predict`` takes
    them); ``max_seqs``: the requests per data-parallel rank (None: the engine's default); ``redundant_slots``:
    expert slots placed without EPLB (``demos.zoo.workload.Workload.redundant_slots``)."""

    gpu: str
    nodes: int = 1
    gpus_per_node: int | None = None
    ep: int | None = None
    attention_tp: int = 1
    workers: int = 1
    max_seqs: int | None = None
    redundant_slots: int = 0


class _Worker:
    """One worker's pool, clock, pending arrivals and step record."""

    def __init__(self, pool: Pool, decide: Callable, price: Callable):
        self.pool, self.decide, self.price = pool, decide, price
        self.now = 0.0
        self.due: list[tuple[float, int, Request, Live | None]] = []
        self.rec = StepRecord()

    def next_time(self) -> float | None:
        if any(r.busy for r in self.pool.ranks):
            return self.now
        return max(self.now, self.due[0][0]) if self.due else None


def serve_coupled(
    prefill: Sequence[_Worker],
    decode: Sequence[_Worker],
    source: arrivals.ArrivalSource,
    transfer_s: Callable[[Request], float],
    max_steps: int = 50_000_000,
) -> list[Live]:
    """Run the coupled workers over a closed-loop ``source`` (module docstring); every request as it
    ended on the decode side (its arrival and first token as the client sees them)."""
    it = iter(source)
    order = [0]
    to_prefill, to_decode = itertools.cycle(prefill), itertools.cycle(decode)  # round robin over the workers
    out: list[Live] = []
    firsts: dict[int, tuple[float, float]] = {}  # request id -> (arrival, first token at prefill)

    def push(w: _Worker, t: float, r: Request, live: Live | None = None) -> None:
        heapq.heappush(w.due, (t, order[0], r, live))
        order[0] += 1

    def send(t: float) -> None:
        r = next(it, None)
        if r is not None:
            push(next(to_prefill), t, r)

    for _ in range(source.concurrency or 0):
        send(0.0)
    steps = 0
    workers = [*prefill, *decode]
    while True:
        nxt = [(t, i) for i, w in enumerate(workers) if (t := w.next_time()) is not None]
        if not nxt:
            break
        t, i = min(nxt)
        w = workers[i]
        w.now = t
        while w.due and w.due[0][0] <= w.now:
            at, _, r, _ = heapq.heappop(w.due)
            live = w.pool.arrive(r, at, taken_s=w.now)
            if w.pool.kind == PoolKind.DECODE:
                arrival, _ = firsts.pop(r.id)
                live.arrival_s = arrival
                out.append(live)
                if live.finished_s is not None:
                    send(live.finished_s)
        if not any(r.busy for r in w.pool.ranks):
            continue
        stepped = step_pool(w.pool, w.decide, w.price, w.rec, w.now)
        if stepped is None:
            if w.due:
                w.now = max(w.now, w.due[0][0])
                continue
            raise stuck(w.pool)
        w.now, left = stepped
        steps += 1
        if steps > max_steps:
            raise ServingError(f"the run passed {max_steps} steps without finishing")
        for live in left:
            if w.pool.kind == PoolKind.PREFILL:
                firsts[live.request.id] = (live.arrival_s, w.now)
                push(next(to_decode), w.now + transfer_s(live.request), live.request)
            else:
                send(w.now)
    return out


def simulate_disaggregated(
    model: Any,
    *,
    prefill: Side,
    decode: Side,
    engine: str = "trtllm",
    concurrency: int,
    isl: int,
    osl: int,
    requests: int | None = None,
    warmup: int | None = None,
    overlap: Sequence[str] = ("none",),
    weights: str | None = None,
    kv_cache_dtype: str | None = None,
    kernels: str = "roofline",
    pricers: dict | None = None,
    release: str | None = None,
    disable_radix_cache: bool = False,
    range_ratio: float = 1.0,
    imbalance: Any = "auto",
) -> tuple[dict[str, OverlapRun], dict[str, list[Live]], dict[str, Any]]:
    """A closed loop of ``concurrency`` clients over a disaggregated deployment (module docstring), per
    overlap strategy in ``overlap`` (each side under the engine's own split rule): ``(runs, lives, setup)``
    with ``runs[overlap]`` the ``OverlapRun`` (the decode side's steps for the split share), ``lives`` the
    requests as they ended, ``setup`` the sides' data-parallel ranks and KV capacity. ``release``: the engine's
    release whose host behaviour and all-reduce kernel both sides' steps take (``demos.serving.host``,
    ``demos.zoo.engine_allreduce``; None: the pinned one),
    ``disable_radix_cache``, ``range_ratio`` (the closed loop's length spread) and ``imbalance`` (the busiest EP
    rank's expert load on both sides) as ``demos.serving.api.simulate``'s."""
    from demos.serving.api import ENGINES
    from demos.serving.split_rules import split_rule

    if engine not in ENGINES:
        raise ConfigError(f"{field_ref('engine')} must be one of {', '.join(ENGINES)}, got {engine!r}")
    check_release(engine, release)
    check_radix_cache(engine, disable_radix_cache)
    n = requests or 1000
    warm = 2 * concurrency if warmup is None else warmup
    source = arrivals.ClosedLoop(concurrency, isl, osl, n, warm, range_ratio=range_ratio)
    native = load_model(model)

    def set_up(side: Side, phase: Phase) -> tuple[Side, RankSetup]:
        cluster = dict(gpu=side.gpu, nodes=side.nodes, gpus_per_node=side.gpus_per_node, ep=side.ep)
        setup = prepare(
            native,
            engine,
            phase,
            **cluster,
            attention_tp=side.attention_tp,
            imbalance=imbalance,
            weights=weights,
            kv_cache_dtype=kv_cache_dtype,
            kernels=kernels,
            max_seqs=side.max_seqs,
            pricers=pricers,
            release=release,
            redundant_slots=side.redundant_slots,
        )
        return side, setup

    sides = {PoolKind.PREFILL: set_up(prefill, Phase.PREFILL), PoolKind.DECODE: set_up(decode, Phase.DECODE)}
    p = sides[PoolKind.PREFILL][1]
    host_s = host_step_seconds(engine, release, p.base.spec, not disable_radix_cache)
    per_token = kv_bytes_per_token(p.base)
    nic = p.base.gpu.nic_bandwidth

    def transfer_s(r: Request) -> float:
        return r.prompt_tokens * per_token / nic

    thresholds = (VLLM_DEFAULT_THRESHOLDS[Phase.DECODE], VLLM_DEFAULT_THRESHOLDS[Phase.PREFILL])
    gpus = sum(d.base.cluster.world * side.workers for side, d in sides.values())
    runs: dict[str, OverlapRun] = {}
    kept: dict[str, list[Live]] = {}
    for o in overlap:
        o = Overlap.parse(o, "overlap")
        workers = {}
        for kind, (side, d) in sides.items():
            decide = split_rule(engine, o, *thresholds, d.graphs)
            workers[kind] = [
                _Worker(d.pool(kind, radix_cache=not disable_radix_cache), decide, _pricing(d.pricer, host_s))
                for _ in range(side.workers)
            ]
        try:
            lives = serve_coupled(workers[PoolKind.PREFILL], workers[PoolKind.DECODE], source, transfer_s)
        except ServingError as e:
            raise ConfigError(f"{field_ref('model')} {native.name}: {e}") from None
        rec = _merged(w.rec for w in workers[PoolKind.DECODE])
        runs[str(o)] = metrics(str(o), lives, rec, gpus=gpus, warmup=source.warmup)
        kept[str(o)] = lives
    setup: dict[str, Any] = {
        str(kind): {
            "gpu": d.base.gpu.name,
            "nodes": d.base.cluster.nodes,
            "gpus_per_node": d.base.cluster.gpus_per_node,
            "ep": d.base.cluster.ep,
            "attention_tp": d.base.attention_tp,
            "workers": side.workers,
            "data_parallel": d.dp,
            "kv_tokens_per_rank": d.kv,
        }
        for kind, (side, d) in sides.items()
    }
    setup["transfer_s_per_prompt_token"] = per_token / nic
    return runs, kept, setup


def _pricing(pricer: StepPricer, host_s: float) -> Callable[[Sequence[RankBatch], SplitDecision], float]:
    return lambda b, d: pricer.seconds(b, d) + host_s


def _merged(recs) -> StepRecord:
    """One record of the decode workers' steps, in time order (for the split share and the step mix)."""
    rows = sorted(
        ((end, i, j), kind, tokens, decision)
        for i, r in enumerate(recs)
        for j, (end, kind, tokens, decision) in enumerate(zip(r.ends, r.kinds, r.tokens, r.decisions))
    )
    out = StepRecord()
    for (end, _, _), kind, tokens, decision in rows:
        out.ends.append(end)
        out.kinds.append(kind)
        out.tokens.append(tokens)
        out.decisions.append(decision)
    return out
