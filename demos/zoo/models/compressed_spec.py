"""``CompressedAttention``: DeepSeek-V4's attention, per layer a sliding window and a compressed cache, as pure
data.

Every layer of DeepSeek-V4 (``deepseek_v4``; SGLang's copies name it ``deepseek_ref``) attends with one
latent KV head of ``head_dim`` values (``qk_rope_head_dim`` of them rotated), shared by its ``heads`` query
heads as MQA shares one head: the same vector serves as key and value. Queries come from a low-rank latent
(``q_lora_rank``); the output goes back through a grouped low-rank projection (``o_groups`` groups of the
heads' outputs, each to ``o_lora_rank``, then all groups to the hidden size). What a layer reads depends on
its compression ratio (``compress_ratios``, one per layer):

* ``0``: a sliding window only: the last ``sliding_window`` tokens;
* ``4`` (compressed sparse attention, CSA): the window, plus a cache of one entry per 4 tokens (a compressor
  pools each 4 tokens, with overlapping windows of 8, into one entry), of which a lightning indexer
  (``index_heads`` x ``index_head_dim``, its own compressed keys) keeps the ``index_topk`` best per query;
* ``128`` (heavily compressed attention, HCA): the window, plus one entry per 128 tokens, all of them read.

A compressor projects the hidden state to ``coff x head_dim`` keys/values and as many gate logits
(``coff`` 2 for ratio 4, whose windows overlap; 1 otherwise), pools each ratio's tokens by a softmax over
the gates and normalises the result (``compressor_width``). Sources: transformers'
``configuration_deepseek_v4.py`` and the public reimplementations of DeepSeek's inference code
(docs/models.md, "DeepSeek-V4").
"""

from __future__ import annotations

from dataclasses import dataclass

from demos.zoo.models._checks import ModelSpecError, check_int

__all__ = ["COMPRESS_RATIOS", "CompressedAttention"]

COMPRESS_RATIOS = (0, 4, 128)
"""The compression ratios DeepSeek-V4 uses (0: the sliding window only); the indexer runs at ratio 4."""

INDEXED_RATIO = 4
"""The ratio whose layers pick their compressed entries with the lightning indexer (CSA)."""


@dataclass(frozen=True)
class CompressedAttention:
    """DeepSeek-V4's attention (module docstring)."""

    heads: int
    head_dim: int
    qk_rope_head_dim: int
    q_lora_rank: int
    o_groups: int
    o_lora_rank: int
    sliding_window: int
    compress_ratios: tuple[int, ...]
    index_heads: int
    index_head_dim: int
    index_topk: int

    kind = "compressed"

    def __post_init__(self) -> None:
        for name in ("heads", "head_dim", "q_lora_rank", "o_groups", "o_lora_rank", "sliding_window"):
            check_int("CompressedAttention", name, getattr(self, name), minimum=1)
        for name in ("index_heads", "index_head_dim", "index_topk"):
            check_int("CompressedAttention", name, getattr(self, name), minimum=1)
        check_int("CompressedAttention", "qk_rope_head_dim", self.qk_rope_head_dim, minimum=0)
        if self.qk_rope_head_dim % 2 or self.qk_rope_head_dim >= self.head_dim:
            raise ModelSpecError(
                "CompressedAttention.qk_rope_head_dim",
                f"must be even and below head_dim ({self.head_dim}), got {self.qk_rope_head_dim}",
            )
        if self.heads % self.o_groups:
            raise ModelSpecError(
                "CompressedAttention.o_groups", f"must divide heads ({self.heads}), got {self.o_groups}"
            )
        if not isinstance(self.compress_ratios, tuple) or not self.compress_ratios:
            raise ModelSpecError(
                "CompressedAttention.compress_ratios", f"must be a non-empty tuple, got {self.compress_ratios!r}"
            )
        for i, r in enumerate(self.compress_ratios):
            if r not in COMPRESS_RATIOS:
                raise ModelSpecError(
                    "CompressedAttention.compress_ratios",
                    f"entry {i} must be one of {', '.join(map(str, COMPRESS_RATIOS))}; got {r!r}",
                )

    def ratio_of(self, layer: int) -> int:
        """Layer ``layer``'s compression ratio (0: the sliding window only)."""
        return self.compress_ratios[layer]

    def indexed(self, layer: int) -> bool:
        """Whether ``layer`` picks its compressed entries with the lightning indexer (CSA)."""
        return self.ratio_of(layer) == INDEXED_RATIO

    @staticmethod
    def compressor_width(ratio: int, dim: int) -> int:
        """Columns each of a compressor's two projections (keys/values and gates) gives for entries of ``dim``
        values: ``2 x dim`` at ratio 4 (overlapping windows), ``dim`` otherwise; 0 without compression."""
        if not ratio:
            return 0
        return (2 if ratio == INDEXED_RATIO else 1) * dim

    @property
    def kv_cache_width(self) -> int:
        """Values cached per token entry (window or compressed): the one latent head."""
        return self.head_dim

    @property
    def index_key_bytes(self) -> int:
        """Bytes of the indexer's compressed key per entry: ``index_head_dim`` FP8 values and one FP32 scale
        (DeepSeek-V3.2's layout; taken for V4, an assumption: docs/models.md)."""
        return self.index_head_dim + 4

    def label(self, layer: int) -> str:
        """The layer's kind as the DeepSeek-V4 report names it: SWA, CSA or HCA."""
        return {0: "SWA", INDEXED_RATIO: "CSA"}.get(self.ratio_of(layer), "HCA")
