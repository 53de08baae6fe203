"""The local fused MoE (``FamilyFit.local_experts``): where no all-to-all moves the tokens (MoE tensor
parallelism, or expert parallelism beside attention TP), the routed experts are timed on the curve of their
dtype fitted to SGLang's local kernels, fixed time included; with an all-to-all they keep DeepEP's grouped
curve without one. The reader gives each rank's slice, and the fitted curves keep their rows within the
documented medians."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest

from demos.fits.rooflines import _experts_parts
from demos.zoo import measured
from demos.zoo.costs import layer_costs
from demos.zoo.hardware import get_gpu
from demos.zoo.measured_moe import EngineMoeRow
from demos.zoo.models import get_preset
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FITS
from demos.zoo.workload import Workload, cluster_for

needs_tables = pytest.mark.skipif(not measured.available(), reason="needs the measured extra")


def _experts_seconds(w: Workload, tokens: int) -> float:
    return layer_costs(w, tokens, 10, gpu_profile(w.gpu)).experts.seconds


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_a_tensor_parallel_moe_pays_the_local_kernels_fixed_time(gpu):
    """MiniMax-M2.5 on 8 GPUs, attention TP 8, MoE TP 8, 4 tokens: the experts op is the local curve's fixed
    time plus the weights of the touched slices at its share of bandwidth (the activation pass beside)."""
    spec, fit = get_preset("minimax-m2.5"), FITS[get_gpu(gpu).family]
    w = Workload(spec, cluster_for(gpu, 1, 8, 8), tokens=4, attention_tp=8, moe_tp=8)
    local = fit.local_curve(spec.precision.experts)
    got = _experts_seconds(w, 4)
    assert not w.alltoall and local is not None and local.latency > 20e-6
    assert got > local.latency
    # the fixed time is what separates it from the all-to-all path's curve at a few tokens
    assert got - local.latency < 0.5 * got


def test_with_an_all_to_all_the_experts_keep_the_grouped_curve_without_a_fixed_time():
    """DeepSeek-V3 at EP 8 over one node's all-to-all: the experts op is the same with or without a local curve
    in the family (the curve is the local kernel's only)."""
    from demos.zoo.kernel_times import KernelTimes

    w = Workload(get_preset("deepseek-v3"), cluster_for("h200", 1, 8, 8), tokens=64)
    profile = gpu_profile(w.gpu)
    fit = FITS["hopper"]
    with_local = layer_costs(w, 64, 10, profile, KernelTimes(w.gpu, profile, fit)).experts.seconds
    without = layer_costs(w, 64, 10, profile, KernelTimes(w.gpu, profile, replace(fit, local_experts={})))
    assert w.alltoall and with_local == without.experts.seconds


def test_a_family_without_the_local_curve_times_the_local_moe_as_before():
    """AMD's families have no engine's local kernel tables: their local MoE takes ``experts`` and no fixed
    time, so a TP-only MoE layer's experts op is below the Hopper local curve's fixed time there."""
    assert FITS["cdna3"].local_experts == {} and FITS["cdna4"].local_experts == {}
    w = Workload(get_preset("minimax-m2.5"), cluster_for("mi300x", 1, 8, 8), tokens=2, attention_tp=8, moe_tp=8)
    assert _experts_seconds(w, 1) < FITS["hopper"].local_curve("fp8_e4m3").latency


@pytest.mark.parametrize("gpu,copies", [("h200", False), ("b200", False), ("mi300x", True)])
def test_the_local_fused_moe_launches_no_receive_copies_where_its_curve_holds_them(gpu, copies):
    """The engines' fused MoE reads the tokens in place through its sorted indices and sums each token's top-k
    inside its own call, which the tables the local curve is fitted to time whole: where the family has the
    curve the layer launches no receive copies around it (they were charged twice, a floor each, at every
    small step); AMD's families, without the curve, keep the two copies for the permute and the sum."""
    from demos.zoo.plan import layer_launches

    w = Workload(get_preset("minimax-m2.5"), cluster_for(gpu, 1, 8, 8), tokens=4, attention_tp=8, moe_tp=8)
    c = layer_costs(w, 4, 10, gpu_profile(w.gpu))
    launched = layer_launches(w, c)
    assert not w.alltoall and ("experts" in launched or "experts_ll" in launched)
    assert ("dispatch_recv" in launched, "combine_recv" in launched) == (copies, copies)
    assert (c.dispatch_recv is not None) == copies and (c.combine_recv is not None) == copies


def test_each_expert_dtype_takes_its_own_local_curve_and_one_without_takes_block_fp8s():
    """Kimi-K2.5's NVFP4 experts on B200 under MoE TP 8 take the NVFP4 kernel's curve (fitted to SGLang's
    NVFP4 rows), not FP8's; on Hopper, which has no NVFP4 kernel, FP8's stands in."""
    blackwell, hopper = FITS["blackwell"], FITS["hopper"]
    assert blackwell.local_curve("nvfp4") is blackwell.local_experts["nvfp4"]
    assert blackwell.local_curve("nvfp4") != blackwell.local_curve("fp8_e4m3")
    assert "nvfp4" not in hopper.local_experts and hopper.local_curve("nvfp4") is hopper.local_experts["fp8_e4m3"]
    kimi = get_preset("kimi-k2.5")
    spec = replace(kimi, precision=replace(kimi.precision, experts="nvfp4"))  # NVIDIA's NVFP4 checkpoint's experts
    w = Workload(spec, cluster_for("b200", 1, 8, 8), tokens=4, attention_tp=8, moe_tp=8)
    assert spec.precision.experts == "nvfp4"
    got = _experts_seconds(w, 4)
    assert got > blackwell.local_curve("nvfp4").latency


def test_mxfp4_experts_without_fp4_tensor_cores_take_the_engines_own_w4a16_kernel():
    """gpt-oss's MXFP4 experts on Hopper run as W4A16 (every engine's table times them so): a step of vLLM or
    TRT-LLM takes that engine's own W4A16 curve, any other SGLang's (its Triton kernel, far slower); on
    Blackwell they keep the MXFP4 x MXFP8 curve whatever the engine."""
    from demos.zoo.kernel_times import KernelTimes

    hopper, blackwell = FITS["hopper"], FITS["blackwell"]
    for engine in ("vllm", "trtllm"):
        assert hopper.local_curve("mxfp4", engine, False) is hopper.engine_local_experts[engine]["mxfp4_w4a16"]
        assert blackwell.local_curve("mxfp4", engine, True) is blackwell.local_experts["mxfp4"]
    assert hopper.local_curve("mxfp4", "sglang", False) is hopper.local_experts["mxfp4_w4a16"]
    assert hopper.local_curve("mxfp4", None, False) is hopper.local_experts["mxfp4_w4a16"]
    assert hopper.local_curve("mxfp4_w4a16", "vllm", False) is hopper.local_experts["mxfp4_w4a16"]  # Kimi-K3's
    w = Workload(get_preset("gpt-oss-120b"), cluster_for("h200", 1, 8, 8), tokens=64, attention_tp=8, moe_tp=8)
    profile = gpu_profile(w.gpu)
    got = {
        e: layer_costs(w, 64, 10, profile, KernelTimes(w.gpu, profile, hopper, engine=e)).experts.seconds
        for e in ("sglang", "vllm", "trtllm")
    }
    assert got["vllm"] < 0.6 * got["sglang"] and got["trtllm"] < 0.6 * got["sglang"]
    assert got["vllm"] != got["trtllm"]


@needs_tables
@pytest.mark.measured
def test_an_engines_own_local_rows_are_its_w4a16_kernel_without_expert_parallelism():
    from demos.zoo.measured_moe import engine_local_moe_rows

    for engine in ("vllm", "trtllm"):
        rows = engine_local_moe_rows("h200", engine)
        assert len(rows) >= 12 and {r.storage for r in rows} == {"mxfp4_w4a16"} and {r.ep for r in rows} == {1}
        assert len({r.kernel for r in rows}) == 1 and max(r.tokens for r in rows) <= 256
    assert engine_local_moe_rows("h20", "vllm") == []  # no tables for the GPU


def test_the_tables_balanced_routing_reads_distinct_experts_until_every_expert_has_a_copy():
    """The harness spreads each token's top-k evenly: 4 tokens of top 8 over 256 experts touch 32 experts, 32
    tokens all 256, 64 tokens no more (the weights read stop growing)."""
    g, fit = get_gpu("h200"), FITS["hopper"]

    def weights(tokens: int) -> float:
        row = EngineMoeRow("fp8_e4m3", "", tokens, 3072, 1536, 8, 256, 1, 0.0)
        return sum(b for _, b in _experts_parts(fit.gemm["fp8"], g, row, "fp8_e4m3")[1])

    assert weights(32) / weights(4) == pytest.approx(8.0, rel=0.01)  # (the copies' own rows are the rest)
    assert weights(64) / weights(32) == pytest.approx(1.0, rel=0.01)


@needs_tables
@pytest.mark.measured
def test_the_reader_gives_each_ranks_slice_of_sglangs_local_kernels():
    from demos.zoo.measured_moe import LOCAL_MOE_MAX_TOKENS, sglang_moe_rows

    hopper, blackwell = sglang_moe_rows("h200"), sglang_moe_rows("b200")
    kernels = {(r.storage, r.kernel) for r in hopper}
    assert ("fp8_e4m3", "sglang_fused_moe_triton") in kernels and ("int4_g32", "sglang_marlin_moe") in kernels
    assert len(kernels) == len({s for s, _ in kernels})  # one kernel per dtype
    assert {r.kernel for r in blackwell if r.storage in ("fp8_e4m3", "nvfp4")} == {"sglang_flashinfer_trtllm_moe"}
    assert "nvfp4" not in {r.storage for r in hopper}
    assert max(r.tokens for r in hopper) == LOCAL_MOE_MAX_TOKENS
    # MiniMax-M2.5's experts (3072 -> 1536) under MoE TP 4: a slice of 384
    minimax = {r.inter for r in hopper if r.hidden == 3072 and r.experts == 256 and r.storage == "fp8_e4m3"}
    assert {1536, 768, 384} <= minimax


@needs_tables
@pytest.mark.measured
@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["h100", "h200", "b200", "gb200", "b300", "gb300"])
def test_the_local_curves_keep_their_rows_within_9_percent_signed_median(gpu):
    """Fitted on H100, H200, B200 and GB200; B300 and GB300 held out (docs/kernels.md: every dtype's signed
    median within 8.0%, block FP8's within 3.0%)."""
    from demos.fidelity.engine_experts import local_experts_rows

    fit = FITS[get_gpu(gpu).family]
    errors: dict[str, list[float]] = {}
    for op, _, p, m in local_experts_rows(gpu, fit):
        errors.setdefault(op, []).append(p / m - 1)
    assert "local experts fp8" in errors and len(errors["local experts fp8"]) > 5000
    own = {op: e for op, e in errors.items() if op.endswith((" vllm", " trtllm"))}  # an engine's own kernel
    assert all(abs(statistics.median(e)) < 0.09 for op, e in errors.items() if op not in own)
    assert abs(statistics.median(errors["local experts fp8"])) < 0.04
    # the engines' own W4A16 curves, Hopper's only: within 11% on the family's pooled curve (kernels.md)
    assert all(abs(statistics.median(e)) < 0.11 for e in own.values())
    assert bool(own) == (get_gpu(gpu).family == "hopper")


def test_a_row_faster_than_its_weights_stream_from_hbm_is_no_measurement_of_a_step():
    """DeepSeek-V3's experts at block FP8, 8 tokens on one rank: 64 active experts, 2.82 GB of weights, 0.84 ms
    at H100's 3.35 TB/s; SGLang's table times it in 0.55 ms."""
    from demos.zoo.measured_moe import streams_its_weights

    row = EngineMoeRow("fp8_e4m3", "sglang_fused_moe_triton", 8, 7168, 2048, 8, 256, 1, 551.9e-6)
    weights = 64 * 3 * 7168 * 2048
    assert not streams_its_weights(row, 3.35e12)
    assert streams_its_weights(row._replace(seconds=weights / 3.35e12), 3.35e12)
    assert not streams_its_weights(row._replace(seconds=weights / 3.35e12 * 0.999), 3.35e12)
    # over 16 ranks the same 8 tokens send 4 copies to the rank: 4 active experts, 176 MB
    assert streams_its_weights(row._replace(ep=16, seconds=60e-6), 3.35e12)


@needs_tables
@pytest.mark.measured
def test_the_readers_keep_only_the_rows_that_stream_their_weights():
    from demos.zoo.measured_moe import sglang_moe_rows, streams_its_weights, vllm_moe_rows

    for gpu, dropped in (("h100", {"fp8_e4m3": 54}), ("b200", {"bfloat16": 565, "fp8_e4m3": 40, "nvfp4": 408})):
        bandwidth = get_gpu(gpu).hbm_bandwidth
        kept, every = sglang_moe_rows(gpu), sglang_moe_rows(gpu, physical=False)
        assert all(streams_its_weights(r, bandwidth) for r in kept)
        out = {s: sum(r.storage == s for r in every) - sum(r.storage == s for r in kept) for s in dropped}
        assert out == dropped
    assert len(vllm_moe_rows("b200", physical=False)) - len(vllm_moe_rows("b200")) == 31


def test_no_local_fused_moe_curve_streams_its_weights_at_the_whole_datasheet_rate():
    """A fit at the cap is one the impossible rows pulled there: every stored curve takes a share under 1."""
    from demos.zoo.rooflines import GPU_FITS

    fits = {**FITS, **GPU_FITS}
    curves = [(name, s, c) for name, fit in fits.items() for s, c in fit.local_experts.items()]
    assert curves and all(c.mem_efficiency < 0.96 for _, _, c in curves), [(n, s) for n, s, c in curves]
