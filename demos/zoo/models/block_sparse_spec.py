"""``BlockSparse``: MiniMax-M3's block-sparse attention layers, as pure data.

In a block-sparse layer (MiniMax-M3's ``sparse_attention_config``), GQA attends not to its whole KV cache but
to the blocks of ``block_size`` cached tokens an index picks: an index of ``index_heads`` query heads of
``index_head_dim`` (projected from the hidden state) scores every cached token against its index key (one of
``index_head_dim`` per token, cached beside the keys and values), a block's score is its tokens' best
(``sparse_score_type`` max), and each query reads the ``topk_blocks`` best blocks plus its ``local_blocks``
most recent and ``init_blocks`` first ones. The per-layer layout is the model's attention's ``layer_types``
(``GQAAttention``: ``block_sparse_attention`` layers use this, the others full attention).
"""

from __future__ import annotations

from dataclasses import dataclass

from demos.zoo.models._checks import check_int

__all__ = ["BlockSparse"]


@dataclass(frozen=True)
class BlockSparse:
    """A block-sparse attention layer's index and selection (module docstring)."""

    index_heads: int
    index_head_dim: int
    block_size: int
    topk_blocks: int
    local_blocks: int = 1
    init_blocks: int = 0

    kind = "block_sparse"

    def __post_init__(self) -> None:
        for name in ("index_heads", "index_head_dim", "block_size", "topk_blocks"):
            check_int("BlockSparse", name, getattr(self, name), minimum=1)
        for name in ("local_blocks", "init_blocks"):
            check_int("BlockSparse", name, getattr(self, name), minimum=0)

    @property
    def read_tokens(self) -> int:
        """The most cached tokens a query reads: its picked, local and first blocks."""
        return (self.topk_blocks + self.local_blocks + self.init_blocks) * self.block_size

    def tokens_read(self, context: float) -> float:
        """Cached tokens a decode token with ``context`` cached tokens reads (all of them while they fit)."""
        return min(float(context), float(self.read_tokens))
