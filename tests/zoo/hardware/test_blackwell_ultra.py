"""Blackwell Ultra (issue 46): B300 (HGX) and GB300 (NVL72) are built-in GPUs, timed on curves fitted to
their own tables, a GB300 rack is 18 hosts of 4 like GB200's, and the measured extra's B300/GB300 tables are
read as held-out checks of the Blackwell family's curves (docs/clusters.md, docs/kernels.md)."""

from __future__ import annotations

import pytest

from demos.errors import ConfigError
from demos.fidelity.silicon import SYSTEM_GPUS
from demos.prediction import predict
from demos.zoo import measured
from demos.zoo.hardware import get_gpu
from demos.zoo.rooflines import FIT_GPUS

pytestmark = pytest.mark.timeout(180)


def test_each_is_a_blackwell_gpu_with_its_own_node_and_nic():
    b300, gb300, b200, gb200 = (get_gpu(n) for n in ("B300", "gb300", "b200", "gb200"))
    assert b300.family == gb300.family == "blackwell"
    assert (b300.gpus_per_node, b300.nvlink_domain) == (8, 8)
    assert (gb300.gpus_per_node, gb300.nvlink_domain) == (gb200.gpus_per_node, gb200.nvlink_domain) == (4, 72)
    assert b300.nic_bandwidth == gb300.nic_bandwidth == 2 * b200.nic_bandwidth  # ConnectX-8, 800 Gb/s
    assert b300.hbm_capacity == gb300.hbm_capacity == 288e9 > gb200.hbm_capacity
    assert (b300.fp8, b300.bf16) == (b200.fp8, b200.bf16) and (gb300.fp8, gb300.bf16) == (gb200.fp8, gb200.bf16)


def test_their_tables_are_read_but_not_fitted():
    assert {"b300": "b300_sxm", "gb300": "gb300"}.items() <= measured.SYSTEMS.items()
    assert SYSTEM_GPUS["b300_sxm"] == "b300" and SYSTEM_GPUS["gb300"] == "gb300"
    assert not {"b300", "gb300"} & {g for gpus in FIT_GPUS.values() for g in gpus}  # held out


@pytest.mark.slow
def test_a_b300_and_a_gb300_rack_get_answers_and_the_rack_typed_as_one_host_its_spelling():
    b300 = predict("deepseek-r1", gpu="b300", nodes=2, ep=16, tokens=[64, 512])
    assert "--data-parallel-size-local 8" in b300.recommendation.vllm
    assert any(s.startswith("GPU b300: NVIDIA HGX B300") for s in b300.sources), b300.sources
    rack = predict("deepseek-r1", gpu="gb300", nodes=18, ep=72, tokens=[64, 512])
    assert "--data-parallel-size-local 4" in rack.recommendation.vllm and "--nnodes 18" in rack.recommendation.sglang
    # GB200's math rates and bandwidth: the same step within 1% (the rest is the SM count's occupancy term)
    gb200 = predict("deepseek-r1", gpu="gb200", nodes=18, ep=72, tokens=[64, 512])
    for a, b in zip(rack.points, gb200.points):
        assert a.step_no_dbo_s == pytest.approx(b.step_no_dbo_s, rel=0.01)
    typed = predict("deepseek-r1", gpu="gb300", nodes=1, gpus_per_node=72, ep=72, tokens=[64, 512])
    assert [p.step_no_dbo_s for p in typed.points] == [p.step_no_dbo_s for p in rack.points]  # the rack's 18 hosts
    with pytest.raises(ConfigError, match="use nodes 9 \\(4 GPUs per node\\) for 36 GPUs"):
        predict("deepseek-r1", gpu="gb300", nodes=1, gpus_per_node=36, ep=36, tokens=[8])


@pytest.mark.slow
@pytest.mark.measured
@pytest.mark.skipif(not measured.available(), reason="needs the measured extra")
def test_the_held_out_tables_sit_near_the_curves_and_gb300_decode_rows_are_checked(validate_json):
    from demos.fidelity.kernels import kernel_rows, summaries
    from demos.zoo.rooflines import family_fit

    wanted = ("gemm fp8", "gemm bf16", "mla decode", "mla prefill", "experts", "dispatch", "combine")
    for gpu in ("b300", "gb300"):
        # the family's curves, fitted on B200 and GB200 (the predictor takes B300's and GB300's own: each GPU's
        # rows are held out of its family's curves only)
        ops = {s["op"]: s for s in summaries(kernel_rows(gpu, family_fit("blackwell"), wanted))}
        assert set(wanted) <= set(ops)
        assert all(abs(s["median_error"]) < 0.2 for s in ops.values()), {o: s["median_error"] for o, s in ops.items()}
    silicon = {(s["gpu"], s["phase"]): s for s in validate_json("silicon")["summary"]}
    assert silicon[("gb300", "decode")]["rows"] >= 20
