"""The low-latency path of ``demos.toy.dist_comm.DistributedTransport`` (DeepEP low-latency's layout).

No host-known split: every rank sends every rank a chunk of one fixed size,
``(local_experts, max_tokens, hidden)`` (zeros past each expert's count), and the per-expert counts
travel as a fixed-size tensor that stays on the device. The receiver's experts see
``(local_experts, world_size * max_tokens, hidden)`` (``ll_batch``); the combine sends the same
chunks back. No ``.tolist()``, no ``.item()``: the path is capturable. The collectives are put in
flight on the transport's link queue; ``dispatch_send`` and ``combine_send`` return the receive
hook the model registers.
"""

from __future__ import annotations

from typing import Any

import torch

import dbo
from demos.toy.dist_buffers import DistBuffers
from demos.toy.ll_layout import LLBatch, byte_view, ll_layout_kernel, ll_pack_kernel, weighted_sum_kernel
from demos.toy.routing import RoutePlan

__all__ = ["LowLatencyPath"]


def _k_ll_receive(recv: torch.Tensor, out: torch.Tensor) -> None:
    """Dequantize the arrived ``(ranks, local_experts, cap, hidden)`` chunks into the experts'
    ``(local_experts, ranks * cap, hidden)`` buffer (source ranks in order within each expert)."""
    w, n, cap, h = recv.shape
    out.view(n, w, cap, h).copy_(recv.transpose(0, 1))


class LowLatencyPath:
    """The low-latency methods of ``DistributedTransport`` (a base class of it, of no use alone).

    They use what the transport sets up and provides: its shapes (``world_size``, ``rank``,
    ``local_experts``, ``_tokens``, ``_hidden``, ``_arange``), its per-ubatch ``DistBuffers``
    (``_buffers``), the group of the launching ubatch (``_group``), the fault seam and count
    (``_before``), the collectives (``_a2a``, ``_wait``), row views (``_rows``), the link queue
    (``_in_flight``) and the byte count (``bytes_to_peers``).
    """

    def ll_batch(self, plan: RoutePlan, *, ubatch: int) -> LLBatch:
        b = self._buffers[ubatch]
        counts = b.counts_recv.view(self.world_size, self.local_experts)  # per source rank
        return LLBatch(self.local_experts, self.world_size * self._tokens, self.rank * self.local_experts, counts)

    # -- kernels ----------------------------------------------------------------------------------------
    def _k_ll_dispatch(self, group: Any, b: DistBuffers, x: torch.Tensor, plan: RoutePlan, what: str) -> None:
        """Fixed-size chunks: no host-known split, no host sync."""
        self._before(what)
        rows, cap, H = plan.rows, self._tokens, self._hidden
        ll_layout_kernel(plan, cap, self._arange[:rows], b.pad_row[:rows], b.copy_row[:rows], b.counts_send)
        send = b.ll_send.view(-1, H)
        ll_pack_kernel(x, plan.src_token, b.pad_row[:rows], self._rows(b.send, rows), send)
        works = [
            self._a2a(b.counts_recv, b.counts_send, None, None, group, what + " (counts)"),
            self._a2a(byte_view(b.ll_recv), byte_view(b.ll_send), None, None, group, what),
        ]
        self._wait(works, what)
        chunk = send.numel() // self.world_size * send.element_size()
        self.bytes_to_peers += (self.world_size - 1) * chunk

    def _k_ll_combine(
        self, group: Any, b: DistBuffers, y: torch.Tensor, plan: RoutePlan, landing: torch.Tensor, what: str
    ) -> None:
        self._before(what)
        W, El, cap, H = self.world_size, self.local_experts, self._tokens, self._hidden
        # experts' rows (El, W * cap) -> one (El, cap) chunk per source rank, back to it
        b.ll_out.view(W, El, cap, H).copy_(y.view(El, W, cap, H).transpose(0, 1))
        self._wait([self._a2a(b.ll_back, b.ll_out, None, None, group, what)], what)
        # the chunks that came back are (experts, cap) in global expert order: the layout's index space
        torch.index_select(b.ll_back.view(-1, H), 0, b.copy_row[: plan.rows], out=landing)
        self.bytes_to_peers += (W - 1) * (b.ll_out.numel() // W) * b.ll_out.element_size()

    # -- the model's calls ------------------------------------------------------------------------------
    def dispatch_send(self, x, plan, recv_into, *, ubatch, name, layer=None, recv_cost=None):
        if plan.expert_sorted is None:
            raise ValueError("the low-latency dispatch needs plan.expert_sorted (the expert of each sorted row)")
        b = self._buffers[ubatch]
        W, El, cap, H = self.world_size, self.local_experts, self._tokens, self._hidden
        if tuple(recv_into.shape) != (El, W * cap, H):
            raise ValueError(
                f"recv_into must be (local experts, capacity, hidden) = {(El, W * cap, H)}, "
                f"got {tuple(recv_into.shape)}"
            )
        group = self._group(ubatch)
        stream = dbo.current_stream()
        arrived = self._in_flight(stream, self._k_ll_dispatch, (group, b, x, plan, name), name, "dispatch_ll", layer)
        recv = b.ll_recv.view(W, El, cap, H)
        rname = name.replace("dispatch", "dispatch_recv", 1)

        def hook() -> None:
            stream.wait_event(arrived)
            stream.launch(
                _k_ll_receive,
                recv,
                recv_into,
                name=rname,
                kind="compute",
                cost=recv_cost,
                op="dispatch_recv",
                layer=layer,
            )

        hook.__name__ = rname
        return hook

    def combine_send(self, y, plan, out, *, ubatch, name, layer=None, recv_cost=None):
        b = self._buffers[ubatch]
        group = self._group(ubatch)
        stream = dbo.current_stream()
        landing = self._rows(b.landing, plan.rows)
        args = (group, b, y, plan, landing, name)
        arrived = self._in_flight(stream, self._k_ll_combine, args, name, "combine_ll", layer)
        rname = name.replace("combine", "combine_recv", 1)

        def hook() -> None:
            stream.wait_event(arrived)
            stream.launch(
                weighted_sum_kernel,
                landing,
                plan.weights,
                out,
                name=rname,
                kind="compute",
                cost=recv_cost,
                op="combine_recv",
                layer=layer,
            )

        hook.__name__ = rname
        return hook
