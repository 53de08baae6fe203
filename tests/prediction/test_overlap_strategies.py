"""Which overlap pays: the single-batch-overlap step, the strategies a sweep compares, and the answer's
runs of token counts per strategy."""

from __future__ import annotations

import pytest

from demos.errors import ConfigError
from demos.prediction import predict
from demos.prediction.answer import overlap_ranges
from demos.prediction.sweep import OVERLAPS, Sweep, applicable_overlaps
from demos.zoo.models import get_preset
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

DSV3 = get_preset("deepseek-v3")
LMSYS = dict(gpu="h100", nodes=9, ep=72, context=2000)


def _w(tokens: int = 32, schedule: str | None = None, ep: int = 72, nodes: int = 9) -> Workload:
    return Workload(DSV3, cluster_for("h100", nodes, None, ep), "decode", tokens, 2000, schedule=schedule)


def test_sbo_overlaps_the_combine_with_the_down_gemm_and_splits_the_experts_kernel():
    with ZooRun(_w(), mode="graph") as r:
        none, sbo = r.step(False), r.step(False, sbo=True)
    assert sbo.seconds < none.seconds * 0.99  # the combine's flight runs beside the down GEMM
    moe_layers = DSV3.moe_layers
    assert sbo.kernels == none.kernels + moe_layers  # the routed experts as two kernels, up and down
    ops = {k.op for k in sbo.records}
    assert {"experts_up", "experts_down"} <= ops and "experts_ll" not in ops


def test_sbo_is_a_step_without_dbo_on_the_low_latency_schedule():
    with ZooRun(_w(), mode="graph") as r, pytest.raises(ValueError, match="single-batch"):
        r.step(True, sbo=True)
    with ZooRun(_w(schedule="ht"), mode="eager") as r, pytest.raises(ValueError, match="ll schedule"):
        r.step(False, sbo=True)


def test_the_strategies_that_apply():
    assert applicable_overlaps(_w()) == ("none", "dbo", "sbo")  # EP 72 over 9 nodes: no fused MoE kernel
    assert set(OVERLAPS) == {"none", "dbo", "sbo", "fused"}
    assert applicable_overlaps(_w(schedule="ht")) == ("none", "dbo")
    assert applicable_overlaps(_w(ep=1, nodes=1)) == ("none",)
    with pytest.raises(ConfigError, match="overlap.*sbo does not apply"):
        Sweep(_w(schedule="ht"), (32,), ("eager",), overlaps=("none", "sbo"))
    with pytest.raises(ConfigError, match="overlap must be among"):
        Sweep(_w(), (32,), ("graph",), overlaps=("tbo",))


def test_overlap_ranges_are_runs_of_the_fastest_strategy():
    recs = [{"tokens": t, "overlap": o} for t, o in ((64, "sbo"), (8, "none"), (16, "sbo"), (128, "dbo"))]
    assert overlap_ranges(recs) == [
        {"overlap": "none", "from": 8, "to": 8},
        {"overlap": "sbo", "from": 16, "to": 64},
        {"overlap": "dbo", "from": 128, "to": None},
    ]
    assert overlap_ranges([]) == []


@pytest.mark.slow
def test_each_point_names_its_fastest_strategy_and_the_answer_its_runs():
    pred = predict("deepseek-v3", tokens=[16, 256], **LMSYS)
    d = pred.to_dict()
    assert d["overlaps"] == ["none", "dbo", "sbo"]
    for p in d["points"]:
        steps = {"none": p["step_no_dbo_s"], "dbo": p["step_dbo_s"], "sbo": p["step_sbo_s"]}
        assert p["overlap"] == min(steps, key=steps.get)
    assert [x["overlap"] for x in d["overlap"]["graph"]] == [p["overlap"] for p in d["points"]]
    assert "best     graph: sbo at 16, dbo from 256" in pred.text()
    only = predict("deepseek-v3", tokens=[16], overlap=["none", "dbo"], **LMSYS).to_dict()
    assert only["points"][0]["step_sbo_s"] is None and only["points"][0]["overlap"] == "none"


def test_a_swept_knob_that_changes_nothing_is_said_to_make_no_difference():
    from demos.prediction.outputs import _no_difference

    pts = [
        {"mode": "graph", "tokens": t, "ubatches": n, "comm_sms": 0, "step_dbo_s": 0.01 * t}
        for t in (16, 64)
        for n in (2, 3)
    ]
    assert _no_difference(pts, "graph")
    pts[-1] = {**pts[-1], "step_dbo_s": 0.5}
    assert not _no_difference(pts, "graph")
    assert not _no_difference([p for p in pts if p["ubatches"] == 2], "graph")  # one setting: nothing to say
