"""The routed experts per expert dtype against an engine's measured fused MoE kernels: ``validate kernels``' ops
``experts vllm fp8``, ``experts vllm nvfp4``, ``experts vllm int4`` (docs/kernels.md, "Routed experts per expert
dtype"): vLLM 0.24.0's rows (``demos.zoo.measured_moe.vllm_moe_rows``) predicted as the experts op is
(``demos.fits.rooflines.experts_seconds`` on the family's curve of the dtype's math, ``KernelTimes.gemm_math``,
each copy routed at random as ``demos.zoo.costs.active_experts`` counts it); held out, nothing fitted to them.
"""

from __future__ import annotations

from collections.abc import Iterable

from demos.fits.rooflines import experts_seconds
from demos.zoo.hardware import get_gpu
from demos.zoo.models.dtypes import dtype
from demos.zoo.rooflines import FamilyFit

__all__ = ["ENGINE_MOE_OPS", "engine_experts_rows"]

ENGINE_MOE_OPS = {"fp8_e4m3": "experts vllm fp8", "nvfp4": "experts vllm nvfp4", "int4_g32": "experts vllm int4"}
"""Expert storage -> the op its rows of vLLM's fused MoE table are checked as."""


def engine_experts_rows(gpu: str, fit: FamilyFit) -> Iterable[tuple[str, str, float, float]]:
    """``(op, shape, predicted seconds, measured seconds)`` of each of ``gpu``'s vLLM fused MoE rows (module
    docstring), its family's curves ``fit``."""
    from demos.zoo.kernel_times import KernelTimes
    from demos.zoo.measured_moe import vllm_moe_rows
    from demos.zoo.profile import gpu_profile

    g = get_gpu(gpu)
    times = KernelTimes(g, gpu_profile(g, fit=fit), fit)
    for r in vllm_moe_rows(gpu):
        curve = fit.gemm[times.gemm_math(dtype(r.storage).math)]
        t = experts_seconds(curve, fit.experts, g, r, r.storage, random_routing=True)
        shape = f"tokens={r.tokens} hidden={r.hidden} inter={r.inter} experts={r.experts} top_k={r.top_k} ep={r.ep}"
        yield ENGINE_MOE_OPS[r.storage], shape, t, r.seconds
