"""The engines' measured local fused MoE kernels (the ``measured`` extra), read as ``EngineMoeRow``s.

* ``sglang_moe_rows``: SGLang 0.5.14's ``moe_perf`` tables, the kernel an engine runs on a rank's own experts
  when no all-to-all moves the tokens (MoE tensor parallelism, or expert parallelism beside attention TP):
  the expert dtypes of ``LOCAL_MOE_STORAGE``, balanced routing, up to ``LOCAL_MOE_MAX_TOKENS`` tokens, for
  each dtype the kernel the table times most shapes with (block FP8 and BF16: Triton's fused MoE on Hopper,
  FlashInfer's TRT-LLM kernels on Blackwell; INT4: Marlin on Hopper). The family's ``local_experts`` curves
  (one per expert dtype) are fitted to them (``demos.fits.rooflines.fit_family``; docs/kernels.md,
  "The local fused MoE").
* ``engine_local_moe_rows``: vLLM 0.24.0's and TRT-LLM 1.3.0rc20's ``moe_perf`` tables, the same kind of rows
  (no expert parallelism: a rank's experts at ``inter / moe_tp``) of the kernels of ``ENGINE_LOCAL_STORAGE``
  (MXFP4 weights against BF16 activations: what every engine's table times for gpt-oss's shapes on Hopper,
  which has no FP4 tensor cores), for an engine's own ``engine_local_experts`` curves
  (``demos.zoo.rooflines.FamilyFit.local_curve``; docs/kernels.md, "The local fused MoE").
* ``vllm_moe_rows``: vLLM 0.24.0's ``moe_perf`` tables for ``validate kernels``' ops ``experts vllm
  fp8|nvfp4|int4`` (``demos.fidelity.engine_experts``; docs/kernels.md, "Routed experts per expert dtype"):
  balanced routing, no MoE tensor parallelism, the dtypes of ``VLLM_MOE_STORAGE``, and for each dtype the
  kernel its table times most shapes with (vLLM's default for the GPU: FlashInfer's TRT-LLM kernels on
  Blackwell, its CUTLASS ones for FP8 on Hopper, Marlin for INT4).

A table's "balanced" routing is its harness's: each token's ``top_k`` experts spread evenly, distinct until
every expert has a token.

Both readers keep only rows that take at least the time their active experts' weights take to stream from HBM
at the GPU's datasheet rate (``streams_its_weights``; the active experts as the predictor counts them,
``demos.zoo.work.table_experts``). A decode step reads each layer's weights from HBM once, so a row faster than
that did not read them as a step does (its harness re-read them from a cache or shared them between experts)
and is no measurement of the kernel a step runs. On Blackwell 7-14% of SGLang's NVFP4 and BF16 rows are (of
256- and 512-expert shapes, up to 1.8 times the datasheet rate), about 1% of its FP8 ones and 0.5-0.6% of
vLLM's; on Hopper 0.6-0.8% of SGLang's FP8 rows (DeepSeek-V3's shape at 2 to 256 tokens) and none of vLLM's
(``physical=False`` keeps them).
"""

from __future__ import annotations

from typing import NamedTuple

from demos.zoo.hardware import get_gpu
from demos.zoo.measured import MeasuredTablesError, package_version, read_table
from demos.zoo.models.dtypes import dtype
from demos.zoo.work import table_experts

__all__ = [
    "ENGINE_LOCAL_STORAGE",
    "ENGINE_MOE_TABLES",
    "LOCAL_MOE_MAX_TOKENS",
    "LOCAL_MOE_STORAGE",
    "MOE_TABLES",
    "VLLM_MOE_STORAGE",
    "EngineMoeRow",
    "engine_local_moe_rows",
    "sglang_moe_rows",
    "streams_its_weights",
    "vllm_moe_rows",
]

MOE_TABLES = {
    "moe_vllm": ("moe", "vllm", "0.24.0", "moe_perf"),
    "moe_sglang": ("moe", "sglang", "0.5.14", "moe_perf"),
    "moe_trtllm": ("moe", "trtllm", "1.3.0rc20", "moe_perf"),
}
"""Table -> (family, framework, version, file stem), as ``demos.zoo.measured.TABLES``."""

ENGINE_MOE_TABLES = {"vllm": "moe_vllm", "trtllm": "moe_trtllm"}
"""Engine -> the ``MOE_TABLES`` table its own local kernels are read from (``engine_local_moe_rows``)."""

ENGINE_LOCAL_STORAGE = {"w4a16_mxfp4": "mxfp4_w4a16"}
"""The table dtypes whose engine-own local kernels are read -> the expert storage each is: MXFP4 weights with BF16
activations, the kernel each engine's Hopper table times for MXFP4 experts."""

LOCAL_MOE_STORAGE = {
    "fp8_block": "fp8_e4m3",
    "nvfp4": "nvfp4",
    "int4_wo": "int4_g32",
    "bfloat16": "bfloat16",
    "w4a16_mxfp4": "mxfp4_w4a16",
    "w4a8_mxfp4_mxfp8": "mxfp4",
}
"""SGLang's MoE table dtypes read -> the expert storage each is (``demos.zoo.models.dtypes``): block FP8, NVFP4,
INT4 and MXFP4 weights with BF16 activations, BF16, MXFP4 weights against MXFP8 activations."""

VLLM_MOE_STORAGE = {"fp8_block": "fp8_e4m3", "nvfp4": "nvfp4", "int4_wo": "int4_g32"}
"""vLLM's MoE table dtypes read -> the expert storage each is (``demos.zoo.models.dtypes``): block FP8, NVFP4
(W4A4) and INT4 weights with BF16 activations (group 32 in the checkpoints these model: Kimi-K2.5's)."""


LOCAL_MOE_MAX_TOKENS = 256
"""The most tokens of a local fused MoE row the ``local_experts`` curve is fitted to: decode's range, where the
kernel moves its weights; beyond it the kernel's math takes over, which the FP8 GEMM curve times (a choice:
docs/kernels.md)."""


class EngineMoeRow(NamedTuple):
    """An engine's measured fused MoE kernel (routed experts only) on one rank of an ``ep``-way group, balanced
    routing: experts stored as ``storage`` (a ``demos.zoo.models.dtypes`` name), ``tokens`` entering the layer
    (each rank computes its local experts' share), ``hidden`` -> ``inter`` experts (``inter`` the rank's slice
    under MoE tensor parallelism), ``top_k`` of ``experts``; ``kernel``: the engine's kernel as its table names
    it."""

    storage: str
    kernel: str
    tokens: int
    hidden: int
    inter: int
    top_k: int
    experts: int
    ep: int
    seconds: float


def _frame(gpu: str, table: str):
    return read_table(gpu, table, tuple(MOE_TABLES.items()))


def streams_its_weights(r: EngineMoeRow, hbm_bandwidth: float) -> bool:
    """Whether row ``r`` takes at least the seconds its active experts' weights (both GEMMs', stored as
    ``r.storage``) take at ``hbm_bandwidth`` bytes a second (module docstring)."""
    active, _ = table_experts(r.experts, r.ep, r.tokens, r.top_k)
    return r.seconds * hbm_bandwidth >= active * 3 * r.hidden * r.inter * dtype(r.storage).bytes


def _most_measured(d, storage: dict) -> list[EngineMoeRow]:
    """The rows of table ``d`` (already filtered) as ``EngineMoeRow``s, each dtype (``storage``: table dtype -> our
    storage) of the kernel the table times most shapes with; a row's ``inter`` its rank's ``1 / moe_tp`` slice,
    latency in seconds."""
    names = ("num_tokens", "hidden_size", "inter_size", "moe_tp_size", "topk", "num_experts", "moe_ep_size")
    out = []
    for dt, rows in d.groupby("moe_dtype"):
        kernel = rows.kernel_source.value_counts().idxmax()
        k = rows[rows.kernel_source == kernel]
        out += [
            EngineMoeRow(storage[dt], kernel, n, h, i // tp, top, e, ep, t * 1e-3)
            for n, h, i, tp, top, e, ep, t in zip(*(k[c].tolist() for c in names), k.latency.tolist())
        ]
    return out


def _physical(gpu: str, rows: list[EngineMoeRow], physical: bool) -> list[EngineMoeRow]:
    bandwidth = get_gpu(gpu).hbm_bandwidth
    return [r for r in rows if streams_its_weights(r, bandwidth)] if physical else rows


def sglang_moe_rows(gpu: str, max_tokens: int = LOCAL_MOE_MAX_TOKENS, *, physical: bool = True) -> list[EngineMoeRow]:
    """SGLang 0.5.14's local fused MoE rows of ``gpu`` (module docstring) up to ``max_tokens``, each one rank's:
    ``experts / ep`` experts at ``inter / moe_tp`` of their width; the dtypes of ``LOCAL_MOE_STORAGE``, each
    with the kernel its table times most shapes with; latency in seconds; ``physical``: only the rows that stream
    their weights (``streams_its_weights``)."""
    package_version()
    d = _frame(gpu, "moe_sglang")
    d = d[(d.distribution == "balanced") & d.moe_dtype.isin(list(LOCAL_MOE_STORAGE)) & (d.num_tokens <= max_tokens)]
    return _physical(gpu, _most_measured(d, LOCAL_MOE_STORAGE), physical)


def engine_local_moe_rows(
    gpu: str, engine: str, max_tokens: int = LOCAL_MOE_MAX_TOKENS, *, physical: bool = True
) -> list[EngineMoeRow]:
    """``engine``'s (``ENGINE_MOE_TABLES``) local fused MoE rows of ``gpu`` up to ``max_tokens``, as
    ``sglang_moe_rows``' but of the dtypes of ``ENGINE_LOCAL_STORAGE`` and without expert parallelism (vLLM's
    expert-parallel rows do not shrink with the group as a rank's share would: docs/kernels.md, "Routed experts
    per expert dtype"); none where the engine has no table for ``gpu``."""
    package_version()
    try:
        d = _frame(gpu, ENGINE_MOE_TABLES[engine])
    except MeasuredTablesError:
        return []
    d = d[(d.distribution == "balanced") & (d.moe_ep_size == 1) & (d.num_tokens <= max_tokens)]
    d = d[d.moe_dtype.isin(list(ENGINE_LOCAL_STORAGE))]
    return _physical(gpu, _most_measured(d, ENGINE_LOCAL_STORAGE), physical)


def vllm_moe_rows(gpu: str, *, physical: bool = True) -> list[EngineMoeRow]:
    """vLLM 0.24.0's fused MoE rows of ``gpu`` (module docstring), latency in seconds; ``physical`` as
    ``sglang_moe_rows``'."""
    package_version()  # the extra, or MeasuredTablesError with the install hint
    d = _frame(gpu, "moe_vllm")
    d = d[(d.distribution == "balanced") & (d.moe_tp_size == 1) & d.moe_dtype.isin(list(VLLM_MOE_STORAGE))]
    return _physical(gpu, _most_measured(d, VLLM_MOE_STORAGE), physical)
