"""Grouped-query attention as kinds (``demos.zoo.attention``): ``GQA``, and ``BlockSparseGQA``, MiniMax-M3's
block-sparse layers (GQA whose core reads only the blocks an index picks:
``demos.zoo.models.block_sparse_spec.BlockSparse``).

``GQA`` (MHA when ``kv_heads == heads``): decode reads each request's KV cache of ``context`` tokens (a
sliding-window layer at most its window, ``read_cap``); attention TP splits the query and the KV heads
(vLLM's QKVParallelLinear: ``max(1, kv_heads / attention_tp)`` KV heads per rank, replicated when fewer
than the group). Its core is timed on the family's GQA curve of its phase, engine and cache dtype
(``KernelTimes.gqa_curve``: each engine's measured kernels; docs/kernels.md, "Grouped-query attention"), its work
counted by ``demos.zoo.work.gqa_core_work``, which the fit counts each measured row with too.

A block-sparse layer launches GQA's three ops with the core capped at ``BlockSparse.read_tokens`` cached
tokens a query (its ``topk_blocks`` picked blocks, its local and first ones: 2,176 tokens for MiniMax-M3),
and before the core the index's op ``attn_index``: its queries (``index_heads x index_head_dim`` from the
hidden state) and its key (one of ``index_head_dim`` a token, normed and cached), the scores of every query
against every cached index key it may read (decode: its request's context; prefill: its causal prefix),
timed as a BF16 grouped GEMM of (keys, heads, head dim) on the family's BF16 curve (as DeepSeek sparse
attention's indexer is on the FP8 one: an extrapolation), and the block maxima and their top-k (a memory
pass over the scores). The index grows with the context; the core stops growing at ``read_tokens``. Its
layers cost the same (``cost_key``); the real math (``demos.zoo.kernels``) picks each token's best cached
tokens by the index and attends to those and itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from types import SimpleNamespace

import torch

from dbo.costs import Work
from demos.vocabulary import Phase
from demos.zoo import kernels as K
from demos.zoo.attention_base import AttentionCosts, AttentionKind, attention_pairs, timed_core
from demos.zoo.fold import Folder, gemm, memory_pass
from demos.zoo.models import BlockSparse, GQAAttention
from demos.zoo.models.dtypes import ACT_BYTES
from demos.zoo.work import causal_pairs, gqa_core_work, gqa_work_items, index_score_work, windowed_pairs
from demos.zoo.workload import Workload

__all__ = ["GQA", "BlockSparseGQA"]


class GQA(AttentionKind):
    """Grouped-query attention (module docstring)."""

    spec_type = GQAAttention
    label = "GQA"

    def costs(self, w: Workload, a: GQAAttention, t: int, layer: int, fold: Folder) -> AttentionCosts:
        H, store, tp = w.spec.hidden_size, w.spec.precision.weights, w.attention_tp
        h, kvh, d = a.heads // tp, max(1, a.kv_heads // tp), a.head_dim
        kvb = w.spec.precision.bytes_of("kv_cache")
        window = self.read_cap(a, layer)
        _sum = fold.named("attn_proj")
        gate = h if a.output_gate else 0  # q_proj's gate columns (Qwen3-Next's and Qwen3.5's gated attention)
        proj = _sum(gemm(t, (h + 2 * kvh + gate) * d, H, store), memory_pass(t, H, 2))
        pairs = windowed_pairs(attention_pairs(w, t), t, window or 0)
        flops, nbytes = gqa_core_work(w.phase, t, pairs, h, kvh, d, kvb)
        ostore = w.spec.precision.store("attention_out")
        out = _sum(gemm(t, H, h * d, ostore), *((memory_pass(t, h * d, 1),) if gate else ()))
        units = gqa_work_items(w.phase, t, w.context, kvh)
        core = timed_core(w, fold, flops, nbytes, None, fp8_cache=kvb == 1, units=units)
        return AttentionCosts(proj, core, out, (flops, nbytes))

    def cost_key(self, a: GQAAttention, layer: int) -> Hashable:
        return a.window_of(layer)

    def read_cap(self, a: GQAAttention, layer: int) -> int | None:
        """The most cached tokens a query of ``layer`` reads: its sliding window (None: all of them)."""
        return a.window_of(layer)

    def weights(self, a: GQAAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        d = a.head_dim
        L = SimpleNamespace()
        L.w_qkv = rand((H, self.qkv_width(a)), H**-0.5)
        L.k_ctx = rand((a.kv_heads, C, d), 1.0)
        L.v_ctx = rand((a.kv_heads, C, d), 1.0)
        L.w_o = rand((a.heads * d, H), (a.heads * d) ** -0.5)
        return L

    def qkv_width(self, a: GQAAttention) -> int:
        """Columns of the fused projection: queries, keys, values, and the output gate when it has one."""
        return (2 * a.heads + 2 * a.kv_heads if a.output_gate else a.heads + 2 * a.kv_heads) * a.head_dim

    def launch(self, run, a: GQAAttention, L, h, t, costs, layer, ub, dt) -> None:
        d = a.head_dim
        qkv, out = run.workspace(((t, self.qkv_width(a)), dt), ((t, a.heads * d), dt))
        run(costs, "attn_proj", K.gqa_proj_kernel, h, None if L is None else L.w_qkv, qkv, layer=layer, ub=ub)
        ctx = (None, None) if L is None else (L.k_ctx, L.v_ctx)
        run(costs, "attn_core", K.gqa_core_kernel, qkv, *ctx, a.heads, a.kv_heads, out, layer=layer, ub=ub)
        w_o = None if L is None else L.w_o
        if a.output_gate:
            run(costs, "attn_out", K.gated_out_kernel, out, qkv, w_o, h, layer=layer, ub=ub)
        else:
            run(costs, "attn_out", K.out_kernel, out, w_o, h, layer=layer, ub=ub)


class BlockSparseGQA(GQA):
    """MiniMax-M3's block-sparse layers (module docstring)."""

    spec_type = BlockSparse
    label = "block-sparse GQA"

    def read_cap(self, a: GQAAttention, layer: int) -> int | None:
        return a.block_sparse.read_tokens

    def cost_key(self, a: GQAAttention, layer: int) -> Hashable:
        return "block_sparse"

    def costs(self, w: Workload, a: GQAAttention, t: int, layer: int, fold: Folder) -> AttentionCosts:
        dense = super().costs(w, a, t, layer, fold)
        return replace(dense, extra=(("attn_index", self.index_costs(w, a.block_sparse, t, fold)),))

    def index_costs(self, w: Workload, b: BlockSparse, t: int, fold: Folder) -> Work:
        """The index of a ubatch of ``t`` tokens (module docstring); replicated under attention TP (assumed,
        as DeepSeek sparse attention's indexer)."""
        H, store = w.spec.hidden_size, w.spec.precision.weights
        ih, d = b.index_heads, b.index_head_dim
        if w.phase == Phase.DECODE:  # every token scores its request's cached index keys
            keys = pairs = t * float(w.context)
            rows = w.context
        else:
            pairs = causal_pairs(t, w.context)
            keys, rows = float(t), min(t, w.context)
        flops, nbytes = index_score_work(t, keys, pairs, ih, d, key_bytes=d * ACT_BYTES)
        scores = Work(flops=flops, bytes=nbytes, dtype="bfloat16", shape=(max(1, round(rows)), ih, d))
        select = Work(bytes=4.0 * pairs + 4.0 * pairs / b.block_size)  # the scores, then their blocks' maxima
        return fold.named("attn_index")(
            gemm(t, ih * d, H, store),
            gemm(t, d, H, store),
            memory_pass(t, d, 2),
            scores,
            select,
        )

    def weights(self, a: GQAAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        L = super().weights(a, H, C, rand)
        b = a.block_sparse
        L.w_iq = rand((H, b.index_heads * b.index_head_dim), H**-0.5)
        L.k_index = rand((C, b.index_head_dim), 1.0)
        return L

    def launch(self, run, a: GQAAttention, L, h, t, costs, layer, ub, dt) -> None:
        b, d = a.block_sparse, a.head_dim
        C = None if L is None else L.k_ctx.shape[1]
        k = b.read_tokens if C is None else min(b.read_tokens, C)
        sel, qkv, out = run.workspace(((t, k), torch.int64), ((t, self.qkv_width(a)), dt), ((t, a.heads * d), dt))
        w = () if L is None else (L.w_iq, L.k_index, b.index_heads)
        run(costs, "attn_index", K.block_index_kernel, h, *w, sel, layer=layer, ub=ub)
        run(costs, "attn_proj", K.gqa_proj_kernel, h, None if L is None else L.w_qkv, qkv, layer=layer, ub=ub)
        ctx = (None, None) if L is None else (L.k_ctx, L.v_ctx)
        run(costs, "attn_core", K.gqa_sparse_core_kernel, qkv, *ctx, sel, a.heads, a.kv_heads, out, layer=layer, ub=ub)
        run(costs, "attn_out", K.out_kernel, out, None if L is None else L.w_o, h, layer=layer, ub=ub)
