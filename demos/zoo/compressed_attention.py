"""DeepSeek-V4's attention as a kind (``demos.zoo.attention``): ``Compressed``, per layer a sliding window and
a compressed cache (``demos.zoo.models.compressed_spec.CompressedAttention``).

A layer of compression ratio ``r`` launches, for a ubatch of ``t`` tokens on one rank (``h = heads /
attention_tp`` query heads):

* ``attn_proj``: the input norm, ``wq_a`` to the query latent and ``wkv`` to the one latent head (both
  replicated under attention TP, as MLA's down-projections), the two latent norms, ``wq_b`` to the rank's
  heads, RoPE and the window's cache write;
* ``attn_compress`` (``r`` > 0): the compressor's two projections (keys/values and gates, ``compressor_width``
  columns each, BF16 weights), the softmax pooling of each ``r`` tokens' rows (FP32) into one entry, its
  norm, RoPE and cache write;
* ``attn_index`` (``r`` = 4): the lightning indexer: its queries from the query latent, per-head weights
  from the hidden state, its own compressor over ``index_head_dim``, the scores of every query against
  every compressed key it may read and their top-k. Decode (``decode_index_parts``; DeepSeek sparse
  attention's indexer keeps its FP8 GEMM for now, docs/models.md): ``(context + 1) / 4`` keys per token,
  the scores on the family's fitted curve of DeepGEMM's ``fp8_paged_mqa_logits`` and the top-k on its
  fitted curve of SGLang's ``topk_transform_v2`` (nothing to select up to ``index_topk`` entries; one
  block per token up to 16,384 entries, another path beyond; distinct scores:
  ``KernelTimes.index_topk_seconds``); prefill (no table of its kernels): its prefix's keys, the scores
  as an FP8 grouped GEMM on the family's FP8 curve, the top-k a memory pass;
* ``attn_core``: every head against the entries the token reads: its window (``min(context + 1,
  sliding_window)``), and its compressed entries: ``min(index_topk, context / 4)`` at ratio 4, ``context /
  128`` at ratio 128 (``compressed_core_work``: key and value are the same latent entry); timed on the
  family's MLA curve of its phase with the decode core's (batch, heads, entries) shape, so a decode core
  pays the MLA module's fixed time as an MLA decode core does; its flops at the heads FlashMLA's sparse
  kernels compute (``kernel_heads``: at least 64 under attention TP), and in decode over the slots its
  sparse kernel costs a request (``decode_slots``: whole blocks of 64 entries and a fixed five more); an
  extrapolation, which the V4 modules' measured tables check (``validate kernels`` ops ``csa module``, ``hca
  module``);
* ``attn_out``: the inverse RoPE of the output's rotated dims, the grouped ``wo_a`` (``o_groups /
  attention_tp`` groups of the rank's heads, each to ``o_lora_rank``) and ``wo_b`` back to the hidden size
  (its partial sums reduced over the attention-TP group as every kind's ``o_proj``).

Layers of the same ratio cost the same (``cost_key``). The real math (``demos.zoo.compressed_kernels``)
runs the same ops at a shrunken size: one cached window and one compressed cache per layer, shared by every
request, as the other kinds' one cached context.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from types import SimpleNamespace

import torch

from dbo.costs import Work
from demos.vocabulary import Phase
from demos.zoo import compressed_kernels as CK
from demos.zoo.attention_base import AttentionCosts, AttentionKind, timed_core
from demos.zoo.fold import Folder, gemm, memory_pass
from demos.zoo.models import CompressedAttention
from demos.zoo.models.dtypes import ACT_BYTES, dtype
from demos.zoo.work import causal_pairs, compressed_core_work, index_entries, index_score_work, sparse_causal_pairs
from demos.zoo.workload import Workload

__all__ = ["KERNEL_HEADS", "Compressed", "decode_index_parts", "entries_read", "kernel_heads"]


def entries_read(a: CompressedAttention, ratio: int, context: float) -> float:
    """Cached entries a decode token of a request with ``context`` cached tokens reads in a layer of ``ratio``:
    its window (itself included) and its compressed entries (module docstring)."""
    window = min(context + 1.0, float(a.sliding_window))
    if ratio == 0:
        return window
    compressed = context / ratio
    return window + (min(float(a.index_topk), compressed) if ratio == 4 else compressed)


KERNEL_HEADS = 64
"""The query heads FlashMLA's sparse kernels compute at least under attention TP: SGLang pads a rank's heads
to 64 (``DeepseekV4Attention._kernel_num_heads``: ``64 if n_local_heads <= 64 else n_heads``, on every
NVIDIA GPU but SM120), the padded heads computed as real ones."""


def kernel_heads(heads: int, tp: int) -> int:
    """The heads the attention core computes for a model of ``heads`` query heads at attention TP ``tp``: the
    rank's own at TP 1, else at least ``KERNEL_HEADS`` (``KERNEL_HEADS`` above it: all ``heads``)."""
    local = max(1, heads // tp)
    if tp == 1:
        return local
    return KERNEL_HEADS if local <= KERNEL_HEADS else heads


SPARSE_BLOCK = 64
"""Entries FlashMLA's sparse decode kernel takes per block (its scheduler's ``block_size_n``)."""

REQUEST_OVERHEAD_BLOCKS = 5
"""The fixed cost of a request in FlashMLA's sparse decode, in blocks: its split-KV scheduler counts every
request as this many blocks more than it reads (``fixed_overhead_num_blocks``, as SGLang 0.5.23 passes it)."""


def decode_slots(a: CompressedAttention, ratio: int, context: float) -> float:
    """Entry-equivalents a decode token costs the sparse kernel in a layer of ``ratio``: its window's and its
    compressed entries' blocks (each list padded to whole ``SPARSE_BLOCK`` blocks) and the request's fixed
    ``REQUEST_OVERHEAD_BLOCKS``."""
    window = min(context + 1.0, float(a.sliding_window))
    blocks = -(-window // SPARSE_BLOCK) + REQUEST_OVERHEAD_BLOCKS
    if ratio:
        compressed = entries_read(a, ratio, context) - window
        blocks += -(-compressed // SPARSE_BLOCK)
    return SPARSE_BLOCK * blocks


def decode_index_parts(fold: Folder, t: int, context: float, ratio: int, a, kernel: str) -> tuple[Work, Work]:
    """A decode indexer's scores and top-k (``attn_index``'s last two parts) for ``t`` tokens of requests of
    ``context`` cached tokens, each scoring ``index_entries(context, ratio)`` keys with ``a``'s indexer (its
    ``index_heads`` of ``index_head_dim``, ``index_key_bytes`` keys, ``index_topk``): the scores on the
    family's fitted curve of DeepGEMM's paged kernel, the top-k on its curve of ``kernel`` ("csa", "dsa"),
    one row per token (``KernelTimes.index_scores_seconds``, ``index_topk_seconds``; docs/kernels.md)."""
    kt = fold.kernels
    entries = index_entries(context, ratio)
    keys = t * entries
    flops, nbytes = index_score_work(t, keys, keys, a.index_heads, a.index_head_dim, key_bytes=a.index_key_bytes)
    scores = Work(seconds=kt.index_scores_seconds(flops, nbytes), bytes=nbytes)
    picked = 4.0 * keys + 4.0 * t * min(a.index_topk, entries)  # the scores read, the indices written
    return scores, Work(seconds=kt.index_topk_seconds(kernel, t, entries, a.index_topk), bytes=picked)


def _quant_passes(out_bytes: float) -> float:
    """A quantizing pass (BF16 read, ``out_bytes`` per value written) as a share of a BF16 read-and-write pass."""
    return (ACT_BYTES + out_bytes) / (2.0 * ACT_BYTES)


def _act_quant(t: float, width: int, store: str) -> tuple[Work, ...]:
    """The quantization of a GEMM's BF16 input of ``t x width`` when its weights (``store``) take 8-bit
    activations: a kernel of its own in SGLang's FP8 paths (``wo_a``'s einsum, ``wo_b``); else nothing."""
    out = dtype(store).activation_bytes
    return (memory_pass(t, width, _quant_passes(out)),) if out < ACT_BYTES else ()


def _prefill_pairs(a: CompressedAttention, ratio: int, t: float, context: int) -> float:
    """Query-entry pairs per head of ``t`` prompt tokens in requests of ``context``: each query's window (at
    most ``sliding_window`` keys of its prefix) and its compressed entries (a query at position ``p`` has
    ``(p + 1) / ratio`` of them, at most ``index_topk`` at ratio 4)."""
    pairs = sparse_causal_pairs(t, context, a.sliding_window)
    if ratio == 4:
        pairs += sparse_causal_pairs(t, context, ratio * a.index_topk) / ratio
    elif ratio:
        pairs += causal_pairs(t, context) / ratio
    return pairs


class Compressed(AttentionKind):
    """DeepSeek-V4's attention (module docstring)."""

    spec_type = CompressedAttention
    label = "compressed"
    module = "mla"

    def costs(self, w: Workload, a: CompressedAttention, t: int, layer: int, fold: Folder) -> AttentionCosts:
        H, store, tp = w.spec.hidden_size, w.spec.precision.weights, w.attention_tp
        d, rope, ratio = a.head_dim, a.qk_rope_head_dim, a.ratio_of(layer)
        h, groups = max(1, a.heads // tp), max(1, a.o_groups // tp)
        kvb = w.spec.precision.bytes_of("kv_cache")
        _proj = fold.named("attn_proj")
        proj = _proj(
            memory_pass(t, H, 2),
            gemm(t, a.q_lora_rank, H, store),
            gemm(t, d, H, store),
            memory_pass(t, a.q_lora_rank + d, 1),
            gemm(t, h * d, a.q_lora_rank, store),
            memory_pass(t, h * d + rope, 1),
        )
        extra = []
        if ratio:
            extra.append(("attn_compress", self.compress_costs(w, a, ratio, d, t, fold, kvb)))
        if ratio == 4:
            index_kv = self.compress_costs(w, a, 4, a.index_head_dim, t, fold, a.index_key_bytes, "attn_index_compress")
            extra.append(("attn_index_compress", index_kv))
            extra.append(("attn_index", self.index_costs(w, a, t, fold)))
        hk = kernel_heads(a.heads, tp)
        if w.phase == Phase.DECODE:
            read = entries_read(a, ratio, w.context)
            pairs, entries, shape = t * decode_slots(a, ratio, w.context), t * read, (t, hk, read)
        else:
            pairs = _prefill_pairs(a, ratio, t, w.context)
            requests = -(-t // w.context)
            entries, shape = requests * entries_read(a, ratio, min(t, w.context)), None
        flops, nbytes = compressed_core_work(t, hk, pairs, d, kvb, entries)
        core = timed_core(w, fold, flops, nbytes, shape)
        width = h * d // groups  # each group's input: its heads' outputs
        ostore = w.spec.precision.store("attention_out")
        out = fold.named("attn_out")(
            memory_pass(t, h * rope, 1),
            *_act_quant(t, h * d, ostore),
            gemm(t, groups * a.o_lora_rank, width, ostore),
            *_act_quant(t, groups * a.o_lora_rank, ostore),
            gemm(t, H, groups * a.o_lora_rank, ostore),
        )
        return AttentionCosts(proj, core, out, (flops, nbytes), extra=tuple(extra))

    def compress_costs(
        self, w: Workload, a, ratio: int, dim: int, t: int, fold: Folder, entry_bytes: float, op: str = "attn_compress"
    ) -> Work:
        """A compressor (op ``op``) over entries of ``dim`` for ``t`` tokens: its two projections (BF16 weights),
        the FP32 pooling of the rows, and the ``t / ratio`` entries normed, rotated and written (module
        docstring)."""
        width = a.compressor_width(ratio, dim)
        H = w.spec.hidden_size
        pool = Work(flops=4.0 * t * width, bytes=2.0 * t * width * 4.0 + t / ratio * dim * (entry_bytes + ACT_BYTES))
        return fold.named(op)(gemm(t, 2 * width, H, "bfloat16"), pool)

    def index_costs(self, w: Workload, a: CompressedAttention, t: int, fold: Folder) -> Work:
        """The lightning indexer of a ratio-4 layer (module docstring); not split by attention TP (as
        ``SparseMLA``'s, assumed replicated)."""
        H, store = w.spec.hidden_size, w.spec.precision.weights
        ih, idim = a.index_heads, a.index_head_dim
        if w.phase == Phase.DECODE and fold.kernels.has_index:
            scores, select = decode_index_parts(fold, t, w.context, 4, a, "csa")
        else:
            if w.phase == Phase.DECODE:  # every token scores its own request's compressed keys
                keys = pairs = t * w.context / 4.0
                rows = w.context / 4.0
            else:
                pairs = causal_pairs(t, w.context) / 4.0
                keys, rows = t / 4.0, min(t, w.context) / 4.0
            flops, nbytes = index_score_work(t, keys, pairs, ih, idim, key_bytes=a.index_key_bytes)
            scores = Work(flops=flops, bytes=nbytes, dtype="fp8", shape=(max(1, round(rows)), ih, idim))
            select = Work(bytes=4.0 * pairs + 4.0 * t * min(a.index_topk, max(1.0, w.context / 4.0)))
        return fold.named("attn_index")(
            gemm(t, ih * idim, a.q_lora_rank, store),
            memory_pass(t, ih * idim, _quant_passes(a.index_key_bytes / idim)),  # RoPE, Hadamard, FP8
            gemm(t, ih, H, "bfloat16"),
            scores,
            select,
        )

    def cost_key(self, a: CompressedAttention, layer: int) -> Hashable:
        return a.ratio_of(layer)

    def layer_label(self, a: CompressedAttention, layer: int) -> str:
        return a.label(layer)

    def weights(self, a: CompressedAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        d, r, g = a.head_dim, a.q_lora_rank, a.o_groups
        L = SimpleNamespace()
        L.w_q_a, L.w_q_b = rand((H, r), H**-0.5), rand((r, a.heads * d), r**-0.5)
        L.w_kv = rand((H, d), H**-0.5)
        L.win_ctx = rand((min(C, a.sliding_window), d), 1.0)
        L.comp = {}
        for ratio in sorted(set(a.compress_ratios) - {0}):
            width = a.compressor_width(ratio, d)
            L.comp[ratio] = (rand((H, width), H**-0.5), rand((H, width), H**-0.5), rand((max(1, C // ratio), d), 1.0))
        iw = a.compressor_width(4, a.index_head_dim)
        L.index_comp = (rand((H, iw), H**-0.5), rand((H, iw), H**-0.5))
        L.w_iq = rand((r, a.index_heads * a.index_head_dim), r**-0.5)
        L.w_iw = rand((H, a.index_heads), H**-0.5)
        L.k_index = rand((max(1, C // 4), a.index_head_dim), 1.0)
        per = a.heads * d // g
        L.w_o_a = rand((g, per, a.o_lora_rank), per**-0.5)
        L.w_o_b = rand((g * a.o_lora_rank, H), (g * a.o_lora_rank) ** -0.5)
        return L

    def launch(self, run, a: CompressedAttention, L, h, t, costs, layer, ub, dt) -> None:
        d, ratio = a.head_dim, a.ratio_of(layer)
        n = max(1, t // ratio) if ratio else 0
        cached = None if L is None or not ratio else L.comp[ratio][2].shape[0]
        k = a.index_topk if cached is None else min(a.index_topk, cached)
        q_lat, q, kv_self, o = run.workspace(
            ((t, a.q_lora_rank), dt), ((t, a.heads, d), dt), ((t, d), dt), ((t, a.heads, d), dt)
        )
        w = () if L is None else (L.w_q_a, L.w_q_b, L.w_kv)
        run(costs, "attn_proj", CK.v4_proj_kernel, h, *w, q_lat, q, kv_self, layer=layer, ub=ub)
        comp_ctx = sel = None
        if ratio:
            (entries,) = run.workspace(((n, d), dt))
            w = () if L is None else L.comp[ratio][:2]
            run(costs, "attn_compress", CK.v4_compress_kernel, h, *w, entries, layer=layer, ub=ub)
            comp_ctx = None if L is None else L.comp[ratio][2]
        if ratio == 4:
            (keys,) = run.workspace(((n, a.index_head_dim), dt))
            w = () if L is None else L.index_comp
            run(costs, "attn_index_compress", CK.v4_compress_kernel, h, *w, keys, layer=layer, ub=ub)
            (sel,) = run.workspace(((t, k), torch.int64))
            w = () if L is None else (L.w_iq, L.w_iw, L.k_index, a.index_heads)
            run(costs, "attn_index", CK.v4_index_kernel, h, q_lat, *w, sel, layer=layer, ub=ub)
        win = None if L is None else L.win_ctx
        run(costs, "attn_core", CK.v4_core_kernel, q, kv_self, win, comp_ctx, sel, o, layer=layer, ub=ub)
        w = () if L is None else (L.w_o_a, L.w_o_b)
        run(costs, "attn_out", CK.v4_out_kernel, o, *w, h, layer=layer, ub=ub)
