"""The engines' rank schedulers and routers (``demos.serving.schedulers``): vLLM's token budget, running
requests first, chunked prefill, the request cap and preemption from the back; SGLang's prefill-first
steps, one chunked prompt at a time and retraction; the routers; and the KV accounting that every step
keeps equal to what the requests hold (the bug feared: a cache that leaks or goes negative, which would
admit requests that do not fit or starve the rank)."""

from __future__ import annotations

import pytest

from demos.serving.requests import Request
from demos.serving.schedulers import Live, Router, SGLangRank, VLLMRank, advance, make_rank


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
    r.NEW_TOKEN_RATIO = 0.0  # admit on the prompt alone, so the pool fills while decoding
    a, b = _live(0, 120, 40), _live(1, 120, 40)
    r.enqueue(a)
    r.enqueue(b)
    t = 0.0
    while not (a.done and b.done):
        t += 1
        _step(r, t)
        assert t < 500
    assert b.preemptions >= 1 and a.preemptions == 0 and r.kv_used == 0


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
