"""One ubatch's buffers of ``demos.toy.dist_comm.DistributedTransport``, for both of its styles.

The high-throughput style sends rows packed by a split known on the host (``send``, ``recv``,
``recv_w``, the counts, ``back``, ``landing``, ``out``, and the split sizes of the last dispatch,
which its combine reuses); the low-latency style sends every rank a chunk of one fixed size
(``ll_send``, ``ll_recv``, ``ll_out``, ``ll_back``) and keeps each row's place in it
(``pad_row``, ``copy_row``).
"""

from __future__ import annotations

import torch

__all__ = ["DistBuffers"]


class DistBuffers:
    """One ubatch's buffers and the split sizes of its last dispatch (used by its combine)."""

    __slots__ = (
        "send",
        "recv",
        "recv_w",
        "counts_send",
        "counts_recv",
        "recv_offsets",
        "back",
        "landing",
        "out",
        "send_splits",
        "recv_splits",
        "ll_send",
        "ll_recv",
        "ll_back",
        "ll_out",
        "pad_row",
        "copy_row",
    )

    def __init__(self, rows: int, cap: int, tokens: int, hidden: int, experts: int, dtype, wire, device):
        def buf(n: int, dt) -> torch.Tensor:
            return torch.empty((n,), dtype=dt, device=device)

        # the low-latency layout: a fixed chunk of (local experts, tokens, hidden) to every rank
        padded = experts * tokens * hidden
        self.ll_send = buf(padded, wire)
        self.ll_recv = buf(padded, wire)
        self.ll_out = buf(padded, dtype)
        self.ll_back = buf(padded, dtype)
        self.pad_row = buf(rows, torch.int64)
        self.copy_row = buf(rows, torch.int64)

        self.send = buf(rows * hidden, wire)
        self.recv = buf(cap * hidden, wire)
        self.recv_w = buf(cap, dtype)
        self.counts_send = buf(experts, torch.int64)
        self.counts_recv = buf(experts, torch.int64)
        self.recv_offsets = torch.zeros((experts + 1,), dtype=torch.int64, device=device)
        self.back = buf(rows * hidden, dtype)
        self.landing = buf(rows * hidden, dtype)
        self.out = buf(tokens * hidden, dtype)
        self.send_splits: list[int] = []
        self.recv_splits: list[int] = []
