"""Token-balanced split of a batch into ubatch slices, and the merge of their results.

As in vLLM: the cut points are the multiples of ``num_tokens // N`` (the last ubatch
absorbs the remainder), chosen by tokens rather than by requests, so a request may straddle a cut
and appear in two ubatches. The later ubatch continues it like a chunked prefill.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Sequence

import torch

__all__ = ["UBatchSlice", "split_tokens", "split_batch", "slice_tensor", "merge_outputs"]


@dataclass(frozen=True)
class UBatchSlice:
    """One ubatch's share of a batch.

    ``tokens`` is the token range; ``requests`` the range of request indices that have tokens in it;
    ``query_lens`` the number of this ubatch's tokens per request in ``requests``;
    ``first_offset`` how many tokens of the first request earlier ubatches already hold.
    """

    ubatch_id: int
    tokens: range
    requests: range
    query_lens: tuple[int, ...]
    first_offset: int

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    @property
    def straddles_start(self) -> bool:
        """True if the first request began in an earlier ubatch."""
        return self.first_offset > 0


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def split_tokens(num_tokens: int, num_ubatches: int) -> list[range]:
    """Cut ``num_tokens`` tokens into ``num_ubatches`` contiguous ranges of ``num_tokens // N`` each;
    the last takes the remainder. Every range is non-empty, so ``num_tokens >= num_ubatches``."""
    _check_count("num_ubatches", num_ubatches, 1)
    _check_count("num_tokens", num_tokens, 0)
    if num_tokens < num_ubatches:
        raise ValueError(
            f"cannot split {num_tokens} tokens into {num_ubatches} ubatches: every ubatch needs at least one token"
        )
    size = num_tokens // num_ubatches
    cuts = [i * size for i in range(num_ubatches)] + [num_tokens]
    return [range(cuts[i], cuts[i + 1]) for i in range(num_ubatches)]


def split_batch(query_lens: Sequence[int], num_ubatches: int) -> list[UBatchSlice]:
    """Split a batch of requests (their query token counts) into token-balanced ubatch slices."""
    lens = list(query_lens)
    for i, n in enumerate(lens):
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"query_lens[{i}] must be a non-negative int, got {n!r}")
    cum = list(accumulate(lens, initial=0))  # cum[r] = first token of request r
    out = []
    for u, tok in enumerate(split_tokens(cum[-1], num_ubatches)):
        first = bisect.bisect_right(cum, tok.start) - 1
        while first < len(lens) and lens[first] == 0:  # skip empty requests at the cut
            first += 1
        last = bisect.bisect_left(cum, tok.stop)  # one past the last request with tokens in range
        reqs = range(first, last)
        qlens = tuple(min(cum[r + 1], tok.stop) - max(cum[r], tok.start) for r in reqs)
        out.append(UBatchSlice(u, tok, reqs, qlens, tok.start - cum[first]))
    return out


def slice_tensor(x: torch.Tensor, slices: Sequence[UBatchSlice | range]) -> list[torch.Tensor]:
    """Views of ``x`` along dim 0, one per slice (no copies)."""
    out = []
    for s in slices:
        r = s.tokens if isinstance(s, UBatchSlice) else s
        out.append(x[r.start : r.stop])
    return out


def merge_outputs(outputs: Sequence[Any]) -> Any:
    """Concatenate per-ubatch outputs along dim 0, in ubatch order; tuples and lists component-wise.

    ``None`` components stay ``None`` (all ubatches must agree).
    """
    if not outputs:
        raise ValueError("merge_outputs needs at least one output")
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(list(outputs), dim=0)
    if first is None:
        if any(o is not None for o in outputs):
            raise ValueError("ubatch outputs disagree: some are None and some are not")
        return None
    if isinstance(first, (tuple, list)):
        if any(not isinstance(o, (tuple, list)) or len(o) != len(first) for o in outputs):
            raise ValueError("ubatch outputs have different structures; cannot merge component-wise")
        merged = [merge_outputs([o[i] for o in outputs]) for i in range(len(first))]
        return type(first)(merged) if isinstance(first, tuple) else merged
    raise TypeError(f"cannot merge ubatch outputs of type {type(first).__name__}")
