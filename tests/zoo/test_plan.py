"""The step as one op list (``demos.zoo.ops``, ``demos.zoo.plan``): the ops a step launches are the plan's,
layer by layer, in every schedule, with and without DBO and single-batch overlap; the breakdown sums the
same plan; an op missing from the table is an error, never a kernel of stage "other".

The bug these catch: the model launching an op the plan (and so the breakdown) does not hold, or the
plan holding one the model never launches, after a change to one and not the other."""

from __future__ import annotations

from collections import Counter

import pytest

from dbo.costs import Work
from dbo.trace import KernelRecord
from demos.zoo.breakdown import layer_breakdown
from demos.zoo.models import get_preset
from demos.zoo.ops import OPS, UnknownOpError, op, stage_seconds
from demos.zoo.overlap_costs import step_profile
from demos.zoo.plan import StepPlan, launch_seconds
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

pytestmark = pytest.mark.timeout(120)

DSV3 = get_preset("deepseek-v3")
CASES = {
    "ll, all-to-all": Workload(DSV3, cluster_for("h100", 2, 8, 16), tokens=32, context=1024),
    "ht, all-to-all": Workload(DSV3, cluster_for("h100", 2, 8, 16), phase="prefill", tokens=2048, context=1024),
    "ll, EP 1": Workload(get_preset("qwen3-30b-a3b"), cluster_for("h100", 1, 1, 1), tokens=16, context=512),
    "ht, EP 1": Workload(get_preset("qwen3-30b-a3b"), cluster_for("h100", 1, 1, 1), tokens=16, schedule="ht"),
    "attention TP with an all-to-all": Workload(DSV3, cluster_for("h200", 2, 8, 16), tokens=64, attention_tp=4),
    "attention TP = EP": Workload(DSV3, cluster_for("h200", 1, 8, 8), tokens=64, attention_tp=8),
    "sliding windows": Workload(get_preset("gpt-oss-120b"), cluster_for("h100", 2, 8, 16), tokens=16, context=4096),
}


def _launched(records: list[KernelRecord], ubatch: int | None = None) -> tuple[Counter, dict[int, Counter]]:
    """(the embedding's ops, {layer: ops}) the records of one step (one ubatch's) launched."""
    embed, layers = Counter(), {}
    for r in records:
        if ubatch is not None and r.ubatch != ubatch:
            continue
        if op(r.op).group == "embed":
            embed[r.op] += 1
        else:
            layers.setdefault(r.layer, Counter())[r.op] += 1
    return embed, layers


def _expected(plan, t: int, sbo: bool = False, fused: bool = False) -> tuple[Counter, dict[int, Counter]]:
    ub = plan.ubatch(t)

    def ops(lp):
        if lp.moe and (sbo or fused):
            return lp.sbo if sbo else lp.fused
        return lp.plain

    layers = {i: Counter(list(ops(lp))) for i, lp in enumerate(ub.layers)}
    return Counter(list(ub.embed)), layers


@pytest.mark.parametrize("case", list(CASES))
def test_a_step_launches_exactly_the_plans_ops_layer_by_layer(case):
    w = CASES[case]
    with ZooRun(w) as r:
        no, yes = r.step(False), r.step(True)
        plan, sizes = r.model.plan, [len(rows) for rows in r.split]
    assert _launched(no.records) == _expected(plan, w.tokens)
    for ub, t in enumerate(sizes):  # each ubatch of the DBO step launches its own size's plan
        assert _launched(yes.records, ub) == _expected(plan, t)


def test_the_single_batch_overlap_step_launches_the_plans_split_experts():
    w = CASES["ll, all-to-all"]
    with ZooRun(w) as r:
        sbo = r.step(False, sbo=True)
        plan = r.model.plan
    assert _launched(sbo.records) == _expected(plan, w.tokens, sbo=True)
    moe = next(lp for lp in plan.ubatch(w.tokens).layers if lp.moe)
    assert {"experts_up", "experts_down"} <= set(moe.sbo) and "experts_ll" not in moe.sbo
    assert all(lp.sbo is None for lp in plan.ubatch(w.tokens).layers if not lp.moe)


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "kimi-k3"])
def test_the_fused_moe_step_launches_the_plans_one_kernel_per_moe_layer(model):
    """DeepGEMM's fused kernel where it runs (one NVLink domain, 4-bit experts on Blackwell): the router, a
    latent MoE's projections, the shared experts, ``fused_moe`` and the finalize; nothing of the all-to-all."""
    w = Workload(get_preset(model), cluster_for("gb300", 18, 4, 72), "decode", 32, 1024)
    with ZooRun(w) as r:
        fused = r.step(False, fused=True)
        plan = r.model.plan
    assert _launched(fused.records) == _expected(plan, w.tokens, fused=True)
    moe = next(lp for lp in plan.ubatch(w.tokens).layers if lp.moe)
    assert "fused_moe" in moe.fused and not set(moe.fused) & {"dispatch_ll", "dispatch_recv", "experts_ll"}
    assert ("latent_down" in moe.fused) == (model == "kimi-k3")


def test_which_ops_an_moe_layer_launches_by_schedule():
    def moe_ops(w: Workload) -> list[str]:
        plan = StepPlan(w, step_profile(w))
        return list(next(lp for lp in plan.ubatch(w.tokens).layers if lp.moe).plain)

    ll = moe_ops(CASES["ll, all-to-all"])
    assert ll[3:] == [
        "router",
        "dispatch_send",
        "dispatch_ll",
        "dispatch_recv",
        "experts_ll",
        "combine_send",
        "combine_ll",
        "shared",
        "combine_recv",
        "finalize",
    ]
    ht = moe_ops(CASES["ht, all-to-all"])
    assert ht[3:] == ["router", "dispatch", "experts", "combine", "shared", "moe_copy", "finalize"]
    local = moe_ops(CASES["ht, EP 1"])  # Qwen3-30B-A3B has no shared experts
    assert local[3:] == ["router", "dispatch_recv", "experts", "combine_recv", "finalize"]
    tp = moe_ops(CASES["attention TP with an all-to-all"])
    assert tp[3] == "tp_attn_reduce" and tp[-1] == "tp_moe_gather"


@pytest.mark.parametrize("case", ["ll, all-to-all", "ht, all-to-all", "attention TP = EP"])
def test_the_breakdown_is_the_plans_launches_summed_by_group(case):
    w = CASES[case]
    with ZooRun(w) as r:
        plan, profile, kernels = r.model.plan, r.profile, r.kernels
    got = layer_breakdown(w, w.tokens, profile, kernels)
    layers = plan.ubatch(w.tokens).layers
    for key, moe in (("moe_layer_s", True), ("dense_layer_s", False)):
        mine = [lp for lp in layers if lp.moe == moe]
        total = sum(launch_seconds(n, c, profile) for lp in mine for n, c in lp.plain.items()) / len(mine)
        assert sum(got[key].values()) == pytest.approx(total, rel=1e-12)


def test_every_op_has_a_stage_and_a_group_and_an_unknown_op_is_an_error():
    assert all(o.kernels >= 1 and o.stream in ("compute", "comm") for o in OPS.values())
    with pytest.raises(UnknownOpError, match="op 'attn_nope' is not in demos.zoo.ops.OPS"):
        op("attn_nope")
    rec = KernelRecord("compute", "x", "compute", 0, 0.0, 1e-6, op="attn_nope", layer=0)
    with pytest.raises(UnknownOpError):
        stage_seconds([rec])  # never counted as "other"
    ok = KernelRecord("compute", "x", "compute", 0, 0.0, 1e-6, op="router", layer=0)
    assert stage_seconds([ok])["attention"] == 1e-6


def test_a_work_of_seconds_is_charged_its_seconds_and_the_floor():
    """What was fitted is seconds, and a launch carries seconds: no flops stand in for them."""
    profile = step_profile(CASES["ll, all-to-all"])
    floor = profile.min_kernel * op("attn_core").kernels
    assert launch_seconds("attn_core", Work(seconds=40e-6), profile) == 40e-6
    assert launch_seconds("attn_core", Work(seconds=1e-6), profile) == floor
    with pytest.raises(ValueError, match="flops or seconds, not both"):
        Work(flops=1.0, seconds=1.0)
    with pytest.raises(TypeError, match="do not add"):
        Work(seconds=1.0) + Work(flops=1.0)


def test_a_new_attention_kind_is_one_class_one_entry_and_its_costs(monkeypatch):
    """What design.md promises: a kind with an op of its own (an indexer, as a sparse attention has) is a
    spec class, an ``AttentionKind`` in ``ATTENTION_KINDS`` and its op in ``OPS``; the plan launches its op,
    the step launches it, and the breakdown counts it under attention, with nothing else changed."""
    import dataclasses
    from types import MappingProxyType

    from demos.vocabulary import Stage
    from demos.zoo import attention, ops
    from demos.zoo.kernels import meta_kernel
    from demos.zoo.models import MLAAttention

    @dataclasses.dataclass(frozen=True)
    class IndexedMLA(MLAAttention):  # the spec class: DeepSeek's MLA with an indexer before its core
        index_seconds: float = 20e-6

    class IndexedKind(attention.MLA):
        spec_type = IndexedMLA

        def costs(self, w, a, t, layer, fold):
            c = super().costs(w, a, t, layer, fold)
            return dataclasses.replace(c, extra=(("attn_index", Work(seconds=a.index_seconds)),))

        def launch(self, run, a, L, h, t, costs, layer, ub, dt):
            run(costs, "attn_index", meta_kernel, layer=layer, ub=ub)
            super().launch(run, a, L, h, t, costs, layer, ub, dt)

    table = {**ops.OPS, "attn_index": ops.Op("attn_index", 2, Stage.ATTENTION, "attention")}
    monkeypatch.setattr(ops, "OPS", MappingProxyType(table))
    monkeypatch.setitem(attention.ATTENTION_KINDS, IndexedMLA, IndexedKind())
    spec = dataclasses.replace(DSV3, attention=IndexedMLA(**dataclasses.asdict(DSV3.attention)))
    w = Workload(spec, cluster_for("h100", 2, 8, 16), tokens=32, context=1024)
    plain = Workload(DSV3, w.cluster, tokens=32, context=1024)
    with ZooRun(w) as r:
        step, plan, profile, kernels = r.step(False), r.model.plan, r.profile, r.kernels
    assert list(plan.ubatch(32).layers[5].plain)[:4] == ["attn_proj", "attn_index", "attn_core", "attn_out"]
    assert _launched(step.records) == _expected(plan, 32)
    base = layer_breakdown(plain, 32, profile, kernels)["moe_layer_s"]["attention"]
    got = layer_breakdown(w, 32, profile, kernels)["moe_layer_s"]["attention"]
    assert got - base == pytest.approx(20e-6)  # above the floor of its 2 kernels (6 us): its seconds
