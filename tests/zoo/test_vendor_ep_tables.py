"""The published expert-parallel tables (demos/zoo/vendor_data/ep_tables.py, README-ep.md): what they hold.

Fast, no network: the CSVs ship beside the reader. The one test that regenerates them from the source
mirrors (scripts/extract_ep_tables.py --check) is skipped where the mirrors are absent.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from demos.zoo.vendor_data.ep_tables import SOURCES, mori_rows, published_rows

ROOT = Path(__file__).resolve().parents[2]

# Rows per (gpu, kernel_type, ep, phase) of mori_ep.csv: one per measured rule of each tuning file, less
# the rules collapsed as copies (README-ep.md). mi355x has no IntraNodeLL combine file at the pinned commit.
MORI_COUNTS = {
    ("mi300x", "IntraNode", 2, "combine"): 7,
    ("mi300x", "IntraNode", 2, "dispatch"): 7,
    ("mi300x", "IntraNode", 4, "combine"): 7,
    ("mi300x", "IntraNode", 4, "dispatch"): 7,
    ("mi300x", "IntraNode", 8, "combine"): 35,
    ("mi300x", "IntraNode", 8, "dispatch"): 35,
    ("mi300x", "IntraNodeLL", 8, "combine"): 9,
    ("mi300x", "IntraNodeLL", 8, "dispatch"): 9,
    ("mi308x", "InterNodeV1", 16, "combine"): 14,
    ("mi308x", "InterNodeV1", 16, "dispatch"): 14,
    ("mi308x", "InterNodeV1LL", 16, "combine"): 14,
    ("mi308x", "InterNodeV1LL", 16, "dispatch"): 14,
    ("mi308x", "IntraNode", 2, "combine"): 28,
    ("mi308x", "IntraNode", 2, "dispatch"): 14,
    ("mi308x", "IntraNode", 4, "combine"): 28,
    ("mi308x", "IntraNode", 4, "dispatch"): 14,
    ("mi308x", "IntraNode", 8, "combine"): 28,
    ("mi308x", "IntraNode", 8, "dispatch"): 14,
    ("mi350x", "IntraNode", 2, "combine"): 28,
    ("mi350x", "IntraNode", 2, "dispatch"): 14,
    ("mi350x", "IntraNode", 4, "combine"): 28,
    ("mi350x", "IntraNode", 4, "dispatch"): 14,
    ("mi350x", "IntraNode", 8, "combine"): 28,
    ("mi350x", "IntraNode", 8, "dispatch"): 15,
    ("mi350x", "IntraNodeLL", 8, "combine"): 9,
    ("mi350x", "IntraNodeLL", 8, "dispatch"): 9,
    ("mi355x", "InterNodeV1", 16, "combine"): 27,
    ("mi355x", "InterNodeV1", 16, "dispatch"): 23,
    ("mi355x", "InterNodeV1LL", 16, "combine"): 32,
    ("mi355x", "InterNodeV1LL", 16, "dispatch"): 25,
    ("mi355x", "IntraNode", 2, "combine"): 30,
    ("mi355x", "IntraNode", 2, "dispatch"): 16,
    ("mi355x", "IntraNode", 4, "combine"): 28,
    ("mi355x", "IntraNode", 4, "dispatch"): 14,
    ("mi355x", "IntraNode", 8, "combine"): 56,
    ("mi355x", "IntraNode", 8, "dispatch"): 56,
    ("mi355x", "IntraNodeLL", 8, "dispatch"): 3,
}

ARCH = {"mi300x": "gfx942", "mi308x": "gfx942", "mi350x": "gfx950", "mi355x": "gfx950"}

# UCCL-EP's README (uccl-project/uccl @ da914a2), "Normal kernels ... On p5en": 8x H200 + 16x 200 Gb/s EFA,
# 4096 tokens, FP8 dispatch; dispatch EP16 "50 GB/s (RDMA), 1196 us", combine EP16 "18 GB/s (RDMA), 6379 us".
P5EN_EP16_DISPATCH = (1196e-6, 50e9)
P5EN_EP16_COMBINE = (6379e-6, 18e9)


def test_every_latency_and_bandwidth_is_positive_and_finite():
    for r in mori_rows():
        assert r.seconds > 0 and math.isfinite(r.seconds), r
        for bw in (r.bandwidth, r.rdma_bandwidth, r.xgmi_bandwidth, r.ll_bandwidth):
            assert bw is None or (bw > 0 and math.isfinite(bw)), r
    for r in published_rows():
        assert r.seconds is not None or r.bandwidth is not None, r
        assert r.seconds is None or (r.seconds > 0 and math.isfinite(r.seconds)), r
        assert r.bandwidth is None or (r.bandwidth > 0 and math.isfinite(r.bandwidth)), r


def test_every_mori_file_is_there_less_asyncll():
    counts = Counter((r.gpu, r.kernel_type, r.ep, r.phase) for r in mori_rows())
    assert counts == MORI_COUNTS
    assert {r.kernel_type for r in mori_rows()} == {"IntraNode", "IntraNodeLL", "InterNodeV1", "InterNodeV1LL"}
    for r in mori_rows():
        assert r.file == f"{ARCH[r.gpu]}_{r.gpu}_{r.kernel_type}_ep{r.ep}_{r.phase}.json", r
        # the internode tables carry the per-fabric averages, the intranode ones do not
        internode = r.kernel_type.startswith("InterNode")
        assert (r.rdma_bandwidth is not None) == internode and (r.xgmi_bandwidth is not None) == internode, r


@pytest.mark.parametrize("gpu", ["mi300x", "mi350x", "mi355x"])
def test_intranode_ep8_rows_of_each_gpu(gpu):
    for kernel_type in ("IntraNode", "IntraNodeLL"):
        for phase in ("dispatch", "combine"):
            want = MORI_COUNTS.get((gpu, kernel_type, 8, phase), 0)
            rows = mori_rows(gpu=gpu, kernel_type=kernel_type, ep=8, phase=phase)
            assert len(rows) == want, (gpu, kernel_type, phase)
    # the bandwidth-table point at 4096 tokens is there for each GPU's IntraNode dispatch
    assert any(r.tokens == 4096 for r in mori_rows(gpu=gpu, kernel_type="IntraNode", ep=8, phase="dispatch"))


def test_no_asyncll_rows():
    assert not any("AsyncLL" in r.kernel_type or "AsyncLL" in r.file for r in mori_rows())
    with pytest.raises(ValueError, match="unknown kernel_type 'AsyncLL'"):
        mori_rows(kernel_type="AsyncLL")


def test_copies_are_one_row_each():
    """A (zero_copy, quant) label set carrying the very same figures is one row, its count in ``copies``."""
    keys = Counter(
        (r.gpu, r.kernel_type, r.ep, r.phase, r.dtype, r.quant, r.zero_copy, r.hidden, r.top_k, r.tokens)
        for r in mori_rows()
    )
    assert max(keys.values()) == 1
    collapsed = {r.file for r in mori_rows() if r.copies > 1}
    assert collapsed == {
        "gfx942_mi300x_IntraNodeLL_ep8_combine.json",
        "gfx942_mi300x_IntraNode_ep2_combine.json",
        "gfx942_mi300x_IntraNode_ep4_combine.json",
        "gfx942_mi300x_IntraNode_ep8_combine.json",
    }
    assert sum(r.copies - 1 for r in mori_rows()) == 90


def test_latency_grows_with_tokens_from_128_up():
    """Within one series, latency does not fall by more than 10% as tokens per rank grow (from 128 up).

    Below 128 tokens it may (e.g. the 1-token IntraNodeLL points take longer than the 32-token ones).
    """
    series = defaultdict(list)
    for r in mori_rows():
        key = (r.gpu, r.kernel_type, r.ep, r.phase, r.dtype, r.quant, r.zero_copy, r.hidden, r.top_k)
        series[key].append((r.tokens, r.seconds))
    for key, points in series.items():
        points.sort()
        for (t0, s0), (t1, s1) in zip(points, points[1:]):
            if t0 >= 128:
                assert s1 >= 0.9 * s0, (key, t0, s0, t1, s1)


def test_p5en_ep16_normal_figures():
    rows = {
        r.kernel: r
        for r in published_rows(network="efa", library="uccl-ep", gpu="h200")
        if r.mode == "normal" and r.ep == 16
    }
    assert set(rows) == {"dispatch", "combine"}
    for kernel, (seconds, bandwidth) in (("dispatch", P5EN_EP16_DISPATCH), ("combine", P5EN_EP16_COMBINE)):
        r = rows[kernel]
        assert r.seconds == pytest.approx(seconds) and r.bandwidth == pytest.approx(bandwidth)
        assert (r.instance, r.nics_per_gpu, r.nic_gbps, r.tokens, r.hidden, r.top_k) == ("p5en", 2, 200, 4096, 7168, 8)
        assert r.bandwidth_kind == "bottleneck" and r.link == "rdma" and r.dispatch_dtype == "fp8"


def test_published_vocabulary_and_keys():
    rows = published_rows()
    assert {r.source for r in rows} == set(SOURCES)
    assert {r.network for r in rows} <= {"efa", "efa-gda", "ib", "roce", "xgmi", "nvlink"}
    assert {r.library for r in rows} <= {"mori", "uccl-ep", "deepep", "deepep-v2", "nccl", "nvshmem-deepep"}
    assert {r.bandwidth_kind for r in rows} <= {"bottleneck", "algbw", "busbw", "per-rank", "scale-out", None}
    assert {r.kernel for r in rows} == {"dispatch", "combine", "alltoall"}
    key = Counter(
        (r.source, r.run, r.gpu, r.network, r.library, r.mode, r.ep, r.tokens, r.kernel, r.dispatch_dtype, r.link)
        for r in rows
    )
    assert max(key.values()) == 1
    # intranode rows are on the node's own fabric; the AMD NICs named AINIC / Pollara / Thor2 are RoCE
    for r in rows:
        if r.network in ("xgmi", "nvlink"):
            assert r.ep == 8, r
    stale = [r for r in rows if r.stale]
    assert {(r.source, r.gpu, r.ep) for r in stale} == {("ROCm/mori", "mi300x", 32)} and len(stale) == 6


def test_unknown_filter_is_one_line_naming_the_known_values():
    with pytest.raises(ValueError) as err:
        mori_rows(gpu="mi325x")
    assert "\n" not in str(err.value) and "mi300x, mi308x, mi350x, mi355x" in str(err.value)
    with pytest.raises(ValueError) as err:
        published_rows(network="nvswitch")
    assert "\n" not in str(err.value) and "efa-gda" in str(err.value)
    with pytest.raises(ValueError, match="unknown ep 32"):
        mori_rows(ep=32)
    with pytest.raises(ValueError, match="unknown library"):
        published_rows(library="deepep-v3")
    v2 = published_rows(network="efa-gda")  # DeepEP V2 over NCCL GIN on p6-b200 (RESULTS-b200.md, transcribed)
    assert {(r.library, r.gpu) for r in v2} == {("deepep-v2", "b200")} and len(v2) == 8
    assert [r.seconds * 1e6 for r in v2 if r.mode == "low-latency" and r.ep == 16] == [185.637, 197.481]


@pytest.mark.skipif(not Path("/work/.mirror/ROCm+mori/repo").exists(), reason="needs the source mirrors")
def test_csvs_regenerate_from_the_mirrors():
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "extract_ep_tables.py"), "--check", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
