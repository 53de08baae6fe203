"""The serving loop (``demos.serving.run``) on a clock of constant steps, where every figure is known in
closed form: a closed loop keeps its clients' requests in flight and no more, an open loop starts nothing
before it arrives, TTFT/TPOT/E2E and the throughput follow from the step count, the decode side starts
from the second token and the prefill side ends at the first, and a request the cache cannot hold ends
the run in one line instead of spinning."""

from __future__ import annotations

import pytest

from demos.serving.batch import SplitDecision
from demos.serving.engine_ranks import make_rank, make_router
from demos.serving.requests import Request
from demos.serving.run import Pool, PoolKind, ServingError, metrics, serve

STEP = 0.001


def _pool(kind=PoolKind.COLOCATED, engine="vllm", ranks=1, kv=1_000_000) -> Pool:
    rs = [make_rank(engine, kv, hbm_gb=80, dp=ranks, max_seqs=None) for _ in range(ranks)]
    return Pool(PoolKind(kind), rs, make_router(engine, ranks), engine, ranks)


def _never(batches):
    return SplitDecision(False, "disabled")


def _const(batches, decision):
    return STEP


def test_one_client_one_request_at_a_time_is_a_step_per_token():
    reqs = [Request(i, None, 100, 10) for i in range(5)]
    lives, rec = serve(_pool(), reqs, decide=_never, price=_const, concurrency=1)
    m = metrics("none", lives, rec, gpus=1)
    assert m.requests == 5 and len(rec.ends) == 50
    assert m.ttft_ms.p50 == pytest.approx(1.0) and m.tpot_ms.p99 == pytest.approx(1.0)
    assert m.e2e_ms.p50 == pytest.approx(10.0) and m.itl_ms.p90 == pytest.approx(1.0)
    assert m.output_tokens_per_s == pytest.approx(1000.0)  # one token per 1 ms step
    assert m.steps == {"prefill": 5, "decode": 45} and m.split_share == 0.0 and m.not_split == {"disabled": 50}


def test_a_closed_loop_keeps_its_clients_requests_in_flight_and_no_more():
    in_flight = []
    pool = _pool(ranks=2)

    def price(batches, decision):
        in_flight.append(sum(b.requests for b in batches))
        return STEP

    reqs = [Request(i, None, 50, 1 + i % 7) for i in range(40)]
    lives, rec = serve(pool, reqs, decide=_never, price=price, concurrency=6)
    assert max(in_flight) == 6 and len([x for x in lives if x.finished_s]) == 40
    assert metrics("none", lives, rec, gpus=2, warmup=10).requests == 30


def test_an_open_loop_starts_nothing_before_it_arrives_and_jumps_over_idle_time():
    reqs = [Request(i, 0.5 * i, 20, 3) for i in range(4)]
    lives, rec = serve(_pool(), reqs, decide=_never, price=_const)
    for x in lives:
        assert x.first_token_s == pytest.approx(x.arrival_s + STEP)
        assert x.finished_s == pytest.approx(x.arrival_s + 3 * STEP)
    assert len(rec.ends) == 12  # idle time costs no step


def test_the_decode_side_starts_at_the_second_token_and_the_prefill_side_ends_at_the_first():
    """SGLang's decode side streams the prefill side's token and decodes from the second; vLLM's recomputes the
    first in one more step (``demos.serving.run``); the prefill side ends at the first token."""
    reqs = [Request(0, None, 1000, 10)]
    lives, rec = serve(_pool(PoolKind.DECODE, engine="sglang"), reqs, decide=_never, price=_const, concurrency=1)
    (x,) = lives
    assert len(rec.ends) == 9 and x.generated == 10 and x.first_token_s == 0.0
    assert metrics("none", lives, rec, gpus=1).tpot_ms.p50 == pytest.approx(1.0)
    lives, rec = serve(_pool(PoolKind.DECODE), reqs, decide=_never, price=_const, concurrency=1)
    (x,) = lives
    assert len(rec.ends) == 10 and x.generated == 10 and x.first_token_s == pytest.approx(STEP)
    assert metrics("none", lives, rec, gpus=1).tpot_ms.p50 == pytest.approx(1.0)
    lives, rec = serve(_pool(PoolKind.PREFILL), reqs, decide=_never, price=_const, concurrency=1)
    (x,) = lives
    assert len(rec.ends) == 1 and x.generated == 1 and x.finished_s == pytest.approx(STEP)
    assert _pool(PoolKind.PREFILL).ranks[0].kv_used == 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_request_the_cache_cannot_hold_ends_the_run_in_one_line(engine):
    with pytest.raises(ServingError, match=r"^rank 0 cannot schedule request 0 \(5000 prompt tokens\)"):
        serve(_pool(engine=engine, kv=1000), [Request(0, None, 5000, 2)], decide=_never, price=_const, concurrency=1)


def test_the_split_decisions_are_counted_by_reason():
    flips = iter([True, False] * 100)

    def decide(batches):
        return SplitDecision(True, "split") if next(flips) else SplitDecision(False, "below_threshold")

    lives, rec = serve(_pool(), [Request(0, None, 10, 20)], decide=decide, price=_const, concurrency=1)
    m = metrics("dbo", lives, rec, gpus=1)
    assert m.split_share == pytest.approx(0.5) and m.not_split == {"below_threshold": 10}
