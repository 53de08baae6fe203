"""Figures docs/clusters.md quotes from deterministic code, recomputed (issue 24, "the docs agree with
the tool"): the DeepEP comparison tables (``python -m demos.validate --deepep``) and the GPU table
(``demos.zoo.hardware.GPUS``). A changed parameter or datasheet figure fails here until the page follows."""

from __future__ import annotations

import re

from demos.fidelity import deepep
from demos.zoo.hardware import GPUS
from tests.support.paths import REPO

TEXT = (REPO / "docs" / "clusters.md").read_text()


def test_the_deepep_tables_are_what_validate_deepep_computes():
    recs = deepep.compare()
    links = {"nvlink": "NVLink", "nvlink+rdma": "NVLink + RDMA"}
    fitted = [
        (
            "normal" if r["mode"] == "normal" else "low-latency",
            r["kernel"],
            str(r["ep"]),
            links[r["links"]],
            f"{r['predicted']:.1f} {r['unit']}",
            f"{r['published']:g} {r['unit']}",
            f"{r['error'] * 100:+.1f}%",
            r["bottleneck"],
        )
        for r in recs
        if r["links"] != "rdma"
    ]
    rows = re.findall(
        r"^\| (normal|low-latency) \| (\w+) \| (\d+) \| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \| (\w+) \|$",
        TEXT,
        re.M,
    )
    assert rows == fitted
    rdma = [
        (r["kernel"], str(r["ep"]), f"{r['predicted']:.1f} us", f"{r['published']:g} us", f"{r['error'] * 100:+.1f}%")
        for r in recs
        if r["links"] == "rdma"
    ]
    old = re.findall(r"^\| (dispatch|combine) \| (\d+) \| ([\d.]+ us) \| ([\d.]+ us) \| ([+-][\d.]+%) \|$", TEXT, re.M)
    assert old == rdma
    largest = max(abs(r["error"]) for r in recs if r["links"] != "rdma")
    assert f"Largest error {largest * 100:.1f}%" in TEXT


UNITS = {"T": 1e12, "GB": 1e9, "TB/s": 1e12, "GB/s": 1e9}


def _value(cell: str) -> float:
    """'989.5 T' -> 9.895e14, '4.0 TB/s' -> 4e12, '132' -> 132."""
    num, _, unit = cell.partition(" ")
    return float(num) * UNITS.get(unit, 1.0)


def test_the_gpu_table_is_the_built_in_gpus():
    rows = re.findall(r"^\| ([\w-]+)(?: \([^)]*\))? \| " + r" \| ".join([r"([^|]+?)"] * 10) + r" \|$", TEXT, re.M)
    rows = [r for r in rows if r[0] in GPUS]
    assert [r[0] for r in rows] == list(GPUS)
    for name, *cells in rows:
        g = GPUS[name]
        want = (g.fp8, g.bf16, g.tf32, g.fp32, g.hbm_capacity, g.hbm_bandwidth, g.sm_count)
        want += (g.nvlink_bandwidth, g.nic_bandwidth)
        assert tuple(_value(c) for c in cells[:9]) == want, name
        assert cells[9] == f"{g.gpus_per_node} / {g.nvlink_domain}", name
