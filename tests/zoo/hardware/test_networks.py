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
        elif f.name != "ll_two_level":
            assert getattr(fitted, f.name) == pytest.approx(getattr(stored, f.name), abs=1e-6), f.name
    assert rms < {"mori": 0.12, "efa": 0.4, "efa-gda": 0.13}[group]


def test_mori_fits_its_rows_and_predicts_the_held_out_gpus_within_15_percent_mostly():
    s = ep_published.summary(ep_published.compare("mori"))
    assert s["fitted"]["rows"] == 124 and s["held out"]["rows"] == 112
    assert s["fitted"]["within_15"] > 0.8 and s["held out"]["within_15"] > 0.8
    assert abs(s["held out"]["median"]) < 0.05


def test_a_one_node_all_to_all_on_a_mesh_uses_one_link_per_peer():
    """EP 2 on one MI355X node crosses 1 of 7 links, EP 8 all 7: the normal dispatch of the same tokens per rank
    moves (ep - 1) / ep of them, so EP 2's time per byte is 7 x 2 / 8 ... (below) larger than EP 8's; through
    NVSwitch (H200) every EP gets the whole bandwidth. MoRI's measured tables show it (validate deepep)."""

    def per_byte(gpu: str, ep: int) -> float:
        a = deepep_normal(ClusterSpec(1, ep, ep, gpu), R, 4096, 7168, "dispatch", comm_sms=32)
        return (a.seconds - comm_params(ClusterSpec(1, ep, ep, gpu)).normal_latency) / a.nvlink_bytes

    assert per_byte("mi355x", 2) == pytest.approx(7 * per_byte("mi355x", 8))
    assert per_byte("mi355x", 4) == pytest.approx(7 / 3 * per_byte("mi355x", 8))
    assert per_byte("h200", 2) == pytest.approx(per_byte("h200", 8))


def test_efas_proxy_pays_per_remote_rank_and_gpu_initiated_rdma_does_not():
    """A CPU proxy serves every remote rank's queue: the low-latency kernel's fixed cost grows with the EP group
    on EFA (10.2 us a remote rank, fitted on p5en), not on InfiniBand."""

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
