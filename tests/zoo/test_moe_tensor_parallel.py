"""MoE tensor parallelism (``Workload.moe_tp``): every rank holds every routed expert at ``1 / moe_tp`` of its
width and computes every routed copy of its attention TP group's tokens; only over one group that is the whole
EP group; and the measured serving rows that run it (GLM-5's, SGLang's plain ``--tp 8``) become expressible."""

from __future__ import annotations

import pytest

from demos.errors import ConfigError
from demos.fidelity.silicon import worker_layout
from demos.zoo import measured
from demos.zoo.costs import layer_costs
from demos.zoo.memory import memory_estimate
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.workload import Workload, cluster_for

needs_extra = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def _w(moe_tp: int, tokens: int = 256, **kw) -> Workload:
    return Workload(
        get_preset("glm-5"), cluster_for("h200", 1, 8, 8), tokens=tokens, attention_tp=8, moe_tp=moe_tp, **kw
    )


def test_every_rank_holds_every_expert_at_a_slice_of_its_width_and_every_copy():
    w, m = _w(8), get_preset("glm-5").moe
    assert (w.experts_per_rank, w.expert_intermediate, w.physical_experts, w.redundant_experts) == (
        m.routed_experts,
        m.intermediate_size // 8,
        m.routed_experts,
        0,
    )
    assert w.routed_tokens(256) == 256.0 and w.imbalance_at(256) == 1.0
    ep = _w(1)
    assert (ep.experts_per_rank, ep.expert_intermediate, ep.routed_tokens(256)) == (32, m.intermediate_size, 32.0)


def test_the_experts_weigh_and_compute_what_expert_parallelism_over_the_group_does():
    """The same bytes of expert weights per GPU, and about the same bytes moved by the grouped GEMMs: a slice
    of every expert against every copy, or an eighth of the experts whole against an eighth of the copies;
    MoE tensor parallelism moves a little more (every rank reads every copy's hidden-size row)."""
    tp, ep = _w(8, imbalance=1.0), _w(1, imbalance=1.0)
    assert memory_estimate(tp).weights == pytest.approx(memory_estimate(ep).weights, rel=1e-9)
    profile = gpu_profile(tp.gpu)
    a, b = layer_costs(tp, 256, 10, profile), layer_costs(ep, 256, 10, profile)
    assert b.experts.bytes < a.experts.bytes < 1.1 * b.experts.bytes
    assert a.dispatch is None and a.tp_mlp_reduce == b.tp_mlp_reduce  # no all-to-all; the same all-reduce


@pytest.mark.parametrize(
    "kw",
    [
        {"moe_tp": 4},  # a group of 8
        {"moe_tp": 8, "attention_tp": 1},  # attention data parallel
    ],
)
def test_moe_tensor_parallelism_is_refused_in_one_line_beyond_one_group_that_is_the_ep_group(kw):
    args = {"attention_tp": 8, **kw}
    with pytest.raises(ConfigError) as info:
        Workload(get_preset("glm-5"), cluster_for("h200", 1, 8, 8), tokens=256, **args)
    assert "\n" not in str(info.value) and "moe_tp" in str(info.value)


def test_both_checks_read_a_tensor_parallel_moe_worker_and_refuse_it_beside_expert_parallelism():
    assert worker_layout(8, 1, 1, 8) == (8, 8, 8)
    assert worker_layout(8, 1, 2, 4).startswith("MoE tensor parallelism beside expert")
    assert worker_layout(8, 2, 1, 8).startswith("MoE tensor parallelism beside expert")
    assert worker_layout(4, 1, 4, 1) == (4, 4)


@needs_extra
def test_glm_5s_measured_serving_rows_are_expressible_through_the_hubs_former_name():
    from demos.fidelity.served import SERVED
    from demos.fidelity.serving import _plan

    assert SERVED[("zhipuai/GLM-5", "fp8")] == ("glm-5", None)
    rows = [r for r in measured.silicon_rows() if r.model == "zhipuai/GLM-5" and r.mode == "agg"]
    plans = [_plan(r) for r in rows]
    assert rows and all(isinstance(p, dict) and p["moe_tp"] == 8 for p in plans)


@pytest.mark.slow  # one serving run (the fast tier leaves it out)
@needs_extra
def test_a_glm_5_row_runs_with_its_moe_tensor_parallel_and_lands_near_its_tpot(monkeypatch):
    from demos.fidelity import serving

    (row,) = [
        r
        for r in measured.silicon_rows()
        if r.model == "zhipuai/GLM-5" and r.system == "b200_sxm" and r.precision == "fp8"
        if (r.concurrency, r.isl, r.osl) == (16, 1024, 1024)
    ][:1]
    monkeypatch.setattr(measured, "silicon_rows", lambda: (row,))
    (check,), skipped = serving.serving_rows()
    assert not skipped and check.gpus == 8
    assert abs(check.tpot_error) < 0.3, check  # B200's GLM-5 rows: -3.4% median
