"""SGLang's scheduler on one data-parallel rank (``SGLangRank``; the other engines' and the request bookkeeping:
``demos.serving.schedulers``).

SGLang 0.5.23 (``managers/scheduler.py``, ``get_next_batch_to_run``; ``schedule_policy.py``): a
prefill (extend) batch first whenever a waiting request fits, with no decode in that step (mixed
chunks are off by default), of prompts in arrival order up to ``max_prefill_tokens`` (16,384) and the
chunk size (``chunked_prefill_size``: 8,192 below 160 GB, 16,384 from it,
``arg_groups/memory_hook.py``; divided by the attention DP size, ``arg_groups/parallel_hook.py``); one
chunked prompt at a time, continued first in the next prefill. Admission (``PrefillAdder``), radix cache
on (its default): while the pool holds the prompt, its own output and a reserve of the running requests'
outputs times ``new_token_ratio`` (outputs clipped at 4,096, ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``); the
ratio starts at 0.7, falls a 600th of the way to 0.7 x 0.14 with each decode step that retracts nothing
(``SGLANG_*NEW_TOKEN_RATIO*``), and after a retraction is the survivors' ``(outputs made + 20 each) / outputs
asked``, at most 1. Radix cache off, for requests that ignore EOS (every simulated request runs its whole
output, as the benchmarks' ``--ignore-eos`` asks): ``add_one_req_ignore_eos``, the prompt within the pool
and that reserve, and the pool holding the running requests and the new one at every future finish (by
tokens left; each finish frees what it holds; one token a request spare). Otherwise a decode step of every
running request, up to ``max_running_requests``; a decode that finds the pool full retracts the newest.
"""

from __future__ import annotations

from demos.serving.schedulers import Live, Plan, RankScheduler, plan_of

__all__ = ["SGLangRank"]


class SGLangRank(RankScheduler):
    """SGLang's scheduler on one rank (module docstring); ``radix_cache`` False: a server launched with
    ``--disable-radix-cache``, which admits requests that ignore EOS by their exact peak."""

    INIT_NEW_TOKEN_RATIO = 0.7
    MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
    NEW_TOKEN_RATIO_DECAY_STEPS = 600
    RETRACT_DECODE_STEPS = 20
    CLIP_MAX_NEW_TOKENS = 4096

    def __init__(
        self,
        kv_tokens: int,
        *,
        chunked_prefill_size: int,
        max_prefill_tokens: int,
        max_running: int,
        radix_cache: bool = True,
    ):
        super().__init__(kv_tokens)
        self.chunk = chunked_prefill_size
        self.max_prefill = max_prefill_tokens
        self.max_running = max_running
        self.radix_cache = radix_cache
        self.chunked: Live | None = None
        self.new_token_ratio = self.INIT_NEW_TOKEN_RATIO
        self._min_ratio = self.INIT_NEW_TOKEN_RATIO * self.MIN_NEW_TOKEN_RATIO_FACTOR
        self._decay = (self.INIT_NEW_TOKEN_RATIO - self._min_ratio) / self.NEW_TOKEN_RATIO_DECAY_STEPS

    def _left(self, x: Live) -> int:  # output tokens still to make, clipped as SGLang's reserve clips them
        return min(x.request.output_tokens - x.generated, self.CLIP_MAX_NEW_TOKENS)

    def _reserve(self) -> float:  # the running batch's: a prompt still in its chunks is reserved when it completes
        return sum(self.new_token_ratio * self._left(x) for x in self.running if x.computed >= x.target)

    def _peak_fits(self, live: Live) -> bool:
        """``add_one_req_ignore_eos``'s check: with ``live`` admitted, the pool holds every running request at
        each future finish (module docstring)."""
        states = sorted(
            (x.request.output_tokens - x.generated, x.request.prompt_tokens + x.generated)
            for x in (*self.running, live)
            if x.request.output_tokens > x.generated
        )
        free = self.kv_tokens - self.kv_used - live.request.prompt_tokens
        freed = 0
        for i, (left, held) in enumerate(states):
            alive = len(states) - i
            if free + freed - left * alive <= alive:
                return False
            freed += held
        return True

    def plan(self) -> Plan:
        entries: list[tuple[Live, int]] = []
        budget = min(self.max_prefill, self.chunk)
        offset = self._reserve()  # the running requests' reserve, then each admitted prompt's own output
        if self.chunked is not None:  # the chunked prompt continues first
            live = self.chunked
            n = min(live.target - live.computed, budget)
            entries.append((live, n))
            self.kv_used += n
            budget -= n
            self.chunked = live if live.computed + n < live.target else None
            offset += 0 if self.chunked else self._left(live)
        while budget > 0 and self.waiting and self.chunked is None and len(self.running) < self.max_running:
            live = self.waiting[0]
            need = live.target - live.computed
            if self.radix_cache:
                fits = self.kv_used + live.cached + need + self._left(live) + offset <= self.kv_tokens
            else:
                fits = self.kv_used + live.cached + need + offset <= self.kv_tokens and self._peak_fits(live)
            if not fits:
                break
            n = min(need, budget)
            self.waiting.popleft()
            self.running.append(live)
            self.kv_used += live.cached + n  # a transferred request joins the running batch with its cache
            if n:
                entries.append((live, n))
                budget -= n
            if n < need:
                self.chunked = live
            else:
                offset += self._left(live)
        if entries:
            return plan_of(entries)
        decoding = [x for x in self.running if not x.prefilling]
        retracted = False
        while decoding and self.kv_used + len(decoding) > self.kv_tokens:  # retract the newest
            victim = decoding.pop()
            self._preempt(victim)
            retracted = True
        if retracted:  # the survivors' progress sets the ratio (``retract_decode``)
            made = sum(x.generated for x in decoding) + self.RETRACT_DECODE_STEPS * len(decoding)
            asked = sum(x.request.output_tokens for x in decoding) + 1
            self.new_token_ratio = min(1.0, made / asked)
        else:
            self.new_token_ratio = max(self.new_token_ratio - self._decay, self._min_ratio)
        self.kv_used += len(decoding)
        return plan_of([(x, 1) for x in decoding])
