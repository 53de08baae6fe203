"""The all-to-all interface the toy MoE model (demos.toy.model) codes against: ``Transport``.

An expert-parallel MoE layer moves every token to the owners of its top-k experts (*dispatch*)
and brings the expert outputs back (*combine*). Two styles, matching DeepEP's two modes
(low-latency and high-throughput):

* blocking on the caller's stream (high-throughput style): ``dispatch`` / ``combine`` enqueue
  the transfer on the *current* stream (the model puts it on the comm stream);
* send + receive hook (low-latency style): ``dispatch_send`` / ``combine_send`` put the transfer
  in flight on the transport's own link queue (the NIC, a stream named ``LINK_QUEUE``: it uses no
  compute stream) and return a *receive hook*; calling the hook makes the sender's stream wait
  for the arrival and enqueues the receive kernel there. The model parks the hook on the next
  ubatch (``dbo_register_recv_hook``), which is what hides the transfer on a single compute
  stream. This style uses DeepEP low-latency's layout (``LLBatch``): the experts' rows arrive in
  a fixed-capacity buffer ``(local_experts, capacity, hidden)`` with the per-expert counts kept
  on the device, so nothing in it syncs with the host or has a data-dependent shape (it can be
  captured into a graph). The high-throughput style keeps host-known counts, as DeepEP's normal
  mode does.

Each transport kernel declares its op (``demos.toy.ops``: ``dispatch``, ``combine``, their
low-latency ``dispatch_ll``, ``combine_ll`` and the receives ``dispatch_recv``, ``combine_recv``)
and the ``layer`` the model passes.

``demos.toy.comm.ModelledLinkTransport`` simulates the exchange in one process;
``demos.toy.dist_comm.DistributedTransport`` is the real thing over ``torch.distributed``.
``ExpertBatch`` says where the rows a rank's experts must process are (all rows and all experts
for the modelled link; the rows received from every rank for this rank's experts for the
distributed one).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import torch

import dbo
from demos.toy.ll_layout import LLBatch
from demos.toy.routing import RoutePlan

__all__ = ["ExpertBatch", "Transport", "RecvHook", "wire_dtype_for", "LINK_QUEUE"]

RecvHook = Callable[[], None]
"""A receive hook: launches the receive of an in-flight transfer on the sender's stream."""

LINK_QUEUE = "link"
"""Name of the stream the send + hook style puts transfers in flight on (the link's one queue)."""


def wire_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """The dtype the dispatch sends: half the compute dtype's bytes (as DeepEP sends fp8 against
    bf16 activations): float32 -> bfloat16, 16-bit -> float8_e4m3fn."""
    if dtype == torch.float32 or dtype == torch.float64:
        return torch.bfloat16
    return torch.float8_e4m3fn


@dataclass
class ExpertBatch:
    """The rows this process's experts compute for one ubatch, after the dispatch.

    They are cut into segments: segment j is ``offsets[j]:offsets[j+1]`` and belongs to expert
    ``first_expert + j % num_experts``. The modelled link: one segment per expert (all experts,
    all of the ubatch's rows). The distributed transport: for every source rank in rank order,
    one segment per local expert (the rows each rank sent, in its expert-sorted order).
    ``offsets`` is filled on the device (by the router, or by the dispatch); its last entry is
    the number of rows. ``weights``: the router weight of each row (the high-throughput schedule
    applies them before the combine). ``capacity``: rows of the expert-side buffers.
    """

    offsets: torch.Tensor
    weights: torch.Tensor
    first_expert: int
    num_experts: int
    capacity: int


class Transport(ABC):
    """What the model needs from an all-to-all. Kernels are enqueued, never run synchronously.

    ``ubatch`` is the id of the ubatch whose buffers a call uses: each ubatch has its own receive
    buffers (as DeepEP keeps one buffer per micro-batch), valid until that ubatch's next
    operation of the same kind. ``name`` is the transfer's display name; ``layer`` the layer its
    kernels declare (``launch(..., layer=)``).
    """

    name: str = "abstract"

    @abstractmethod
    def setup(
        self,
        *,
        num_ubatches: int,
        max_tokens: int,
        topk: int,
        hidden: int,
        dtype: torch.dtype,
        device: Any,
        experts: int = 1,
    ) -> None:
        """Allocate buffers for ``num_ubatches`` ubatches of up to ``max_tokens`` tokens of ``hidden``
        values routed to ``experts`` experts."""

    @property
    @abstractmethod
    def wire_dtype(self) -> torch.dtype:
        """The dtype dispatched rows travel (and arrive) in."""

    # -- high-throughput style: on the caller's current stream -------------------------------------
    @abstractmethod
    def dispatch(
        self,
        x: torch.Tensor,
        plan: RoutePlan,
        *,
        ubatch: int,
        name: str,
        layer: int | None = None,
        previous_event: Any = None,
    ) -> torch.Tensor:
        """Send row ``src_token[r]`` of ``x`` (wire dtype, (tokens, hidden)) as row r to the experts'
        owner; return the (rows, hidden) receive buffer. ``previous_event``: the stream first waits it."""

    @abstractmethod
    def combine(
        self,
        y: torch.Tensor,
        plan: RoutePlan,
        *,
        ubatch: int,
        name: str,
        layer: int | None = None,
        previous_event: Any = None,
    ) -> torch.Tensor:
        """Send the (rows, hidden) expert outputs ``y`` (already weighted) back; each token receives
        the sum of its top-k rows. Returns the (tokens, hidden) landing buffer."""

    # -- low-latency style: in flight on the link, receive through a hook --------------------------
    @abstractmethod
    def ll_batch(self, plan: RoutePlan, *, ubatch: int) -> LLBatch:
        """The low-latency layout of ``plan``'s rows on this process's experts (shapes known now;
        ``counts`` filled on the device by the dispatch)."""

    @abstractmethod
    def dispatch_send(
        self,
        x: torch.Tensor,
        plan: RoutePlan,
        recv_into: torch.Tensor,
        *,
        ubatch: int,
        name: str,
        layer: int | None = None,
        recv_cost: Any = None,
    ) -> RecvHook:
        """Put the dispatch in flight; the hook, when called, makes the sender's stream wait for it
        and enqueues the receive, which dequantizes the arrived rows into ``recv_into``, a
        ``(local_experts, capacity, hidden)`` buffer in the layout of ``ll_batch`` (zeros past each
        expert's count). No host sync."""

    @abstractmethod
    def combine_send(
        self,
        y: torch.Tensor,
        plan: RoutePlan,
        out: torch.Tensor,
        *,
        ubatch: int,
        name: str,
        layer: int | None = None,
        recv_cost: Any = None,
    ) -> RecvHook:
        """Put the combine of (unweighted) ``y``, the experts' ``(local_experts, capacity, hidden)``
        outputs in the layout of the same ubatch's last ``dispatch_send``, in flight; the hook's
        receive writes ``out[t] = sum_k weights[t, k] * y_of(copy t * topk + k)`` (reading only valid
        rows, through a device-side index). No host sync."""

    # -- where the experts' rows are (defaults: one process owns every expert) ---------------------
    def expert_capacity(self, rows: int) -> int:
        """Rows the expert-side buffers need for a ubatch that sends ``rows`` token copies."""
        return rows

    def expert_batch(self, plan: RoutePlan, *, ubatch: int) -> ExpertBatch:
        """Where the rows this process's experts compute for ``plan`` will be (see ExpertBatch)."""
        return ExpertBatch(plan.offsets, plan.weights_sorted, 0, plan.offsets.shape[0] - 1, plan.rows)

    def record_event(self) -> Any:
        """An event recorded now on the calling thread's current stream (a DeepEP "previous event")."""
        stream = dbo.current_stream()
        ev = stream.backend.new_event()
        ev.record(stream)
        return ev

    def describe(self) -> dict:
        """What the report prints about the transport."""
        return {"transport": self.name}
