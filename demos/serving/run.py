"""The serving run: a discrete-event simulation at step granularity, and what it measures.

``serve(pool, source, *, decide, price, overlap)`` runs one overlap strategy over one arrival source:

1. arrivals due by now go to a rank (the engine's router); a closed loop sends its next request when
   one finishes, an open loop or a trace at its arrival time;
2. every data-parallel rank's scheduler plans its step (``demos.serving.schedulers``); the ranks step in
   lockstep, as DP attention with an expert-parallel MoE does (every MoE layer's all-to-all joins them);
   an idle rank still steps (vLLM's dummy batch, SGLang's idle batch) when any rank has work;
3. the engine's rule decides whether the step runs split (``decide``: ``demos.serving.split_rules``), and
   the step costs ``price(batches, decision)`` (``demos.serving.step_times``): the busiest rank's step;
4. when the step ends every request advances: a chunk that completes a prompt makes the first token, a
   decode one more.

When no rank has work the clock jumps to the next arrival. A rank that cannot admit its waiting request
(its KV cache full, nothing running to finish) with nothing else to do ends the run with an error naming
it: the deployment cannot hold that request.

A ``Pool`` is the part of a deployment simulated: co-located (whole requests), the prefill side of a
disaggregated one (each request leaves when its first token is made, its cache sent on), or the decode
side (each request arrives with its prompt cached and its first token made on the prefill side, and
decodes from its first step: SGLang merges it into the running batch; vLLM's first step for it recomputes
its last prompt token, a query of one token like a decode's, priced as one). The client's first token: on
vLLM's decode side the recompute's (the end of that first step: vLLM issue 50913 measures the recompute and
the step alignment at 58 ms p50 of a 197 ms handover); on SGLang's and TRT-LLM's the prefill side's, streamed
when the decode loop takes the request in (``Pool.arrive``'s ``taken_s``: the step boundary after its cache
arrived).

``metrics(...)`` -> ``OverlapRun``: throughput (requests and output tokens per second, per GPU), TTFT,
TPOT (a request's time between its first and last token over the tokens between), inter-token latency
(every gap) and end-to-end latency at p50, p90 and p99, the share of steps that ran split and why the
others did not, and the step mix. Warm-up requests (a closed loop's first ones) are left out; the
throughput window runs from the first measured request's arrival to the last one's finish.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

from demos.serving.batch import RankBatch, SplitDecision
from demos.serving.requests import Request
from demos.serving.schedulers import Live, RankScheduler, Router, advance
from demos.vocabulary import Word

__all__ = [
    "OverlapRun",
    "Percentiles",
    "Pool",
    "PoolKind",
    "ServingError",
    "StepRecord",
    "metrics",
    "serve",
    "step_pool",
    "stuck",
]


class PoolKind(Word):
    COLOCATED = "colocated"
    PREFILL = "prefill"
    DECODE = "decode"


class ServingError(RuntimeError):
    """A run that cannot go on (one line: which rank, which request, why)."""


@dataclass
class Pool:
    """The ranks simulated: ``kind``, the rank schedulers (one per attention DP rank), the router, the
    engine's name (vLLM's decode side recomputes an arriving request's last prompt token) and the GPUs
    (for the per-GPU figures)."""

    kind: PoolKind
    ranks: list[RankScheduler]
    router: Router
    engine: str
    gpus: int

    def arrive(self, request: Request, now: float, taken_s: float | None = None) -> Live:
        """``request`` into a rank, as this pool receives it at ``now`` (module docstring); ``taken_s``: when a
        decode pool's loop takes it in (None: ``now``), its first token's time where that token streams then."""
        live = Live(request, now)
        if self.kind == PoolKind.DECODE:  # its prompt cached and its first token made on the prefill side
            live.computed = request.prompt_tokens
            if self.engine != "vllm":  # the prefill side's token streams (vLLM's first step recomputes it)
                live.generated = 1
                live.first_token_s = now if taken_s is None else taken_s
                live.token_s.append(live.first_token_s)
                if request.output_tokens == 1:  # nothing left to decode: done when its token streams
                    live.finished_s = live.first_token_s
                    return live
        live.rank = self.router.pick(self.ranks)
        self.ranks[live.rank].enqueue(live)
        return live


@dataclass(frozen=True)
class Percentiles:
    """p50, p90 and p99 of a latency, in milliseconds (None where nothing was measured)."""

    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Percentiles:
        if not seconds:
            return cls(None, None, None)
        xs = sorted(seconds)
        return cls(*(1e3 * _quantile(xs, q) for q in (0.5, 0.9, 0.99)))


def _quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs``, linear between order statistics (numpy's default)."""
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


@dataclass(frozen=True)
class OverlapRun:
    """One overlap strategy's run (module docstring). Times in ms; ``not_split``: reason -> steps;
    ``steps``: kind (decode, mixed, prefill) -> steps."""

    overlap: str
    requests: int
    duration_s: float
    requests_per_s: float
    output_tokens_per_s: float
    output_tokens_per_s_gpu: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    split_share: float
    not_split: dict[str, int] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    preemptions: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StepRecord:
    """What the loop keeps of the steps: each step's end time, kind, tokens on the busiest rank and decision."""

    ends: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    decisions: list[SplitDecision] = field(default_factory=list)


def _kind(batches: Sequence[RankBatch]) -> str:
    busy = [b for b in batches if not b.idle]
    if all(b.uniform_decode for b in busy):
        return "decode"
    if all(not b.decode for b in busy):
        return "prefill"
    return "mixed"


def serve(
    pool: Pool,
    source: Iterable[Request],
    *,
    decide: Callable[[Sequence[RankBatch]], SplitDecision],
    price: Callable[[Sequence[RankBatch], SplitDecision], float],
    concurrency: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    total: int | None = None,
    max_steps: int = 50_000_000,
) -> tuple[list[Live], StepRecord]:
    """Run ``pool`` over ``source`` (module docstring). ``concurrency``: a closed loop of that many clients
    (the requests' arrival times are ignored: each is sent when a client's previous one finishes); None: an
    open loop at the requests' own ``arrival_s``. ``progress(finished, total)`` after each finished request.
    Returns every request as it ended and the step record."""
    it = iter(source)
    lives: list[Live] = []
    rec = StepRecord()
    now = 0.0
    due: list[tuple[float, int, Request]] = []  # (time, order, request): the arrivals not yet delivered
    order = 0

    def push(t: float, r: Request) -> None:
        nonlocal order
        heapq.heappush(due, (t, order, r))
        order += 1

    if concurrency is not None:
        for _ in range(concurrency):
            r = next(it, None)
            if r is None:
                break
            push(0.0, r)
    else:
        first = next(it, None)
        if first is not None:
            push(float(first.arrival_s or 0.0), first)
    finished = 0
    steps = 0
    while True:
        while due and due[0][0] <= now:
            t, _, r = heapq.heappop(due)
            live = pool.arrive(r, t)
            lives.append(live)
            if live.finished_s is not None:
                finished += 1
                if concurrency is not None:
                    nxt = next(it, None)
                    if nxt is not None:
                        push(now, nxt)
            if concurrency is None:
                nxt = next(it, None)
                if nxt is not None:
                    push(max(t, float(nxt.arrival_s or 0.0)), nxt)
        if not any(r.busy for r in pool.ranks):
            if not due:
                break
            now = max(now, due[0][0])
            continue
        out = step_pool(pool, decide, price, rec, now)
        if out is None:  # every rank's plan is idle
            if due:
                now = max(now, due[0][0])
                continue
            raise stuck(pool)
        now, left = out
        steps += 1
        if steps > max_steps:
            raise ServingError(f"the run passed {max_steps} steps without finishing")
        for _live in left:
            finished += 1
            if progress is not None:
                progress(finished, total or 0)
            if concurrency is not None:
                nxt = next(it, None)
                if nxt is not None:
                    push(now, nxt)
    return lives, rec


def step_pool(
    pool: Pool,
    decide: Callable[[Sequence[RankBatch]], SplitDecision],
    price: Callable[[Sequence[RankBatch], SplitDecision], float],
    rec: StepRecord,
    now: float,
) -> tuple[float, list[Live]] | None:
    """One lockstep step of ``pool``'s ranks from ``now`` (module docstring, 2-4), recorded in ``rec``: its
    end and the requests that left the pool at it (finished, or on a prefill pool prefilled: their cache
    goes on to decode), rank by rank, the finished first; None when no rank has anything it can schedule."""
    plans = [r.plan() for r in pool.ranks]
    batches = [p.batch for p in plans]
    if all(b.idle for b in batches):
        return None
    decision = decide(batches)
    now += price(batches, decision)
    rec.ends.append(now)
    rec.kinds.append(_kind(batches))
    rec.tokens.append(max(b.tokens for b in batches))
    rec.decisions.append(decision)
    left: list[Live] = []
    for plan, rank in zip(plans, pool.ranks):
        for live in advance(plan, now):
            rank.release(live)
            left.append(live)
        if pool.kind == PoolKind.PREFILL:  # a prefilled request leaves: its cache goes to decode
            for live, _ in plan.entries:
                if live.first_token_s is not None and live.finished_s is None and live in rank.running:
                    live.finished_s = now
                    rank.release(live)
                    left.append(live)
    return now, left


def stuck(pool: Pool) -> ServingError:
    """The error of a pool whose busy rank cannot schedule anything (its KV cache cannot hold the request)."""
    i = next(i for i, r in enumerate(pool.ranks) if r.busy)
    w = pool.ranks[i].waiting[0] if pool.ranks[i].waiting else None
    what = f"request {w.request.id} ({w.request.prompt_tokens} prompt tokens)" if w else "its requests"
    return ServingError(f"rank {i} cannot schedule {what}: its KV cache holds {pool.ranks[i].kv_tokens} tokens")


def metrics(overlap: str, lives: Sequence[Live], rec: StepRecord, *, gpus: int, warmup: int = 0) -> OverlapRun:
    """The ``OverlapRun`` of a finished run (module docstring); ``warmup``: the first requests (by id order
    of arrival) left out."""
    measured = [x for x in sorted(lives, key=lambda x: (x.arrival_s, x.request.id))[warmup:] if x.finished_s]
    if not measured:
        raise ServingError("no request finished: nothing to measure")
    start = min(x.arrival_s for x in measured)
    end = max(x.finished_s for x in measured)
    span = max(end - start, 1e-12)
    out_tokens = sum(x.generated for x in measured)
    ttft = [x.first_token_s - x.arrival_s for x in measured if x.first_token_s is not None]
    tpot = [(x.token_s[-1] - x.token_s[0]) / (len(x.token_s) - 1) for x in measured if len(x.token_s) > 1]
    itl = [b - a for x in measured for a, b in zip(x.token_s, x.token_s[1:])]
    e2e = [x.finished_s - x.arrival_s for x in measured]
    window = [i for i, t in enumerate(rec.ends) if start < t <= end]
    decisions = [rec.decisions[i] for i in window]
    split = sum(d.split for d in decisions)
    not_split = Counter(str(d.reason) for d in decisions if not d.split)
    return OverlapRun(
        overlap=overlap,
        requests=len(measured),
        duration_s=span,
        requests_per_s=len(measured) / span,
        output_tokens_per_s=out_tokens / span,
        output_tokens_per_s_gpu=out_tokens / span / gpus,
        ttft_ms=Percentiles.of(ttft),
        tpot_ms=Percentiles.of(tpot),
        itl_ms=Percentiles.of(itl),
        e2e_ms=Percentiles.of(e2e),
        split_share=split / len(decisions) if decisions else 0.0,
        not_split=dict(not_split.most_common()),
        steps=dict(Counter(rec.kinds[i] for i in window)),
        preemptions=sum(x.preemptions for x in measured),
    )
