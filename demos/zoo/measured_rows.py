"""The rows the measured-table adapter returns (``demos.zoo.measured``): plain tuples in SI units (seconds),
one per table kind, so that no caller sees pandas.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = [
    "AllToAllRow",
    "DsaModuleRow",
    "GdnRow",
    "GemmRow",
    "MlaModuleRow",
    "MlaRow",
    "MoeRow",
    "SiliconRow",
    "row_release",
    "source_concurrency",
    "speculative_reason",
]


class GemmRow(NamedTuple):
    """A GEMM ``m`` x ``n`` x ``k`` (``m`` rows through a k -> n weight) in ``dtype`` ("fp8_block":
    DeepGEMM with 128-block scales; "fp8": per-tensor scaled; "bfloat16"), taking ``seconds``."""

    m: int
    n: int
    k: int
    dtype: str
    seconds: float


class MlaRow(NamedTuple):
    """MLA's attention core: ``batch`` requests, ``heads`` query heads on the GPU, ``kv_len`` cached tokens
    per request (decode) or ``kv_len`` prompt tokens (prefill, causal), KV cache in ``kv_dtype``."""

    batch: int
    heads: int
    kv_len: int
    kv_dtype: str
    seconds: float


class MlaModuleRow(NamedTuple):
    """MLA's whole decode module (the input norm to ``o_proj``: projections, absorptions, RoPE, cache
    write, attention core and every small kernel between them) as an engine runs it: ``batch`` requests,
    ``heads`` query heads on the GPU (128 / attention TP), ``kv_len`` cached tokens each, KV cache in
    ``kv_dtype``, GEMMs in ``gemm_dtype``."""

    batch: int
    heads: int
    kv_len: int
    kv_dtype: str
    gemm_dtype: str
    seconds: float


class DsaModuleRow(NamedTuple):
    """A sparse MLA's whole decode module (DeepSeek sparse attention: projections, the indexer and its
    top-k, the attention core over the selected entries, ``o_proj``) as SGLang runs it: ``model`` (the
    table's repository id), ``batch`` requests, ``heads`` query heads on the GPU, ``kv_len`` cached tokens
    each, KV cache in ``kv_dtype``, GEMMs in ``gemm_dtype``, the attention kernels ``kernel`` (the table's
    ``kernel_source``)."""

    model: str
    batch: int
    heads: int
    kv_len: int
    kv_dtype: str
    gemm_dtype: str
    kernel: str
    seconds: float


class GdnRow(NamedTuple):
    """One Gated DeltaNet kernel (SGLang's flash-linear-attention kernels) in ``phase`` ("decode":
    ``batch`` requests of one token; "prefill": ``batch`` requests of ``seq_len`` prompt tokens each):
    ``kernel`` is "conv" (the causal convolution: ``causal_conv1d_fn`` / ``causal_conv1d_update``) or
    "delta_rule" (``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule_packed_decode``), over
    ``key_heads`` query/key heads of ``key_dim`` and ``value_heads`` value heads of ``value_dim`` on the GPU,
    the convolution ``conv_kernel`` wide; ``model`` the table's repository id. A Kimi Delta Attention kernel
    (``demos.zoo.measured.kda_rows``: ``causal_conv1d_fn_qkv3`` / ``causal_conv1d_update``, ``chunk_kda`` /
    ``fused_recurrent_kda_packed_decode``) is read as the same row, as many key heads as value heads."""

    model: str
    phase: str
    kernel: str
    batch: int
    seq_len: int
    key_heads: int
    key_dim: int
    value_heads: int
    value_dim: int
    conv_kernel: int
    seconds: float


class MhcRow(NamedTuple):
    """One wide-residual kernel (DeepSeek-V4's manifold-constrained hyper-connections, SGLang's TileLang
    kernels): ``site`` "pre" (the stream's rows combined into a sub-layer's input) or "post" (its output
    mixed back), over ``tokens`` tokens whose stream is ``hc`` rows of ``hidden``."""

    site: str
    tokens: int
    hidden: int
    hc: int
    seconds: float


class V4ModuleRow(NamedTuple):
    """One DeepSeek-V4 attention module measured whole (SGLang's collection, the input norm to ``wo_b``):
    ``ratio`` 4 (CSA) or 128 (HCA), ``phase``, ``batch`` requests with ``heads`` query heads on the GPU
    (attention TP ``tp``) and ``length`` tokens (decode: the cached context; prefill: each prompt), its
    GEMMs ``gemm_dtype`` and its cache ``kv_dtype``; ``model`` the table's repository id."""

    model: str
    ratio: int
    phase: str
    batch: int
    heads: int
    tp: int
    length: int
    gemm_dtype: str
    kv_dtype: str
    seconds: float


class MoeRow(NamedTuple):
    """DeepEP MoE's expert compute (grouped GEMMs, FP8 block) on one rank of an ``ep``-way group:
    ``tokens`` per rank, ``hidden`` -> ``inter`` experts, ``top_k`` of ``experts``, routing ``distribution``."""

    tokens: int
    hidden: int
    inter: int
    top_k: int
    experts: int
    ep: int
    distribution: str
    seconds: float


class AllToAllRow(NamedTuple):
    """DeepEP low-latency dispatch and combine on ``gpus`` GPUs (one node): ``tokens`` per rank of
    ``hidden`` to ``top_k`` of ``experts``; the mean seconds of each."""

    gpus: int
    tokens: int
    hidden: int
    top_k: int
    experts: int
    dispatch_s: float
    combine_s: float


class SiliconRow(NamedTuple):
    """One measured deployment: ``engine`` serving ``model`` on ``system`` with ``precision``; ``mode``
    "agg" (one worker does both phases) or "disagg"; the worker's parallelism for the phase measured
    (``tp``, ``attention_dp``, ``moe_ep``, ``moe_tp``); ``batch`` the worker's configured batch (per
    attention-DP rank where attention DP is on) of ``isl``-token prompts; measured ``ttft_s`` and ``tpot_s``
    (None when absent); ``concurrency`` the benchmark's clients over the whole deployment (its source's
    ``silicon_concurrency``; None when not recorded): the batch times the attention-DP ranks on most rows,
    not always the batch itself; ``workers`` a disaggregated row's (prefill, decode) worker counts (None
    for a co-located row, or where not recorded); ``release`` the engine release it ran (``row_release``;
    None where neither its version nor its image says); ``speculative`` whether the run decoded
    speculatively: "mtp", "unknown" (its benchmark ran the layout with and without MTP and the row does not
    say which) or "none" (``demos.zoo.vendor_data.inferencex``: InferenceX's exported rows; every other
    row is "none"); ``radix_cache`` whether an SGLang server ran with its radix cache (its default; off
    where the benchmark's launch script is known to disable it: ``inferencex.radix_cache_off``); ``kv_cache`` the
    KV cache dtype its launch script set ("fp8": ``inferencex.kv_cache_fp8``; None where none is known: the
    engine's default); ``redundant_slots`` the expert slots beyond the routed experts its decode worker deployed
    without EPLB (``inferencex.redundant_slots``; 0 where none is known)."""

    id: str
    engine: str
    model: str
    system: str
    precision: str
    mode: str
    isl: int
    osl: int
    batch: int
    tp: int
    attention_dp: int
    moe_ep: int
    moe_tp: int
    prefill: tuple[int, int, int, int, int] | None
    ttft_s: float | None
    tpot_s: float | None
    concurrency: int | None = None
    workers: tuple[int, int] | None = None
    release: str | None = None
    speculative: str = "none"
    radix_cache: bool = True
    kv_cache: str | None = None
    redundant_slots: int = 0


_CONCURRENCY = re.compile(r"(?:^|;)\s*silicon_concurrency=(\d+)\s*(?:;|$)")
_VERSION = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+|rc\d+(?:\.post\d+)?)?)(?:-.*)?$")
_NIGHTLY = re.compile(r"^nightly-dev-(?:cu\d+-)?(\d{8})(?:-.*)?$")
_IMAGE = re.compile(r"(?:^|[;\s=])[\w.\-]+/(?:sglang|vllm-openai|tensorrt-llm[\w\-]*):([\w.\-]+)")


def source_concurrency(source) -> int | None:
    """The ``silicon_concurrency=N`` of a row's source field (``id; key=value; ...``), None without one."""
    m = _CONCURRENCY.search(source) if isinstance(source, str) else None
    return int(m.group(1)) if m else None


def _tag_release(tag: str) -> str | None:
    m, n = _VERSION.match(tag), _NIGHTLY.match(tag)
    return m.group(1) if m else f"nightly-dev-{n.group(1)}" if n else None


def row_release(version, source) -> str | None:
    """The engine release a measured row ran: its ``backend_version`` where that is a release (``0.5.9``,
    ``0.5.10.post1``) or a dated nightly (``nightly-dev-YYYYMMDD``), else the tag of the container image its
    source field names (``image=lmsysorg/sglang:v0.5.9-cu130``, ``...:nightly-dev-cu13-20260401-b6fe0cca``);
    None where neither says."""
    if isinstance(version, str) and (r := _tag_release(version.strip())):
        return r
    m = _IMAGE.search(source) if isinstance(source, str) else None
    return _tag_release(m.group(1)) if m else None


def speculative_reason(row: SiliconRow) -> str | None:
    """Why a measured row that decoded speculatively, or may have, is not checked (speculative decoding is
    not modelled); None for a row that did not."""
    if row.speculative == "mtp":
        return "ran with MTP speculative decoding (InferenceX's config): not modelled"
    if row.speculative == "unknown":
        return "InferenceX ran its layout with and without MTP speculative decoding: the row does not say which"
    return None
