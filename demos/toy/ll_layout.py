"""DeepEP low-latency's layout for the toy MoE's ll schedule: ``LLBatch``, the device-side
kernels that build it and the combine's receive (used by both transports, ``demos.toy.comm`` and
``demos.toy.dist_comm``).

The experts' rows live in a fixed-capacity ``(experts, capacity, hidden)`` buffer with the counts on
the device: no host sync and no data-dependent shape, so a step that uses it can be captured.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from demos.toy.routing import RoutePlan

__all__ = ["LLBatch", "ll_layout_kernel", "ll_pack_kernel", "weighted_sum_kernel", "byte_view"]


@dataclass
class LLBatch:
    """The low-latency layout of the rows this process's experts compute for one ubatch (DeepEP
    low-latency): a ``(local_experts, capacity, hidden)`` buffer, expert ``first_expert + e``'s rows
    in ``[e, :counts[e]]``; the rest of each expert's rows are zeros. ``counts`` stays on the device
    (over torch.distributed it is ``(world_size, local_experts)``: rank q's rows of expert e are
    ``[e, q * max_tokens : q * max_tokens + counts[q, e]]``).

    ``capacity`` cannot overflow: a token's top-k experts are distinct, so an expert receives at
    most one copy of each token of each source rank; the capacity is the tokens a source rank may
    send (the ubatch's tokens over the modelled link; ``world_size x`` the most tokens of any rank
    over torch.distributed, whose chunks must have one size on every rank).
    """

    local_experts: int
    capacity: int
    first_expert: int
    counts: torch.Tensor

    @property
    def rows(self) -> int:
        return self.local_experts * self.capacity


def ll_layout_kernel(
    plan: RoutePlan,
    cap: int,
    arange_rows: torch.Tensor,
    pad_row: torch.Tensor,
    copy_row: torch.Tensor,
    counts: torch.Tensor,
) -> None:
    """The low-latency layout, on the device: ``pad_row[r]`` = the row of sorted row r in the padded
    ``(experts * cap)`` buffer (``expert * cap + position within the expert``), ``copy_row[j]`` = that
    of token-major copy j, ``counts[e]`` = rows of expert e."""
    torch.index_select(plan.offsets, 0, plan.expert_sorted, out=pad_row)
    torch.sub(arange_rows, pad_row, out=pad_row)
    pad_row.add_(plan.expert_sorted, alpha=cap)
    torch.index_select(pad_row, 0, plan.row_of, out=copy_row)
    torch.diff(plan.offsets, out=counts)


def byte_view(t: torch.Tensor) -> torch.Tensor:
    """``t`` as bytes when its dtype is a 1-byte float (float8): some kernels (CPU ``index_copy_``)
    and collectives (gloo, older nccl) do not take them."""
    if t.element_size() == 1 and t.dtype not in (torch.uint8, torch.int8):
        return t.view(torch.uint8)
    return t


def ll_pack_kernel(
    x: torch.Tensor, src_token: torch.Tensor, pad_row: torch.Tensor, stage: torch.Tensor, padded: torch.Tensor
) -> None:
    """``padded[pad_row[r]] = x[src_token[r]]``, zeros elsewhere (``padded``: (experts * cap, hidden))."""
    x, stage, padded = byte_view(x), byte_view(stage), byte_view(padded)
    torch.index_select(x, 0, src_token, out=stage)
    padded.zero_()
    padded.index_copy_(0, pad_row, stage)


def weighted_sum_kernel(landing: torch.Tensor, weights: torch.Tensor, out: torch.Tensor) -> None:
    """The combine's receive: ``out[t] = sum_k weights[t, k] * landing[t * topk + k]`` (``landing``:
    the token-major rows that came back; scaled in place)."""
    t, h = out.shape
    rows = landing.view(t, -1, h)
    rows.mul_(weights.unsqueeze(-1))
    torch.sum(rows, dim=1, out=out)
