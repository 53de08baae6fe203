"""The routed experts against the engines' measured local fused MoE kernels.

``validate kernels``' ops ``local experts fp8|nvfp4|int4|bf16|w4a16|w4a8``: SGLang 0.5.14's local kernels per
expert dtype (``demos.zoo.measured_moe.sglang_moe_rows``) on the family's ``local_experts`` curve of that dtype
(``FamilyFit.local_curve``), which is fitted to them on H100, H200, B200 and GB200 (B300 and GB300 held out);
``local experts w4a16 vllm|trtllm``: vLLM 0.24.0's and TRT-LLM 1.3.0rc20's own W4A16 MXFP4 kernels on their
curves (``FamilyFit.engine_local_experts``, fitted to them on Hopper, where MXFP4 experts run so).

The routed experts per expert dtype against vLLM's fused MoE kernels: ``validate kernels``' ops
``experts vllm fp8``, ``experts vllm nvfp4``, ``experts vllm int4`` (docs/kernels.md, "Routed experts per expert
dtype"): vLLM 0.24.0's rows (``demos.zoo.measured_moe.vllm_moe_rows``) predicted as the step times a rank's
local fused MoE (``demos.fits.rooflines.experts_seconds`` on the family's curve of the dtype's math,
``KernelTimes.gemm_math``, and its local curve of the dtype, fitted to SGLang's kernels: ``experts`` where
the family has none), the copies spread as the table's harness spreads them; held out, nothing fitted to
them.
"""

from __future__ import annotations

from collections.abc import Iterable

from demos.fits.rooflines import experts_seconds
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import storage_curve
from demos.zoo.rooflines import FamilyFit

__all__ = ["ENGINE_MOE_OPS", "LOCAL_MOE_OPS", "engine_experts_rows", "local_experts_rows"]

LOCAL_MOE_OPS = {
    "fp8_e4m3": "local experts fp8",
    "nvfp4": "local experts nvfp4",
    "int4_g32": "local experts int4",
    "bfloat16": "local experts bf16",
    "mxfp4_w4a16": "local experts w4a16",
    "mxfp4": "local experts w4a8",
    "mxfp4_w4a16 vllm": "local experts w4a16 vllm",
    "mxfp4_w4a16 trtllm": "local experts w4a16 trtllm",
}
"""Expert storage -> the op its rows of SGLang's local fused MoE table are checked as; "<storage> <engine>" -> the
op of that engine's own kernel's rows (``FamilyFit.engine_local_experts``)."""

ENGINE_MOE_OPS = {"fp8_e4m3": "experts vllm fp8", "nvfp4": "experts vllm nvfp4", "int4_g32": "experts vllm int4"}
"""Expert storage -> the op its rows of vLLM's fused MoE table are checked as."""


def engine_experts_rows(gpu: str, fit: FamilyFit) -> Iterable[tuple[str, str, float, float]]:
    """``(op, shape, predicted seconds, measured seconds)`` of each of ``gpu``'s vLLM fused MoE rows (module
    docstring), its family's curves ``fit``."""
    from demos.zoo.measured_moe import vllm_moe_rows

    return _predicted(gpu, fit, vllm_moe_rows(gpu), ENGINE_MOE_OPS, lambda s: fit.local_curve(s) or fit.experts)


def local_experts_rows(gpu: str, fit: FamilyFit) -> Iterable[tuple[str, str, float, float]]:
    """``(op, shape, predicted seconds, measured seconds)`` of each of ``gpu``'s SGLang local fused MoE rows whose
    dtype has a local curve of its own in ``fit`` (``FamilyFit.local_experts``), and of each engine's own rows
    whose kernel ``fit`` has a curve of (``FamilyFit.engine_local_experts``, the engine's rows read by
    ``demos.zoo.measured_moe.engine_local_moe_rows``)."""
    from demos.zoo.measured_moe import engine_local_moe_rows, sglang_moe_rows

    yield from _predicted(gpu, fit, sglang_moe_rows(gpu), LOCAL_MOE_OPS, fit.local_experts.get)
    for engine, curves in fit.engine_local_experts.items():
        ops = {storage: LOCAL_MOE_OPS[f"{storage} {engine}"] for storage in curves}
        yield from _predicted(gpu, fit, engine_local_moe_rows(gpu, engine), ops, curves.get)


def _predicted(gpu: str, fit: FamilyFit, rows, ops: dict, grouped) -> Iterable[tuple[str, str, float, float]]:
    """Each of ``rows`` (``EngineMoeRow``s) whose storage ``grouped`` gives a ``GroupedCurve`` for, as ``ops``
    names its dtype, predicted on it and on ``fit``'s GEMM curve of the storage's math."""
    g = get_gpu(gpu)
    for r in rows:
        curve = grouped(r.storage)
        if curve is None:
            continue
        t = experts_seconds(storage_curve(fit.gemm, r.storage, g.has_fp4), curve, g, r, r.storage)
        shape = f"tokens={r.tokens} hidden={r.hidden} inter={r.inter} experts={r.experts} top_k={r.top_k} ep={r.ep}"
        yield ops[r.storage], shape, t, r.seconds
