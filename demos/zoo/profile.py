"""A ``dbo.costs.DeviceProfile`` built from a GPU's datasheet (``demos.zoo.hardware.GpuSpec``) and the kernel
efficiency fitted to published kernel tables (``demos.zoo.efficiency``, docs/kernels.md).

``gpu_profile(gpu, comm_sms=0)``:

* math rates: the datasheet's dense peak per dtype times that dtype's ceiling (the share of peak the
  best published kernels reach: DeepGEMM's FP8 fit, and the BF16 and FP32 figures of docs/kernels.md);
* the GEMM efficiency curve ``M/(M+m0) N/(N+n0) K/(K+k0)`` and the achieved share of HBM bandwidth,
  both from the DeepGEMM fit (H800), applied to every GPU as fractions of its own datasheet;
* ``min_kernel``: 3 us per device kernel, the floor our H200 measurements of small torch kernels gave
  (docs/fidelity.md); ``ZOO_OPS`` says how many device kernels each op of the model issues, counts
  estimated from vLLM's DeepSeek/Qwen layers (a guess, docs/models.md);
* ``comm_sm_share``: ``comm_sms / sm_count``, the compute a DeepEP normal kernel takes while it runs;
* host costs of an eager step (``EAGER_HOST``): the per-launch, stream-switch, handoff, event and sync
  costs measured on our H200 host (docs/fidelity.md). A CUDA-graph replay has no per-kernel host cost
  (the virtual backend's replay model), so the same profile serves both modes.

``attention_scale(...)`` gives the factors that express FlashMLA's achieved shares of peak in the
profile's GEMM-fitted rates (``demos.zoo.costs.layer_costs``).
"""

from __future__ import annotations

from dataclasses import replace

from dbo.costs import DeviceProfile, HostCosts, OpCost
from demos.zoo.efficiency import (
    ATTENTION_COMPUTE_CEILING,
    ATTENTION_MEM_EFFICIENCY,
    DEEPGEMM_FP8_FIT,
    DTYPE_CEILING,
)
from demos.zoo.hardware import H200_HOST, GpuSpec, get_gpu

__all__ = ["EAGER_HOST", "MIN_KERNEL", "ZOO_OPS", "attention_scale", "gpu_profile"]

MIN_KERNEL = 3.0e-6

ZOO_OPS: dict[str, int] = {
    "embed": 1,
    "attn_proj": 8,  # input norm, fused q_a/kv_a GEMM, two latent norms, q_b, RoPE, cache write, quant
    "attn_core": 3,  # metadata, attention, split-KV combine
    "attn_out": 3,  # value un-absorb, quant, o_proj
    "router": 3,  # fused add+norm, gate GEMM, top-k
    "dense_mlp": 4,  # gate/up GEMM, activation+quant, down GEMM, add
    "dispatch": 2,
    "dispatch_ll": 1,
    "dispatch_recv": 1,
    "experts": 5,  # permute, two grouped GEMMs, activation+quant, un-permute
    "experts_ll": 3,  # two masked grouped GEMMs, activation+quant
    "combine": 1,
    "combine_ll": 1,
    "combine_recv": 1,
    "shared": 3,
    "moe_copy": 1,
    "finalize": 1,
}
"""Device kernels per op of ``demos.zoo.model.ZooModel`` (each pays ``MIN_KERNEL`` at least)."""

EAGER_HOST = replace(
    H200_HOST,
    launch=0.0,
    kernel=6.0e-6,  # one eager launch of a small op on our H200 host (the toy's Python per kernel aside)
    ops={op: OpCost(kernels=n) for op, n in ZOO_OPS.items()},
)
"""The host of an eager step (module docstring): the host costs measured on our H200 host
(``demos.zoo.hardware.hosts``: stream switch, handoff, sync, event, threaded), with the per-launch cost
of a small eager op in place of the toy's own Python per kernel."""


def gpu_profile(gpu: str | GpuSpec, *, comm_sms: int = 0, gemm_scale: float = 1.0, host: HostCosts = EAGER_HOST):
    """The ``DeviceProfile`` of ``gpu`` (module docstring). ``comm_sms``: SMs a comm kernel takes while it
    runs; ``gemm_scale``: a what-if factor on every math rate (1: as fitted)."""
    g = get_gpu(gpu)
    fit = DEEPGEMM_FP8_FIT
    rates = {
        "fp8": g.fp8 * DTYPE_CEILING["fp8"],
        "bfloat16": g.bf16 * DTYPE_CEILING["bfloat16"],
        "float16": g.bf16 * DTYPE_CEILING["bfloat16"],
        "tf32": g.tf32 * DTYPE_CEILING["bfloat16"],
        "float32": g.fp32 * DTYPE_CEILING["float32"],
    }
    rates = {k: v * gemm_scale for k, v in rates.items()}
    return DeviceProfile(
        f"{g.name}-zoo",
        peak_flops=rates["bfloat16"],
        mem_bandwidth=g.hbm_bandwidth * fit.mem_efficiency,
        launch_overhead=0.0,
        dtype_flops=rates,
        min_kernel=MIN_KERNEL,
        gemm_knee=(fit.m0, fit.n0, fit.k0),
        comm_sm_share=g.sm_share(comm_sms),
        host=host,
    )


def attention_scale() -> tuple[float, float]:
    """(flops factor, bytes factor) that turn attention's real flops and bytes into the profile's
    GEMM-fitted rates: BF16 GEMM ceiling over FlashMLA's compute share; GEMM memory share over
    FlashMLA's memory share."""
    return (
        DTYPE_CEILING["bfloat16"] / ATTENTION_COMPUTE_CEILING,
        DEEPGEMM_FP8_FIT.mem_efficiency / ATTENTION_MEM_EFFICIENCY,
    )


def with_host(profile: DeviceProfile, host: HostCosts) -> DeviceProfile:
    """``profile`` with other host costs."""
    return replace(profile, host=host)
