"""The MLA decode module as the predictor composes it, for the module rows engines measured whole.

The predictor builds a layer's attention from its kernels (``demos.zoo.costs``): the projections and
absorptions on the family's fitted GEMM curves, the core on its MLA curve, and every kernel of the op at
least the per-kernel floor (``demos.zoo.profile``). Each of those curves is fitted to a table of one
kernel. TRT-LLM's collection also measures the whole decode module as the engine runs it, from the input
norm to ``o_proj`` (``demos.zoo.measured.MlaModuleRow``), on every GPU with tables; against it the
composed op runs short at the batches decode serves, by a median 25-36 us per layer (the
module's small kernels, its quantizations and the gaps between its kernels cost more than the floors
say; the composition cannot tell which). ``FamilyFit.mla_module`` holds that constant per GPU family
(fitted by ``demos.fits.module``), and ``KernelTimes.attention`` adds it to every MLA decode core, so each
ubatch of a DBO step pays it again, as it pays each kernel's floor.

``module_rows(gpu)`` are the rows fitted and checked (``FIT_ROWS``: FP8 block GEMMs and a BF16 cache,
DeepSeek-V3's checkpoint and the predictor's default cache, at 16 to 128 heads per GPU: attention TP 8 to
1); ``composed_seconds(gpu, row, fit)`` is the predictor's attention op of one row, its kernels timed with
``fit`` (its ``mla_module`` included): what the fit puts on the rows and ``validate --kernels`` (op ``mla
module``) compares with them. Prefill modules, other attention and other engines' modules are not fitted
(vLLM's measures a median 46-55 us longer at up to 64 requests on H100, H200 and GB200: docs/kernels.md).
"""

from __future__ import annotations

import functools

from demos.zoo.breakdown import layer_breakdown
from demos.zoo.hardware import get_gpu
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import get_preset, with_precision
from demos.zoo.profile import gpu_profile
from demos.zoo.rooflines import FamilyFit
from demos.zoo.workload import Workload, cluster_for

__all__ = ["FIT_ROWS", "composed_seconds", "module_rows"]

FIT_ROWS = {"gemm_dtype": "fp8_block", "kv_dtype": "bfloat16", "heads": (16, 32, 64, 128)}
"""The module rows fitted and checked: FP8 block GEMMs, a BF16 cache, 16 to 128 query heads per GPU."""

_MODEL = "deepseek-v3"  # the architecture every module table was measured on
_EP = 8  # any EP group whose NVLink domain holds attention TP 8; the attention op does not depend on it


def module_rows(gpu: str) -> list:
    """``gpu``'s measured module rows of ``FIT_ROWS`` (needs the ``measured`` extra)."""
    from demos.zoo import measured

    return [
        r
        for r in measured.mla_module_rows(gpu)
        if r.gemm_dtype == FIT_ROWS["gemm_dtype"]
        and r.kv_dtype == FIT_ROWS["kv_dtype"]
        and r.heads in FIT_ROWS["heads"]
    ]


@functools.lru_cache(maxsize=4)
def _spec(kv_cache: str):
    """DeepSeek-V3 with its KV cache in ``kv_cache`` (built once: a fit composes every row many times)."""
    return with_precision(get_preset(_MODEL), kv_cache=kv_cache)


def composed_seconds(gpu: str, row, fit: FamilyFit) -> float:
    """The predictor's attention op (``moe_layer_s["attention"]``) for module row ``row`` on ``gpu``, its
    kernels timed with ``fit`` (its ``mla_module`` included): DeepSeek-V3 with the row's cache dtype,
    ``row.batch`` requests of ``row.kv_len`` cached tokens, attention TP ``128 / row.heads``."""
    g = get_gpu(gpu)
    spec = _spec("fp8" if row.kv_dtype.startswith("fp8") else "bf16")
    per = min(_EP, g.gpus_per_node)
    w = Workload(
        spec,
        cluster_for(gpu, _EP // per, per, _EP),
        tokens=row.batch,
        context=max(1, row.kv_len),
        ubatches=1,
        attention_tp=spec.attention.heads // row.heads,
    )
    profile = gpu_profile(g, fit=fit)
    ops = layer_breakdown(w, row.batch, profile, KernelTimes(g, profile, fit))["moe_layer_s"]
    return ops["attention"]
