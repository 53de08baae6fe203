"""``demos.fidelity.breakdown`` and ``python -m demos.validate grid --breakdown``: each op's kernel time
in a step, measured against predicted, on virtual machines whose truth is known."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dbo.costs import OpCost
from dbo.trace import KernelRecord
from demos import validate as cli
from demos.fidelity import breakdown as bd
from demos.fidelity import checks
from demos.fidelity.comparison import Point
from tests.support.profiles import validation_machine

pytestmark = pytest.mark.timeout(120)

MACHINE = validation_machine(experts=OpCost(device=50e-6, scale=2.0))
SHAPES = (("hidden", 64), ("layers", 2))


def _ops(step: bd.StepBreakdown) -> dict[str, bd.OpTimes]:
    return {o.op: o for o in step.ops}


def test_the_machines_own_profile_predicts_every_op_exactly():
    b = bd.breakdown("virtual", MACHINE, Point("ht", 64, 1.0, "eager", SHAPES), steps=2, min_time=0, truth=MACHINE)
    assert b.steps == 2 and b.point.mode == "eager"
    for step, kernels in ((b.no_dbo, 2), (b.dbo, 4)):  # 2 layers, 1 or 2 ubatches
        ops = _ops(step)
        assert {"attn_qkv", "router", "experts", "shared", "dispatch", "combine"} <= set(ops)
        assert ops["experts"].kernels == kernels and ops["experts"].kind == "compute"
        assert ops["dispatch"].kind == "comm"
        for o in step.ops:
            assert o.measured_s > 0 and o.predicted_s == pytest.approx(o.measured_s, rel=1e-9), o.op
        assert step.predicted_step_s == pytest.approx(step.measured_step_s, rel=1e-9)
        assert step.predicted_span_s == pytest.approx(step.measured_span_s, rel=1e-9)


def test_one_slow_op_shows_where_it_is_and_nowhere_else():
    # the machine's experts run 3x their profile's; a profile that does not know it predicts them short
    ops = dict(MACHINE.host.ops)
    ops["experts"] = OpCost(device=150e-6, scale=6.0)
    truth = replace(MACHINE, host=replace(MACHINE.host, ops=ops))
    b = bd.breakdown("virtual", MACHINE, Point("ht", 64, 1.0, "eager", SHAPES), steps=1, min_time=0, truth=truth)
    for step in (b.no_dbo, b.dbo):
        got = _ops(step)
        assert got["experts"].measured_s == pytest.approx(3 * got["experts"].predicted_s, rel=1e-6)
        for op in ("attn_qkv", "attn_context", "router", "shared", "finalize"):
            assert got[op].predicted_s == pytest.approx(got[op].measured_s, rel=1e-6), op
        assert step.predicted_step_s < step.measured_step_s
    text = bd.format_breakdown(b)
    assert "breakdown: ht eager 64 tokens comm 1x on virtual (1 timed steps per kind, medians)" in text
    row = next(line for line in text.splitlines() if line.split()[:1] == ["experts"])
    assert "(-67%)" in row  # predicted a third of measured


def test_a_graph_point_is_broken_down_as_its_eager_steps():
    b = bd.breakdown("virtual", MACHINE, Point("ll", 16, 1.0, "graph", SHAPES), steps=1, min_time=0, truth=MACHINE)
    assert b.point.mode == "eager" and "ll eager 16 tokens" in bd.format_breakdown(b)
    assert _ops(b.dbo)["experts_ll"].kernels == 4


def _rec(op, start, end, kind="compute"):
    return KernelRecord("s", f"{op} k", kind, 0, start, end, op, 0)


def test_step_ops_takes_medians_over_steps_and_counts_an_op_absent_from_a_step_as_zero():
    steps = [
        [_rec("a", 0.0, 1.0), _rec("a", 1.0, 2.0), _rec("b", 2.0, 5.0, "comm")],
        [_rec("a", 0.0, 3.0), _rec("a", 3.0, 4.0)],  # no "b" in this step
        [_rec("a", 0.0, 1.5), _rec("a", 1.5, 3.0), _rec("b", 3.0, 4.0, "comm")],
        [_rec("a", 0.0, 1.0), _rec("c", 1.0, 4.0)],  # "c" only here
    ]
    got, span = bd.step_ops(steps)
    assert got[("a", "compute")] == (2, pytest.approx(2.5))  # sums 2, 4, 3, 1
    assert got[("b", "comm")] == (0, pytest.approx(0.5))  # sums 3, 0, 1, 0
    assert got[("c", "compute")] == (0, pytest.approx(0.0))  # sums 0, 0, 0, 3
    assert span == pytest.approx(4.0)  # spans 5, 4, 4, 4


def test_cli_breakdown_prints_each_selected_point_once_and_writes_json(tmp_path, capsys, monkeypatch):
    real = bd.breakdown
    seen = []

    def on_virtual(backend, profile, pt, **kw):
        seen.append(pt)
        return real("virtual", profile, replace(pt, shapes=SHAPES), steps=1, min_time=0, truth=MACHINE)

    monkeypatch.setattr(checks, "breakdown", on_virtual)
    path = tmp_path / "m.json"
    MACHINE.to_json(path)
    out = tmp_path / "b.json"
    argv = ["grid", "--profile", str(path), "--sizes", "16", "--ratios", "1", "--schedules", "ll", "--breakdown"]
    assert cli.main(argv + ["--json", str(out), "--no-progress", "--no-held-out"]) == 0
    text = capsys.readouterr().out
    assert len(seen) == 1 and seen[0].mode == "eager"  # eager and graph of one point: one run
    assert text.count("breakdown: ll eager 16 tokens comm 1x") == 1
    assert "crossover" not in text  # no validation table
    d = json.loads(out.read_text())
    (one,) = d["breakdowns"]
    assert one["point"]["tokens"] == 16 and {o["op"] for o in one["dbo"]["ops"]} >= {"experts_ll", "dispatch_ll"}
