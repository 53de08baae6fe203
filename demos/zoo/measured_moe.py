"""The engines' measured fused MoE kernels per expert dtype (the ``measured`` extra): vLLM 0.24.0's ``moe_perf``
tables, read as ``EngineMoeRow``s for ``validate kernels``' ops ``experts vllm fp8|nvfp4|int4``
(``demos.fidelity.engine_experts``; docs/kernels.md, "Routed experts per expert dtype").

Read: balanced routing, no MoE tensor parallelism, the dtypes of ``VLLM_MOE_STORAGE``, and for each dtype the
kernel its table times most shapes with (vLLM's default for the GPU: FlashInfer's TRT-LLM kernels on
Blackwell, its CUTLASS ones for FP8 on Hopper, Marlin for INT4).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from demos.zoo.measured import package_version, table_path

__all__ = ["MOE_TABLES", "VLLM_MOE_STORAGE", "EngineMoeRow", "vllm_moe_rows"]

MOE_TABLES = {"moe_vllm": ("moe", "vllm", "0.24.0", "moe_perf")}
"""Table -> (family, framework, version, file stem), as ``demos.zoo.measured.TABLES``."""

VLLM_MOE_STORAGE = {"fp8_block": "fp8_e4m3", "nvfp4": "nvfp4", "int4_wo": "int4_g32"}
"""vLLM's MoE table dtypes read -> the expert storage each is (``demos.zoo.models.dtypes``): block FP8, NVFP4
(W4A4) and INT4 weights with BF16 activations (group 32 in the checkpoints these model: Kimi-K2.5's)."""


class EngineMoeRow(NamedTuple):
    """An engine's measured fused MoE kernel (routed experts only) on one rank of an ``ep``-way group, balanced
    routing: experts stored as ``storage`` (a ``demos.zoo.models.dtypes`` name), ``tokens`` entering the layer
    (each rank computes its local experts' share), ``hidden`` -> ``inter`` experts, ``top_k`` of ``experts``;
    ``kernel``: the engine's kernel as its table names it."""

    storage: str
    kernel: str
    tokens: int
    hidden: int
    inter: int
    top_k: int
    experts: int
    ep: int
    seconds: float


@functools.lru_cache(maxsize=8)
def _frame(gpu: str):
    import pandas as pd

    return pd.read_parquet(table_path(gpu, "moe_vllm", MOE_TABLES))


def vllm_moe_rows(gpu: str) -> list[EngineMoeRow]:
    """vLLM 0.24.0's fused MoE rows of ``gpu`` (module docstring), latency in seconds."""
    package_version()  # the extra, or MeasuredTablesError with the install hint
    d = _frame(gpu)
    d = d[(d.distribution == "balanced") & (d.moe_tp_size == 1) & d.moe_dtype.isin(list(VLLM_MOE_STORAGE))]
    out = []
    names = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size")
    for dt, rows in d.groupby("moe_dtype"):
        kernel = rows.kernel_source.value_counts().idxmax()
        k = rows[rows.kernel_source == kernel]
        cols = zip(*(k[c].tolist() for c in names), k.latency.tolist())
        out += [EngineMoeRow(VLLM_MOE_STORAGE[dt], kernel, *row[:-1], row[-1] * 1e-3) for row in cols]
    return out
