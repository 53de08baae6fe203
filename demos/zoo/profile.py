"""A ``dbo.costs.DeviceProfile`` built from a GPU's datasheet (``demos.zoo.hardware.GpuSpec``) and its
family's kernel curves fitted to measured tables (``demos.zoo.rooflines``, docs/kernels.md).

``gpu_profile(gpu, comm_sms=0)``:

* math rates: the datasheet's dense peak per dtype (times a ``gemm`` what-if); the share of it each
  kernel reaches is its fitted curve's, applied where the zoo's kernels are timed
  (``demos.zoo.kernel_times``), which folds each op into a Work this profile charges as it is;
* memory bandwidth: the largest share of HBM any of the family's curves reaches, so that no folded op
  is made longer by its bytes, and unfolded memory-bound kernels (receive, finalize) stream at it;
* ``min_kernel``: 3 us per device kernel, the floor our H200 measurements of small torch kernels gave
  (docs/fidelity.md); the op table (``demos.zoo.ops``) says how many device kernels each op of the model
  issues, counts estimated from vLLM's DeepSeek/Qwen layers (a guess, docs/models.md);
* ``comm_sm_share``: ``comm_sms / sm_count``, the compute a DeepEP normal kernel takes while it runs;
* host costs of an eager step (``EAGER_HOST``): the per-launch, stream-switch, handoff, event and sync
  costs measured on our H200 host (docs/fidelity.md). A CUDA-graph replay has no per-kernel host cost
  (the virtual backend's replay model), so the same profile serves both modes.
"""

from __future__ import annotations

from dataclasses import replace

from dbo.costs import DeviceProfile, HostCosts, OpCost
from demos.zoo.hardware import H200_HOST, GpuSpec, get_gpu
from demos.zoo.ops import OPS
from demos.zoo.rooflines import FamilyFit, gpu_fit

__all__ = ["EAGER_HOST", "MIN_KERNEL", "gpu_profile"]

MIN_KERNEL = 3.0e-6

EAGER_HOST = replace(
    H200_HOST,
    launch=0.0,
    kernel=6.0e-6,  # one eager launch of a small op on our H200 host (the toy's Python per kernel aside)
    ops={name: OpCost(kernels=o.kernels) for name, o in OPS.items()},
)
"""The host of an eager step (module docstring): the host costs measured on our H200 host
(``demos.zoo.hardware.hosts``: stream switch, handoff, sync, event, threaded), with the per-launch cost
of a small eager op in place of the toy's own Python per kernel."""


def gpu_profile(
    gpu: str | GpuSpec,
    *,
    comm_sms: int = 0,
    gemm_scale: float = 1.0,
    host: HostCosts = EAGER_HOST,
    fit: FamilyFit | None = None,
):
    """The ``DeviceProfile`` of ``gpu`` (module docstring). ``comm_sms``: SMs a comm kernel takes while it
    runs; ``gemm_scale``: a what-if factor on every math rate (1: the datasheet's); ``fit``: the family's
    curves (default: ``rooflines.json``'s; a fit in progress passes its own)."""
    g = get_gpu(gpu)
    fit = gpu_fit(g) if fit is None else fit
    rates = {k: v * gemm_scale for k, v in g.dtype_flops.items()}
    curves = [*fit.gemm.values(), fit.mla_decode, fit.mla_prefill]
    fp8 = fit.gemm["fp8"]
    return DeviceProfile(
        f"{g.name}-zoo",
        peak_flops=rates["bfloat16"],
        mem_bandwidth=g.hbm_bandwidth * max(c.mem_efficiency for c in curves),
        launch_overhead=0.0,
        dtype_flops=rates,
        min_kernel=MIN_KERNEL,
        gemm_knee=(fp8.m0, fp8.n0, fp8.k0),
        comm_sm_share=g.sm_share(comm_sms),
        host=host,
    )


def with_host(profile: DeviceProfile, host: HostCosts) -> DeviceProfile:
    """``profile`` with other host costs."""
    return replace(profile, host=host)
