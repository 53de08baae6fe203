"""The coupled disaggregated run (``demos.serving.coupled``) on constant clocks, where every figure is known
in closed form: a request's first token reaches the decode side a transfer after its prefill, it decodes
from its second token there, a closed loop sends the next request only when one has finished decoding,
and a worker that stepped ahead never takes an arrival into a step that began before it arrived."""

from __future__ import annotations

import pytest

from demos.serving import arrivals
from demos.serving.batch import SplitDecision
from demos.serving.coupled import Side, _Worker, serve_coupled, simulate_disaggregated
from demos.serving.engine_ranks import make_rank, make_router
from demos.serving.run import Pool, PoolKind, metrics

pytestmark = pytest.mark.timeout(300)


def _never(batches):
    return SplitDecision(False, "disabled")


def _worker(kind: PoolKind, step_s: float, ranks: int = 1, log: list | None = None, engine: str = "vllm") -> _Worker:
    rs = [make_rank(engine, 1_000_000, hbm_gb=80, dp=ranks, max_seqs=None) for _ in range(ranks)]

    def price(batches, decision):
        if log is not None:
            log.append((kind, batches))
        return step_s

    return _Worker(Pool(kind, rs, make_router(engine, ranks), engine, ranks), _never, price)


def test_vllms_first_token_comes_from_the_decode_sides_recompute_a_step_after_the_transfer():
    """vLLM's decode side recomputes the token the prefill side sampled (vLLM issue 50913): its first step for the
    request makes the client's first token, and the request decodes its whole output there."""
    pre, dec = _worker(PoolKind.PREFILL, 1.0), _worker(PoolKind.DECODE, 0.1)
    source = arrivals.ClosedLoop(1, 100, 3, 1)
    (live,) = serve_coupled([pre], [dec], source, transfer_s=lambda r: 0.5)
    assert live.arrival_s == 0.0
    assert live.first_token_s == pytest.approx(1.6)  # 1 s of prefill, 0.5 s of transfer, the recompute's step
    assert live.token_s == pytest.approx([1.6, 1.7, 1.8]) and live.finished_s == pytest.approx(1.8)


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_sglang_and_trtllm_stream_the_prefill_sides_token_when_the_decode_loop_takes_the_request(engine):
    """An idle decode worker takes the transferred request at once: its first token is the transfer's end; a busy
    one at its step's end (a second request's cache lands during the first one's decode step)."""
    pre, dec = _worker(PoolKind.PREFILL, 1.0, engine=engine), _worker(PoolKind.DECODE, 0.1, engine=engine)
    (live,) = serve_coupled([pre], [dec], arrivals.ClosedLoop(1, 100, 3, 1), transfer_s=lambda r: 0.5)
    assert live.token_s == pytest.approx([1.5, 1.6, 1.7]) and live.first_token_s == pytest.approx(1.5)
    pre, dec = _worker(PoolKind.PREFILL, 1.0, engine=engine), _worker(PoolKind.DECODE, 0.3, engine=engine)
    first_id = min(r.id for r in arrivals.ClosedLoop(2, 100, 4, 2))
    transfer = {first_id: 0.05}  # both prefilled by 1.0; one cache lands at 1.05, the other at 1.2
    lives = serve_coupled([pre], [dec], arrivals.ClosedLoop(2, 100, 4, 2), lambda r: transfer.get(r.id, 0.2))
    # the first is taken in at once and decodes 1.05-1.35; the second lands during that step: taken in at 1.35
    second = max(lives, key=lambda x: x.first_token_s)
    assert second.first_token_s == pytest.approx(1.35) and second.token_s[1] == pytest.approx(1.65)


def test_a_closed_loop_sends_the_next_request_when_one_has_decoded():
    pre, dec = _worker(PoolKind.PREFILL, 1.0), _worker(PoolKind.DECODE, 0.1)
    lives = serve_coupled([pre], [dec], arrivals.ClosedLoop(1, 100, 3, 3), transfer_s=lambda r: 0.0)
    assert [x.arrival_s for x in lives] == pytest.approx([0.0, 1.3, 2.6])  # each after the previous finished
    assert all(x.finished_s is not None for x in lives)


def test_workers_step_concurrently_and_no_step_takes_an_arrival_from_its_future():
    """Two decode workers, round robin: four clients split two and two; every decode token of a request
    comes after its arrival on the decode side. The bug this catches: a worker whose clock ran ahead
    putting a request that arrives later into a step that had begun already."""
    log: list = []
    pre = _worker(PoolKind.PREFILL, 0.3, log=log)
    decs = [_worker(PoolKind.DECODE, 0.07, log=log), _worker(PoolKind.DECODE, 0.11, log=log)]
    lives = serve_coupled([pre], decs, arrivals.ClosedLoop(4, 64, 20, 12), transfer_s=lambda r: 0.013)
    assert len(lives) == 12 and all(x.finished_s for x in lives)
    for x in lives:
        assert x.first_token_s >= x.arrival_s + 0.3 + 0.013 - 1e-9
        assert all(b > a for a, b in zip(x.token_s, x.token_s[1:]))
        assert x.token_s[1] - x.token_s[0] >= 0.07 - 1e-9  # a whole step after it arrived
    ranks = {id(x) for x in lives}
    assert len(ranks) == 12
    assert max(sum(b.requests for b in batches) for kind, batches in log if kind == PoolKind.DECODE) <= 4
    m = metrics("none", lives, decs[0].rec, gpus=3)
    assert m.requests == 12


@pytest.mark.slow
def test_a_decode_bound_deployment_decodes_as_its_decode_pool_alone():
    """With a prefill side much faster than the decode side, the coupled run's TPOT is the decode pool's
    own at the same clients per rank (the pool simulated alone, ``simulate(pool="decode")``), and two
    decode workers serve twice the clients at the same TPOT."""
    from demos.serving.api import simulate

    alone = simulate(
        "deepseek-v2-lite", engine="sglang", pool="decode", gpu="h100", ep=8, concurrency=64, isl=256, osl=128,
        requests=128, warmup=64, overlap="none", search=False,
    )  # fmt: skip
    tpot = alone.runs[0].tpot_ms.p50
    for workers in (1, 2):
        runs, _, setup = simulate_disaggregated(
            "deepseek-v2-lite", engine="sglang", prefill=Side("h100", ep=8), decode=Side("h100", ep=8, workers=workers),
            concurrency=64 * workers, isl=256, osl=128, requests=128 * workers, warmup=64 * workers,
        )  # fmt: skip
        assert runs["none"].tpot_ms.p50 == pytest.approx(tpot, rel=0.1), workers
        assert setup["decode"]["workers"] == workers


def test_a_one_token_request_finishes_when_its_token_streams():
    """A request of one output token has nothing to decode: it is done when the decode loop takes it in and its
    token streams (the boundary of the step another request's decode ran), not when its cache landed."""
    from demos.serving.requests import Request

    class Two:  # a closed loop of two clients: a request of 4 output tokens and one of 1
        concurrency = 2

        def __iter__(self):
            return iter([Request(0, None, 100, 4), Request(1, None, 100, 1)])

    pre, dec = _worker(PoolKind.PREFILL, 1.0, engine="sglang"), _worker(PoolKind.DECODE, 0.3, engine="sglang")
    lives = serve_coupled([pre], [dec], Two(), lambda r: 0.05 if r.id == 0 else 0.2)
    one = next(x for x in lives if x.request.output_tokens == 1)
    assert one.first_token_s == pytest.approx(1.35) and one.finished_s == one.first_token_s  # landed at 1.2
