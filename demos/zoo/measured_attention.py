"""The engines' measured grouped-query attention kernels (the ``measured`` extra), read as ``GqaRow``s.

aiconfigurator-core ships, per GPU and engine, the attention core of a step over a paged KV cache: decode
(``generation_attention_perf``), ``batch`` requests of one new token each over the cached tokens before it (the
table's ``step``); prefill (``context_attention_perf``), ``batch`` prompts of ``isl`` tokens each, causal, nothing
cached before them; ``heads`` query heads and ``kv_heads`` KV heads on the GPU, ``head_dim``, a sliding window (0:
none), the cache in BF16 or FP8 (the queries in BF16). ``gqa_rows`` reads the kernel each engine runs by default:
the one its table times most shapes with, which is the engine's default on every GPU we read (SGLang's ``fa3`` on
Hopper and ``trtllm_mha`` on Blackwell, as its server arguments pick for a model without MLA; vLLM's FlashAttention
3 on Hopper and FlashInfer's TRT-LLM kernels on Blackwell; TRT-LLM's own attention). The family's GQA curves
(``demos.zoo.rooflines.FamilyFit.gqa``) are fitted to them (``demos.fits.gqa``); rows whose query heads are not a
whole multiple of their KV heads are left out (no model has that shape).
"""

from __future__ import annotations

from typing import NamedTuple

from demos.vocabulary import Phase
from demos.zoo.measured import package_version, read_table

__all__ = ["GQA_ENGINES", "GQA_KV", "GQA_TABLES", "GqaRow", "gqa_rows"]

_VERSIONS = {"sglang": "0.5.14", "vllm": "0.24.0", "trtllm": "1.3.0rc20"}
_STEMS = {Phase.DECODE: "generation_attention_perf", Phase.PREFILL: "context_attention_perf"}

GQA_TABLES = {
    f"{phase} {engine}": ("attention", engine, version, stem)
    for phase, stem in _STEMS.items()
    for engine, version in _VERSIONS.items()
}
"""``"<phase> <engine>"`` -> (family, framework, version, file stem) of its GQA table, as
``demos.zoo.measured.TABLES`` (each engine's newest collection on every GPU with tables, aiconfigurator-core
0.12.0)."""

GQA_ENGINES = tuple(_VERSIONS)
"""The engines whose GQA kernels are read."""

GQA_KV = ("bfloat16", "fp8")
"""The KV-cache dtypes the tables time (the queries are BF16 in both)."""


class GqaRow(NamedTuple):
    """One GQA core (module docstring): ``batch`` requests; ``context`` the cached tokens before a decode token,
    or a prompt's tokens; ``window`` 0 for full attention; ``kernel`` the table's kernel_source; latency in
    seconds."""

    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    context: int
    window: int
    kv_dtype: str
    kernel: str
    seconds: float


def gqa_rows(gpu: str, phase: str, engine: str, kv_dtype: str) -> list[GqaRow]:
    """``engine``'s GQA rows of ``phase`` on ``gpu`` over a ``kv_dtype`` cache, of the kernel its table times most
    shapes with (module docstring); a bad phase, engine or dtype -> ``ValueError``; no extra or table ->
    ``demos.zoo.measured.MeasuredTablesError``."""
    table = f"{phase} {engine}"
    if table not in GQA_TABLES:
        raise ValueError(f"no GQA table for phase {phase!r} and engine {engine!r}; tables: {', '.join(GQA_TABLES)}")
    if kv_dtype not in GQA_KV:
        raise ValueError(f"kv_dtype must be one of {', '.join(GQA_KV)}, got {kv_dtype!r}")
    package_version()  # the extra, or MeasuredTablesError with the install hint
    d = read_table(gpu, table, tuple(GQA_TABLES.items()))
    d = d[(d.kv_cache_dtype == kv_dtype) & (d.num_heads % d.num_key_value_heads == 0)]
    if d.empty:
        return []
    kernel = d.kernel_source.value_counts().idxmax()
    d = d[d.kernel_source == kernel]
    length = "step" if phase == Phase.DECODE else "isl"
    names = ("batch_size", "num_heads", "num_key_value_heads", "head_dim", length, "window_size")
    return [
        GqaRow(b, h, kvh, hd, s, w, kv_dtype, kernel, ms * 1e-3)
        for b, h, kvh, hd, s, w, ms in zip(*(d[c].tolist() for c in names), d.latency.tolist())
    ]
