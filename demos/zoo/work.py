"""The work of a kernel the zoo counts: floating-point operations and bytes, from its shape.

One copy of each formula, for the simulator (``demos.zoo.costs`` folds them into a layer's ops) and for
the fitting (``demos.fits`` counts every measured row's work with them before it fits a curve to the
row's time), so that a curve is fitted to the very work the predictor later asks it to time. Each takes
numbers or numpy arrays alike (plain arithmetic; ``divmod`` works on both).

* ``gemm_work(m, n, k, storage, weights=)``: ``m`` rows through a (k -> n) weight stored as ``storage``
  (``demos.zoo.models.dtypes``): ``2 m n k`` flops; the weight's bytes ``weights`` times (once per kernel:
  a decode GEMM reads all its weights whatever its rows; a grouped GEMM once per active expert), the
  activations in (FP8 when the weights are FP8) and the BF16 activations out.
* ``decode_pairs`` / ``causal_pairs``: the query-key pairs per head of ``tokens`` tokens: decode, each
  token attends to its request's ``context`` cached tokens and itself; prefill, causal within requests of
  ``context`` tokens (the last one shorter); ``sparse_causal_pairs`` the same with each query reading at
  most ``topk`` keys (numbers only).
* ``index_score_work``: a lightning indexer's scores (DeepSeek sparse attention): FP8 query-key products
  over the pairs it scores, the cached keys it reads, one FP32 score per pair; ``index_entries`` the keys
  a decode token's indexer scores and its top-k selects from (its request's cached tokens and itself,
  ``ratio`` to a compressed entry).
* ``compressed_core_work``: DeepSeek-V4's attention core on one rank: every query head against the entries
  it reads (its window and its compressed entries) of the one latent head, which is key and value.
* ``mhc_work``: a wide residual's pre or post kernel (DeepSeek-V4's hyper-connections) over an FP32 stream.
* ``gqa_core_work``: grouped-query attention's core on one rank, every query head against its group's keys over
  the query-key ``pairs`` (a sliding-window layer's capped at its window): decode, each pair's cached key and value
  of every KV head read once; prefill, each token's queries, keys, values and output once; ``windowed_pairs`` the
  pairs a sliding-window layer keeps, ``gqa_work_items`` the core's requests x KV heads.
* ``mla_core_work``: MLA's attention core on one rank (DeepSeek's decode path absorbed: the latent cache
  read once per kernel, scores and values in the latent + RoPE space; prefill expanded: per-head keys and
  values, causal).
* ``delta_rule_work``: a Gated DeltaNet layer's recurrence on one rank (decode: each token reads and writes
  its request's FP32 state per value head; prefill: the chunked form, per chunk of ``DELTA_CHUNK`` tokens).
* ``delta_rule_chunks``: the longest chain of chunks the chunked delta rule runs one after another.
* ``conv_work``: a Gated DeltaNet layer's short causal convolution (its inputs, outputs and conv states).
* ``pass_work(tokens, width, passes)``: ``passes`` BF16 read-and-write memory passes over ``tokens x
  width`` values (norms, activations, residual adds).
"""

from __future__ import annotations

from demos.vocabulary import Phase
from demos.zoo.elementwise import max_, min_, where_
from demos.zoo.models.dtypes import ACT_BYTES, dtype

DELTA_CHUNK = 64
"""Tokens per chunk of the chunked delta rule (the flash-linear-attention kernels both engines run)."""

__all__ = [
    "DELTA_CHUNK",
    "causal_pairs",
    "compressed_core_work",
    "conv_work",
    "decode_pairs",
    "delta_rule_chunks",
    "delta_rule_work",
    "distinct_experts",
    "gemm_work",
    "index_entries",
    "index_score_work",
    "mhc_work",
    "mla_core_work",
    "pass_work",
    "sparse_causal_pairs",
    "table_experts",
]


def gemm_work(m, n, k, storage: str, *, weights=1.0):
    """(flops, bytes) of ``m`` rows through a (k -> n) weight stored as ``storage``, its bytes read
    ``weights`` times (module docstring)."""
    d = dtype(storage)
    flops = 2.0 * m * n * k
    nbytes = weights * n * k * d.bytes + m * k * d.activation_bytes + m * n * ACT_BYTES
    return flops, nbytes


def table_experts(experts, ep, tokens, top_k) -> tuple[float, float]:
    """(active experts, token copies) of one rank of a measured MoE table row: ``tokens x top_k / ep`` copies (at
    least one: a row of fewer tokens than ranks is the rank that receives one), which the tables' routing
    ("uniform" in DeepEP's, "balanced" in the engines' fused MoE tables) spreads evenly over distinct experts,
    so ``min(experts / ep, copies)`` of the rank's experts are active."""
    copies = max(1.0, tokens * top_k / ep)
    return max(1.0, min(experts / ep, copies)), copies


def distinct_experts(local: float, copies: float) -> float:
    """Expected experts of ``local`` that receive at least one of ``copies`` token copies, each sent to one of
    them uniformly at random."""
    return local * (1.0 - (1.0 - 1.0 / local) ** copies) if local > 1 else min(1.0, copies)


def decode_pairs(tokens, context):
    """Query-key pairs per head of ``tokens`` decode tokens, each with ``context`` cached tokens."""
    return tokens * (context + 1.0)


def causal_pairs(tokens, context):
    """Query-key pairs per head of ``tokens`` prompt tokens in requests of ``context`` tokens, causal
    within each request (the last request holds the remainder)."""
    full, rest = divmod(tokens, context)
    return full * context * (context + 1) / 2 + rest * (rest + 1) / 2


def sparse_causal_pairs(tokens, context, topk):
    """``causal_pairs`` when each query reads at most ``topk`` keys (a sparse attention's selection): in a
    request of ``context`` tokens the query at position ``p`` reads ``min(p + 1, topk)`` (numbers only)."""
    full, rest = divmod(tokens, context)

    def one(n):  # a request's first n tokens
        k = min(n, topk)
        return k * (k + 1) / 2 + (n - k) * topk

    return full * one(context) + one(rest)


def index_score_work(queries, keys_read, pairs, heads, head_dim, *, key_bytes):
    """(flops, bytes) of a lightning indexer's scores: ``pairs`` query-key pairs of ``heads`` FP8 heads of
    ``head_dim`` (a multiply-add per head and dim, the heads' ReLU-weighted sum folded in), ``keys_read``
    cached keys of ``key_bytes`` each read, one FP32 score per pair written and ``queries`` FP8 queries
    read."""
    flops = 2.0 * pairs * heads * head_dim
    nbytes = keys_read * key_bytes + 4.0 * pairs + queries * heads * head_dim
    return flops, nbytes


def index_entries(context, ratio=1):
    """Entries a decode token's indexer scores in a request of ``context`` cached tokens: the cached tokens
    and the token itself, one entry per ``ratio`` of them (DeepSeek-V4's compressed cache: 4; DSA: 1), as
    the measured top-k counts them (nothing to select up to ``index_topk`` entries)."""
    return (context + 1) // ratio


def windowed_pairs(pairs, tokens, window):
    """``pairs`` capped at ``window`` keys a token where ``window`` is not 0 (a sliding-window layer's)."""
    return where_(window > 0, min_(pairs, tokens * window), pairs)


def gqa_work_items(phase: str, tokens, context, kv_heads):
    """A GQA core's work items (``demos.zoo.curves.GqaCurve``): its requests (decode: one a token; prefill: its
    tokens over the ``context`` each request has, at least one) times its ``kv_heads``."""
    requests = tokens if phase == Phase.DECODE else max_(1.0, tokens / context)
    return requests * kv_heads


def gqa_core_work(phase: str, tokens, pairs, heads, kv_heads, head_dim, kv_bytes):
    """(flops, bytes) of a GQA core (module docstring) of ``tokens`` tokens and ``pairs`` query-key pairs per head,
    ``heads`` query heads and ``kv_heads`` KV heads of ``head_dim``, the cache in ``kv_bytes`` a value: decode,
    each pair's cached key and value read, the BF16 queries in and outputs out; prefill, the BF16 queries, keys,
    values and outputs once and the new keys and values written to the cache."""
    flops = 4.0 * heads * head_dim * pairs
    if phase == Phase.DECODE:
        return flops, pairs * 2 * kv_heads * head_dim * kv_bytes + 2 * tokens * heads * head_dim * ACT_BYTES
    kv_width = 2 * kv_heads * head_dim
    return flops, tokens * (2 * heads * head_dim + kv_width) * ACT_BYTES + tokens * kv_width * kv_bytes


def mla_core_work(phase: str, tokens, heads, pairs, *, latent: int, rope: int, nope: int, v: int, kv_bytes):
    """(flops, bytes) of MLA's attention core for ``tokens`` tokens of ``heads`` heads on one rank and
    ``pairs`` query-key pairs per head (``decode_pairs`` / ``causal_pairs``), its cache ``kv_bytes`` per
    value (module docstring)."""
    if phase == Phase.DECODE:
        flops = 2.0 * heads * pairs * (latent + rope) + 2.0 * heads * pairs * latent
        nbytes = pairs * (latent + rope) * kv_bytes + tokens * heads * (latent + rope + latent) * ACT_BYTES
    else:
        flops = 2.0 * heads * pairs * (nope + rope) + 2.0 * heads * pairs * v
        nbytes = tokens * heads * (2 * (nope + rope) + 2 * v) * ACT_BYTES + tokens * (latent + rope) * kv_bytes
    return flops, nbytes


def compressed_core_work(tokens, heads, pairs, head_dim, kv_bytes, entries_read):
    """(flops, bytes) of DeepSeek-V4's attention core for ``tokens`` queries of ``heads`` heads on one rank and
    ``pairs`` query-entry pairs per head: scores and values both over the ``head_dim``-wide latent entry (the
    same vector is key and value: ``4 head_dim`` flops a pair and head), the ``entries_read`` cached entries
    read once per kernel (decode: every token its own; prefill: each request's once), the BF16 queries in
    and outputs out."""
    flops = 4.0 * heads * pairs * head_dim
    return flops, entries_read * head_dim * kv_bytes + 2.0 * tokens * heads * head_dim * ACT_BYTES


MHC_STREAM_BYTES = 4
"""Bytes of a value of the wide residual stream: FP32 (an assumption; the measured post kernels move it at
81% of B200's and 82% of H200's HBM bandwidth counted so, 41% counted in BF16: docs/models.md)."""


def mhc_work(site: str, tokens, hidden, hc):
    """(flops, bytes) of a wide residual's ``site`` kernel ("pre" or "post") over ``tokens`` tokens whose stream
    is ``hc`` rows of ``hidden`` (``MHC_STREAM_BYTES`` each). Pre: the stream read, its ``(2 + hc) x hc`` mixing
    weights projected from it, the rows combined into one BF16 row for the sub-layer; post: the stream and
    the sub-layer's BF16 output read, the stream mixed (``hc x hc``) with the output added, written back."""
    stream = tokens * hc * hidden
    if site == "pre":
        return 2.0 * stream * ((2 + hc) * hc + 1), stream * MHC_STREAM_BYTES + tokens * hidden * ACT_BYTES
    return 2.0 * stream * (hc + 1), 2.0 * stream * MHC_STREAM_BYTES + tokens * hidden * ACT_BYTES


def pass_work(tokens, width, passes):
    """(flops, bytes) of ``passes`` BF16 read-and-write passes over ``tokens x width`` values."""
    return passes * tokens * width, passes * 2 * tokens * width * ACT_BYTES


def delta_rule_work(phase: str, tokens, context, value_heads, key_dim, value_dim, *, key_heads):
    """(flops, bytes) of a Gated DeltaNet layer's recurrence over ``tokens`` tokens on one rank, with
    ``value_heads`` heads whose states are ``key_dim x value_dim`` (FP32), their queries and keys from
    ``key_heads`` heads.

    Decode (one token per request): each token decays its request's state, reads it against its key, writes
    the rank-one delta update and reads the output against its query: ``6 dk dv`` flops per head; the state
    read and written once (``8 dk dv`` bytes per head), the token's BF16 query, key, value, gate and output.
    Prefill, chunked (``DELTA_CHUNK`` tokens, the chunk no longer than the request): per chunk and head the
    keys' Gram matrix, the triangular solve's products for ``w`` and ``u`` and the intra-chunk output
    (``2 C^2 (3 dk + 2 dv)``) plus the state's two passes and the output's read of it (``6 C dk dv``); bytes
    the BF16 activations and each request's final state written (requests of ``context`` tokens)."""
    acts = tokens * (2 * key_heads * key_dim + 2 * value_heads * value_dim + 2 * value_heads) * ACT_BYTES
    if phase == Phase.DECODE:
        flops = 6.0 * tokens * value_heads * key_dim * value_dim
        return flops, 8.0 * tokens * value_heads * key_dim * value_dim + acts
    chunk = (context + DELTA_CHUNK - abs(context - DELTA_CHUNK)) / 2  # min(context, chunk), arrays too
    per_token = 2.0 * chunk * (3 * key_dim + 2 * value_dim) + 6.0 * key_dim * value_dim
    requests = -(-tokens // context)
    return tokens * value_heads * per_token, acts + 4.0 * requests * value_heads * key_dim * value_dim


def conv_work(phase: str, tokens, context, channels, width):
    """(flops, bytes) of the short causal convolution of ``width`` taps over ``channels`` BF16 channels of
    ``tokens`` tokens in requests of ``context`` tokens: the inputs read and outputs written, and each
    request's conv state (``width - 1`` tokens) read and written back (decode: every token is a request)."""
    requests = tokens if phase == Phase.DECODE else -(-tokens // context)
    state = 2.0 * requests * channels * (width - 1) * ACT_BYTES
    return 2.0 * width * tokens * channels, 2.0 * tokens * channels * ACT_BYTES + state


def delta_rule_chunks(phase: str, tokens, context):
    """The chunks of the longest chain the chunked delta rule runs one after another over ``tokens`` tokens
    in requests of ``context`` tokens: a request's chunks of ``DELTA_CHUNK`` (each chunk's state pass
    needs the one before); 0 in decode (one step per token, no chain)."""
    if phase == Phase.DECODE:
        return 0.0 * tokens
    longest = (tokens + context - abs(tokens - context)) / 2  # min(tokens, context), arrays too
    return -(-longest // DELTA_CHUNK)
