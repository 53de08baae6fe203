"""``demos.zoo.breakdown``: the seconds per op of one MoE and one dense layer of the no-DBO step are what
the virtual backend charges that layer's kernels, and the layers add up to the step."""

from __future__ import annotations

from collections import defaultdict

import pytest

from demos.zoo.breakdown import layer_breakdown
from demos.zoo.models import get_preset
from demos.zoo.ops import DENSE_GROUPS, MOE_GROUPS, TP_GROUPS
from demos.zoo.overlap_costs import Mechanisms
from demos.zoo.profile import gpu_profile
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

pytestmark = pytest.mark.timeout(120)

KEY_OF = {
    "attn_proj": "attention",
    "attn_core": "attention",
    "attn_out": "attention",
    "router": "router",
    "dispatch": "dispatch",
    "dispatch_ll": "dispatch",
    "dispatch_send": "dispatch",
    "dispatch_recv": "dispatch_recv",
    "experts": "experts",
    "experts_ll": "experts",
    "combine": "combine",
    "combine_ll": "combine",
    "combine_send": "combine",
    "combine_recv": "combine_recv",
    "moe_copy": "combine_recv",
    "shared": "shared",
    "finalize": "finalize",
    "dense_mlp": "mlp",
    "tp_attn_reduce": "tp_attn_reduce",
    "tp_moe_gather": "tp_moe_gather",
    "tp_mlp_reduce": "tp_mlp_reduce",
}
"""Each op a layer launches (demos.zoo.model) and the breakdown key it belongs to, written out here so
that the test does not read the mapping it checks."""

CASES = [
    ("deepseek-v3", "decode", 16, "ll"),  # MLA, dense layers, shared experts, ll all-to-all
    ("deepseek-v3", "prefill", 16, "ht"),  # the normal kernels
    ("deepseek-v3", "decode", 1, "ll"),  # EP 1: nothing crosses a link
    ("deepseek-v3", "prefill", 1, "ht"),
    ("gpt-oss-120b", "decode", 16, "ll"),  # sliding-window layers, no shared experts, no dense layer
    ("qwen3-30b-a3b", "prefill", 16, "ht"),
    ("deepseek-v3", "decode", 16, "ll", 2),  # attention TP: its collectives are further keys
]

NOT_A_LAYER = ("embed", "tp_embed_reduce")
"""The step's kernels outside its layers (the LM head is ``StepTimes.head_s``)."""


def _workload(name: str, phase: str, ep: int, schedule: str, tp: int = 1) -> Workload:
    """The case's workload, without HBM contention: a kernel beside an all-to-all in flight (the shared
    experts on ll) runs longer by the contention share, which is the overlap's cost, not the op's own time
    (demos.zoo.overlap_costs)."""
    cluster = cluster_for("h100", 2 if ep > 1 else 1, 8 if ep > 1 else 1, ep)
    tokens = 64 if phase == "decode" else 2048
    return Workload(
        get_preset(name),
        cluster,
        phase=phase,
        tokens=tokens,
        context=1024,
        schedule=schedule,
        attention_tp=tp,
        mechanisms=Mechanisms(contention=0.0),
    )


def _measured(w: Workload) -> tuple[object, dict, dict[int, dict[str, float]]]:
    """(the no-DBO step, the breakdown, the records' seconds per layer and key) of a graph replay."""
    with ZooRun(w, mode="graph") as r:
        step = r.step(False)
        ops = layer_breakdown(w, w.tokens, r.profile, r.kernels)
    per_layer: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for k in step.records:
        if k.op not in NOT_A_LAYER:
            per_layer[k.layer][KEY_OF[k.op]] += k.duration
    return step, ops, per_layer


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_each_op_is_what_the_virtual_backend_charged_its_kernels(case):
    w = _workload(*case)
    _, ops, per_layer = _measured(w)
    s = w.spec
    for key, moe, names in (("moe_layer_s", True, MOE_GROUPS), ("dense_layer_s", False, DENSE_GROUPS)):
        layers = [i for i in range(s.num_layers) if s.is_moe_layer(i) == moe]
        if not layers:
            assert ops[key] is None
            continue
        assert list(ops[key])[: len(names)] == list(names)
        extra = list(ops[key])[len(names) :]
        assert set(extra) <= set(TP_GROUPS) and bool(extra) == (w.attention_tp > 1)
        assert all(set(per_layer[i]) <= set(ops[key]) for i in layers)  # no kernel of a layer left out
        mean = {op: sum(per_layer[i].get(op, 0.0) for i in layers) / len(layers) for op in ops[key]}
        assert ops[key] == pytest.approx(mean, rel=1e-9, abs=1e-15), key


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_layers_add_up_to_the_no_dbo_step(case):
    """A graph replay's no-DBO step is its kernels one after another plus the LM head, the embedding and
    one replay's launch: within 0.5% of the layers' sums. On ll with EP > 1 the shared experts run while
    the combine is in flight, so the step is shorter by at most the smaller of the two per layer."""
    w = _workload(*case)
    schedule, ep = w.schedule, w.cluster.ep
    step, ops, _ = _measured(w)
    s = w.spec
    moe, dense = ops["moe_layer_s"], ops["dense_layer_s"]
    embed = sum(k.duration for k in step.records if k.op in NOT_A_LAYER)
    layers = sum(moe.values()) * s.moe_layers + (0.0 if dense is None else sum(dense.values()) * s.first_k_dense)
    forward = step.seconds - step.head_s - embed
    hidden = s.moe_layers * min(moe["shared"], moe["combine"]) if schedule == "ll" and ep > 1 else 0.0
    assert layers - hidden - 1e-9 <= forward <= layers * 1.005
    if hidden:
        assert forward < layers  # the overlap is real: the sum of the ops is an upper bound there


def test_ep_1_has_no_all_to_all_and_a_model_without_shared_experts_no_shared_time():
    ops = layer_breakdown(_workload("deepseek-v3", "decode", 1, "ll"), 64, gpu_profile("h100"))
    assert ops["moe_layer_s"]["dispatch"] == 0.0 and ops["moe_layer_s"]["combine"] == 0.0
    # EP 1: the local fused MoE, whose call holds the gather and the sum (no receive copies launched)
    assert ops["moe_layer_s"]["dispatch_recv"] == 0.0 and ops["moe_layer_s"]["combine_recv"] == 0.0
    assert ops["moe_layer_s"]["experts"] > 0 and ops["moe_layer_s"]["shared"] > 0
    assert set(ops["dense_layer_s"]) == {"attention", "mlp"}
    ops = layer_breakdown(_workload("qwen3-30b-a3b", "decode", 16, "ll"), 64, gpu_profile("h100"))
    assert ops["moe_layer_s"]["shared"] == 0.0 and ops["moe_layer_s"]["dispatch"] > 0
    assert ops["dense_layer_s"] is None


def test_a_layer_of_more_tokens_costs_more():
    w = _workload("deepseek-v3", "decode", 16, "ll")
    small, big = (sum(layer_breakdown(w, t, gpu_profile("h100"))["moe_layer_s"].values()) for t in (8, 512))
    assert 0 < small < big
