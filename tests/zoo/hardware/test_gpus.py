"""GPU profiles (demos.zoo.hardware.gpus) and the cluster and routing model (demos.zoo.hardware.cluster): how the
datasheet figures are counted, the copy and destination shares, a Monte-Carlo check of the
expected distinct ranks and domains, and input validation."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dbo.costs import DTYPES
from demos.errors import ConfigError
from demos.zoo.hardware import GPUS, ClusterSpec, Routing, get_gpu, gpus, host_layout, oversized_host
from demos.zoo.hardware.gpu_spec import REPORTED_SHARE
from demos.zoo.workload import cluster_for

# --- GPU profiles -------------------------------------------------------------------------------------


def test_the_thirteen_builtin_gpus():
    nvidia = {"h100", "h200", "h800", "h20", "h20-141g", "b200", "gb200", "b300", "gb300"}
    assert set(GPUS) == nvidia | {"mi300x", "mi325x", "mi350x", "mi355x"}
    assert gpus() == dict(GPUS) and gpus() is not GPUS
    with pytest.raises(TypeError):
        GPUS["mine"] = GPUS["h100"]  # read-only


@pytest.mark.parametrize("name", sorted(GPUS))
def test_dense_rates_keep_the_tensor_core_ratios(name):
    # Dense rates halved from the sparse datasheet figures keep FP8 = 2 x BF16 and TF32 ~ BF16 / 2
    # (B200's table rounds TF32 to 1.1 of 1.125 PFLOPS); the SIMT FP32 rate is far below the tensor rates.
    # AMD's tables round each rate to 0.1 TFLOP/s; CDNA4 has no TF32 matrix rate (TF32 runs as FP32) and its
    # MXFP4 rate is twice its FP8 one.
    g = GPUS[name]
    assert g.fp8 == pytest.approx(2 * g.bf16, rel=1e-4)
    if g.family == "cdna4":
        assert g.tf32 == g.fp32 < g.bf16 / 8 and g.fp4 == pytest.approx(2 * g.fp8, rel=1e-4)
    else:
        assert g.tf32 == pytest.approx(g.bf16 / 2, rel=0.03)
        assert g.fp32 < g.tf32 / 1.5
    ultra = name in ("b300", "gb300")  # Blackwell Ultra: one 800 Gb/s ConnectX-8 per GPU
    assert g.nic_bandwidth == pytest.approx((800e9 if ultra else 400e9) / 8)  # one NIC per GPU, each way


def test_hopper_siblings_share_compute_and_differ_where_the_datasheets_say():
    h100, h200, h800, h20 = (GPUS[n] for n in ("h100", "h200", "h800", "h20"))
    for g in (h200, h800):
        assert (g.fp8, g.bf16, g.tf32, g.fp32, g.sm_count) == (h100.fp8, h100.bf16, h100.tf32, h100.fp32, 132)
    assert h100.bf16 == pytest.approx(1979e12 / 2)  # 1,979 TFLOPS "with sparsity"
    assert h200.hbm_capacity > h100.hbm_capacity and h200.hbm_bandwidth > h100.hbm_bandwidth
    assert (h800.hbm_capacity, h800.hbm_bandwidth) == (h100.hbm_capacity, h100.hbm_bandwidth)
    assert h100.nvlink_bandwidth == pytest.approx(900e9 / 2)  # 900 GB/s bidirectional
    assert h800.nvlink_bandwidth == pytest.approx(400e9 / 2)  # the export part: 400 GB/s bidirectional
    assert h20.bf16 < 0.2 * h100.bf16 and h20.sm_count < h100.sm_count  # the export part's cut compute
    assert h20.hbm_bandwidth > h100.hbm_bandwidth and h20.hbm_capacity == pytest.approx(96e9)
    assert h20.nvlink_bandwidth == h100.nvlink_bandwidth


def test_blackwell_and_domains():
    b200, gb200 = GPUS["b200"], GPUS["gb200"]
    assert b200.bf16 > 2 * GPUS["h100"].bf16 and gb200.bf16 > b200.bf16
    assert b200.nvlink_bandwidth == gb200.nvlink_bandwidth == pytest.approx(1.8e12 / 2)
    assert (gb200.gpus_per_node, gb200.nvlink_domain) == (4, 72)
    for name in ("h100", "h200", "h800", "h20", "b200"):
        assert (GPUS[name].gpus_per_node, GPUS[name].nvlink_domain) == (8, 8)
    assert all(g.source for g in GPUS.values())


def test_flops_by_dtype():
    g = GPUS["h100"]
    assert g.flops(torch.bfloat16) == g.flops("bf16") == g.flops("float16") == g.bf16
    assert g.flops(torch.float8_e4m3fn) == g.flops("fp8") == g.fp8
    assert g.flops("tf32") == g.tf32 and g.flops(torch.float32) == g.flops("fp32") == g.fp32
    assert set(g.dtype_flops) <= set(DTYPES) and g.dtype_flops["bfloat16"] == g.bf16
    with pytest.raises(ValueError, match="no rate for dtype"):
        g.flops(torch.float64)
    with pytest.raises(ValueError, match="no rate for dtype"):
        g.flops("int8")


def test_sm_share():
    assert GPUS["h800"].sm_share(20) == pytest.approx(20 / 132)
    assert GPUS["h800"].sm_share(0) == 0
    for bad in (132, -1, True, 1.5):
        with pytest.raises(ValueError, match="sms must be an int"):
            GPUS["h800"].sm_share(bad)


def test_get_gpu():
    assert get_gpu("H800") is GPUS["h800"]
    mine = dataclasses.replace(GPUS["h100"], name="mine")
    assert get_gpu(mine) is mine
    with pytest.raises(ValueError, match="unknown GPU 'a100'; known GPUs: h100"):
        get_gpu("a100")
    with pytest.raises(ValueError, match="unknown GPU"):
        get_gpu(3)


@pytest.mark.parametrize(
    "change,err,match",
    [
        ({"bf16": 0}, ValueError, "bf16 must be a finite number > 0"),
        ({"hbm_bandwidth": math.inf}, ValueError, "hbm_bandwidth must be a finite"),
        ({"nic_bandwidth": math.nan}, ValueError, "nic_bandwidth must be a finite"),
        ({"fp8": "1e15"}, TypeError, "fp8 must be a number"),
        ({"fp32": True}, TypeError, "fp32 must be a number"),
        ({"sm_count": 1.5}, ValueError, "sm_count must be an int >= 1"),
        ({"nvlink_domain": 0}, ValueError, "nvlink_domain must be an int >= 1"),
        ({"name": ""}, ValueError, "name must be a non-empty string"),
        ({"fp8": 1e12}, ValueError, "expected fp8 >= bf16 >= tf32"),
        ({"source": 3}, TypeError, "source must be a string"),
        ({"device_memory": -1.0}, ValueError, "device_memory must be 0 .derived. or bytes > 0"),
        ({"device_memory": math.inf}, ValueError, "device_memory must be 0 .derived. or bytes > 0"),
    ],
)
def test_gpu_spec_rejects_bad_figures(change, err, match):
    with pytest.raises(err, match=match):
        dataclasses.replace(GPUS["h100"], **change)


def test_the_device_memory_is_what_the_driver_reports_not_the_datasheets_si_gigabytes():
    """docs/clusters.md, "Device memory": the four measured totals are stored to the byte, every other GPU takes
    its datasheet figure as GiB times its vendor's share, and that share is the measured NVIDIA GPUs' own (each
    within 0.1% of it): the rule reproduces the measured figures it was drawn from."""
    mib = 2**20
    measured = {"h100": 81559 * mib, "h200": 143771 * mib, "b200": 183359 * mib, "mi300x": 206141652992}
    for name, total in measured.items():
        assert GPUS[name].memory_total == total
        g = dataclasses.replace(GPUS[name], device_memory=0.0)  # the rule alone
        assert g.memory_total == pytest.approx(total, rel=1e-3)
    for name, g in GPUS.items():
        if name not in measured:
            assert g.device_memory == 0.0
            assert g.memory_total == pytest.approx(g.hbm_capacity / 1e9 * 2**30 * REPORTED_SHARE[g.vendor])
        assert 1.06 < g.memory_total / g.hbm_capacity < 1.08  # binary, less the driver's share


def test_gpu_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        GPUS["h100"].bf16 = 1.0


# --- cluster and routing ------------------------------------------------------------------------------


def _h800(ep: int) -> ClusterSpec:
    return ClusterSpec(nodes=max(1, ep // 8), gpus_per_node=8, ep=ep, gpu="h800")


@pytest.mark.parametrize("ep", [1, 2, 4, 8, 16, 32, 64, 128, 256])
def test_copy_shares_under_uniform_routing(ep):
    c = _h800(ep)
    d = min(ep, 8)
    t = c.traffic(Routing(experts=256, top_k=8))
    assert t.shares == pytest.approx((1 / ep, (d - 1) / ep, (ep - d) / ep))
    assert sum(t.shares) == pytest.approx(1) and t.copies == pytest.approx(8)
    assert (c.ranks_per_domain, c.domains) == (d, max(1, ep // 8))
    assert t.ranks <= 8 and t.domains <= min(8, c.domains)
    assert t.remote_domains == pytest.approx(t.domains * (c.domains - 1) / c.domains)
    if c.domains == 1:
        assert t.copies_rdma == 0 and t.ranks_rdma == 0 and t.remote_domains == 0


def test_nvlink_domains_spanning_nodes():
    gb = ClusterSpec(nodes=18, gpus_per_node=4, ep=72, gpu="gb200")
    assert gb.nvlink_domain == 72 and gb.domains == 1
    assert gb.traffic(Routing(experts=288, top_k=8)).copies_rdma == 0  # the whole NVL72 rack on NVLink
    two = ClusterSpec(nodes=36, gpus_per_node=4, ep=144, gpu="gb200")
    assert (two.ranks_per_domain, two.domains) == (72, 2)
    assert two.traffic(Routing(experts=288, top_k=8)).shares[2] == pytest.approx(0.5)
    # an H100 node of 4 GPUs is a domain of 4; an explicit domain overrides the GPU's
    assert ClusterSpec(nodes=2, gpus_per_node=4, ep=8, gpu="h100").domains == 2
    assert ClusterSpec(nodes=2, gpus_per_node=4, ep=8, gpu="h100", nvlink_domain=8).domains == 1


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 8),
    per_rank=st.integers(1, 8),
    limit=st.sampled_from([None, 1, 2, 4]),
    gpu=st.sampled_from(["h800", "b200", "gb200"]),
)
def test_more_ep_never_less_rdma(k, per_rank, limit, gpu):
    limit = None if limit is None or limit > k else limit
    g = GPUS[gpu]
    last_share, last_remote = -1.0, -1.0
    for ep in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        if ep > g.nvlink_domain and ep % g.nvlink_domain:
            continue
        nodes = max(1, ep // g.gpus_per_node)
        c = ClusterSpec(nodes=nodes, gpus_per_node=min(ep, g.gpus_per_node), ep=ep, gpu=gpu)
        t = c.traffic(Routing(experts=256 * per_rank, top_k=k, max_domains=limit))
        assert t.shares[2] >= last_share - 1e-12
        assert t.remote_domains >= last_remote - 1e-12
        assert 0 <= t.ranks <= k + 1e-9 and t.domains <= k + 1e-9
        last_share, last_remote = t.shares[2], t.remote_domains


def _monte_carlo(ep: int, groups: int | None, tokens: int = 8192, experts: int = 256, k: int = 8):
    """Distinct ranks and nodes per token under DeepEP's test routing (random scores; top-`groups`
    nodes by their best expert, then top-k experts within them)."""
    gen = torch.Generator().manual_seed(1234)
    nodes = max(1, ep // 8)
    scores = torch.randn(tokens, experts, generator=gen).abs() + 1
    if groups is not None and nodes > groups:
        best = scores.view(tokens, nodes, -1).amax(dim=-1)
        chosen = torch.topk(best, groups, dim=-1).indices
        mask = torch.zeros(tokens, nodes, dtype=torch.bool).scatter_(1, chosen, True)
        scores = (scores.view(tokens, nodes, -1) * mask.unsqueeze(-1)).view(tokens, experts)
    idx = torch.topk(scores, k, dim=-1).indices
    ranks = torch.zeros(tokens, ep).scatter_(1, idx // (experts // ep), 1).sum(1).mean().item()
    node_hits = torch.zeros(tokens, nodes).scatter_(1, idx // (experts // nodes), 1).sum(1).mean().item()
    return ranks, node_hits


@pytest.mark.parametrize("ep,groups", [(8, None), (16, 4), (32, 4), (64, 4), (64, None), (128, 4)])
def test_expected_ranks_and_domains_match_a_monte_carlo_of_deepeps_routing(ep, groups):
    t = _h800(ep).traffic(Routing(experts=256, top_k=8, max_domains=groups))
    ranks, nodes = _monte_carlo(ep, groups)
    assert t.ranks == pytest.approx(ranks, rel=0.01)
    assert t.domains == pytest.approx(nodes, rel=0.01)


def test_imbalance_is_carried_not_applied_to_shares():
    a = _h800(64).traffic(Routing(experts=256, top_k=8))
    b = _h800(64).traffic(Routing(experts=256, top_k=8, imbalance=1.5))
    assert b.imbalance == 1.5 and a.imbalance == 1.0
    assert a.shares == b.shares and a.ranks == b.ranks


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"nodes": 2, "gpus_per_node": 8, "ep": 32}, r"ep \(32\) must divide the 16 GPUs"),
        ({"nodes": 2, "gpus_per_node": 8, "ep": 5}, r"ep \(5\) must divide"),
        ({"nodes": 3, "gpus_per_node": 8, "ep": 12}, r"ep \(12\) must fill whole NVLink domains of 8"),
        ({"nodes": 0, "gpus_per_node": 8, "ep": 8}, "nodes must be an int >= 1"),
        ({"nodes": 1, "gpus_per_node": 8, "ep": 8.0}, "ep must be an int >= 1"),
        ({"nodes": 2, "gpus_per_node": 8, "ep": 16, "nvlink_domain": 3}, "must be whole nodes of 8"),
    ],
)
def test_cluster_spec_rejects_bad_layouts(kw, match):
    with pytest.raises(ValueError, match=match):
        ClusterSpec(gpu="h800", **kw)


RACK = "a whole NVL72 rack of 18 hosts of 4 (one gb200 host holds 4 GPUs)"


@pytest.mark.parametrize(
    "gpu, nodes, per, message",
    [
        ("gb200", 1, 72, f"gpus_per_node=72 is {RACK}: use nodes=18 (4 GPUs per node) for one rack"),
        ("gb200", 2, 36, f"nodes=2 gpus_per_node=36 is {RACK}: use nodes=18 (4 GPUs per node) for one rack"),
        (
            "gb200",
            2,
            72,
            "nodes=2 gpus_per_node=72 is 2 whole NVL72 racks of 18 hosts of 4 (one gb200 host holds 4 GPUs): "
            "use nodes=36 (4 GPUs per node) for 2 racks",
        ),
        (
            "gb200",
            1,
            8,
            "gpus_per_node=8 is 2 hosts of 4 (one gb200 host holds 4 GPUs): use nodes=2 (4 GPUs per node) for 8 GPUs",
        ),
        (
            "h100",
            1,
            16,
            "gpus_per_node=16 is 2 hosts of 8 (one h100 host holds 8 GPUs): use nodes=2 (8 GPUs per node) for 16 GPUs",
        ),
        (
            "h100",
            1,
            12,
            "gpus_per_node=12 is 2 hosts of 6 (one h100 host holds 8 GPUs): use nodes=2 gpus_per_node=6 for 12 GPUs",
        ),
    ],
)
def test_a_node_is_one_host_and_a_rack_typed_as_one_is_refused_with_the_hosts_spelling(gpu, nodes, per, message):
    """``ClusterSpec`` takes hosts only; ``cluster_for`` (the commands' and ``predict``'s) takes whole racks typed as
    nodes as their hosts (issue 46) and refuses every other oversized host with the same line."""
    with pytest.raises(ValueError) as info:
        ClusterSpec(nodes=nodes, gpus_per_node=per, ep=nodes * per, gpu=gpu)
    assert str(info.value) == f"ClusterSpec: {message}"
    if "whole NVL72" in message and per % 72 == 0:
        c = cluster_for(gpu, nodes, per, None)
        assert (c.nodes, c.gpus_per_node) == (nodes * per // 4, 4) and c.nvlink_domain == 72
    else:
        with pytest.raises(ConfigError) as info:  # the library's one line, its fields named as the keywords
            cluster_for(gpu, nodes, per, None)
        assert str(info.value) == message.replace("=", " ") and set(info.value.fields) <= {"nodes", "gpus_per_node"}
    # what it says to pass is a cluster of the same GPUs, each host at most the GPU's server
    hosts, each = host_layout(GPUS[gpu], nodes * per)
    c = cluster_for(gpu, hosts, each, None)
    assert c.world == nodes * per and c.gpus_per_node <= GPUS[gpu].gpus_per_node and c.nodes == hosts


def test_a_host_up_to_its_server_is_a_node_and_a_smaller_one_too():
    for name, g in GPUS.items():
        for per in range(1, g.gpus_per_node + 1):
            assert oversized_host(g, 3, per, lambda f, v: f"{f}={v}") is None
            assert ClusterSpec(nodes=3, gpus_per_node=per, ep=per, gpu=name).gpus_per_node == per
    assert host_layout(GPUS["gb200"], 72) == (18, 4) and host_layout(GPUS["h100"], 7) == (1, 7)
    assert host_layout(GPUS["h100"], 13) == (13, 1)  # a prime count: one GPU per host


def test_cluster_spec_rejects_unknown_gpus_and_routing_that_does_not_shard():
    with pytest.raises(ValueError, match="unknown GPU 'v100'"):
        ClusterSpec(nodes=1, gpus_per_node=8, ep=8, gpu="v100")
    with pytest.raises(ValueError, match="288 experts do not shard evenly over ep=64"):
        _h800(64).traffic(Routing(experts=288, top_k=8))
    with pytest.raises(TypeError, match="routing must be a Routing"):
        _h800(8).traffic((256, 8))


@pytest.mark.parametrize(
    "kw,err,match",
    [
        ({"experts": 8, "top_k": 9}, ValueError, r"top_k \(9\) must not exceed experts"),
        ({"experts": 256, "top_k": 8, "max_domains": 9}, ValueError, r"max_domains \(9\) must not exceed top_k"),
        ({"experts": 256, "top_k": 8, "imbalance": 0.9}, ValueError, "imbalance must be >= 1"),
        ({"experts": 256, "top_k": 8, "imbalance": math.nan}, ValueError, "imbalance must not be NaN"),
        ({"experts": 256, "top_k": 0}, ValueError, "top_k must be an int >= 1"),
        ({"experts": 256, "top_k": 8, "imbalance": "2"}, TypeError, "imbalance must be a number"),
    ],
)
def test_routing_rejects_bad_input(kw, err, match):
    with pytest.raises(err, match=match):
        Routing(**kw)


def test_amd_instinct_gpus_are_a_full_mesh_of_seven_links_and_four_hardware_queues():
    """Infinity Fabric joins a node's 8 GPUs point to point: traffic to p peers uses p of the 7 links (an
    EP-4 all-to-all inside a node gets 3/7 of the GPU's scale-up bandwidth); NVSwitch gives every peer count
    the whole of it."""
    for name in ("mi300x", "mi325x", "mi350x", "mi355x"):
        g = GPUS[name]
        assert (g.vendor, g.scaleup, g.links, g.hw_queues, g.gpus_per_node) == ("amd", "mesh", 7, 4, 8)
        assert g.scaleup_bandwidth(7) == g.nvlink_bandwidth
        assert g.scaleup_bandwidth(3) == pytest.approx(3 / 7 * g.nvlink_bandwidth)
        assert g.scaleup_bandwidth(100) == g.nvlink_bandwidth
    assert GPUS["mi300x"].nvlink_bandwidth == 7 * 64e9  # 16 lanes at 32 Gb/s a link, each way
    h = GPUS["h200"]
    assert h.scaleup == "switch" and h.scaleup_bandwidth(1) == h.scaleup_bandwidth(7) == h.nvlink_bandwidth
    assert GPUS["mi355x"].sm_count == 256 and GPUS["mi300x"].sm_count == 304  # compute units
    assert GPUS["mi325x"].fp8 == GPUS["mi300x"].fp8 and GPUS["mi325x"].hbm_capacity == 256e9
    assert GPUS["h20-141g"].hbm_capacity == 141e9 and GPUS["h20-141g"].fp8 == GPUS["h20"].fp8


def test_a_mesh_without_links_or_a_vendor_with_anothers_family_is_one_line():
    import dataclasses

    base = GPUS["mi300x"]
    for bad, words in (
        ({"links": 0}, "a mesh has links"),
        ({"links": 3}, "needs 7 links"),
        ({"family": "hopper"}, "vendor 'amd' with family 'hopper'"),
        ({"scaleup": "torus"}, "scaleup must be one of"),
    ):
        with pytest.raises(ValueError, match=words) as e:
            dataclasses.replace(base, **bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="peers must be an int >= 1"):
        base.scaleup_bandwidth(0)
