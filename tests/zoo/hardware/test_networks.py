"""Scale-out networks and AMD's all-to-all (issue 46): the parameters per vendor and network
(``comm_params``), each group's stored parameters as its fit gives them, the full mesh's links and EFA's CPU
proxy as mechanisms, and the published rows held out of each fit."""

from __future__ import annotations

import dataclasses

import pytest

from demos.fidelity import ep_published
from demos.zoo.hardware import DEEPEP_H800, ClusterSpec, Routing, deepep_low_latency, deepep_normal
from demos.zoo.hardware.alltoall import EFA_GDA, EFA_PROXY, MORI, comm_params
from demos.zoo.hardware.cluster import NETWORKS

R = Routing(experts=256, top_k=8)


def test_the_parameters_follow_the_gpu_vendor_and_the_network():
    assert comm_params(ClusterSpec(2, 8, 16, "h200")) is DEEPEP_H800
    assert comm_params(ClusterSpec(2, 8, 16, "h200", network="roce")) is DEEPEP_H800
    assert comm_params(ClusterSpec(2, 8, 16, "h200", network="efa")) is EFA_PROXY
    assert comm_params(ClusterSpec(2, 8, 16, "b200", network="efa-gda")) is EFA_GDA
    assert comm_params(ClusterSpec(2, 8, 16, "mi355x")) is MORI
    with pytest.raises(ValueError, match="network must be one of ib, roce, efa, efa-gda") as e:
        ClusterSpec(2, 8, 16, "h200", network="tcp")
    assert "\n" not in str(e.value) and NETWORKS == ("ib", "roce", "efa", "efa-gda")


@pytest.mark.parametrize("group", list(ep_published.GROUPS))
def test_each_groups_stored_parameters_are_its_fit(group):
    """Within a tolerance (as DeepEP's refit in test_alltoall.py): the Nelder-Mead fit may move in its last digits
    on another processor, which the stored figures' rounding could otherwise turn into a different number."""
    fitted, rms = ep_published.fit(group)
    stored = ep_published.GROUPS[group]
    assert fitted.ll_two_level == stored.ll_two_level
    for f in dataclasses.fields(stored):
        if f.name.endswith("efficiency"):
            assert getattr(fitted, f.name) == pytest.approx(getattr(stored, f.name), abs=0.01), f.name
        elif f.name.endswith("bandwidth"):
            assert getattr(fitted, f.name) == pytest.approx(getattr(stored, f.name), rel=0.01, abs=1e6), f.name
        elif f.name == "dispatch_copy_latency":  # nanoseconds: abs=1e-6 would hold any value
            assert getattr(fitted, f.name) == pytest.approx(getattr(stored, f.name), rel=0.05, abs=1e-11), f.name
        elif f.name != "ll_two_level":
            assert getattr(fitted, f.name) == pytest.approx(getattr(stored, f.name), abs=1e-6), f.name
    assert rms < {"mori": 0.12, "efa": 0.12, "efa-gda": 0.15}[group]


def test_mori_fits_every_row_within_15_percent_and_predicts_the_held_out_gpus_within_15_percent_mostly():
    """Held out: MI300X's and MI350X's rows and every BF16 dispatch row (146: 112 + 34). Every fitted row within
    15% (issue 46 asks it); the mechanisms that take the last ones in are checked one by one below."""
    s = ep_published.summary(ep_published.compare("mori"))
    assert s["fitted"]["rows"] == 124 and s["held out"]["rows"] == 146
    assert s["fitted"]["within_15"] == 1.0 and s["held out"]["within_15"] > 0.9
    assert abs(s["held out"]["median"]) < 0.05


def _intranode_dispatch_errors(records, bf16: bool) -> dict[int, float]:
    out = {}
    for ep in (2, 4, 8):
        errs = sorted(
            r["error"]
            for r in records
            if r["label"] == "MoRI IntraNode" + (" BF16" if bf16 else "")
            and r["kernel"] == "dispatch"
            and r["ep"] == ep
            and r["gpu"] == "mi355x"
        )
        if errs:
            out[ep] = errs[len(errs) // 2]
    return out


def test_moris_dispatch_pays_per_copy_on_the_mesh_and_without_it_ep8_runs_short():
    """MoRI's IntraNode dispatch slows against its combine as the peers grow (docs/clusters.md, "AMD Instinct"):
    with ``dispatch_copy_latency`` (a serial cost per token and scale-up destination) the FP8 dispatch's median
    at EP 8 is within 10% and the held-out BF16 dispatch rows (the combine's bytes, no parameter saw them)
    within 8% (MI355X's; -7.0% measured); without it (0, the rest as stored) EP 8's FP8 dispatch runs more than
    15% short, EP 2's does not, and the BF16 rows more than 10% short. The cost is the dispatch's alone: a combine
    is timed the same."""
    with_copy = ep_published.compare("mori")
    without = ep_published.compare("mori", dataclasses.replace(MORI, dispatch_copy_latency=0.0))
    fp8, fp8_without = _intranode_dispatch_errors(with_copy, False), _intranode_dispatch_errors(without, False)
    assert abs(fp8[8]) < 0.10 and fp8_without[8] < -0.15 and abs(fp8_without[2]) < 0.10
    assert abs(_intranode_dispatch_errors(with_copy, True)[8]) < 0.08
    assert _intranode_dispatch_errors(without, True)[8] < -0.10
    for a, b in zip(with_copy, without):
        if a["kernel"] == "combine":
            assert a["predicted"] == b["predicted"]
    assert DEEPEP_H800.dispatch_copy_latency == EFA_PROXY.dispatch_copy_latency == EFA_GDA.dispatch_copy_latency == 0


def test_a_one_node_all_to_all_on_a_mesh_uses_one_link_per_peer():
    """EP 2 on one MI355X node crosses 1 of 7 links, EP 8 all 7: the normal combine of the same tokens per rank
    moves (ep - 1) / ep of them, so EP 2's time per byte is 7 x 2 / 8 ... (below) larger than EP 8's; through
    NVSwitch (H200) every EP gets the whole bandwidth. MoRI's measured tables show it (validate deepep). The
    combine, its input already in MoRI's buffer: MoRI's dispatch adds a per-copy cost that is not spread over the
    links (the test above), its combine a copy stage otherwise (below)."""

    def per_byte(gpu: str, ep: int) -> float:
        a = deepep_normal(ClusterSpec(1, ep, ep, gpu), R, 4096, 7168, "combine", comm_sms=32, zero_copy=True)
        return (a.seconds - comm_params(ClusterSpec(1, ep, ep, gpu)).normal_latency) / a.nvlink_bytes

    assert per_byte("mi355x", 2) == pytest.approx(7 * per_byte("mi355x", 8))
    assert per_byte("mi355x", 4) == pytest.approx(7 / 3 * per_byte("mi355x", 8))
    assert per_byte("h200", 2) == pytest.approx(per_byte("h200", 8))


def test_efas_proxy_pays_per_remote_rank_and_gpu_initiated_rdma_does_not():
    """A CPU proxy serves every remote rank's queue: the low-latency kernel's fixed cost grows with the EP group
    on EFA (14.8 us a remote rank, fitted on p6-b200), not on InfiniBand."""

    def ll(network: str, ep: int, params=None) -> float:
        c = ClusterSpec(ep // 8, 8, ep, "h200", network=network)
        return deepep_low_latency(c, R, 1, 7168, "dispatch", params=params).seconds

    assert ll("efa", 32) - ll("efa", 16) == pytest.approx(16 * EFA_PROXY.rdma_peer_latency, rel=0.05)
    assert ll("ib", 32) - ll("ib", 16) < 1e-6
    no_proxy = dataclasses.replace(EFA_PROXY, rdma_peer_latency=0.0)
    assert ll("efa", 32, no_proxy) < ll("efa", 32) - 200e-6


def test_moris_low_latency_kernel_crosses_the_network_once_per_remote_node():
    """InterNodeV1LL sends each token once per remote node and forwards it over Infinity Fabric; DeepEP's sends
    one message per routed copy: at EP 16 over two nodes MoRI's crosses the NIC with fewer bytes."""
    c = ClusterSpec(2, 8, 16, "mi355x")
    two = deepep_low_latency(c, R, 128, 7168, "dispatch")
    per_copy = deepep_low_latency(c, R, 128, 7168, "dispatch", params=dataclasses.replace(MORI, ll_two_level=False))
    t = c.traffic(R)
    assert two.rdma_bytes == pytest.approx(per_copy.rdma_bytes * t.remote_domains / t.copies_rdma)
    assert two.nvlink_bytes > 0 and two.seconds < per_copy.seconds


def test_a_normal_kernel_held_to_its_forwarding_rate_grows_with_the_domains_it_touches_its_own_included():
    """UCCL-EP over EFA: the normal kernels' time follows the (token, destination node) pairs, the own node's
    included, at one rate (``pair_bandwidth``), not the remote pairs at the NIC's: from EP 16 to EP 32 a token
    touches 2 -> 3.6 domains (1.8x) but 1 -> 2.7 remote ones (2.7x)."""
    kw = dict(hidden=7168, kernel="dispatch", comm_sms=32)
    r = Routing(experts=288, top_k=8)  # UCCL-EP's benchmark: 288 shard over 16, 24 and 32 ranks

    def run(ep, params):
        return deepep_normal(ClusterSpec(ep // 8, 8, ep, "b200", network="efa"), r, 4096, params=params, **kw)

    for ep in (16, 24):
        a = run(ep, EFA_PROXY)
        t = ClusterSpec(ep // 8, 8, ep, "b200", network="efa").traffic(r)
        assert a.bottleneck == "forwarding"
        rounds = 2  # a normal kernel crossing the network: the count exchange, then the data
        fixed = EFA_PROXY.normal_latency + rounds * EFA_PROXY.rdma_latency + EFA_PROXY.rdma_peer_latency * (ep - 8)
        forwarded = t.domains * 4096 * (7168 + 7168 // 128 * 4)
        assert a.seconds - fixed == pytest.approx(forwarded / EFA_PROXY.pair_bandwidth)
    # at EP 32 three of a token's 3.6 domains are remote: the NIC binds again
    assert run(32, EFA_PROXY).bottleneck == "rdma"
    unlimited = dataclasses.replace(EFA_PROXY, pair_bandwidth=0.0)
    assert run(16, unlimited).bottleneck == "rdma" and run(16, unlimited).seconds < 0.75 * run(16, EFA_PROXY).seconds
    # one node: nothing crosses the network, so no forwarding stage (DeepEP's intranode kernel has none)
    one = deepep_normal(ClusterSpec(1, 8, 8, "b200", network="efa"), r, 4096, **kw)
    assert one.bottleneck == "nvlink"
    # the other parameter sets have no such limit
    assert DEEPEP_H800.pair_bandwidth == MORI.pair_bandwidth == EFA_GDA.pair_bandwidth == 0.0
    with pytest.raises(ValueError, match="pair_bandwidth must be >= 0"):
        dataclasses.replace(EFA_PROXY, pair_bandwidth=-1.0)


def test_efas_fit_holds_its_rows_and_the_held_out_instances_dispatch():
    """Fitted on p6-b200, held out on p5en: every p6 normal row within 5%, p5en's normal dispatch within 10%
    (its normal combine, 3.2-5.3 times its dispatch where p6's is 1.7-1.8 times, is the table's outlier)."""
    recs = ep_published.compare("efa")
    normal = [r for r in recs if r["mode"] == "normal"]
    assert all(abs(r["error"]) < 0.05 for r in normal if r["fitted"])
    assert all(abs(r["error"]) < 0.10 for r in normal if not r["fitted"] and r["kernel"] == "dispatch")
    s = ep_published.summary(recs)
    assert s["fitted"]["within_15"] > 0.9


def test_the_robust_loss_is_squares_near_zero_and_caps_an_outliers_pull():
    sq = ep_published._case_loss
    assert sq(0.02, True) == pytest.approx(sq(0.02, False), rel=0.02)
    # a row 3x off costs less than 1/10 of its square: it cannot outweigh a dozen rows 10% off
    assert sq(2.0, True) < 0.1 * sq(2.0, False)
    assert sq(2.0, True) < 12 * sq(0.1, True)


def _bytes_only(params):
    """``params`` with every fixed cost 0 and the NIC at its line rate: a case's time is its bytes' alone."""
    zero = {f.name: 0.0 for f in dataclasses.fields(params) if f.name.endswith("latency")}
    return dataclasses.replace(params, rdma_efficiency=1.0, **zero)


def _case(group: str, **match):
    (c,) = [c for c in ep_published.cases(group) if all(getattr(c, k) == v for k, v in match.items())]
    return c


def test_no_parameters_hold_p6_b200s_low_latency_rows_within_15_percent():
    """UCCL-EP's p6-b200 low-latency rows: dispatch 228, 448 and 406 us at EP 16, 24 and 32, combine 318 us at EP
    16; the fit leaves the EP 32 dispatch out of 15%. Any time of the model's form, fixed + per remote rank x
    (EP - 8) + k x the bytes' time at line rate (every term >= 0; k = 1 / efficiency, any value, so a share of
    the NIC for small messages of its own is covered too), cannot hold the four: the dispatch rows ask k of at
    least 2.5 (EP 24 >= 0.85 x 448 and EP 32 <= 1.15 x 406, while the bytes' share of the remote ranks grows less
    from 24 to 32 than from 16 to 24 and the per-rank term grows the same), the EP 16 pair at most 2.5 (the
    combine's extra BF16 bytes in 1.15 x 318 - 0.85 x 228) (docs/clusters.md, "Rows out of reach")."""
    d = {ep: _case("efa", gpu="b200", mode="low-latency", kernel="dispatch", ep=ep) for ep in (16, 24, 32)}
    c16 = _case("efa", gpu="b200", mode="low-latency", kernel="combine", ep=16)
    b = {ep: ep_published.predicted_seconds(c, _bytes_only(EFA_PROXY)) for ep, c in d.items()}
    lo = {ep: 0.85 * c.seconds for ep, c in d.items()}
    hi = {ep: 1.15 * c.seconds for ep, c in d.items()}
    concave = (b[24] - b[16]) - (b[32] - b[24])  # the per-rank term cancels in the steps' difference
    assert concave > 0
    k_least = ((lo[24] - hi[16]) - (hi[32] - lo[24])) / concave
    extra_bytes = ep_published.predicted_seconds(c16, _bytes_only(EFA_PROXY)) - b[16]
    k_most = (1.15 * c16.seconds - lo[16]) / extra_bytes
    assert k_least > k_most > 1
    # the stored fit: that row, and only it, out of 15%
    out = [r for r in ep_published.compare("efa") if r["fitted"] and abs(r["error"]) > 0.15]
    assert [(r["mode"], r["kernel"], r["ep"]) for r in out] == [("low-latency", "dispatch", 32)]


def test_no_efficiency_holds_deepep_v2s_low_latency_dispatch_and_combine_at_ep16_within_15_percent():
    """DeepEP V2 over EFA-GDA, EP 16, 128 tokens: dispatch 185.6 us, combine 197.5 us, though the combine carries
    BF16 (1.9x the FP8 dispatch's bytes). One fixed cost for both: the combine less the dispatch is the extra
    bytes' time, at least at the NIC's line rate, and that is more than 1.15 x combine - 0.85 x dispatch."""
    d = _case("efa-gda", mode="low-latency", kernel="dispatch", ep=16)
    c = _case("efa-gda", mode="low-latency", kernel="combine", ep=16)
    extra = ep_published.predicted_seconds(c, _bytes_only(EFA_GDA)) - ep_published.predicted_seconds(
        d, _bytes_only(EFA_GDA)
    )
    assert extra > 1.15 * c.seconds - 0.85 * d.seconds
    out = [r for r in ep_published.compare("efa-gda") if r["fitted"] and abs(r["error"]) > 0.15]
    assert [(r["mode"], r["kernel"], r["ep"]) for r in out] == [("low-latency", "combine", 16)]


@pytest.mark.slow
@pytest.mark.parametrize("ablation", ["one-round", "combine_rdma_latency", "combine_copy_bandwidth"])
def test_each_of_moris_last_three_mechanisms_is_needed_for_every_fitted_row_within_15_percent(ablation, monkeypatch):
    """Refit without one (docs/clusters.md, "AMD Instinct", the ablation): a normal kernel's count exchange as a
    network round trip of its own (one round instead of two), the combine's fixed cost over the network, the
    combine's copy of its input into MoRI's buffer. Each time some fitted row ends outside 15%."""
    from demos.zoo.hardware import alltoall

    if ablation == "one-round":
        monkeypatch.setattr(alltoall, "_NORMAL_ROUNDS", 1)
        params, _ = ep_published.fit("mori")
    else:
        params, _ = ep_published.fit("mori", without=(ablation,))
        assert getattr(params, ablation) == 0.0
    assert ep_published.summary(ep_published.compare("mori", params))["fitted"]["within_15"] < 1.0


def test_a_combine_not_zero_copy_pays_its_copy_stage_and_moris_tables_show_it():
    """MoRI's combine copies its input rows (one a token and rank) into its registered buffer first unless they
    are there already (``zero_copy``): at EP 8 on one MI355X node the modelled stage is the rows' bytes at
    ``combine_copy_bandwidth``, and MoRI's own rows show the gap (1,024 tokens: 231.9 us without zero copy, 198.4
    us with it; the model's gap within 25% of theirs). DeepEP's parameters have no such stage."""
    c = ClusterSpec(1, 8, 8, "mi355x")
    kw = dict(hidden=7168, kernel="combine", comm_sms=32)
    staged, direct = deepep_normal(c, R, 1024, **kw), deepep_normal(c, R, 1024, zero_copy=True, **kw)
    rows = c.traffic(R).ranks * 1024
    assert staged.seconds - direct.seconds == pytest.approx(rows * 7168 * 2 / MORI.combine_copy_bandwidth)
    assert staged.seconds - direct.seconds == pytest.approx(231.94e-6 - 198.39e-6, rel=0.25)
    ll = [deepep_low_latency(ClusterSpec(2, 8, 16, "mi355x"), R, 128, 7168, "combine", zero_copy=z) for z in (0, 1)]
    assert ll[0].seconds > ll[1].seconds
    h = ClusterSpec(1, 8, 8, "h200")
    assert deepep_normal(h, R, 1024, **kw).seconds == deepep_normal(h, R, 1024, zero_copy=True, **kw).seconds
    assert (
        deepep_normal(c, R, 1024, **{**kw, "kernel": "dispatch"}).seconds
        == deepep_normal(c, R, 1024, zero_copy=True, **{**kw, "kernel": "dispatch"}).seconds
    )


def test_a_normal_kernel_pays_two_network_round_trips_and_a_low_latency_one_one():
    """Over the network a normal kernel first exchanges its counts (to size the receive buffers), then sends; a
    low-latency one writes into fixed slots at once. With one token a rank (bytes negligible) MoRI's normal
    dispatch at EP 16 pays ``normal_latency + 2 x rdma_latency``, its low-latency one ``ll_latency +
    rdma_latency``; inside one node neither pays the network's."""
    c = ClusterSpec(2, 8, 16, "mi355x")
    normal = deepep_normal(c, R, 1, 7168, "dispatch", comm_sms=32).seconds
    ll = deepep_low_latency(c, R, 1, 7168, "dispatch").seconds
    assert normal == pytest.approx(MORI.normal_latency + 2 * MORI.rdma_latency, rel=0.02)
    assert ll == pytest.approx(MORI.ll_latency + MORI.rdma_latency, rel=0.02)
    one = deepep_normal(ClusterSpec(1, 8, 8, "mi355x"), R, 1, 7168, "dispatch", comm_sms=32).seconds
    assert one == pytest.approx(MORI.normal_latency, rel=0.02)
