"""``RoutePlan``: where each token's top-k copies go in one ubatch (filled on the device by the
router kernel, read by the transports and the low-latency layout)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["RoutePlan"]


@dataclass
class RoutePlan:
    """Where each token's top-k copies go, for one ubatch (views of per-ubatch buffers).

    Rows of the exchange are the ``num_tokens * topk`` token copies, sorted by expert (stable).
    ``src_token[r]``: the token (row of the ubatch) that row r carries; ``row_of[j]``: the sorted
    row of token-major copy ``j = token * topk + k``; ``weights``: (num_tokens, topk) router
    weights; ``weights_sorted[r]``: the weight of row r; ``offsets``: (experts + 1,) row offsets
    of each expert's segment. All are filled on the device by the router kernel.
    """

    num_tokens: int
    topk: int
    src_token: torch.Tensor
    row_of: torch.Tensor
    weights: torch.Tensor
    weights_sorted: torch.Tensor
    offsets: torch.Tensor
    expert_sorted: torch.Tensor | None = None
    """``expert_sorted[r]``: the expert of sorted row r (the low-latency layout needs it)."""

    @property
    def rows(self) -> int:
        return self.num_tokens * self.topk
