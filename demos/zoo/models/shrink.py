"""``shrink(spec, factor)``: a small spec of the same architecture, for runs that do the real math.

Contract. The result is a valid ``ModelSpec`` (its ``__post_init__`` checked it) with:

* the layer structure kept: ``num_layers``, ``first_k_dense``, ``mtp_layers``, ``hc_mult``, the attention
  kind, the per-layer ``layer_types``, ``compress_ratios`` and ``sliding_window`` (a window is a token
  count, not a width), the flags
  (biases, sinks, q/k norms, router biases), the routing functions and ``precision``;
* every width divided by ``factor`` (floor, at least 1): ``hidden_size``, ``vocab_size``, the dense and
  expert intermediate sizes, a latent MoE's ``latent_size``, MLA's ``q_lora_rank`` and ``kv_lora_rank``,
  DeepSeek-V4's ``q_lora_rank`` and ``o_lora_rank`` (its ``o_groups`` the largest divisor of the new heads
  not above ``o_groups // factor``), and an indexer's heads and ``index_topk``;
* head dims divided by ``factor`` and kept even and >= 2 (RoPE rotates pairs); head counts divided by
  ``factor`` (at least 1) with ``kv_heads`` the largest divisor of the new ``heads`` not above
  ``kv_heads // factor`` (at least 1);
* ``routed_experts`` divided by ``factor`` but at least ``min_experts`` (default 1; never more than the
  original count), ``top_k`` clamped to it, ``shared_experts`` kept;
  ``n_group`` the largest divisor of the new expert count not above ``n_group // factor`` (at least 1) and
  ``topk_group`` the smallest count, from ``min(topk_group, n_group)`` up, whose groups still hold ``top_k``;
* ``name`` ``"<name>/<factor>"`` and ``source`` noting the shrink.

``factor`` must be an int >= 1 (1 returns an equal spec with the new name) and ``min_experts`` an int >= 1;
anything else is a ``ModelSpecError`` naming ``shrink.factor`` or ``shrink.min_experts``. Dividing the experts
keeps ``top_k`` where it can, so a large factor can leave every expert active (DeepSeek-V3 by 32: top-8 of 8)
or a single expert (Mixtral by 8): pass ``min_experts`` to keep routing sparse.
"""

from __future__ import annotations

from dataclasses import fields, replace

from demos.zoo.models.hybrid_spec import HybridMLAAttention
from demos.zoo.models.spec import (
    CompressedAttention,
    MLAAttention,
    ModelSpec,
    ModelSpecError,
    MoESpec,
    SparseMLAAttention,
)

__all__ = ["shrink"]


def _width(value: int, factor: int) -> int:
    return max(1, value // factor)


def _head_dim(value: int, factor: int) -> int:
    return max(2, (value // factor) // 2 * 2)


def _largest_divisor(n: int, at_most: int) -> int:
    """The largest divisor of ``n`` that is <= ``at_most`` (1 when ``at_most`` < 1)."""
    for d in range(min(n, max(1, at_most)), 0, -1):
        if n % d == 0:
            return d
    return 1


def _shrink_compressed(a: CompressedAttention, factor: int) -> CompressedAttention:
    heads, head_dim = _width(a.heads, factor), _head_dim(a.head_dim, factor)
    return replace(
        a,
        heads=heads,
        head_dim=head_dim,
        qk_rope_head_dim=min(_head_dim(a.qk_rope_head_dim, factor), head_dim - 2) if a.qk_rope_head_dim else 0,
        q_lora_rank=_width(a.q_lora_rank, factor),
        o_groups=_largest_divisor(heads, a.o_groups // factor),
        o_lora_rank=_width(a.o_lora_rank, factor),
        index_heads=_width(a.index_heads, factor),
        index_head_dim=_head_dim(a.index_head_dim, factor),
        index_topk=_width(a.index_topk, factor),
    )


def _shrink_attention(a, factor: int):
    if isinstance(a, CompressedAttention):
        return _shrink_compressed(a, factor)
    heads = _width(a.heads, factor)
    if isinstance(a, MLAAttention):
        mla = MLAAttention(
            heads=heads,
            q_lora_rank=None if a.q_lora_rank is None else _width(a.q_lora_rank, factor),
            kv_lora_rank=_width(a.kv_lora_rank, factor),
            qk_nope_head_dim=_head_dim(a.qk_nope_head_dim, factor),
            qk_rope_head_dim=_head_dim(a.qk_rope_head_dim, factor),
            v_head_dim=_head_dim(a.v_head_dim, factor),
        )
        if isinstance(a, HybridMLAAttention):  # its KDA layers' heads and head dim too
            kda = replace(a.linear, heads=_width(a.linear.heads, factor), head_dim=_head_dim(a.linear.head_dim, factor))
            base = {f.name: getattr(mla, f.name) for f in fields(MLAAttention)}
            return HybridMLAAttention(**base, layer_types=a.layer_types, linear=kda, output_gate=a.output_gate)
        if not isinstance(a, SparseMLAAttention):
            return mla
        return SparseMLAAttention(
            **{f.name: getattr(mla, f.name) for f in fields(MLAAttention)},
            index_heads=_width(a.index_heads, factor),
            index_head_dim=_head_dim(a.index_head_dim, factor),
            index_topk=_width(a.index_topk, factor),
        )
    linear = a.linear
    if linear is not None:
        key_heads = _width(linear.key_heads, factor)
        linear = replace(
            linear,
            key_heads=key_heads,
            value_heads=key_heads * (linear.value_heads // linear.key_heads),
            key_head_dim=_head_dim(linear.key_head_dim, factor),
            value_head_dim=_head_dim(linear.value_head_dim, factor),
        )
    return replace(
        a,
        heads=heads,
        kv_heads=_largest_divisor(heads, a.kv_heads // factor),
        head_dim=_head_dim(a.head_dim, factor),
        linear=linear,
    )


def _shrink_moe(moe: MoESpec, factor: int, min_experts: int) -> MoESpec:
    experts = min(moe.routed_experts, max(min_experts, moe.routed_experts // factor))
    top_k = min(moe.top_k, experts)
    n_group = _largest_divisor(experts, moe.n_group // factor)
    per_group = experts // n_group
    topk_group = min(moe.topk_group, n_group)
    while topk_group * per_group < top_k:
        topk_group += 1
    return replace(
        moe,
        routed_experts=experts,
        top_k=top_k,
        intermediate_size=_width(moe.intermediate_size, factor),
        latent_size=None if moe.latent_size is None else _width(moe.latent_size, factor),
        n_group=n_group,
        topk_group=topk_group,
    )


def shrink(spec: ModelSpec, factor: int, *, min_experts: int = 1) -> ModelSpec:
    """``spec`` with widths, heads and experts divided by ``factor`` (module docstring for the rules)."""
    if not isinstance(spec, ModelSpec):
        raise ModelSpecError("shrink.spec", f"must be a ModelSpec, got {type(spec).__name__}")
    for name, value in (("factor", factor), ("min_experts", min_experts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ModelSpecError(f"shrink.{name}", f"must be an int >= 1, got {value!r}")
    dense = spec.dense_intermediate_size
    return replace(
        spec,
        name=f"{spec.name}/{factor}",
        source=f"{spec.source}, shrunk by {factor}",
        hidden_size=_width(spec.hidden_size, factor),
        vocab_size=_width(spec.vocab_size, factor),
        dense_intermediate_size=None if dense is None else _width(dense, factor),
        attention=_shrink_attention(spec.attention, factor),
        moe=None if spec.moe is None else _shrink_moe(spec.moe, factor, min_experts),
    )
