"""The DeepEP all-to-all model (demos.zoo.hardware.alltoall) against DeepEP's published H800 tables
(demos/fidelity/deepep.py), its fit, its message sizes against the tables' own bandwidth
columns, monotonic sanity, and input validation."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demos.fidelity import deepep
from demos.zoo.hardware import (
    DEEPEP_H800,
    DEFAULT_COMM_SMS,
    GPUS,
    ClusterSpec,
    DeepEPParams,
    Routing,
    deepep_low_latency,
    deepep_normal,
    ll_buffer_bytes,
    message_bytes,
    token_bytes,
)

ROUTING = Routing(experts=256, top_k=8)
KEYS = {"kernel", "mode", "ep", "predicted", "published"}


def _cluster(ep: int, gpu: str = "h800") -> ClusterSpec:
    g = GPUS[gpu]
    return ClusterSpec(nodes=max(1, ep // g.gpus_per_node), gpus_per_node=min(ep, g.gpus_per_node), ep=ep, gpu=gpu)


# --- the published tables -----------------------------------------------------------------------------


def test_every_published_row_is_reproduced_within_15_percent():
    rows = deepep.compare(legacy=False)
    assert len(rows) == len(deepep.PUBLISHED_NORMAL) + len(deepep.PUBLISHED_LL) == 20
    assert {(r["mode"], r["kernel"]) for r in rows} == {
        (m, k) for m in ("normal", "low-latency") for k in ("dispatch", "combine")
    }
    for r in rows:
        assert KEYS <= set(r)
        assert r["unit"] == ("GB/s" if r["mode"] == "normal" else "us")
        assert abs(r["predicted"] / r["published"] - 1) <= deepep.TOLERANCE, r
    assert deepep.max_error(rows) <= deepep.TOLERANCE


def test_the_earlier_pure_rdma_rows_out_of_the_fit_are_within_15_percent_too():
    rows = [r for r in deepep.compare() if r["source"] == deepep.LEGACY_SOURCE]
    assert len(rows) == 8 and all(r["links"] == "rdma" and r["mode"] == "low-latency" for r in rows)
    for r in rows:
        assert abs(r["error"]) <= deepep.TOLERANCE, r


def test_bottlenecks_where_the_physics_puts_them():
    rows = {(r["mode"], r["kernel"], r["ep"], r["links"]): r for r in deepep.compare()}
    assert rows["normal", "dispatch", 8, "nvlink"]["bottleneck"] == "nvlink"
    assert rows["normal", "dispatch", 64, "nvlink+rdma"]["bottleneck"] == "rdma"
    assert rows["low-latency", "combine", 8, "nvlink+rdma"]["bottleneck"] == "nvlink"
    assert rows["low-latency", "combine", 8, "rdma"]["bottleneck"] == "rdma"


def test_refitting_gives_back_the_builtin_parameters():
    p, rms = deepep.fit()
    assert rms < 0.05
    assert p.rdma_efficiency == pytest.approx(DEEPEP_H800.rdma_efficiency, abs=0.01)
    assert p.nvlink_efficiency == pytest.approx(DEEPEP_H800.nvlink_efficiency, abs=0.01)
    assert p.ll_latency == pytest.approx(DEEPEP_H800.ll_latency, abs=1e-6)
    assert p.normal_latency == pytest.approx(DEEPEP_H800.normal_latency, abs=2e-6)  # weakly determined
    assert deepep.max_error(deepep.compare(p, legacy=False)) <= deepep.TOLERANCE


def test_format_table_lists_every_row_and_the_worst_error():
    rows = deepep.compare()
    text = deepep.format_table(rows)
    assert text.count("\n") >= len(rows) + 4
    assert f"max |error| {deepep.max_error(rows) * 100:.1f}% over {deepep.SOURCE}" in text
    assert text.count("(held out)") == 8  # the pure-RDMA rows no parameter saw
    assert text.count("(fitted)") == len(rows) - 8 and "fitted to the current rows" in text
    with pytest.raises(ValueError, match="no rows from"):
        deepep.max_error([])


# The README's low-latency "RDMA bandwidth" columns are (selections x message bytes) / latency;
# DeepEP's test routes 128 tokens x top-8 and masks 10 selections (1014 left); the README rounds to
# whole GB/s (1.3% of 39 GB/s).
_LL_BANDWIDTH = {
    "dispatch": {8: (77, 98), 16: (118, 63), 32: (155, 48), 64: (173, 43), 128: (192, 39), 256: (194, 39)},
    "combine": {8: (114, 127), 16: (195, 74), 32: (273, 53), 64: (314, 46), 128: (369, 39), 256: (360, 40)},
}
_LL_RDMA_BANDWIDTH = {
    "dispatch": {8: (163, 46), 16: (173, 43), 32: (182, 41), 64: (186, 40)},
    "combine": {8: (318, 46), 16: (329, 44), 32: (350, 41), 64: (353, 41)},
}


@pytest.mark.parametrize("table", [_LL_BANDWIDTH, _LL_RDMA_BANDWIDTH])
def test_low_latency_message_bytes_match_the_readme_bandwidth_columns(table):
    for kernel, rows in table.items():
        msg = message_bytes(kernel, 7168, low_latency=True)
        for ep, (us, gbps) in rows.items():
            assert 1014 * msg / (us * 1e-6) / 1e9 == pytest.approx(gbps, rel=0.015), (kernel, ep)


def test_message_bytes():
    assert token_bytes(7168, True) == 7168 + 56 * 4
    assert token_bytes(7168, False) == 14336
    assert message_bytes("dispatch", 7168, low_latency=True) == 7168 + 224 + 16
    assert message_bytes("dispatch", 7168, fp8=False) == 14336
    assert message_bytes("combine", 7168, fp8=True) == 14336  # combine is BF16 whatever fp8 says


def test_low_latency_buffer_matches_deepeps_allocation():
    # test_low_latency.py's "Allocating buffer size" line as users posted it (128 tokens, hidden 7168):
    # deepseek-ai/DeepEP issue #183 (2025-06-04, 256 experts) and issue #75 (2025-04-13, 288 experts).
    assert ll_buffer_bytes(128, 7168, 256) == 1_880_098_944
    assert ll_buffer_bytes(128, 7168, 288) == 2_115_111_296
    assert ll_buffer_bytes(256, 7168, 256) == pytest.approx(2 * ll_buffer_bytes(128, 7168, 256), rel=1e-6)


# --- monotonic sanity ---------------------------------------------------------------------------------

_EPS = {"h800": (8, 16, 32, 64, 128, 256), "b200": (8, 16, 64), "gb200": (8, 72, 144)}


@settings(max_examples=80, deadline=None)
@given(
    gpu=st.sampled_from(sorted(_EPS)),
    data=st.data(),
    kernel=st.sampled_from(["dispatch", "combine"]),
    t1=st.integers(0, 8192),
    t2=st.integers(0, 8192),
    fp8=st.booleans(),
)
def test_more_tokens_are_never_faster(gpu, data, kernel, t1, t2, fp8):
    ep = data.draw(st.sampled_from(_EPS[gpu]))
    lo, hi = sorted((t1, t2))
    c = _cluster(ep, gpu)
    routing = Routing(experts=ep * 4, top_k=8)
    for mode in (deepep_low_latency, deepep_normal):
        a, b = mode(c, routing, lo, 7168, kernel, fp8=fp8), mode(c, routing, hi, 7168, kernel, fp8=fp8)
        assert a.seconds <= b.seconds
        assert a.rdma_bytes <= b.rdma_bytes and a.nvlink_bytes <= b.nvlink_bytes


def test_more_ep_never_moves_less_over_rdma():
    for mode in (deepep_low_latency, deepep_normal):
        last = -1.0
        for ep in (8, 16, 32, 64, 128, 256):
            a = mode(_cluster(ep), Routing(experts=256, top_k=8, max_domains=4), 1024, 7168)
            assert a.rdma_bytes >= last
            last = a.rdma_bytes


def test_nvlink_for_intranode_copies_is_never_slower():
    for ep in (8, 16, 64, 256):
        with_nvl = deepep_low_latency(_cluster(ep), ROUTING, 128, 7168)
        rdma_only = deepep_low_latency(_cluster(ep), ROUTING, 128, 7168, nvlink=False)
        assert with_nvl.seconds <= rdma_only.seconds
        assert rdma_only.nvlink_bytes == 0
        assert rdma_only.rdma_bytes == pytest.approx(with_nvl.rdma_bytes + with_nvl.nvlink_bytes)


def test_fp8_dispatch_beats_bf16_and_faster_links_beat_slower():
    c = _cluster(64)
    assert (
        deepep_low_latency(c, ROUTING, 128, 7168).seconds < deepep_low_latency(c, ROUTING, 128, 7168, fp8=False).seconds
    )
    assert deepep_normal(c, ROUTING, 4096, 7168).seconds < deepep_normal(c, ROUTING, 4096, 7168, fp8=False).seconds
    # NVLink-bound within one node: the H100's 450 GB/s beats the H800's 200 GB/s; RDMA-bound
    # across nodes (the same 400 Gb/s NIC): the same time
    assert (
        deepep_normal(_cluster(8, "h100"), ROUTING, 4096, 7168).seconds
        < deepep_normal(_cluster(8), ROUTING, 4096, 7168).seconds
    )
    assert deepep_low_latency(_cluster(64, "h100"), ROUTING, 128, 7168).seconds == pytest.approx(
        deepep_low_latency(c, ROUTING, 128, 7168).seconds
    )
    # a GB200 NVL72 rack keeps EP72 off the NIC altogether
    gb = deepep_low_latency(_cluster(72, "gb200"), Routing(experts=288, top_k=8), 128, 7168)
    assert gb.rdma_bytes == 0 and gb.bottleneck == "nvlink"


def test_imbalance_scales_the_link_time_of_the_busiest_rank():
    c = _cluster(32)
    for mode, latency in ((deepep_low_latency, DEEPEP_H800.ll_latency), (deepep_normal, DEEPEP_H800.normal_latency)):
        even = mode(c, ROUTING, 512, 7168)
        skew = mode(c, dataclasses.replace(ROUTING, imbalance=1.5), 512, 7168)
        assert skew.seconds - latency == pytest.approx(1.5 * (even.seconds - latency))
        assert skew.rdma_bytes == pytest.approx(1.5 * even.rdma_bytes)


def test_sms_held_and_zero_tokens():
    c = _cluster(16)
    assert deepep_low_latency(c, ROUTING, 128, 7168).sms == 0
    assert deepep_normal(c, ROUTING, 4096, 7168).sms == DEFAULT_COMM_SMS == 20
    assert deepep_normal(c, ROUTING, 4096, 7168, comm_sms=24).sms == 24
    empty = deepep_low_latency(c, ROUTING, 0, 7168)
    assert empty.seconds == DEEPEP_H800.ll_latency and empty.bottleneck == "latency"
    assert deepep_normal(c, ROUTING, 0, 7168).seconds == DEEPEP_H800.normal_latency


# --- input validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call,err,match",
    [
        (lambda c: deepep_low_latency(c, ROUTING, -1, 7168), ValueError, "tokens must be an int >= 0"),
        (lambda c: deepep_normal(c, ROUTING, 1.5, 7168), ValueError, "tokens must be an int >= 0"),
        (lambda c: deepep_low_latency(c, ROUTING, 128, 7000), ValueError, "multiple of 128"),
        (lambda c: deepep_low_latency(c, ROUTING, 128, 0), ValueError, "hidden must be an int >= 1"),
        (
            lambda c: deepep_normal(c, ROUTING, 128, 7168, "gather"),
            ValueError,
            "kernel must be one of dispatch, combine",
        ),
        (
            lambda c: deepep_normal(c, ROUTING, 128, 7168, comm_sms=0),
            ValueError,
            r"comm_sms must be an int in \[1, 132\)",
        ),
        (lambda c: deepep_normal(c, ROUTING, 128, 7168, comm_sms=132), ValueError, "comm_sms must be an int"),
        (lambda c: deepep_normal(c, ROUTING, 128, 7168, comm_sms=True), ValueError, "comm_sms must be an int"),
        (lambda c: deepep_low_latency(c, ROUTING, 128, 7168, params=(0.9, 0.7, 0, 0)), TypeError, "params must be"),
        (lambda c: deepep_low_latency("h800", ROUTING, 128, 7168), TypeError, "cluster must be a ClusterSpec"),
        (lambda c: ll_buffer_bytes(0, 7168, 256), ValueError, "max_tokens must be an int >= 1"),
    ],
)
def test_bad_calls_fail_with_one_line(call, err, match):
    with pytest.raises(err, match=match) as info:
        call(_cluster(16))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kw,err,match",
    [
        ({"rdma_efficiency": 1.2}, ValueError, r"rdma_efficiency must be in \(0, 1\]"),
        ({"nvlink_efficiency": 0.0}, ValueError, "nvlink_efficiency must be in"),
        ({"ll_latency": -1e-6}, ValueError, "ll_latency must be >= 0"),
        ({"normal_latency": math.inf}, ValueError, "normal_latency must be finite"),
        ({"rdma_efficiency": True}, TypeError, "rdma_efficiency must be a number"),
    ],
)
def test_params_reject_bad_values(kw, err, match):
    with pytest.raises(err, match=match):
        dataclasses.replace(DEEPEP_H800, **kw)
    assert isinstance(DEEPEP_H800, DeepEPParams)
