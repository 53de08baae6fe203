"""``ModelSpec``: one MoE (or dense) decoder-only transformer as the simulator needs it, as pure data.

A spec holds the shapes that set compute, memory and all-to-all traffic, and nothing about weights:

* the trunk: ``hidden_size``, ``num_layers``, ``vocab_size``, ``tie_embeddings``;
* the MLP layout: the first ``first_k_dense`` layers are dense (DeepSeek's ``first_k_dense_replace``)
  with a gated MLP of ``dense_intermediate_size``; every later layer is an MoE layer (``moe``), or
  every layer is dense when ``moe`` is None;
* attention by kind: ``MLAAttention`` (DeepSeek's multi-head latent attention), ``SparseMLAAttention``
  (MLA behind a lightning indexer: DeepSeek sparse attention) or ``GQAAttention`` (grouped-query, MHA
  when ``kv_heads == heads``), with the per-layer sliding-window pattern, the attention sinks of the
  families that have them, the Gated DeltaNet linear-attention layers of the hybrid ones
  (``GatedDeltaNet``, ``demos.zoo.models.linear_spec``), or DeepSeek-V4's per-layer compressed attention
  (``CompressedAttention``, ``demos.zoo.models.compressed_spec``), and MiniMax-M3's block-sparse layers
  (``BlockSparse``, ``demos.zoo.models.block_sparse_spec``);
* ``Precision``: the dtype of each part (non-expert weights, expert weights, dispatch, combine, KV cache, and
  the dense MLPs and attention output a checkpoint may quantize apart);
* ``mtp_layers``: multi-token-prediction modules shipped beside the trunk (DeepSeek-V3), which the
  published totals leave out (``demos.zoo.models.params``);
* ``hc_mult``: the residual stream's width in hidden-size rows (DeepSeek-V4's manifold-constrained
  hyper-connections: 4; 1 is the plain residual);
* ``attn_res_block``: block attention residuals (Kimi-K3's ``attn_res_block_size``): each sub-layer's input
  is a learned softmax mix of the representations of the blocks of ``attn_res_block`` layers before it and
  of the current block's partial sum, instead of the running sum alone (0: the plain residual).

Contract: every dataclass here is frozen and checks every field in ``__post_init__``; a bad value raises
``ModelSpecError``, one line that names the field as ``Class.field`` (also in ``e.field``) and says what
was expected and what it got. All MLPs are gated (SwiGLU-style: gate, up and down projections).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from demos.zoo.models._checks import (
    ModelSpecError,
    check_bool,
    check_choice,
    check_int,
    check_optional_int,
    check_str,
    is_int,
)
from demos.zoo.models.block_sparse_spec import BlockSparse
from demos.zoo.models.compressed_spec import CompressedAttention
from demos.zoo.models.dtypes import DTYPES, dtype
from demos.zoo.models.linear_spec import GatedDeltaNet
from demos.zoo.models.moe_spec import SCORING_FUNCS, MoESpec

__all__ = [
    "ATTENTION_LAYER_TYPES",
    "SCORING_FUNCS",
    "BlockSparse",
    "CompressedAttention",
    "GQAAttention",
    "GatedDeltaNet",
    "MLAAttention",
    "MoESpec",
    "ModelSpec",
    "ModelSpecError",
    "Precision",
    "STORED_APART",
    "SparseMLAAttention",
    "stored_apart",
]

ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention", "linear_attention", "block_sparse_attention")


@dataclass(frozen=True)
class Precision:
    """The dtype of each part, by name in ``demos.zoo.models.dtypes.DTYPES``.

    ``weights``: attention, dense MLPs, shared experts, router, embeddings; ``experts``: routed expert
    weights; ``dispatch`` / ``combine``: the all-to-all payloads towards / back from the experts;
    ``kv_cache``: the attention cache (MLA's latent cache included). Two parts of ``weights`` may be stored
    otherwise, as a checkpoint quantizes them (None: as ``weights``): ``mlp``, the dense MLPs and the shared
    experts; ``attention_out``, attention's output projection (``o_proj``). ``store(part)`` names the dtype a
    part is stored in, either override resolved.
    """

    weights: str = "bfloat16"
    experts: str = "bfloat16"
    dispatch: str = "bfloat16"
    combine: str = "bfloat16"
    kv_cache: str = "bfloat16"
    mlp: str | None = None
    attention_out: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name in STORED_APART:
                continue
            check_choice("Precision", f.name, value, tuple(DTYPES))

    def store(self, part: str) -> str:
        """The ``DTYPES`` name ``part`` (a field name) is stored in, ``mlp`` and ``attention_out`` falling back
        to ``weights``; any other name is a ModelSpecError."""
        if part not in {f.name for f in fields(self)}:
            raise ModelSpecError("Precision.part", f"must be a Precision field name, got {part!r}")
        value = getattr(self, part)
        return self.weights if value is None else value

    def bytes_of(self, part: str) -> float:
        """Bytes per element of ``part`` (a field name, as ``store``); any other name is a ModelSpecError."""
        return dtype(self.store(part)).bytes


STORED_APART = ("mlp", "attention_out")
"""``Precision``'s parts of ``weights`` a checkpoint may store apart: the fields that may be None (stored as
``weights``)."""


def stored_apart(scope: frozenset[str], storage: str) -> dict[str, str | None]:
    """``Precision``'s ``STORED_APART`` fields for a checkpoint that stores the parts in ``scope`` as ``storage``
    and the others as its ``weights`` (None)."""
    return {part: storage if part in scope else None for part in STORED_APART}


@dataclass(frozen=True)
class MLAAttention:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2).

    Queries go through a low-rank ``q_lora_rank`` bottleneck (None: a full ``q_proj``, as DeepSeek-V2-Lite);
    keys and values through the shared ``kv_lora_rank`` latent plus one decoupled RoPE key of
    ``qk_rope_head_dim``; each head has ``qk_nope_head_dim + qk_rope_head_dim`` query/key dims and
    ``v_head_dim`` value dims. The KV cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token and layer.
    """

    heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    kind = "mla"

    def __post_init__(self) -> None:
        check_int("MLAAttention", "heads", self.heads, minimum=1)
        check_optional_int("MLAAttention", "q_lora_rank", self.q_lora_rank, minimum=1)
        check_int("MLAAttention", "kv_lora_rank", self.kv_lora_rank, minimum=1)
        check_int("MLAAttention", "qk_nope_head_dim", self.qk_nope_head_dim, minimum=1)
        check_int("MLAAttention", "qk_rope_head_dim", self.qk_rope_head_dim, minimum=2)
        if self.qk_rope_head_dim % 2:
            raise ModelSpecError(
                "MLAAttention.qk_rope_head_dim", f"must be even (RoPE rotates pairs), got {self.qk_rope_head_dim}"
            )
        check_int("MLAAttention", "v_head_dim", self.v_head_dim, minimum=1)

    @property
    def kv_cache_width(self) -> int:
        """Values cached per token and layer: the latent plus the decoupled RoPE key."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class SparseMLAAttention(MLAAttention):
    """MLA whose core reads only the cached tokens a lightning indexer picks (DeepSeek sparse attention,
    DSA: DeepSeek-V3.2, GLM-5).

    The indexer has ``index_heads`` query heads of ``index_head_dim`` projected from the query latent
    (``q_lora_rank``, which it needs), one key of ``index_head_dim`` per token projected from the hidden
    state (and cached beside the latent, in FP8 with one 4-byte scale), and one weight per head from the
    hidden state; each query scores every cached token with it and attends to the ``index_topk`` best.
    """

    index_heads: int
    index_head_dim: int
    index_topk: int

    kind = "sparse_mla"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.q_lora_rank is None:
            raise ModelSpecError("SparseMLAAttention.q_lora_rank", "must be set: the indexer's queries come from it")
        check_int("SparseMLAAttention", "index_heads", self.index_heads, minimum=1)
        check_int("SparseMLAAttention", "index_head_dim", self.index_head_dim, minimum=1)
        check_int("SparseMLAAttention", "index_topk", self.index_topk, minimum=1)

    @property
    def index_key_bytes(self) -> int:
        """Bytes of the indexer's key cached per token and layer: ``index_head_dim`` FP8 values and one FP32
        scale (DeepSeek-V3.2's inference code quantizes the key in blocks of 128 values; one at 128)."""
        return self.index_head_dim + 4


@dataclass(frozen=True)
class GQAAttention:
    """Grouped-query attention (MHA when ``kv_heads == heads``).

    ``bias``: q/k/v/o projections carry biases (gpt-oss); ``qk_norm``: per-head RMSNorm on queries and keys
    (Qwen3); ``sinks``: one learned sink logit per head (gpt-oss); ``output_gate``: ``q_proj`` also gives a
    per-channel sigmoid gate on the attention's output (Qwen3-Next's and Qwen3.5's gated attention).
    ``sliding_window`` (tokens) applies to the layers ``layer_types`` marks ``"sliding_attention"``; with
    ``layer_types`` None every layer is full attention when ``sliding_window`` is None and sliding when it is
    set (Mistral style). Layers marked ``"linear_attention"`` are Gated DeltaNet layers (``linear``, which
    they need; Qwen3-Next, Qwen3.5), layers marked ``"block_sparse_attention"`` read only the blocks an
    index picks (``block_sparse``, which they need; MiniMax-M3), the others this attention.
    """

    heads: int
    kv_heads: int
    head_dim: int
    bias: bool = False
    qk_norm: bool = False
    sinks: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    output_gate: bool = False
    linear: GatedDeltaNet | None = None
    block_sparse: BlockSparse | None = None

    kind = "gqa"

    def __post_init__(self) -> None:
        check_int("GQAAttention", "heads", self.heads, minimum=1)
        check_int("GQAAttention", "kv_heads", self.kv_heads, minimum=1)
        if self.heads % self.kv_heads:
            raise ModelSpecError("GQAAttention.kv_heads", f"must divide heads ({self.heads}), got {self.kv_heads}")
        check_int("GQAAttention", "head_dim", self.head_dim, minimum=2)
        if self.head_dim % 2:
            raise ModelSpecError("GQAAttention.head_dim", f"must be even (RoPE rotates pairs), got {self.head_dim}")
        for name in ("bias", "qk_norm", "sinks", "output_gate"):
            check_bool("GQAAttention", name, getattr(self, name))
        if not isinstance(self.linear, (GatedDeltaNet, type(None))):
            raise ModelSpecError(
                "GQAAttention.linear", f"must be a GatedDeltaNet or None, got {type(self.linear).__name__}"
            )
        check_optional_int("GQAAttention", "sliding_window", self.sliding_window, minimum=1)
        if self.layer_types is not None:
            if not isinstance(self.layer_types, tuple) or not self.layer_types:
                raise ModelSpecError(
                    "GQAAttention.layer_types", f"must be a non-empty tuple or None, got {self.layer_types!r}"
                )
            for i, t in enumerate(self.layer_types):
                if t not in ATTENTION_LAYER_TYPES:
                    raise ModelSpecError(
                        "GQAAttention.layer_types",
                        f"entry {i} must be one of {', '.join(ATTENTION_LAYER_TYPES)}; got {t!r}",
                    )
            if "sliding_attention" in self.layer_types and self.sliding_window is None:
                raise ModelSpecError(
                    "GQAAttention.sliding_window", "must be set when layer_types has sliding_attention layers"
                )
        linear_layers = self.layer_types is not None and "linear_attention" in self.layer_types
        if linear_layers != (self.linear is not None):
            raise ModelSpecError(
                "GQAAttention.linear",
                "must be set exactly when layer_types has linear_attention layers, "
                f"got {'None' if self.linear is None else 'a GatedDeltaNet'}",
            )
        if not isinstance(self.block_sparse, (BlockSparse, type(None))):
            raise ModelSpecError(
                "GQAAttention.block_sparse", f"must be a BlockSparse or None, got {type(self.block_sparse).__name__}"
            )
        sparse_layers = self.layer_types is not None and "block_sparse_attention" in self.layer_types
        if sparse_layers != (self.block_sparse is not None):
            raise ModelSpecError(
                "GQAAttention.block_sparse",
                "must be set exactly when layer_types has block_sparse_attention layers, "
                f"got {'None' if self.block_sparse is None else 'a BlockSparse'}",
            )

    def is_block_sparse(self, layer: int) -> bool:
        """Whether ``layer`` reads only the blocks its index picks (``block_sparse``)."""
        return self.layer_types is not None and self.layer_types[layer] == "block_sparse_attention"

    def is_linear(self, layer: int) -> bool:
        """Whether ``layer`` is a Gated DeltaNet layer (``linear``) rather than this attention."""
        return self.layer_types is not None and self.layer_types[layer] == "linear_attention"

    def window_of(self, layer: int) -> int | None:
        """The sliding window of ``layer`` in tokens, None for full (or linear) attention."""
        if self.layer_types is None:
            return self.sliding_window
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None


@dataclass(frozen=True)
class ModelSpec:
    """One decoder-only transformer: trunk, MLP layout, attention, MoE, precision (module docstring).

    Layers ``0 .. first_k_dense - 1`` are dense; the rest are MoE layers. A dense model (``moe`` None) has
    ``first_k_dense == num_layers``. ``dense_intermediate_size`` is required when there is a dense layer and
    must be None otherwise. ``source`` names where the spec came from (a config.json path or a preset's
    HuggingFace repo and file).
    """

    name: str
    source: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int
    first_k_dense: int
    dense_intermediate_size: int | None
    attention: MLAAttention | GQAAttention | CompressedAttention
    moe: MoESpec | None
    tie_embeddings: bool = False
    precision: Precision = Precision()
    mtp_layers: int = 0
    hc_mult: int = 1
    attn_res_block: int = 0

    def __post_init__(self) -> None:
        for name in ("name", "source", "model_type"):
            check_str("ModelSpec", name, getattr(self, name))
        check_int("ModelSpec", "hidden_size", self.hidden_size, minimum=1)
        check_int("ModelSpec", "num_layers", self.num_layers, minimum=1)
        check_int("ModelSpec", "vocab_size", self.vocab_size, minimum=1)
        check_int("ModelSpec", "first_k_dense", self.first_k_dense, minimum=0)
        if self.first_k_dense > self.num_layers:
            raise ModelSpecError(
                "ModelSpec.first_k_dense", f"must be <= num_layers ({self.num_layers}), got {self.first_k_dense}"
            )
        if not isinstance(self.moe, (MoESpec, type(None))):
            raise ModelSpecError("ModelSpec.moe", f"must be a MoESpec or None, got {type(self.moe).__name__}")
        if self.moe is None and self.first_k_dense != self.num_layers:
            raise ModelSpecError(
                "ModelSpec.first_k_dense",
                f"a dense model (moe None) has every layer dense: must be {self.num_layers}, got {self.first_k_dense}",
            )
        if self.first_k_dense:
            check_int("ModelSpec", "dense_intermediate_size", self.dense_intermediate_size, minimum=1)
        elif self.dense_intermediate_size is not None:
            raise ModelSpecError(
                "ModelSpec.dense_intermediate_size",
                f"must be None without dense layers (first_k_dense 0), got {self.dense_intermediate_size!r}",
            )
        if not isinstance(self.attention, (MLAAttention, GQAAttention, CompressedAttention)):
            raise ModelSpecError(
                "ModelSpec.attention",
                f"must be an MLAAttention, GQAAttention or CompressedAttention, got {type(self.attention).__name__}",
            )
        ratios = getattr(self.attention, "compress_ratios", None)
        if ratios is not None and len(ratios) != self.num_layers:
            raise ModelSpecError(
                "CompressedAttention.compress_ratios",
                f"must have num_layers ({self.num_layers}) entries, got {len(ratios)}",
            )
        types = getattr(self.attention, "layer_types", None)
        if types is not None and len(types) != self.num_layers:
            raise ModelSpecError(
                f"{type(self.attention).__name__}.layer_types",
                f"must have num_layers ({self.num_layers}) entries, got {len(types)}",
            )
        check_bool("ModelSpec", "tie_embeddings", self.tie_embeddings)
        if not isinstance(self.precision, Precision):
            raise ModelSpecError("ModelSpec.precision", f"must be a Precision, got {type(self.precision).__name__}")
        check_int("ModelSpec", "mtp_layers", self.mtp_layers, minimum=0)
        check_int("ModelSpec", "hc_mult", self.hc_mult, minimum=1)
        check_int("ModelSpec", "attn_res_block", self.attn_res_block, minimum=0)
        if self.hc_mult > 1 and self.first_k_dense:
            raise ModelSpecError(
                "ModelSpec.hc_mult",
                f"a wide residual ({self.hc_mult}) is modelled around MoE layers only, got {self.first_k_dense} dense",
            )
        if self.moe is not None and self.moe.hash_layers > self.moe_layers:
            raise ModelSpecError(
                "MoESpec.hash_layers", f"must be <= the {self.moe_layers} MoE layers, got {self.moe.hash_layers}"
            )

    @property
    def routed_width(self) -> int:
        """The width of the rows the routed experts take and the all-to-all carries: the hidden size, or a
        latent MoE's ``latent_size``."""
        latent = self.moe.latent_size if self.moe is not None else None
        return latent or self.hidden_size

    @property
    def moe_layers(self) -> int:
        """How many layers are MoE layers."""
        return self.num_layers - self.first_k_dense

    def is_moe_layer(self, layer: int) -> bool:
        """Whether ``layer`` (0-based) is an MoE layer; an out-of-range layer is a ModelSpecError."""
        if not is_int(layer) or not 0 <= layer < self.num_layers:
            raise ModelSpecError("ModelSpec.layer", f"must be an int in [0, {self.num_layers}), got {layer!r}")
        return layer >= self.first_k_dense
