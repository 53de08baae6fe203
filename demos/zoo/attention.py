"""Attention by kind: what each kind's ops cost, its real-math weights, and how it launches them.

Every kind issues the same three ops (``demos.zoo.ops``): ``attn_proj`` (the input norm and the
projections), ``attn_core`` (the attention itself) and ``attn_out`` (back to the hidden size). An
``AttentionKind`` says, for the spec class it serves (``ATTENTION_KINDS``, keyed by that class):

* ``costs(w, a, t, layer, fold)``: its ops' ``Work`` on one rank for a ubatch of ``t`` tokens
  (``AttentionCosts``: the three, and any of its own in ``extra``), their parts folded by ``fold``
  (``demos.zoo.fold.Folder``) and the core timed on its family's attention curve (``KernelTimes.attention``,
  with the core's (batch, heads, context) shape where a measured table is keyed on it);
* ``cost_key(a, layer)``: what makes two layers' attention cost the same (a sliding window), so that a
  plan costs each kind of layer once;
* ``weights(a, hidden, context, rand)``: a layer's real-math weights at a shrunken size;
* ``launch(run, a, weights, h, t, costs, layer, ub, dtype)``: its launches of one ubatch, its workspace
  requested with the real shapes (meta views at full size).

The kinds:

* ``MLA`` (DeepSeek's multi-head latent attention): decode absorbed (the latent cache read once per
  kernel, scores and values in the 512 + 64 latent space), prefill expanded (``kv_b_proj`` expands the
  latent; causal within each request, compute-bound). Attention TP (vLLM's DeepseekV2MLAAttention): the
  down-projections ``q_a`` and ``kv_a`` are replicated, ``q_b`` (or ``q_proj``), ``kv_b``, ``o_proj`` and the
  absorptions split by heads, and every rank reads the whole latent cache (the one KV head). A decode core
  over an FP8 cache takes the family's curve of that path (``KernelTimes.attention``'s ``fp8_cache``).
* ``SparseMLA`` (DeepSeek sparse attention: DeepSeek-V3.2, GLM-5): MLA whose core reads only the
  ``index_topk`` cached tokens a lightning indexer picks (decode: ``min(context, topk)`` entries per token;
  prefill: at most ``topk`` keys per query), after its own op ``attn_index``: the indexer's projections,
  its scores of every query against every cached key it may read, and their top-k. The indexer is what
  grows with the context; the core stops growing at ``topk``.
* ``GQA`` (``demos.zoo.gqa_attention``; grouped-query, MHA when ``kv_heads == heads``): decode reads each
  request's KV cache of ``context`` tokens (a sliding-window layer at most its window); attention TP splits
  the query and the KV heads (vLLM's QKVParallelLinear: ``max(1, kv_heads / attention_tp)`` KV heads per
  rank, replicated when fewer than the group). Its core is timed on the family's GQA curve of its phase,
  engine and cache dtype (``FamilyFit.gqa``, fitted to the engines' measured kernels; docs/kernels.md).
* ``DeltaRule`` (``demos.zoo.linear_attention``): a hybrid model's Gated DeltaNet layers (Qwen3-Next,
  Qwen3.5), picked per layer by ``layer_attention``: a fixed-size recurrent state per request instead of
  a KV cache, its own ops (``gdn_*``).
* ``GatedMLA``: Kimi-K3's MLA layers (``HybridMLAAttention``), MLA with its output gate (``g_proj`` from the
  hidden state, its sigmoid multiplied into the heads' outputs before ``o_proj``, in ``attn_out``); its other
  layers are ``KimiDelta`` (``demos.zoo.linear_attention``), picked per layer by ``layer_attention``.
* ``Compressed`` (``demos.zoo.compressed_attention``): DeepSeek-V4's layers, each a sliding window and, by
  its compression ratio, a compressed cache (read whole, or through a lightning indexer's top-k), with
  its own op ``attn_compress`` (and ``attn_index`` at ratio 4).
* ``BlockSparseGQA`` (``demos.zoo.gqa_attention``): MiniMax-M3's block-sparse layers, GQA whose core reads
  only the blocks an index picks, after the index's op ``attn_index``.

A new kind of attention (compressed, sparse, linear) is one class here and one entry in
``ATTENTION_KINDS``, plus an entry in ``demos.zoo.ops.OPS`` for each op of its own: the plan, the
breakdown and the model take it from there (docs/design.md, "The step as one op list", has an example).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch

from dbo.costs import Work
from demos.vocabulary import Phase
from demos.zoo import kernels as K
from demos.zoo.attention_base import AttentionCosts, AttentionKind, attention_pairs, timed_core
from demos.zoo.compressed_attention import Compressed, decode_index_parts
from demos.zoo.fold import Folder, bmm, gemm, memory_pass
from demos.zoo.gqa_attention import GQA, BlockSparseGQA
from demos.zoo.linear_attention import DeltaRule, KimiDelta
from demos.zoo.models import (
    BlockSparse,
    GQAAttention,
    HybridMLAAttention,
    MLAAttention,
    SparseMLAAttention,
)
from demos.zoo.models.linear_spec import linear_of
from demos.zoo.work import causal_pairs, decode_pairs, index_score_work, mla_core_work, sparse_causal_pairs
from demos.zoo.workload import Workload

__all__ = [
    "ATTENTION_KINDS",
    "GQA",
    "BlockSparseGQA",
    "Compressed",
    "DeltaRule",
    "GatedMLA",
    "KimiDelta",
    "MLA",
    "SparseMLA",
    "AttentionCosts",
    "AttentionKind",
    "attention_kind",
    "attention_pairs",
    "layer_attention",
]


class MLA(AttentionKind):
    """Multi-head latent attention (module docstring)."""

    spec_type = MLAAttention
    label = "MLA"
    module = "mla"

    def costs(self, w: Workload, a: MLAAttention, t: int, layer: int, fold: Folder) -> AttentionCosts:
        H, store, ostore = w.spec.hidden_size, w.spec.precision.weights, w.spec.precision.store("attention_out")
        nope, rope, v, lat = a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.kv_lora_rank
        h = a.heads // w.attention_tp
        _sum = fold.named("attn_proj")
        if a.q_lora_rank is None:
            q = gemm(t, h * (nope + rope), H, store)
        else:
            q = _sum(gemm(t, a.q_lora_rank, H, store), gemm(t, h * (nope + rope), a.q_lora_rank, store))
        kv_a = gemm(t, lat + rope, H, store)
        norm = memory_pass(t, H, 2)
        if w.phase == Phase.DECODE:
            absorb_k = bmm(h, t, lat, nope)  # q_nope into the latent space (per-head bmm)
            proj = _sum(q, kv_a, absorb_k, norm)
            out = _sum(gemm(t, H, h * v, ostore), bmm(h, t, v, lat))
            shape = (t, h, self.read(w, a))
        else:
            kv_b = gemm(t, h * (nope + v), lat, store)  # expand the latent into per-head keys and values
            proj = _sum(q, kv_a, kv_b, norm)
            out = _sum(gemm(t, H, h * v, ostore))
            shape = (max(1.0, t / w.context), h, min(t, w.context))
        kvb = w.spec.precision.bytes_of("kv_cache")
        pairs = self.pairs(w, a, t)
        flops, nbytes = mla_core_work(w.phase, t, h, pairs, latent=lat, rope=rope, nope=nope, v=v, kv_bytes=kvb)
        core = timed_core(w, fold, flops, nbytes, shape, fp8_cache=kvb == 1, module=self.module)
        return AttentionCosts(proj, core, out, (flops, nbytes))

    def read(self, w: Workload, a: MLAAttention) -> float:
        """Cached tokens a decode token's core reads: its request's whole context."""
        return w.context

    def pairs(self, w: Workload, a: MLAAttention, t: int) -> float:
        """Query-key pairs per head of the core for a ubatch of ``t`` tokens (``attention_pairs``)."""
        return attention_pairs(w, t)

    def weights(self, a: MLAAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        L = SimpleNamespace()
        qd = a.qk_nope_head_dim + a.qk_rope_head_dim
        L.w_q = (
            (rand((H, a.heads * qd), H**-0.5),)
            if a.q_lora_rank is None
            else (rand((H, a.q_lora_rank), H**-0.5), rand((a.q_lora_rank, a.heads * qd), 1.0))
        )
        L.w_kv_a = rand((H, a.kv_cache_width), H**-0.5)
        L.w_uk = rand((a.heads, a.qk_nope_head_dim, a.kv_lora_rank), a.qk_nope_head_dim**-0.5)
        L.w_uv = rand((a.heads, a.kv_lora_rank, a.v_head_dim), a.kv_lora_rank**-0.5)
        L.kv_ctx = rand((C, a.kv_cache_width), 1.0)
        L.w_o = rand((a.heads * a.v_head_dim, H), (a.heads * a.v_head_dim) ** -0.5)
        return L

    def launch(self, run, a: MLAAttention, L, h, t, costs, layer, ub, dt) -> None:
        lat, rope = a.kv_lora_rank, a.qk_rope_head_dim
        q_lat, q_rope, kv_self, o_lat = run.workspace(
            ((t, a.heads, lat), dt), ((t, a.heads, rope), dt), ((t, lat + rope), dt), ((t, a.heads, lat), dt)
        )
        w = () if L is None else (L.w_q, L.w_kv_a, L.w_uk, a.qk_nope_head_dim)
        run(costs, "attn_proj", K.mla_proj_kernel, h, *w, q_lat, q_rope, kv_self, layer=layer, ub=ub)
        ctx = None if L is None else L.kv_ctx
        run(costs, "attn_core", K.mla_core_kernel, q_lat, q_rope, kv_self, ctx, o_lat, layer=layer, ub=ub)
        self.launch_out(run, a, L, h, o_lat, costs, layer, ub)

    def launch_out(self, run, a: MLAAttention, L, h, o_lat, costs, layer, ub) -> None:
        """``attn_out``: the values un-absorbed from the latent and ``o_proj`` into ``h``."""
        w = () if L is None else (L.w_uv, L.w_o)
        run(costs, "attn_out", K.mla_out_kernel, o_lat, *w, h, layer=layer, ub=ub)


class SparseMLA(MLA):
    """MLA behind a lightning indexer (DeepSeek sparse attention; module docstring)."""

    spec_type = SparseMLAAttention
    label = "sparse MLA"
    module = "dsa"

    def read(self, w: Workload, a: SparseMLAAttention) -> float:
        """A decode token's core reads the ``index_topk`` entries its indexer picked (all, when fewer)."""
        return min(w.context, a.index_topk)

    def pairs(self, w: Workload, a: SparseMLAAttention, t: int) -> float:
        if w.phase == Phase.DECODE:
            return decode_pairs(t, self.read(w, a))
        return sparse_causal_pairs(t, w.context, a.index_topk)

    def costs(self, w: Workload, a: SparseMLAAttention, t: int, layer: int, fold: Folder) -> AttentionCosts:
        dense = super().costs(w, a, t, layer, fold)
        return replace(dense, extra=(("attn_index", self.index_costs(w, a, t, fold)),))

    def index_costs(self, w: Workload, a: SparseMLAAttention, t: int, fold: Folder) -> Work:
        """The indexer of a ubatch of ``t`` tokens: its query projection from the query latent, its key and
        per-head weight projections from the hidden state, the key's norm, RoPE and FP8 cache write, the
        scores of every query against every cached key it may read and the top-k over them. In decode the
        scores and the top-k take the family's fitted curves of DeepGEMM's paged kernel and GLM-5's top-k
        (``decode_index_parts``), and the indexer's own fixed time rides on them (``KernelTimes.index_extra``:
        its chain of small kernels beyond the op's floors); in prefill the scores take the fitted curve of
        DeepGEMM's ``fp8_mqa_logits`` (``KernelTimes.index_prefill_scores_seconds``) and the top-k a memory
        pass. A family without those curves times the scores as an FP8 grouped GEMM of (keys, heads, head
        dim), an extrapolation (docs/models.md). The indexer is not split by attention TP (assumed
        replicated, as ``demos.zoo.memory`` counts it)."""
        H, store = w.spec.hidden_size, w.spec.precision.weights
        ih, d = a.index_heads, a.index_head_dim
        kt = fold.kernels
        fixed: tuple[Work, ...] = ()
        if w.phase == Phase.DECODE and kt.has_index:
            scores, select = decode_index_parts(fold, t, w.context, 1, a, "dsa")
            fixed = (Work(seconds=kt.index_extra),)
        else:
            if w.phase == Phase.DECODE:
                keys = pairs = t * float(w.context)  # every token scores every cached key of its request
                rows = w.context
            else:
                pairs = causal_pairs(t, w.context)
                keys, rows = float(t), min(t, w.context)
            flops, nbytes = index_score_work(t, keys, pairs, ih, d, key_bytes=a.index_key_bytes)
            if w.phase != Phase.DECODE and kt.has_prefill_index:
                scores = Work(seconds=kt.index_prefill_scores_seconds(t, w.context, ih, d), bytes=nbytes)
            else:
                scores = Work(flops=flops, bytes=nbytes, dtype="fp8", shape=(max(1, round(rows)), ih, d))
            select = Work(bytes=4.0 * pairs + 4.0 * t * min(a.index_topk, w.context))
        return fold.named("attn_index")(
            gemm(t, ih * d, a.q_lora_rank, store),
            gemm(t, d, H, store),
            gemm(t, ih, H, "bfloat16"),
            memory_pass(t, d, 2),
            scores,
            select,
            *fixed,
        )

    def weights(self, a: SparseMLAAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        L = super().weights(a, H, C, rand)
        L.w_iq = rand((H, a.index_heads * a.index_head_dim), H**-0.5)
        L.w_iw = rand((H, a.index_heads), H**-0.5)
        L.k_index = rand((C, a.index_head_dim), 1.0)
        return L

    def launch(self, run, a: SparseMLAAttention, L, h, t, costs, layer, ub, dt) -> None:
        lat, rope = a.kv_lora_rank, a.qk_rope_head_dim
        C = None if L is None else L.kv_ctx.shape[0]
        k = a.index_topk if C is None else min(a.index_topk, C)
        sel, q_lat, q_rope, kv_self, o_lat = run.workspace(
            ((t, k), torch.int64),
            ((t, a.heads, lat), dt),
            ((t, a.heads, rope), dt),
            ((t, lat + rope), dt),
            ((t, a.heads, lat), dt),
        )
        w = () if L is None else (L.w_iq, L.w_iw, L.k_index, a.index_heads)
        run(costs, "attn_index", K.dsa_index_kernel, h, *w, sel, layer=layer, ub=ub)
        w = () if L is None else (L.w_q, L.w_kv_a, L.w_uk, a.qk_nope_head_dim)
        run(costs, "attn_proj", K.mla_proj_kernel, h, *w, q_lat, q_rope, kv_self, layer=layer, ub=ub)
        ctx = None if L is None else L.kv_ctx
        run(costs, "attn_core", K.sparse_mla_core_kernel, q_lat, q_rope, kv_self, ctx, sel, o_lat, layer=layer, ub=ub)
        w = () if L is None else (L.w_uv, L.w_o)
        run(costs, "attn_out", K.mla_out_kernel, o_lat, *w, h, layer=layer, ub=ub)


class GatedMLA(MLA):
    """MLA with an output gate, beside KDA layers (Kimi-K3; module docstring)."""

    spec_type = HybridMLAAttention

    def costs(self, w: Workload, a: HybridMLAAttention, t: int, layer: int, fold: Folder) -> AttentionCosts:
        c = super().costs(w, a, t, layer, fold)
        if not a.output_gate:
            return c
        width = a.heads // w.attention_tp * a.v_head_dim
        gate = gemm(t, width, w.spec.hidden_size, w.spec.precision.weights)
        return replace(c, out=fold.named("attn_out")(c.out, gate, memory_pass(t, width, 1)))

    def weights(self, a: HybridMLAAttention, H: int, C: int, rand: Callable) -> SimpleNamespace:
        L = super().weights(a, H, C, rand)
        L.w_g = rand((H, a.heads * a.v_head_dim), H**-0.5) if a.output_gate else None
        return L

    def launch_out(self, run, a: HybridMLAAttention, L, h, o_lat, costs, layer, ub) -> None:
        """``attn_out`` with the output gate (``g_proj``'s sigmoid) multiplied in before ``o_proj``."""
        if not a.output_gate:
            return super().launch_out(run, a, L, h, o_lat, costs, layer, ub)
        w = () if L is None else (L.w_uv, L.w_g, L.w_o)
        run(costs, "attn_out", K.gated_mla_out_kernel, o_lat, *w, h, layer=layer, ub=ub)


ATTENTION_KINDS: dict[type, AttentionKind] = {
    k.spec_type: k
    for k in (MLA(), SparseMLA(), GQA(), DeltaRule(), Compressed(), BlockSparseGQA(), GatedMLA(), KimiDelta())
}
"""Every kind of attention the zoo runs, keyed by its spec class (``demos.zoo.models``)."""


def attention_kind(a: Any) -> AttentionKind:
    """The ``AttentionKind`` of attention spec ``a``; a spec class without one is a ``TypeError`` naming it."""
    try:
        return ATTENTION_KINDS[type(a)]
    except KeyError:
        known = ", ".join(t.__name__ for t in ATTENTION_KINDS)
        raise TypeError(f"no attention kind for {type(a).__name__}; known: {known} (demos.zoo.attention)") from None


def layer_attention(a: Any, layer: int) -> tuple[AttentionKind, Any]:
    """(kind, spec) of layer ``layer``'s attention in a model whose attention spec is ``a``: a hybrid model's
    ``linear_attention`` layers are Gated DeltaNet layers (``GQAAttention.linear``) or Kimi-K3's KDA layers
    (``HybridMLAAttention.linear``), MiniMax-M3's
    ``block_sparse_attention`` layers block-sparse GQA (the kind reads ``a.block_sparse``), every other layer
    ``a`` itself. Everything that costs, launches or builds a layer asks this, never ``a`` alone."""
    linear = linear_of(a, layer)
    if linear is not None:
        return ATTENTION_KINDS[type(linear)], linear
    if isinstance(a, GQAAttention) and a.is_block_sparse(layer):
        return ATTENTION_KINDS[BlockSparse], a
    return attention_kind(a), a
