"""The engines' rank schedulers and routers (``demos.serving.schedulers``): vLLM's token budget, running
requests first, chunked prefill, the request cap and preemption from the back; SGLang's prefill-first
steps, one chunked prompt at a time and retraction; the routers; and the KV accounting that every step
keeps equal to what the requests hold (the bug feared: a cache that leaks or goes negative, which would
admit requests that do not fit or starve the rank)."""

from __future__ import annotations

import pytest

from demos.serving.engine_ranks import make_rank
from demos.serving.requests import Request
from demos.serving.schedulers import Live, Router, TRTLLMRank, VLLMRank, advance
from demos.serving.sglang_rank import SGLangRank


def _live(i: int, prompt: int, out: int) -> Live:
    return Live(Request(i, 0.0, prompt, out), 0.0)


def _step(rank, t: float):
    """One step of ``rank``: its plan, then every request advanced; the KV accounting checked."""
    plan = rank.plan()
    for live in advance(plan, t):
        rank.release(live)
    assert rank.kv_used == sum(x.cached for x in rank.running), "KV accounting drifted"
    assert 0 <= rank.kv_used <= rank.kv_tokens
    return plan


def test_vllm_serves_running_requests_first_within_the_token_budget_and_chunks_a_long_prompt():
    r = VLLMRank(100_000, max_num_batched_tokens=512, max_num_seqs=8)
    a, b = _live(0, 300, 3), _live(1, 700, 3)
    r.enqueue(a)
    r.enqueue(b)
    p = _step(r, 1.0)
    assert [(x.request.id, n) for x, n in p.entries] == [(0, 300), (1, 212)]  # b chunked at the budget
    assert p.batch.prefill == ((300, 0), (212, 0))
    p = _step(r, 2.0)  # a decodes first (running order), b continues its prompt
    assert [(x.request.id, n) for x, n in p.entries] == [(0, 1), (1, 488)]
    assert p.batch.decode == (300,) and p.batch.prefill == ((488, 212),)
    assert a.first_token_s == 1.0 and b.first_token_s == 2.0 and b.generated == 1


def test_vllm_caps_running_requests_at_max_num_seqs():
    r = VLLMRank(100_000, max_num_batched_tokens=10_000, max_num_seqs=3)
    for i in range(5):
        r.enqueue(_live(i, 10, 5))
    _step(r, 1.0)
    assert len(r.running) == 3 and len(r.waiting) == 2


def test_vllm_preempts_the_last_running_request_which_recomputes_what_it_had():
    r = VLLMRank(230, max_num_batched_tokens=1000, max_num_seqs=8)
    a, b = _live(0, 100, 50), _live(1, 100, 50)
    r.enqueue(a)
    r.enqueue(b)
    t = 0.0
    while not b.preemptions:
        t += 1
        _step(r, t)
        assert t < 200, "no preemption"
    assert r.running == [a] and list(r.waiting) == [b]
    assert b.computed == 0 and b.target == 100 + b.generated  # prompt and output so far, recomputed
    while not (a.done and b.done):
        t += 1
        _step(r, t)
        assert t < 1000, "the requests never finish"
    assert r.kv_used == 0 and not r.running and not r.waiting
    assert len(b.token_s) == 50 and b.token_s == sorted(b.token_s)


def test_sglang_runs_a_prefill_step_without_decodes_whenever_a_prompt_fits():
    r = SGLangRank(100_000, chunked_prefill_size=1024, max_prefill_tokens=16384, max_running=64)
    a = _live(0, 100, 5)
    r.enqueue(a)
    _step(r, 1.0)
    r.enqueue(_live(1, 100, 5))
    p = _step(r, 2.0)
    assert p.batch.decode == () and p.batch.prefill == ((100, 0),)  # a waits: prefill first
    p = _step(r, 3.0)
    assert p.batch.decode == (100, 100) and p.batch.prefill == ()


def test_sglang_chunks_one_prompt_at_a_time_and_continues_it_first():
    r = SGLangRank(100_000, chunked_prefill_size=256, max_prefill_tokens=16384, max_running=64)
    r.enqueue(_live(0, 600, 5))
    r.enqueue(_live(1, 50, 5))
    assert _step(r, 1.0).batch.prefill == ((256, 0),)
    assert _step(r, 2.0).batch.prefill == ((256, 256),)
    assert _step(r, 3.0).batch.prefill == ((88, 512), (50, 0))


def test_sglang_retracts_the_newest_decode_when_the_pool_is_full():
    r = SGLangRank(260, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running=64)
    r.CLIP_MAX_NEW_TOKENS = 0  # reserve no output at all: admit on the prompt alone, so the pool fills decoding
    a, b = _live(0, 120, 40), _live(1, 120, 40)
    r.enqueue(a)
    r.enqueue(b)
    t = 0.0
    ratios = []
    while not (a.done and b.done):
        t += 1
        _step(r, t)
        ratios.append(r.new_token_ratio)
        assert t < 500
    assert b.preemptions >= 1 and a.preemptions == 0 and r.kv_used == 0
    # the retraction set the ratio from the survivor's progress: (made + 20) / (asked + 1), at most 1
    assert any(x > SGLangRank.INIT_NEW_TOKEN_RATIO for x in ratios)


def _decoding(r, prompt: int, out: int, generated: int = 0) -> Live:
    """A request already running on ``r`` with ``generated`` outputs made (its cache counted)."""
    x = _live(len(r.running) + 100, prompt, out)
    x.computed, x.generated = prompt, generated
    r.running.append(x)
    r.kv_used += x.cached
    return x


def test_sglangs_reserve_ratio_decays_with_each_decode_step_to_its_floor():
    r = SGLangRank(100_000, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running=64)
    _decoding(r, 100, 5000, generated=1)
    floor = SGLangRank.INIT_NEW_TOKEN_RATIO * SGLangRank.MIN_NEW_TOKEN_RATIO_FACTOR
    assert r.new_token_ratio == SGLangRank.INIT_NEW_TOKEN_RATIO
    _step(r, 1.0)
    assert r.new_token_ratio == pytest.approx(0.7 - (0.7 - floor) / 600)
    for t in range(2, 700):
        _step(r, float(t))
    assert r.new_token_ratio == pytest.approx(floor)  # 0.098 after 600 steps, and no lower
    # the reserve clips each running request's outputs left at 4,096
    assert r._reserve() == pytest.approx(floor * 4096)


@pytest.mark.parametrize("radix_cache, pool, admitted", [(True, 2000, True), (False, 2000, False), (False, 3500, True)])
def test_sglang_without_its_radix_cache_admits_by_the_exact_peak(radix_cache, pool, admitted):
    """A running request of 100 prompt tokens with 1,500 outputs left, and a new one the same: with the ratio
    at its floor the reserve path admits it into 2,000 tokens (100 + 100 + 1,500 + 0.098 x 1,500 = 1,847), but
    both grow by 1,500 before either finishes (3,200 tokens): ``add_one_req_ignore_eos`` refuses it there and
    admits it into 3,500."""
    r = SGLangRank(pool, chunked_prefill_size=4096, max_prefill_tokens=16384, max_running=64, radix_cache=radix_cache)
    r.new_token_ratio = SGLangRank.INIT_NEW_TOKEN_RATIO * SGLangRank.MIN_NEW_TOKEN_RATIO_FACTOR
    _decoding(r, 100, 1500)
    r.enqueue(_live(1, 100, 1500))
    p = r.plan()
    assert (p.batch.prefill == ((100, 0),)) is admitted
    assert make_rank("sglang", 10, hbm_gb=80, dp=1, max_seqs=None, radix_cache=False).radix_cache is False


def test_the_routers():
    ranks = [make_rank("vllm", 10_000, hbm_gb=80, dp=3, max_seqs=None) for _ in range(3)]
    ranks[0].enqueue(_live(0, 10, 1))
    ranks[2].enqueue(_live(1, 10, 1))
    assert Router("least_loaded", 3).pick(ranks) == 1
    rr = Router("round_robin", 3)
    assert [rr.pick(ranks) for _ in range(4)] == [0, 1, 2, 0]
    even = Router("least_loaded", 3)
    empty = [make_rank("vllm", 10_000, hbm_gb=80, dp=3, max_seqs=None) for _ in range(3)]
    assert [even.pick(empty) for _ in range(3)] == [0, 1, 2]  # ties rotate
    with pytest.raises(ValueError, match="router must be"):
        Router("random", 3)


def test_engine_defaults_follow_the_gpus_memory():
    assert make_rank("vllm", 1, hbm_gb=141, dp=8, max_seqs=None).budget == 8192
    assert make_rank("vllm", 1, hbm_gb=180, dp=8, max_seqs=None).budget == 16384
    assert make_rank("sglang", 1, hbm_gb=141, dp=8, max_seqs=None).chunk == 1024  # 8192 over 8 DP ranks
    assert make_rank("vllm", 1, hbm_gb=141, dp=8, max_seqs=37).max_seqs == 37
    with pytest.raises(ValueError, match="engine must be"):
        make_rank("tgi", 1, hbm_gb=80, dp=1, max_seqs=None)


def test_trtllm_starts_a_request_only_when_every_started_one_fits_at_its_end():
    """GUARANTEED_NO_EVICT (TensorRT-LLM's default capacity policy): two requests of 100 prompt and 100 output
    tokens in a pool of 300 run one after the other, never evicted; vLLM's scheduler starts both at once and
    preempts one when the pool fills."""
    served = {}
    for cls in (VLLMRank, TRTLLMRank):
        r = cls(300, max_num_batched_tokens=8192, max_num_seqs=64)
        a, b = _live(0, 100, 100), _live(1, 100, 100)
        r.enqueue(a)
        r.enqueue(b)
        first = _step(r, 1.0)
        t = 1.0
        while not (a.done and b.done):
            t += 1
            _step(r, t)
            assert t < 2000
        served[cls] = (len(first.entries), a.preemptions + b.preemptions, b.first_token_s > a.finished_s)
    assert served[VLLMRank][0] == 2 and served[VLLMRank][1] >= 1
    assert served[TRTLLMRank] == (1, 0, True)
    assert isinstance(make_rank("trtllm", 10, hbm_gb=80, dp=1, max_seqs=None), TRTLLMRank)


def test_sglang_reserves_a_chunked_prompts_output_once_when_its_last_chunk_is_admitted():
    """SGLang's running batch holds decoding requests only; a prompt still in its chunks is reserved (its whole
    clipped output) with the chunk that completes it, not also at the ratio while it is chunked."""
    r = SGLangRank(100_000, chunked_prefill_size=256, max_prefill_tokens=16384, max_running=64)
    a = _live(0, 600, 1000)
    r.enqueue(a)
    _step(r, 1.0)  # its first chunk: it runs, still prefilling
    assert a in r.running and a.prefilling and r._reserve() == 0
    _step(r, 2.0)
    _step(r, 3.0)  # the last chunk: decoding from here
    assert not a.prefilling and r._reserve() == pytest.approx(r.new_token_ratio * (1000 - a.generated))
