"""Parameter counts of a ``ModelSpec``: ``count_params(spec) -> ParamCount``, exact integer arithmetic.

What is counted (every weight, bias and norm scale of the HuggingFace implementation of each family):

* ``embedding``: the input token table, ``vocab_size * hidden_size``; ``lm_head``: the output projection of
  the same size, 0 when the embeddings are tied;
* ``attention`` (all layers): MLA's ``q_a/q_b`` (or ``q_proj``), ``kv_a_proj_with_mqa``, ``kv_b_proj``,
  ``o_proj`` and its two latent norms, and a sparse MLA's lightning indexer (``indexer_params``); GQA's
  q/k/v/o projections with their biases when ``bias``, the per-head q/k norms when ``qk_norm``, one sink
  per head when ``sinks`` and ``q_proj``'s output-gate half when ``output_gate``; a hybrid model's Gated
  DeltaNet layers (``linear_attention_params``) in its ``linear_attention`` layers; DeepSeek-V4's
  compressed attention per layer (``compressed_attention_params``: its projections, its compressor and, at
  ratio 4, its indexer); MiniMax-M3's block-sparse layers GQA's plus their index's query and key
  projections and the key's norm (the names of those weights not read: an assumption);
* ``norms``: two RMSNorms per layer (before attention and before the MLP) and the final norm, and a wide
  residual's mixing weights (``hyper_connection_params``: DeepSeek-V4's ``hc_*`` tensors);
* ``dense_mlp``: the gated MLPs (gate, up, down) of the ``first_k_dense`` layers;
* ``routed_experts`` / ``routed_active``: all routed experts of every MoE layer / the ``top_k`` a token uses;
  ``shared_experts``: the always-on experts; ``router``: the gate linear, its bias, and DeepSeek-V3's
  selection-only correction bias (which DeepSeek-V4's hash-routed layers do not have; their token-id table
  is a buffer, not counted);
* ``latent``: a latent MoE's projections around its routed experts (Kimi-K3's ``routed_expert_down_proj``,
  ``routed_expert_norm``, ``routed_expert_up_proj``: hidden -> ``latent_size`` -> hidden), every token's;
* block attention residuals (``attn_res_block``): a query vector and a norm scale of hidden size at each
  sub-layer (``self_attention_res``, ``mlp_res``), counted in ``norms``;
* ``mtp``: the multi-token-prediction modules (DeepSeek-V3 and GLM-4.5 ship one): a full MoE layer plus
  ``enorm``, ``hnorm``, ``eh_proj`` (2·hidden -> hidden) and the head norm, sharing the trunk's embedding and head.

Conventions (docs/models.md has the measured agreement):

* ``total`` is the trunk only, MTP excluded: DeepSeek-V3's published 671B excludes its MTP module, the
  HF checkpoint's 685B includes it (``checkpoint_total``: the MTP modules plus the copy of the embedding and
  head each stores as its own tensors, ``model.layers.61.embed_tokens`` and ``shared_head.head``); GLM-4.5-Air's
  106B is only matched without its MTP layer too (106.85B computed, 109.23B with it);
* ``active`` is what one token multiplies through: attention, norms, dense MLPs, the router, the top-k
  routed experts and the shared experts of every layer, and the LM head, but not the input-embedding
  lookup. DeepSeek (36.6B "including 0.9B for the output head", README_WEIGHTS.md) and OpenAI (gpt-oss-120b
  5.1B) count this way; Mistral (Mixtral 12.9B) and Qwen (3.3B, 22B) also count the input table, which is
  ``active_with_embedding``; Z.ai's GLM-4.5 figures (32B, 12B for -Air) leave out both the input table and
  the LM head, which is ``active_non_embedding`` (inferred: the only convention within 2% of both).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from demos.zoo.models.linear_spec import KimiDeltaAttention, linear_of
from demos.zoo.models.spec import (
    CompressedAttention,
    GatedDeltaNet,
    GQAAttention,
    MLAAttention,
    ModelSpec,
    ModelSpecError,
    SparseMLAAttention,
)

__all__ = [
    "attention_out_params",
    "ParamCount",
    "attention_params",
    "compressed_attention_params",
    "compressed_head_params",
    "count_params",
    "expert_params",
    "hyper_connection_params",
    "indexer_params",
    "kda_params",
    "latent_params",
    "layer_attention_params",
    "linear_attention_params",
    "routed_expert_params",
]


@dataclass(frozen=True)
class ParamCount:
    """Parameters of one model by part (module docstring); every field is an exact int.

    ``mtp`` holds ``mtp_modules`` multi-token-prediction modules, without the embedding and head they share.
    """

    embedding: int
    lm_head: int
    attention: int
    norms: int
    dense_mlp: int
    routed_experts: int
    routed_active: int
    shared_experts: int
    router: int
    mtp: int
    mtp_modules: int
    latent: int = 0

    @property
    def total(self) -> int:
        """Every trunk parameter once (tied embeddings once), MTP excluded."""
        return (
            self.embedding
            + self.lm_head
            + self.attention
            + self.norms
            + self.dense_mlp
            + self.routed_experts
            + self.shared_experts
            + self.router
            + self.latent
        )

    @property
    def non_embedding(self) -> int:
        """``total`` without the embedding table and the LM head (Qwen's "Non-Embedding" figure)."""
        return self.total - self.embedding - self.lm_head

    @property
    def active(self) -> int:
        """Per-token parameters without the input-embedding lookup (the DeepSeek / OpenAI convention).

        With tied embeddings the one table is the LM head, so it is counted.
        """
        head = self.lm_head if self.lm_head else self.embedding
        trunk = self.attention + self.norms + self.dense_mlp + self.router + self.latent
        return trunk + self.routed_active + self.shared_experts + head

    @property
    def active_with_embedding(self) -> int:
        """``active`` plus the input-embedding table when it is its own (the Mistral / Qwen convention)."""
        return self.active + (self.embedding if self.lm_head else 0)

    @property
    def active_non_embedding(self) -> int:
        """``active`` without the LM head (nor the input table): per-token parameters inside the layers."""
        return self.active - (self.lm_head or self.embedding)

    @property
    def checkpoint_total(self) -> int:
        """``total`` plus the MTP modules, each with its own stored copy of the embedding and the head."""
        copies = self.embedding + (self.lm_head or self.embedding)
        return self.total + self.mtp + self.mtp_modules * copies

    def as_dict(self) -> dict[str, int]:
        """The parts and the sums, for reports."""
        parts = {f.name: getattr(self, f.name) for f in fields(self)}
        sums = ("total", "non_embedding", "active", "active_with_embedding", "active_non_embedding", "checkpoint_total")
        return {**parts, **{name: getattr(self, name) for name in sums}}


def _gated_mlp(hidden: int, intermediate: int, bias: bool) -> int:
    weights = 3 * hidden * intermediate
    return weights + (2 * intermediate + hidden if bias else 0)


def linear_attention_params(hidden: int, a: GatedDeltaNet | KimiDeltaAttention) -> int:
    """A linear-attention layer's parameters (a KDA layer's: ``kda_params``). A Gated DeltaNet layer's (Qwen3-Next's
    ``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz`` and
    ``in_proj_ba`` (hidden -> query, key, value, gate; -> each value head's strength and decay), the depthwise
    ``conv1d`` (no bias), ``dt_bias`` and ``A_log`` per value head, the gated norm's scale, ``out_proj``."""
    if isinstance(a, KimiDeltaAttention):
        return kda_params(hidden, a)
    qkvz = hidden * (2 * a.key_dim + 2 * a.value_dim)
    return (
        qkvz
        + hidden * 2 * a.value_heads
        + a.conv_dim * a.conv_kernel
        + 2 * a.value_heads
        + a.value_head_dim
        + a.value_dim * hidden
    )


def kda_params(hidden: int, a: KimiDeltaAttention) -> int:
    """A Kimi Delta Attention layer's parameters (the weight names of Kimi-K3's checkpoint): ``q_proj``,
    ``k_proj``, ``v_proj``, their three depthwise convolutions, the decay gate's ``f_a_proj`` (hidden ->
    ``head_dim``) and ``f_b_proj`` (-> every channel), ``A_log`` per head and ``dt_bias`` per channel,
    ``b_proj`` (one strength a head), the output gate (``g_proj`` full rank, or ``g_a_proj``/``g_b_proj``
    through ``head_dim``), the gated norm's scale (``head_dim``) and ``o_proj``."""
    p, d = a.key_dim, a.head_dim
    gate = hidden * p if a.full_rank_gate else hidden * d + d * p
    return (
        3 * hidden * p
        + 3 * p * a.conv_kernel
        + hidden * d
        + d * p
        + a.heads
        + p
        + hidden * a.heads
        + gate
        + d
        + p * hidden
    )


def compressed_head_params(hidden: int, a: CompressedAttention) -> int:
    """The part of a DeepSeek-V4 attention layer split by heads (under attention TP): ``wq_b``, the grouped
    ``wo_a``, ``wo_b`` and the sinks (``compressed_attention_params`` holds the rest)."""
    per_heads = a.heads * a.head_dim
    return a.q_lora_rank * per_heads + per_heads * a.o_lora_rank + a.o_groups * a.o_lora_rank * hidden + a.heads


def compressed_attention_params(hidden: int, a: CompressedAttention, ratio: int) -> int:
    """One DeepSeek-V4 attention layer of compression ratio ``ratio``: ``wq_a`` with the query latent's norm,
    ``wq_b``, ``wkv`` (the one latent head) with its norm, the grouped ``wo_a`` (each group's heads to
    ``o_lora_rank``) and ``wo_b``, one sink per head; at a ratio, the compressor (``wkv`` and ``wgate`` to
    ``compressor_width`` columns, ``ape`` per position of the ratio, the entry's norm); at ratio 4 the
    indexer too (``wq_b`` from the query latent, ``weights_proj`` from the hidden state, and a compressor of
    its own over ``index_head_dim``)."""
    hd = a.head_dim
    total = hidden * a.q_lora_rank + a.q_lora_rank + hidden * hd + hd + compressed_head_params(hidden, a)

    def compressor(dim: int) -> int:
        width = a.compressor_width(ratio, dim)
        return 2 * hidden * width + ratio * width + dim

    if ratio:
        total += compressor(hd)
    if ratio == 4:
        ih, idim = a.index_heads, a.index_head_dim
        total += a.q_lora_rank * ih * idim + hidden * ih + compressor(idim)
    return total


def hyper_connection_params(spec: ModelSpec) -> int:
    """A wide residual's mixing weights (DeepSeek-V4's manifold-constrained hyper-connections; 0 when
    ``hc_mult`` is 1): at each of a layer's two sub-layers, ``hc_fn`` maps the ``hc x hidden`` stream to the
    ``(2 + hc) x hc`` pre, post and combination weights, with ``hc_base`` and three scales; before the head,
    ``hc_head_fn`` to ``hc`` weights with its base and scale."""
    hc, h = spec.hc_mult, spec.hidden_size
    if hc == 1:
        return 0
    mixes = (2 + hc) * hc
    per_site = mixes * hc * h + mixes + 3
    return spec.num_layers * 2 * per_site + hc * hc * h + hc + 1


def layer_attention_params(spec: ModelSpec, layer: int) -> int:
    """The attention parameters of layer ``layer``: a hybrid model's linear layers their Gated DeltaNet's,
    DeepSeek-V4's at the layer's compression ratio, every other layer ``attention_params``."""
    a = spec.attention
    linear = linear_of(a, layer)
    if linear is not None:
        return linear_attention_params(spec.hidden_size, linear)
    if isinstance(a, CompressedAttention):
        return compressed_attention_params(spec.hidden_size, a, a.ratio_of(layer))
    if isinstance(a, GQAAttention) and a.is_block_sparse(layer):
        b = a.block_sparse  # the index's query projection and its key's, with the key's norm (assumed)
        return attention_params(spec) + spec.hidden_size * (b.index_heads + 1) * b.index_head_dim + b.index_head_dim
    return attention_params(spec)


def attention_out_params(spec: ModelSpec) -> int:
    """The parameters of the trunk's attention output projections, every layer's (what ``Precision.attention_out``
    stores): MLA's and GQA's ``o_proj``, a Gated DeltaNet's ``out_proj``, a KDA layer's ``o_proj``, DeepSeek-V4's
    grouped ``wo_a`` and ``wo_b``; the MTP layers' are not the trunk's."""
    h, a = spec.hidden_size, spec.attention
    total = 0
    for layer in range(spec.num_layers):
        linear = linear_of(a, layer)
        if isinstance(linear, KimiDeltaAttention):
            total += linear.key_dim * h
        elif linear is not None:
            total += linear.value_dim * h
        elif isinstance(a, CompressedAttention):
            total += a.heads * a.head_dim * a.o_lora_rank + a.o_groups * a.o_lora_rank * h
        elif isinstance(a, MLAAttention):
            total += a.heads * a.v_head_dim * h
        elif isinstance(a, GQAAttention):
            total += a.heads * a.head_dim * h + (h if a.bias else 0)
        else:
            raise ModelSpecError("ModelSpec.attention", f"has no output projection count for {type(a).__name__}")
    return total


def attention_params(spec: ModelSpec) -> int:
    """The parameters of one layer of the model's attention (in a hybrid model, of one full-attention
    layer: ``layer_attention_params`` gives any layer's)."""
    h, a = spec.hidden_size, spec.attention
    if isinstance(a, MLAAttention):
        qk_dim = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank is None:
            q = h * a.heads * qk_dim
        else:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * a.heads * qk_dim
        kv = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv += a.kv_lora_rank * a.heads * (a.qk_nope_head_dim + a.v_head_dim)
        gate = h * a.heads * a.v_head_dim if getattr(a, "output_gate", False) else 0  # Kimi-K3's g_proj
        return q + kv + a.heads * a.v_head_dim * h + gate + indexer_params(spec)
    if isinstance(a, GQAAttention):
        q_width, kv_width = a.heads * a.head_dim, a.kv_heads * a.head_dim
        gate = h * q_width if a.output_gate else 0  # q_proj's output-gate half
        total = h * q_width + gate + 2 * h * kv_width + q_width * h
        if a.bias:
            total += q_width + 2 * kv_width + h
        if a.qk_norm:
            total += 2 * a.head_dim
        if a.sinks:
            total += a.heads
        return total
    if isinstance(a, CompressedAttention):  # the MTP layer's: a sliding window only, as DeepSeek's configs give it
        return compressed_attention_params(h, a, 0)
    raise ModelSpecError("ModelSpec.attention", f"has no parameter count for {type(a).__name__}")


def indexer_params(spec: ModelSpec) -> int:
    """The lightning indexer's parameters of one layer (``SparseMLAAttention``; 0 for any other attention):
    its query projection from the query latent, its key projection from the hidden state with the key's
    LayerNorm (weight and bias), and the per-head weights' projection from the hidden state (DeepSeek-V3.2's
    ``Indexer``: ``wq_b``, ``wk``, ``k_norm``, ``weights_proj``)."""
    a, h = spec.attention, spec.hidden_size
    if not isinstance(a, SparseMLAAttention):
        return 0
    return (
        a.q_lora_rank * a.index_heads * a.index_head_dim
        + h * a.index_head_dim
        + 2 * a.index_head_dim
        + h * a.index_heads
    )


def expert_params(spec: ModelSpec) -> int:
    """The parameters of one routed (or shared) expert; 0 for a dense model."""
    if spec.moe is None:
        return 0
    return _gated_mlp(spec.hidden_size, spec.moe.intermediate_size, spec.moe.expert_bias)


def routed_expert_params(spec: ModelSpec) -> int:
    """The parameters of one routed expert: ``expert_params`` at the latent width in a latent MoE."""
    moe = spec.moe
    if moe is None or moe.latent_size is None:
        return expert_params(spec)
    return _gated_mlp(moe.latent_size, moe.intermediate_size, moe.expert_bias)


def latent_params(spec: ModelSpec) -> int:
    """A latent MoE's projections of one MoE layer (0 without): down to ``latent_size``, the norm, back up."""
    moe = spec.moe
    if moe is None or moe.latent_size is None:
        return 0
    return 2 * spec.hidden_size * moe.latent_size + moe.latent_size


def _router_params(spec: ModelSpec) -> int:
    moe = spec.moe
    if moe is None:
        return 0
    total = spec.hidden_size * moe.routed_experts
    total += moe.routed_experts if moe.router_bias else 0
    total += moe.routed_experts if moe.score_correction_bias else 0
    return total


def _hash_layer_bias(spec: ModelSpec) -> int:
    """The correction biases DeepSeek-V4's hash-routed layers do not have (they select by the table)."""
    moe = spec.moe
    return moe.hash_layers * moe.routed_experts if moe is not None and moe.score_correction_bias else 0


def count_params(spec: ModelSpec) -> ParamCount:
    """Parameters of ``spec`` by part; sums and conventions on ``ParamCount`` (module docstring)."""
    if not isinstance(spec, ModelSpec):
        raise ModelSpecError("count_params.spec", f"must be a ModelSpec, got {type(spec).__name__}")
    h = spec.hidden_size
    table = spec.vocab_size * h
    attention = attention_params(spec)
    expert, routed = expert_params(spec), routed_expert_params(spec)
    router = _router_params(spec)
    moe = spec.moe
    routed_per_layer = moe.routed_experts * routed if moe else 0
    active_per_layer = moe.top_k * routed if moe else 0
    shared_per_layer = moe.shared_experts * expert if moe else 0
    dense = _gated_mlp(h, spec.dense_intermediate_size, False) if spec.first_k_dense else 0
    # One MTP module: an MoE layer (attention, two norms, experts, router) + enorm, hnorm, eh_proj, head norm.
    mtp_layer = attention + 2 * h + routed_per_layer + shared_per_layer + router + 2 * h + 2 * h * h + h
    count = ParamCount(
        embedding=table,
        lm_head=0 if spec.tie_embeddings else table,
        attention=sum(layer_attention_params(spec, i) for i in range(spec.num_layers)),
        norms=spec.num_layers * (2 * h + (4 * h if spec.attn_res_block else 0)) + h + hyper_connection_params(spec),
        dense_mlp=spec.first_k_dense * dense,
        routed_experts=spec.moe_layers * routed_per_layer,
        routed_active=spec.moe_layers * active_per_layer,
        shared_experts=spec.moe_layers * shared_per_layer,
        router=spec.moe_layers * router - _hash_layer_bias(spec),
        mtp=spec.mtp_layers * mtp_layer,
        mtp_modules=spec.mtp_layers,
        latent=spec.moe_layers * latent_params(spec),
    )
    return count
