"""Redundant expert slots placed without EPLB (``demos.zoo.expert_placement``, ``Workload.redundant_slots``) and
the measured rows whose recipes deployed them (``inferencex.DISAGG_REDUNDANT_SLOTS``)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter

import pytest

from demos.errors import ConfigError
from demos.vocabulary import Phase
from demos.zoo import measured
from demos.zoo.expert_placement import placement_imbalance, slot_experts, trivial_shares
from demos.zoo.models import get_preset
from demos.zoo.routing_skew import POWER_LAW, power_law_imbalance
from demos.zoo.vendor_data.inferencex import DISAGG_REDUNDANT_SLOTS, redundant_slots
from demos.zoo.workload import Workload, auto_imbalance, cluster_for

DSV3 = get_preset("deepseek-v3")
needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def test_slot_p_holds_expert_p_mod_the_experts_so_the_first_experts_get_the_second_copies():
    assert slot_experts(4, 3) == (0, 1, 2, 3, 0, 1, 2)
    assert slot_experts(256, 32)[256:] == tuple(range(32))


def test_a_small_placement_by_hand():
    # 6 experts in 8 slots over 4 ranks: slots (0 1)(2 3)(4 5)(0 1); experts 0 and 1 have two copies
    shares = trivial_shares(6, 2, 4)
    assert shares == pytest.approx((1 / 6, 2 / 6, 2 / 6, 1 / 6))
    assert placement_imbalance(0, 2, 6, 2, 4) == pytest.approx(4 / 3)  # the heaviest share alone


def test_deepseeks_32_redundant_slots_put_nine_single_copy_experts_on_most_ranks():
    for ep, heavy in ((8, 6), (32, 24), (48, 36)):
        shares = trivial_shares(256, 32, ep)
        assert sum(shares) == pytest.approx(1.0)
        assert max(shares) * ep == pytest.approx(9 / 8)  # 288 / ep slots of 1/256 each, the mean 1/ep
        assert sum(1 for s in shares if s == pytest.approx(max(shares))) == heavy
        assert min(shares) * ep < 1  # the ranks that hold the second copies run lighter
    with pytest.raises(ValueError, match="must divide the 288 expert slots"):
        trivial_shares(256, 32, 20)


def test_the_busiest_ranks_load_is_the_heaviest_share_plus_uniform_routings_fluctuation():
    # without redundant slots it is the uniform estimate itself
    for tokens, ep in ((4, 32), (163, 32), (64, 8)):
        assert placement_imbalance(tokens, 8, 256, 0, ep) == pytest.approx(auto_imbalance(tokens, 8, ep))
    got = placement_imbalance(163, 8, 256, 32, 32)
    assert got == pytest.approx(9 / 8 * (1 + (2 * math.log(24) / (163 * 8 * 9 / 8)) ** 0.5))
    assert got > auto_imbalance(163, 8, 32)
    assert placement_imbalance(10**7, 8, 256, 32, 32) == pytest.approx(9 / 8, rel=1e-3)
    assert placement_imbalance(163, 8, 256, 32, 1) == 1.0


def test_a_workload_with_redundant_slots_holds_them_and_loads_its_busiest_rank_by_the_placement():
    plain = Workload(DSV3, cluster_for("gb300", 8, 4, 32), tokens=116, imbalance="auto")
    w = plain.with_(redundant_slots=32)
    assert (plain.experts_per_rank, w.experts_per_rank) == (8, 9)
    assert (w.physical_experts, w.redundant_experts) == (288, 32)
    assert w.imbalance_at(116) == placement_imbalance(116, 8, 256, 32, 32) > plain.imbalance_at(116)
    assert w.routing(116).experts == 288
    skewed = w.with_(imbalance=POWER_LAW)
    assert skewed.imbalance_at(116) == power_law_imbalance(116, 8, 256, 32, redundant=32)
    assert skewed.imbalance_at(116) != power_law_imbalance(116, 8, 256, 32)
    assert w.with_(imbalance=1.5).imbalance_at(116) == 1.5  # a number is the busiest load as given


@pytest.mark.parametrize(
    "changes, match",
    [
        (dict(redundant_slots=30), "must divide the 256 routed experts plus the redundant slots"),
        (dict(redundant_slots=-1), "redundant_slots must be an int >= 0"),
        (dict(redundant_slots=True), "redundant_slots must be an int >= 0"),
    ],
)
def test_slots_that_ep_does_not_divide_or_no_count_are_refused_in_one_line(changes, match):
    with pytest.raises(ConfigError, match=match):
        Workload(DSV3, cluster_for("gb300", 8, 4, 32), tokens=64, **changes)


def test_a_dense_model_or_moe_tensor_parallelism_takes_no_redundant_slots():
    dense = dataclasses.replace(DSV3, moe=None, first_k_dense=DSV3.num_layers, name="dense")
    with pytest.raises(ConfigError, match="dense is dense, it has no experts"):
        Workload(dense, cluster_for("h100", 1, 8, 8), tokens=8, redundant_slots=8)
    with pytest.raises(ConfigError, match="every rank holds every expert"):
        Workload(DSV3, cluster_for("b200", 1, 8, 8), tokens=8, attention_tp=8, moe_tp=8, redundant_slots=32)


def test_the_ninth_expert_and_the_heavier_rank_lengthen_a_wide_decode_step():
    from demos.fidelity.silicon import _step_seconds

    plan = dict(preset="deepseek-r1", gpu="gb300", ep=32, tp=1, tokens=116, context=1536, engine="sglang")
    plain = _step_seconds(Phase.DECODE, plan)
    slots = _step_seconds(Phase.DECODE, {**plan, "redundant_slots": 32})
    assert 1.01 < slots / plain < 1.25


IX_DB = "db-dump/2026-04-27; config_id=1; measured={}T00:00:00.000Z; workflow_run_id=1"


def _record(day, system="gb300", precision="fp8", mode="disagg", backend="sglang", dp=32.0):
    return {
        "backend": backend,
        "model_path": "deepseek-ai/DeepSeek-R1",
        "silicon_data_source": IX_DB.format(day),
        "system": system,
        "precision": precision,
        "mode": mode,
        "decode_attention_dp_size": dp,
    }


@pytest.mark.parametrize(
    "record, slots",
    [
        (_record("2026-02-09"), 32),
        (_record("2026-02-09", precision="fp4"), 32),
        (_record("2026-02-01"), 0),  # before InferenceX named the recipe directory
        (_record("2026-02-09", dp=1.0), 0),  # a low-latency recipe: attention TP, no DeepEP, no slots
        (_record("2026-02-09", backend="trtllm"), 0),
        (_record("2026-02-09", mode="agg"), 0),
        (_record("2026-02-08", "gb200", "fp4"), 32),
        (_record("2026-02-01", "gb200", "fp8"), 0),
        (_record("2026-02-05", "gb200", "fp8"), 32),
        (_record("2026-03-10", "b200_sxm"), 0),  # SGLang's B200 recipes set none
    ],
)
def test_disaggregated_sglang_rows_of_recipes_with_redundant_slots_read_them(record, slots):
    assert redundant_slots(record) == slots
    assert DISAGG_REDUNDANT_SLOTS[0] == 32


@needs_tables
def test_the_checks_plan_the_decode_workers_of_those_recipes_with_their_slots():
    from demos.fidelity import serving, silicon

    rows = measured.silicon_rows()
    counts = Counter((r.system, r.precision) for r in rows if r.redundant_slots)
    assert counts == {("gb300", "fp8"): 11, ("gb200", "fp8"): 9, ("gb200", "fp4"): 5, ("gb300", "fp4"): 5}
    assert all(r.engine == "sglang" and r.mode == "disagg" and r.attention_dp > 1 for r in rows if r.redundant_slots)
    row = next(r for r in rows if r.redundant_slots and r.tpot_s is not None and r.speculative == "none")
    assert silicon._plan(row)["redundant_slots"] == 32
    assert serving._plan(row)["redundant_slots"] == 32
    others = [silicon._plan(r) for r in rows if r.engine == "sglang" and r.mode == "disagg" and not r.redundant_slots]
    planned = [p for p in others if isinstance(p, dict)]
    assert planned and not any("redundant_slots" in p for p in planned)


@needs_tables
def test_the_serving_check_gives_the_slots_to_the_decode_side_only(monkeypatch):
    from demos.fidelity import serving
    from demos.serving import coupled

    seen = {}

    def fake(model, *, prefill, decode, **kw):
        seen.update(prefill=prefill, decode=decode)
        raise RuntimeError("stop")

    monkeypatch.setattr(coupled, "simulate_disaggregated", fake)
    row = next(r for r in measured.silicon_rows() if r.redundant_slots and r.speculative == "none")
    plan = serving._plan(row)
    with pytest.raises(RuntimeError, match="stop"):
        serving._disaggregated(row, plan, 8, 8, False, {})
    assert seen["decode"].redundant_slots == 32 and seen["prefill"].redundant_slots == 0
