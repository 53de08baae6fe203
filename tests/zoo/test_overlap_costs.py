"""The overlap mechanisms (demos.zoo.overlap_costs): each one is charged where it belongs, each knob turns
its mechanism off, and the no-DBO step keeps its all-to-all time."""

from __future__ import annotations

import pytest

from demos.errors import ConfigError
from demos.prediction.sweep import Sweep, what_if_workload
from demos.zoo.costs import layer_costs
from demos.zoo.hardware import DEEPEP_H800, deepep_low_latency, get_gpu, ll_bytes
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset
from demos.zoo.overlap_costs import (
    BLOCK_M,
    MECHANISMS,
    Mechanisms,
    ll_node_seconds,
    ll_send_seconds,
    local_rows,
    masked_rows,
    overlap_share,
    step_profile,
    ubatch_sizes,
)
from demos.zoo.profile import MIN_KERNEL
from demos.zoo.report import measure_point
from demos.zoo.rooflines import family_fit, gpu_fit
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

DSV3 = get_preset("deepseek-v3")
H100 = get_gpu("h100")


def _lmsys(tokens: int = 32, **mech: float) -> Workload:
    """LMSYS's decode cluster: 9 x 8 H100, EP 72, 2,000-token contexts."""
    w = Workload(DSV3, cluster_for("h100", 9, None, 72), "decode", tokens, 2000)
    return what_if_workload(w, mech) if mech else w


@pytest.mark.parametrize("bad", [-0.5, float("nan"), True, "1"])
def test_a_mechanism_factor_must_be_a_number_at_least_0(bad):
    with pytest.raises(ConfigError, match="ll_sm"):
        Mechanisms(ll_sm=bad)


def test_the_masked_layout_computes_whole_blocks_per_expert():
    assert masked_rows(4, "hopper") == 64
    assert masked_rows(64, "hopper") == 64
    assert masked_rows(65, "hopper") == 128
    assert masked_rows(4, "blackwell") == BLOCK_M["blackwell"]
    assert masked_rows(4, "hopper", 0.0) == 4  # the knob at 0: no padding
    assert masked_rows(4, "hopper", 0.5) == 32


def test_without_an_all_to_all_the_tile_follows_the_rows_per_expert():
    assert local_rows(1) == 8 and local_rows(4) == 8 and local_rows(9) == 16
    assert local_rows(100) == 128 and local_rows(128) == 128 and local_rows(129) == 256
    assert local_rows(4, 0.0) == 4  # the tile knob at 0: no padding, as the masked layout's


def test_only_the_masked_layout_pads_to_its_block(monkeypatch):
    """DeepEP's low-latency kernels feed the masked layout (whole ``BLOCK_M`` blocks per expert); a step
    without an all-to-all (EP 1, or attention TP = EP) runs the engine's local fused MoE, whose tile is
    sized to the rows. The bug this catches: an EP-1 decode step of 128 tokens of gpt-oss-120b on B200
    computing 128 rows for each expert that receives 4, twice its weights' memory time."""
    import demos.zoo.costs as costs

    seen = []
    real = costs.gemm

    def spy(m, n, k, storage, *, weights=1.0):
        if weights != 1.0:  # the routed experts' grouped GEMMs: (rows computed, active experts)
            seen.append((m, weights))
        return real(m, n, k, storage, weights=weights)

    monkeypatch.setattr(costs, "gemm", spy)
    gpt = get_preset("gpt-oss-120b")
    rows = {}
    for ep in (1, 8):
        w = Workload(gpt, cluster_for("b200", 1, None, ep), tokens=128, context=1024, imbalance=1.0)
        seen.clear()
        layer_costs(w, 128, 0, step_profile(w))
        m, active = seen[0]
        rows[ep] = (m / active, w.alltoall)
    assert rows[1] == (8, False)  # 4 copies per active expert (128 x 4 over 128) -> an 8-row tile
    assert rows[8] == (BLOCK_M["blackwell"], True)  # 64 copies over 16 local experts -> one 128-row block


def test_the_send_half_grows_with_the_messages_and_leaves_out_the_receive_half():
    small = ll_send_seconds(H100, "dispatch", 16, 7168, 8, 7, 0.0)
    big = ll_send_seconds(H100, "dispatch", 128, 7168, 8, 7, 0.0)
    assert 0 < small < big
    held = gpu_fit(H100).ll_sm["dispatch"].seconds(ll_bytes("dispatch", 128, 7168, 8), 7)
    assert big == pytest.approx(held) == ll_node_seconds(H100, "dispatch", 128, 7168, 8, 7)
    assert ll_send_seconds(H100, "dispatch", 128, 7168, 8, 7, 5e-6) == pytest.approx(held - 5e-6)
    assert ll_send_seconds(H100, "dispatch", 128, 7168, 8, 7, 1.0) == 0.0  # never negative
    assert ll_send_seconds(H100, "combine", 128, 7168, 8, 7, 0.0, 0.0) == 0.0
    # H800 (no tables: Hopper's pooled line): its NVLink (200 GB/s per direction against the fitted GPUs'
    # 450) stretches the per-byte term
    h800 = ll_node_seconds(get_gpu("h800"), "dispatch", 128, 7168, 8, 7)
    line = family_fit("hopper").ll_sm["dispatch"]
    pooled = line.seconds(ll_bytes("dispatch", 128, 7168, 8), 7)
    assert h800 - line.fixed == pytest.approx((pooled - line.fixed) * 450 / 200)


def test_on_one_node_the_low_latency_kernel_is_the_measured_single_node_line():
    """Within one node the SMs move every message: send half, flight and receive half add up to the
    GPU's single-node line for the busiest rank's tokens, not to DeepEP's multi-node model (25 us of
    RDMA round trips); with ll_sm off the flight takes what the send half gave up. The bug this catches: a
    one-node kernel timed as RDMA, or its receive half counted twice."""
    w = Workload(DSV3, cluster_for("h200", 1, None, 8), tokens=64, imbalance=1.0)
    p = step_profile(w)
    kt = KernelTimes(w.gpu, p)
    for ll_sm in (1.0, 0.0):
        c = layer_costs(w.with_(mechanisms=Mechanisms(ll_sm=ll_sm)), 64, 3, p)
        for kind, recv in (("dispatch", c.dispatch_recv), ("combine", c.combine_recv)):
            whole = ll_node_seconds(w.gpu, kind, 64, DSV3.hidden_size, 8, 7)
            send, flight = getattr(c, f"{kind}_send"), getattr(c, kind)
            recv_s = max(MIN_KERNEL, kt.memory(recv.bytes, recv.flops))  # one kernel: at least the floor
            assert send + flight + recv_s == pytest.approx(whole)
            assert (flight == pytest.approx(0.0, abs=1e-12)) == (ll_sm == 1.0)
    multi = Workload(DSV3, cluster_for("h200", 2, None, 16), tokens=64, imbalance=1.0)
    c = layer_costs(multi, 64, 3, p)
    deepep = deepep_low_latency(multi.cluster, multi.routing(64), 64, DSV3.hidden_size, "dispatch").seconds
    assert c.dispatch_send + c.dispatch == pytest.approx(deepep)


def test_the_send_half_moves_to_the_compute_stream_and_the_kernel_keeps_its_time():
    """With ll_sm the low-latency kernel is its send half plus its flight, as long as DeepEP's modelled
    kernel (the no-DBO step pays the same); without it the flight is the whole kernel."""
    w = _lmsys(64)
    p = step_profile(w)
    on, off = layer_costs(w, 64, 3, p), layer_costs(_lmsys(64, ll_sm=0.0), 64, 3, p)
    total = deepep_low_latency(w.cluster, w.routing(64), 64, DSV3.hidden_size, "dispatch", fp8=True).seconds
    assert on.dispatch_send > 5e-6
    assert on.dispatch_send + on.dispatch == pytest.approx(total)
    assert off.dispatch_send == 0.0 and off.dispatch == pytest.approx(total)
    assert on.combine_send > 0 and on.combine_send + on.combine == pytest.approx(off.combine)


def test_the_sm_held_halves_cost_the_dbo_step_and_not_the_no_dbo_step():
    """The bug this catches: a send half placed off the compute stream (overlapped for free)."""
    on, off = (measure_point(_lmsys(32, **m), mode="graph") for m in ({}, {"ll_sm": 0.0}))
    assert on.no_dbo.seconds == pytest.approx(off.no_dbo.seconds, rel=1e-6)
    assert on.dbo.seconds > off.dbo.seconds * 1.03


def test_contention_takes_the_link_traffic_share_of_hbm():
    multi, single = cluster_for("h100", 9, None, 72), cluster_for("h100", 1, None, 8)
    g, p = multi.gpu, DEEPEP_H800
    assert overlap_share(multi, 0.0) == pytest.approx(2 * g.nic_bandwidth * p.rdma_efficiency / g.hbm_bandwidth)
    nvl = 2 * g.nvlink_bandwidth * p.nvlink_efficiency / g.hbm_bandwidth
    assert overlap_share(single, 0.0) == pytest.approx(nvl)
    nvl72 = cluster_for("gb200", 18, None, 72)  # one NVLink domain of 72: no NIC in the path
    assert overlap_share(nvl72, 0.0) == pytest.approx(
        2 * nvl72.gpu.nvlink_bandwidth * p.nvlink_efficiency / nvl72.gpu.hbm_bandwidth
    )
    assert overlap_share(multi, 0.0, 0.0) == 0.0
    assert overlap_share(multi, 0.2, 0.0) == pytest.approx(0.2)
    assert step_profile(_lmsys()).comm_sm_share == pytest.approx(overlap_share(multi, 0.0))
    assert step_profile(_lmsys(contention=0.0)).comm_sm_share == 0.0


def test_each_mechanism_has_a_what_if_knob_that_takes_0_while_the_others_do_not():
    base = _lmsys()
    for k in MECHANISMS:
        w = Sweep(base, (32,), ("graph",), what_if={k: 0}).workload(32, 2, None)
        assert getattr(w.mechanisms, k) == 0.0
    with pytest.raises(ConfigError, match=r"tile=-1.*>= 0"):
        Sweep(base, (32,), ("graph",), what_if={"tile": -1})
    with pytest.raises(ConfigError, match=r"link=0.*> 0"):
        Sweep(base, (32,), ("graph",), what_if={"link": 0})


def test_the_split_knob_cuts_a_larger_first_ubatch_and_balanced_is_the_default():
    assert ubatch_sizes(16384, 2) == [8192, 8192]
    assert ubatch_sizes(7, 2) == [3, 4]  # as dbo.split_tokens cuts: the remainder in the last
    assert ubatch_sizes(16384, 2, 0.34) == [9382, 7002]  # AMD's request-boundary split, 1.34x
    assert ubatch_sizes(2, 2, 5.0) == [1, 1]  # every ubatch keeps a token
    w = Workload(DSV3, cluster_for("h100", 4, None, 32), "prefill", 4096, 2048)
    with ZooRun(what_if_workload(w, {"split": 0.34}), mode="eager") as r:
        assert [len(x) for x in r.split] == ubatch_sizes(4096, 2, 0.34)
        assert r.split[0].start == 0 and r.split[-1].stop == 4096
    with ZooRun(w, mode="eager") as r:
        assert [len(x) for x in r.split] == [2048, 2048]
