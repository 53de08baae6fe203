"""The step pricer (``demos.serving.step_times``): a step costs its busiest rank's batch (the padded
count where the engine pads), decode steps at their mean context in the mode the decision says, steps
with prefill chunks as prefill, split steps as DBO; between grid points the price is interpolated (exact
for a price linear in tokens and context), each grid point runs once; and one real point of the
predictor, compared with a direct run."""

from __future__ import annotations

import pytest

from demos.serving.batch import RankBatch, SplitDecision
from demos.serving.step_times import GRID_TOKENS, Priced, StepPricer, kv_capacity_tokens, token_grid
from demos.vocabulary import Mode, Phase
from demos.zoo.models import get_preset
from demos.zoo.workload import Workload, cluster_for

W = Workload(get_preset("qwen3-30b-a3b"), cluster_for("h100", 1, 8, 8), tokens=64, context=1024)
calls = []


def _linear(phase, tokens, context, mode):
    calls.append((phase, tokens, context, mode))
    base = (1e-3 if phase == Phase.DECODE else 2e-3) * tokens + 1e-6 * context + (0 if mode == Mode.GRAPH else 5e-3)
    return Priced(base, 0.9 * base, 0.95 * base)


def test_the_token_grid():
    assert token_grid(20) == (1, 2, 3, 4, 6, 8, 12, 16, 24)
    assert GRID_TOKENS[-1] >= 1 << 17


def test_a_step_costs_its_busiest_rank_at_its_mix_interpolated_between_grid_points():
    calls.clear()
    p = StepPricer(W, run=_linear)
    ranks = [RankBatch((1000,) * 20), RankBatch((3000,) * 50), RankBatch()]
    plain = SplitDecision(False, "below_threshold", None, True)
    assert p.seconds(ranks, plain) == pytest.approx(1e-3 * 50 + 1e-6 * 3000)
    split = SplitDecision(True, "split", 64, True)  # padded to 64: priced at 64 tokens, split
    assert p.seconds(ranks, split) == pytest.approx(0.9 * (1e-3 * 64 + 1e-6 * 3000))
    eager = SplitDecision(False, "below_threshold", None, False)
    assert p.seconds(ranks, eager) == pytest.approx(1e-3 * 50 + 1e-6 * 3000 + 5e-3)
    assert p.seconds(ranks, plain, sbo=True) == pytest.approx(0.95 * (1e-3 * 50 + 1e-6 * 3000))
    mixed = [RankBatch((500,) * 10, ((1000, 2000),)), RankBatch((100,))]
    # prefill, eager, in one request as long as the busiest rank's tokens (a chunk's cached tokens not charged)
    assert p.seconds(mixed, plain) == pytest.approx(2e-3 * 1010 + 1e-6 * 1010 + 5e-3)
    assert p.seconds([RankBatch(), RankBatch()], plain) == 0.0
    n = p.runs
    p.seconds(ranks, plain)
    assert p.runs == n and len(calls) == n  # each grid point ran once
    assert all(t in GRID_TOKENS for _, t, _, _ in calls)


@pytest.mark.slow  # a whole run (the fast tier leaves it out: docs/testing.md)
def test_interpolation_error_against_the_predictor_itself():
    """Decode steps of a real model between grid points, against direct runs (the figure the docs quote)."""
    p = StepPricer(W)
    err = p.interpolation_error([(Phase.DECODE, 40, 1500, Mode.GRAPH), (Phase.DECODE, 10, 3000, Mode.GRAPH)])
    assert err["samples"] == 2 and err["max"] < 0.05


def test_the_kv_cache_a_rank_holds():
    one = W.with_(cluster=cluster_for("h100", 1, 1, 1))  # every expert on one GPU: less room for the cache
    assert kv_capacity_tokens(W, 8192) > kv_capacity_tokens(one, 8192) > 0
    assert kv_capacity_tokens(W, 8192) > kv_capacity_tokens(W, 65536)  # a larger step's activations
