"""Each engine's scheduler on one data-parallel rank, and the router that picks a rank for a request.

A request in the engine is a ``Live``: its ``Request``, the prompt tokens computed so far (``computed``, of
``target``: the prompt, or the prompt and the output so far after a preemption), the output tokens made
(``generated``), and when each came. Every step a rank's scheduler returns a ``Plan``: the ``RankBatch``
the step runs (each decode's context, each prefill chunk and the tokens cached before it) and, for each
entry, the ``Live`` and its token count, which the run advances when the step ends (``advance``).

Rules, each read from the pinned releases (``demos.prediction.engines``) where named:

* **vLLM** 0.34.0 (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``): one token budget per
  step (``max_num_batched_tokens``; server defaults 8,192 on H100/H200-class GPUs and 16,384 from 160 GB,
  ``EngineArgs.get_batch_defaults``). Running requests first, in order: a decode takes one token, a
  prefill the rest of its prompt up to the budget (chunked prefill, on by default;
  ``long_prefill_token_threshold`` is 0 by default, so one prompt may take the whole budget). A request
  whose KV blocks cannot be allocated preempts the last running request (FCFS), which goes back to the
  front of the waiting queue and recomputes its prompt and output so far. Then waiting requests in
  arrival order while budget is left and fewer than ``max_num_seqs`` (default 1,024) run, none after a
  preemption in the same step. Prefill cadence (``prefill_schedule_interval``) is 1 by default: off.
* **vLLM's router** (``vllm/v1/engine/core_client.py``, ``get_core_engine_for_request`` of the DP load
  balancer): the rank with the lowest ``waiting + running`` (plus ``6 x waiting x (KV usage - 0.5)`` when
  its KV cache is over half full), the scan starting one rank later each time so ties rotate. Its counts
  come from the coordinator every ~100 ms, corrected by its own in-flight count; here they are exact.
* **SGLang** 0.5.23: ``demos.serving.sglang_rank`` (prefill first, one chunked prompt at a time, its
  admission rule with and without its radix cache, retraction).
* **SGLang's router**: round robin over the attention DP ranks (its default load-balance method).
* **TensorRT-LLM** (no release pinned; as far as the measured rows need it): in-flight batching with
  ``max_num_tokens`` (8,192) and chunked context: decodes first, then context chunks, as vLLM's order;
  modelled with vLLM's rank scheduler at TRT-LLM's limits, and its default capacity policy
  (``SchedulerConfig.capacity_scheduler_policy``, ``GUARANTEED_NO_EVICT``, ``tensorrt_llm/llmapi/llm_args.py``):
  a request starts only while the pool holds every started request at its end, its prompt and its whole
  output, so none is evicted (``TRTLLMRank``; a request alone on the rank starts whatever it asks).

KV capacity is in tokens per rank (``kv_tokens``): what the memory model leaves the cache
(``demos.serving.step_times``). A block's rounding and prefix caching are not modelled.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from demos.serving.batch import RankBatch
from demos.serving.requests import Request

__all__ = [
    "Live",
    "Plan",
    "RankScheduler",
    "Router",
    "TRTLLMRank",
    "VLLMRank",
    "advance",
    "plan_of",
]


@dataclass(eq=False, slots=True)
class Live:
    """A request in the engine (module docstring). Slotted: the loop reads and writes its fields for every
    request of every step."""

    request: Request
    arrival_s: float
    rank: int = 0
    computed: int = 0
    target: int = 0
    generated: int = 0
    first_token_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    finished_s: float | None = None
    preemptions: int = 0

    def __post_init__(self) -> None:
        if not self.target:
            self.target = self.request.prompt_tokens

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target

    @property
    def cached(self) -> int:
        """Tokens in its KV cache: the prompt (or recompute) computed, and every output token fed back
        since (the newest output token has no cache until the next step feeds it)."""
        return self.computed + max(0, self.generated - 1 - (self.target - self.request.prompt_tokens))

    @property
    def done(self) -> bool:
        return self.generated >= self.request.output_tokens


@dataclass
class Plan:
    """A rank's step: the batch and, per entry, the request and its tokens (prefill chunks, then decodes)."""

    batch: RankBatch
    entries: list[tuple[Live, int]]


def advance(plan: Plan, end_s: float) -> list[Live]:
    """Advance each request of ``plan`` by its step, which ended at ``end_s``: a chunk that completes the
    prompt (or a recompute) makes the next output token, a decode makes one; returns those now done."""
    done = []
    for live, n in plan.entries:  # ``prefilling`` and ``done`` written out: this runs per request per step
        if live.computed < live.target:
            live.computed += n
            if live.computed < live.target:
                continue
        live.generated += 1
        live.token_s.append(end_s)
        if live.first_token_s is None:
            live.first_token_s = end_s
        if live.generated >= live.request.output_tokens:
            live.finished_s = end_s
            done.append(live)
    return done


class RankScheduler:
    """One rank's scheduler: ``enqueue`` a request, ``plan`` a step, ``release`` a finished request;
    ``waiting``, ``running`` and ``kv_usage`` for the router."""

    def __init__(self, kv_tokens: int):
        if kv_tokens < 1:
            raise ValueError(f"kv_tokens must be >= 1, got {kv_tokens}")
        self.kv_tokens = kv_tokens
        self.kv_used = 0
        self.waiting: deque[Live] = deque()
        self.running: list[Live] = []

    def enqueue(self, live: Live) -> None:
        self.waiting.append(live)

    def release(self, live: Live) -> None:
        self.running.remove(live)
        self.kv_used -= live.cached

    @property
    def kv_usage(self) -> float:
        return self.kv_used / self.kv_tokens

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def _preempt(self, victim: Live) -> None:
        """Back to the front of the waiting queue, its cache freed: it recomputes what it had."""
        self.running.remove(victim)
        self.kv_used -= victim.cached
        victim.target = victim.request.prompt_tokens + victim.generated
        victim.computed = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    def plan(self) -> Plan:  # pragma: no cover - each engine's
        raise NotImplementedError


class VLLMRank(RankScheduler):
    """vLLM's scheduler on one rank (module docstring); TensorRT-LLM's at its own limits."""

    def __init__(self, kv_tokens: int, *, max_num_batched_tokens: int, max_num_seqs: int):
        super().__init__(kv_tokens)
        self.budget = max_num_batched_tokens
        self.max_seqs = max_num_seqs

    def _admits(self, live: Live, n: int) -> bool:
        """Whether waiting ``live`` starts with ``n`` tokens this step: its blocks can be allocated now."""
        return self.kv_used + live.cached + n <= self.kv_tokens

    def plan(self) -> Plan:
        budget = self.budget
        running = self.running
        if not self.waiting and len(running) <= budget and self.kv_used + len(running) <= self.kv_tokens:
            # every request decodes one token and the cache holds them: the loop below, without its checks
            # (``_plan`` of ``(x, 1)`` for each, written out)
            decode = []
            for x in running:
                if x.computed < x.target:
                    break
                k = x.generated - 1 - (x.target - x.request.prompt_tokens)
                decode.append(x.computed + k if k > 0 else x.computed)
            else:
                self.kv_used += len(running)
                return Plan(RankBatch.trusted(tuple(decode), ()), [(x, 1) for x in running])
        entries: dict[Live, int] = {}  # insertion-ordered; a Live hashes by identity
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            live = self.running[i]
            n = min(live.target - live.computed, budget) if live.prefilling else 1
            while self.kv_used + n > self.kv_tokens:  # allocate, preempting from the back
                victim = self.running[-1]
                k = entries.pop(victim, 0)
                budget += k
                self.kv_used -= k
                self._preempt(victim)
                preempted = True
                if victim is live:
                    break
            if preempted and live not in self.running:
                break  # it preempted itself: nothing after it runs
            self.kv_used += n
            entries[live] = n
            budget -= n
            i += 1
        while not preempted and budget > 0 and self.waiting and len(self.running) < self.max_seqs:
            live = self.waiting[0]
            n = min(live.target - live.computed, budget) if live.prefilling else 1  # a transferred one decodes
            if not self._admits(live, n):
                break
            self.waiting.popleft()
            self.running.append(live)
            self.kv_used += live.cached + n  # a transferred request arrives with its prompt's cache
            entries[live] = n
            budget -= n
        return plan_of(list(entries.items()))


class TRTLLMRank(VLLMRank):
    """TensorRT-LLM's scheduler on one rank: vLLM's at TRT-LLM's limits, admitting as ``GUARANTEED_NO_EVICT``
    does (module docstring)."""

    def _admits(self, live: Live, n: int) -> bool:
        if not self.running:
            return super()._admits(live, n)
        committed = sum(x.request.prompt_tokens + x.request.output_tokens for x in self.running)
        return committed + live.request.prompt_tokens + live.request.output_tokens <= self.kv_tokens


def plan_of(entries: list[tuple[Live, int]]) -> Plan:
    decode, prefill = [], []
    for x, n in entries:
        if x.computed < x.target:
            prefill.append((n, x.computed))
        else:  # ``x.cached`` written out: this runs per request per step
            k = x.generated - 1 - (x.target - x.request.prompt_tokens)
            decode.append(x.computed + k if k > 0 else x.computed)
    return Plan(RankBatch.trusted(tuple(decode), tuple(prefill)), entries)


class Router:
    """Which rank a new request goes to: ``"least_loaded"`` (vLLM's DP load balancer) or
    ``"round_robin"`` (SGLang's default); module docstring."""

    def __init__(self, kind: str, ranks: int):
        if kind not in ("least_loaded", "round_robin"):
            raise ValueError(f"router must be least_loaded or round_robin, got {kind!r}")
        self.kind, self.ranks, self.next = kind, ranks, 0

    def pick(self, ranks: list[RankScheduler]) -> int:
        n = self.ranks
        start = self.next
        self.next = (self.next + 1) % n
        if self.kind == "round_robin":
            return start
        best, score = start, None
        for i in range(n):
            idx = (start + i) % n
            r = ranks[idx]
            s = len(r.waiting) + len(r.running)
            if r.waiting:
                s += len(r.waiting) * 6.0 * max(0.0, r.kv_usage - 0.5)
            if score is None or s < score:
                best, score = idx, s
        return best
