"""DeepGEMM's fused MoE kernel as a strategy: where it runs, what a layer costs with it, its step, the answer's
line for it, and its published tables."""

from __future__ import annotations

import dataclasses

import pytest

from demos.errors import ConfigError
from demos.fidelity import fused_moe as published
from demos.predict import main
from demos.prediction.sweep import Sweep, applicable_overlaps
from demos.zoo.costs import layer_costs
from demos.zoo.fused_moe import fused_moe_math, fused_moe_refusal, fused_moe_seconds
from demos.zoo.loading import shrunk_spec
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload, cluster_for

FLASH = get_preset("deepseek-v4-flash")  # MXFP4 experts


def _w(spec=FLASH, gpu: str = "b200", nodes: int = 1, ep: int = 8, tokens: int = 64, **kw) -> Workload:
    return Workload(spec, cluster_for(gpu, nodes, None, ep), "decode", tokens, 2048, **kw)


def _with_experts(spec, experts: str):
    return dataclasses.replace(spec, precision=dataclasses.replace(spec.precision, experts=experts))


def test_it_runs_in_one_nvlink_domain_on_experts_its_kernels_take():
    assert fused_moe_refusal(_w()) is None
    assert "one NVLink domain" in fused_moe_refusal(_w(nodes=2, ep=16))
    assert fused_moe_refusal(_w(gpu="gb200", nodes=4, ep=16)) is None  # four trays of one NVL72 rack
    assert "all-to-all" in fused_moe_refusal(_w(ep=1))
    assert "fp8_e4m3 experts on hopper, not mxfp4" in fused_moe_refusal(_w(gpu="h200"))
    assert fused_moe_refusal(_w(_with_experts(FLASH, "fp8_e4m3"), gpu="h200")) is None  # SM90: block FP8
    assert "not fp8_e4m3" in fused_moe_refusal(_w(_with_experts(FLASH, "fp8_e4m3")))  # SM100 takes 4-bit
    oss = fused_moe_refusal(_w(get_preset("gpt-oss-120b")))  # MXFP4 experts, but 2880 wide
    assert (
        oss == "its mxfp4 kernels need the hidden size a multiple of 512 and the expert width of 128, got 2880 and 2880"
    )


def test_the_kernel_hides_the_shorter_of_transfers_and_gemms_behind_the_longer():
    w = _w(tokens=512)
    floor = fused_moe_seconds(w, 1, 0.0)
    assert floor > 0  # the transfers' latency: a one-token dispatch and combine
    big = fused_moe_seconds(w, 512, 1e-3)
    assert big == pytest.approx(floor + 1e-3)  # GEMM-bound: the transfers hidden
    flight = fused_moe_seconds(w, 512, 0.0) - floor
    assert flight > 0
    assert fused_moe_seconds(w, 512, flight / 2, overlap=0.0) == pytest.approx(floor + 1.5 * flight)
    assert fused_moe_seconds(w, 512, flight / 2) == pytest.approx(floor + flight)


def test_mxfp4_experts_multiply_as_w4a8_in_the_fused_kernel_whatever_the_checkpoint_declares():
    assert fused_moe_math(_w(), "w4a8") == "w4a8"
    assert fused_moe_math(_w(get_preset("kimi-k3")), "bfloat16") == "w4a8"  # K3's W4A16 checkpoint
    assert fused_moe_math(_w(_with_experts(FLASH, "fp8_e4m3"), gpu="h200"), "fp8") == "fp8"
    assert fused_moe_math(_w(_with_experts(FLASH, "nvfp4")), "fp4") == "fp4"


def test_its_step_launches_one_kernel_per_moe_layer_instead_of_the_all_to_all():
    w = _w()
    with ZooRun(w, mode="graph") as r:
        none, fused = r.step(False), r.step(False, fused=True)
        with pytest.raises(ValueError, match="without DBO"):
            r.step(True, fused=True)
    ops = {k.op for k in fused.records}
    assert "fused_moe" in ops and not ops & {"dispatch_ll", "combine_ll", "experts_ll", "dispatch_recv"}
    assert fused.seconds < none.seconds
    c = layer_costs(w, 64, 5, gpu_profile(w.gpu))
    assert c.fused is not None and layer_costs(_w(nodes=2, ep=16), 64, 5, gpu_profile(w.gpu)).fused is None


def test_its_real_math_equals_the_plain_steps_bitwise():
    w = Workload(shrunk_spec(FLASH, 8), cluster_for("b200", 1, 8, 8), "decode", 12, 8)  # widths its kernels tile
    with ZooRun(w, backend="threads") as r:
        r.step(False)
        plain = r.model.hidden.clone()
        r.step(False, fused=True)
        assert bool((r.model.hidden == plain).all()) and float(plain.abs().max()) > 0


def test_the_sweep_compares_it_where_it_runs_and_says_why_not_elsewhere():
    assert applicable_overlaps(_w()) == ("none", "dbo", "sbo", "fused")
    with pytest.raises(ConfigError, match="overlap fused does not apply here: its EP group must sit in one NVLink"):
        Sweep(_w(nodes=2, ep=16), (64,), ("graph",), overlaps=("none", "fused"))


def test_predict_names_the_engine_flags_of_the_fused_kernel(capsys, tmp_path):
    argv = ["--model", "deepseek-v4-flash", "--gpu", "b200", "--nodes", "1", "--ep", "8", "--tokens", "64,512"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "(the fastest of none, dbo, sbo, fused at each swept count" in out
    assert "fused: SGLang --moe-a2a-backend megamoe (without --enable-two-batch-overlap); vLLM --moe-backend " in out
    argv = [
        "--model",
        "minimax-m2.5",
        "--gpu",
        "h200",
        "--nodes",
        "1",
        "--ep",
        "8",
        "--tokens",
        "64",
        "--json",
        str(tmp_path / "p.json"),
    ]
    assert main(argv) == 0
    flags = capsys.readouterr().out
    assert "SGLang 0.5.23 has no fused MoE kernel for minimax_m2" in flags
    assert "vLLM 0.34.0 has no fused MoE kernel for minimax_m2" in flags


def test_the_published_tables_are_transcribed_and_every_row_compared():
    assert len(published.PUBLISHED_SM100) == 8 and len(published.PUBLISHED_SM90) == 22
    flash_h200 = [r for r in published.PUBLISHED_SM90 if r[0] == "deepseek-v4-flash"]
    assert flash_h200[0] == ("deepseek-v4-flash", 8, 225.0, pytest.approx(348.0 / 225.0))
    rows = published.compare()
    assert len(rows) == 30 and all(r["predicted"] > 0 and r["unfused_predicted"] > 0 for r in rows)
    text = published.format_table(rows)
    assert "held out" in text and text.count("unfused median") == 2
