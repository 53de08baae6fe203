"""The power-law routing model (``demos.zoo.routing_skew``, ``--imbalance power-law``)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from demos._cli.model_flags import parse_imbalance
from demos.errors import ConfigError
from demos.zoo import measured
from demos.zoo.models import get_preset
from demos.zoo.routing_skew import POWER_LAW, SAMPLES, power_law_imbalance
from demos.zoo.workload import Workload, auto_imbalance, cluster_for

DSV3 = get_preset("deepseek-v3")


def _busiest_by_hand(tokens: int, top_k: int, experts: int, ep: int, alpha: float, seed: int = 0) -> float:
    """aiconfigurator's generator written out one draw at a time: each expert's share from the power law on
    ``[1, 0.8 T]``, rounded copies, the experts dealt to ranks in order, the busiest rank over the mean."""
    rng = np.random.default_rng(seed)
    u = rng.random((SAMPLES, experts))
    total = tokens * ep
    lo, hi = (1.0, 0.8 * total) if total * top_k > experts else (0.01, 2.0)
    out = []
    for row in u:
        x = ((hi ** (1 - alpha) - lo ** (1 - alpha)) * row + lo ** (1 - alpha)) ** (1 / (1 - alpha))
        copies = np.round(x / x.sum() * total * top_k)
        ranks = [copies[r * experts // ep : (r + 1) * experts // ep].sum() for r in range(ep)]
        out.append(max(ranks) / (sum(ranks) / ep))
    return float(np.mean(out))


def test_the_model_is_aiconfigurators_generator_averaged_over_a_fixed_seed():
    for tokens, ep in ((4, 32), (163, 32), (64, 8)):
        want = _busiest_by_hand(tokens, 8, 256, ep, 1.01)
        assert power_law_imbalance(tokens, 8, 256, ep) == pytest.approx(want, rel=1e-12)
    power_law_imbalance.cache_clear()
    assert power_law_imbalance(163, 8, 256, 32) == pytest.approx(_busiest_by_hand(163, 8, 256, 32, 1.01), rel=1e-12)


def test_redundant_slots_split_a_two_copy_experts_draw_over_its_copies_before_ranks_are_summed():
    """``redundant``: the same draws, slot ``p`` holding expert ``p mod experts`` (its copies sharing its load)."""
    rng = np.random.default_rng(0)
    u = rng.random((SAMPLES, 256))
    total, k, ep = 116 * 32, 8, 32
    out = []
    for row in u:
        x = ((0.8 * total) ** -0.01 - 1.0) * row + 1.0
        x = x ** (1 / -0.01)
        copies = np.round(x / x.sum() * total * k)
        slots = np.array([copies[p % 256] / (2 if p % 256 < 32 else 1) for p in range(288)])
        ranks = slots.reshape(ep, 9).sum(axis=1)
        out.append(ranks.max() / ranks.mean())
    want = float(np.mean(out))
    assert power_law_imbalance(116, 8, 256, 32, redundant=32) == pytest.approx(want, rel=1e-9)


def test_skewed_routing_loads_the_busiest_rank_far_past_uniform_routing_and_more_over_more_ranks():
    one, eight, wide = (power_law_imbalance(163, 8, 256, ep) for ep in (1, 8, 32))
    assert one == 1.0 and 1.2 < eight < wide < 3.5
    assert wide > 2.0 * auto_imbalance(163, 8, 32)  # uniform: 1.07 at 163 tokens over 32 ranks
    assert power_law_imbalance(0, 8, 256, 32) == 1.0
    assert power_law_imbalance(163, 8, 256, 32, alpha=1.2) > wide  # the steeper law aiconfigurator also tables


def test_a_workload_takes_the_named_routing_model_and_refuses_another_word():
    w = Workload(DSV3, cluster_for("gb300", 8, 4, 32), tokens=64, imbalance=POWER_LAW)
    assert w.imbalance_at(64) == power_law_imbalance(64, 8, 256, 32)
    assert w.with_(imbalance="auto").imbalance_at(64) == auto_imbalance(64, 8, 32)
    assert w.with_(moe_tp=1).imbalance_at(0) == 1.0
    with pytest.raises(ConfigError, match="'auto' or 'power-law'"):
        Workload(DSV3, cluster_for("gb300", 8, 4, 32), tokens=64, imbalance="zipf")


def test_the_flag_parses_the_routing_models_in_any_case():
    assert parse_imbalance("Power-Law") == POWER_LAW and parse_imbalance("auto") == "auto"
    assert parse_imbalance("1.5") == 1.5
    with pytest.raises(argparse.ArgumentTypeError, match="power-law"):
        parse_imbalance("zipf")


@pytest.mark.measured
@pytest.mark.slow
@pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
def test_validate_silicon_under_skewed_routing_lengthens_the_wide_expert_parallel_steps():
    """``validate silicon --imbalance power-law``: every data-parallel attention decode row over 16 or more EP
    ranks (an all-to-all across a rack) predicted longer than under uniform routing. Not every row of fewer
    ranks: at a few token copies a rank the uniform fluctuation (1.7 at one token, top-8, over 8 ranks) exceeds
    the power law's (1.5), and those steps read shorter."""
    from demos.fidelity import silicon

    uniform, _ = silicon.silicon_rows(imbalance="auto")
    skewed, _ = silicon.silicon_rows(imbalance=POWER_LAW)
    pairs = {(r.id, r.phase): r for r in uniform}
    wide = [(pairs[(r.id, r.phase)], r) for r in skewed if r.phase == "decode" and r.ep >= 16 and r.attention_tp == 1]
    assert len(wide) > 30 and all(s.predicted_s > u.predicted_s for u, s in wide)
    assert auto_imbalance(1, 8, 8) > power_law_imbalance(1, 8, 256, 8)
