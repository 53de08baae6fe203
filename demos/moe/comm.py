"""All-to-all transports for the toy MoE model (demos.moe.model): the interface and the modelled link.

An expert-parallel MoE layer moves every token to the owners of its top-k experts (*dispatch*)
and brings the expert outputs back (*combine*). In one process there is nobody to send to, so
``ModelledLinkTransport`` simulates the exchange: a transfer is a comm kernel
(``kind="comm"``) whose modelled duration is ``latency + bytes / bandwidth`` of a
``dbo.costs.LinkProfile`` and whose ``fn`` really permutes the rows into the receiver's buffer.
The math downstream is therefore real and the outputs exact; only the time is modelled. On the
``threads`` backend a transfer sleeps (without the GIL) for its modelled time and then lands its
data; on ``virtual`` it advances the virtual clock; on ``cuda`` it spins the stream.

Two styles, matching DeepEP's two modes (low-latency and high-throughput):

* blocking on the caller's stream (high-throughput style): ``dispatch`` / ``combine`` enqueue
  the transfer on the *current* stream (the model puts it on the comm stream);
* send + receive hook (low-latency style): ``dispatch_send`` / ``combine_send`` put the transfer
  in flight on the transport's own link queue (the NIC, a stream named "link": it uses no compute
  stream) and return a *receive hook*; calling the hook makes the sender's stream wait for the arrival and
  enqueues the receive kernel there. The model parks the hook on the next ubatch
  (``dbo_register_recv_hook``), which is what hides the transfer on a single compute stream.
  This style uses DeepEP low-latency's layout (``LLBatch``): the experts' rows arrive in a
  fixed-capacity buffer ``(local_experts, capacity, hidden)`` with the per-expert counts kept on
  the device, so nothing in it syncs with the host or has a data-dependent shape (it can be
  captured into a graph). The high-throughput style keeps host-known counts, as DeepEP's normal
  mode does.

``demos.moe.dist_comm.DistributedTransport`` is the real thing: the same four methods over
``torch.distributed.all_to_all_single`` between ranks (docs/distributed.md).

``Transport`` is the small interface the model codes against; ``ExpertBatch`` says where the
rows a rank's experts must process are (all rows and all experts for the modelled link; the rows
received from every rank for this rank's experts for the distributed one).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import torch

import dbo
from dbo.costs import LinkProfile, Work, get_link

from demos.moe.ll_layout import LLBatch, ll_layout_kernel, ll_pack_kernel

__all__ = [
    "RoutePlan",
    "ExpertBatch",
    "LLBatch",
    "Transport",
    "ModelledLinkTransport",
    "RecvHook",
    "wire_dtype_for",
    "TRANSFER_OPS",
    "LINK_QUEUE",
]

RecvHook = Callable[[], None]
"""A receive hook: launches the receive of an in-flight transfer on the sender's stream."""

TRANSFER_OPS = ("dispatch", "combine")
"""Kernel ops (first word of a kernel name) that are link transfers."""

LINK_QUEUE = "link"
"""Name of the stream the send + hook style puts transfers in flight on."""


def wire_dtype_for(dtype: torch.dtype) -> torch.dtype:
    """The dtype the dispatch sends: half the compute dtype's bytes (as DeepEP sends fp8 against
    bf16 activations): float32 -> bfloat16, 16-bit -> float8_e4m3fn."""
    if dtype == torch.float32 or dtype == torch.float64:
        return torch.bfloat16
    return torch.float8_e4m3fn


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

    ``slot`` is the ubatch id: each ubatch has its own receive buffers (as DeepEP keeps one
    buffer per micro-batch), valid until that ubatch's next operation of the same kind.
    """

    name: str = "abstract"

    @abstractmethod
    def setup(
        self, *, num_slots: int, max_tokens: int, topk: int, hidden: int, dtype: torch.dtype, device: Any, experts: int = 1
    ) -> None:
        """Allocate per-slot buffers for up to ``max_tokens`` tokens of ``hidden`` values routed to
        ``experts`` experts."""

    @property
    @abstractmethod
    def wire_dtype(self) -> torch.dtype:
        """The dtype dispatched rows travel (and arrive) in."""

    # -- high-throughput style: on the caller's current stream -------------------------------------
    @abstractmethod
    def dispatch(self, x: torch.Tensor, plan: RoutePlan, *, slot: int, name: str, previous_event: Any = None) -> torch.Tensor:
        """Send row ``src_token[r]`` of ``x`` (wire dtype, (tokens, hidden)) as row r to the experts'
        owner; return the (rows, hidden) receive buffer. ``previous_event``: the stream first waits it."""

    @abstractmethod
    def combine(self, y: torch.Tensor, plan: RoutePlan, *, slot: int, name: str, previous_event: Any = None) -> torch.Tensor:
        """Send the (rows, hidden) expert outputs ``y`` (already weighted) back; each token receives
        the sum of its top-k rows. Returns the (tokens, hidden) landing buffer."""

    # -- low-latency style: in flight on the link, receive through a hook --------------------------
    @abstractmethod
    def ll_batch(self, plan: RoutePlan, *, slot: int) -> LLBatch:
        """The low-latency layout of ``plan``'s rows on this process's experts (shapes known now;
        ``counts`` filled on the device by the dispatch)."""

    @abstractmethod
    def dispatch_send(
        self, x: torch.Tensor, plan: RoutePlan, recv_into: torch.Tensor, *, slot: int, name: str, recv_cost: Any = None
    ) -> RecvHook:
        """Put the dispatch in flight; the hook, when called, makes the sender's stream wait for it
        and enqueues the receive, which dequantizes the arrived rows into ``recv_into``, a
        ``(local_experts, capacity, hidden)`` buffer in the layout of ``ll_batch`` (zeros past each
        expert's count). No host sync."""

    @abstractmethod
    def combine_send(
        self, y: torch.Tensor, plan: RoutePlan, out: torch.Tensor, *, slot: int, name: str, recv_cost: Any = None
    ) -> RecvHook:
        """Put the combine of (unweighted) ``y``, the experts' ``(local_experts, capacity, hidden)``
        outputs in the layout of the same slot's last ``dispatch_send``, in flight; the hook's receive
        writes ``out[t] = sum_k weights[t, k] * y_of(copy t * topk + k)`` (reading only valid rows,
        through a device-side index). No host sync."""

    # -- where the experts' rows are (defaults: one process owns every expert) ---------------------
    def expert_capacity(self, rows: int) -> int:
        """Rows the expert-side buffers need for a ubatch that sends ``rows`` token copies."""
        return rows

    def expert_batch(self, plan: RoutePlan, *, slot: int) -> ExpertBatch:
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


# --- kernels (module-level so that traces and errors name them) ----------------------------------


def _dispatch_kernel(x: torch.Tensor, src_token: torch.Tensor, recv: torch.Tensor) -> None:
    torch.index_select(x, 0, src_token, out=recv)


def _combine_gather_kernel(y: torch.Tensor, row_of: torch.Tensor, landing: torch.Tensor) -> None:
    torch.index_select(y, 0, row_of, out=landing)


def _combine_sum_kernel(y: torch.Tensor, row_of: torch.Tensor, landing: torch.Tensor, out: torch.Tensor) -> None:
    # rows arrive token-major, (tokens, topk, hidden); the receiver sums each token's copies
    torch.index_select(y, 0, row_of, out=landing)
    torch.sum(landing.view(out.shape[0], -1, out.shape[1]), dim=1, out=out)


def _dequant_kernel(wire: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(wire)


def _ll_dispatch_kernel(x, plan, cap, arange_rows, pad_row, copy_row, counts, stage, padded) -> None:
    ll_layout_kernel(plan, cap, arange_rows, pad_row, copy_row, counts)
    ll_pack_kernel(x, plan.src_token, pad_row, stage, padded)


def _weighted_sum_kernel(landing: torch.Tensor, weights: torch.Tensor, out: torch.Tensor) -> None:
    t, h = out.shape
    rows = landing.view(t, -1, h)
    rows.mul_(weights.unsqueeze(-1))
    torch.sum(rows, dim=1, out=out)


class _SlotBuffers:
    __slots__ = ("recv", "landing", "out", "padded", "pad_row", "copy_row", "counts")

    def __init__(self, rows: int, tokens: int, hidden: int, experts: int, dtype: torch.dtype, wire: torch.dtype, device: Any):
        self.recv = torch.empty((rows * hidden,), dtype=wire, device=device)
        self.landing = torch.empty((rows * hidden,), dtype=dtype, device=device)
        self.out = torch.empty((tokens * hidden,), dtype=dtype, device=device)
        # the low-latency layout: (experts, capacity <= tokens, hidden), its indices and counts
        self.padded = torch.empty((experts * tokens * hidden,), dtype=wire, device=device)
        self.pad_row = torch.empty((rows,), dtype=torch.int64, device=device)
        self.copy_row = torch.empty((rows,), dtype=torch.int64, device=device)
        self.counts = torch.empty((experts,), dtype=torch.int64, device=device)


class ModelledLinkTransport(Transport):
    """A simulated expert-parallel all-to-all over a modelled link (see the module docstring).

    A transfer of B bytes takes ``link.latency + B / link.bandwidth`` seconds (passed to the
    kernel as its ``cost`` in seconds); ``scale_bandwidth(f)`` makes the link f times faster
    without touching its latency (that is what ``--comm-ratio`` calibrates). Every transfer is
    logged in ``log`` while ``logging`` is True, as ``(kernel name, bytes, modelled seconds)``.
    """

    name = "modelled-link"

    def __init__(self, link: str | LinkProfile = "nvlink"):
        self.link: LinkProfile = get_link(link)
        self.base_link: LinkProfile = self.link
        self._slots: list[_SlotBuffers] = []
        self._hidden = 0
        self._experts = 1
        self._arange: torch.Tensor | None = None
        self._dtype = torch.float32
        self._wire = torch.bfloat16
        self.logging = False
        self.log: list[tuple[str, int, float]] = []
        self._log_lock = threading.Lock()

    # -- setup and link model -----------------------------------------------------------------------
    def setup(self, *, num_slots: int, max_tokens: int, topk: int, hidden: int, dtype: torch.dtype, device: Any, experts: int = 1) -> None:
        self._hidden = hidden
        self._experts = experts
        self._dtype = dtype
        self._wire = wire_dtype_for(dtype)
        rows = max_tokens * topk
        self._arange = torch.arange(rows, dtype=torch.int64, device=device)
        self._slots = [_SlotBuffers(rows, max_tokens, hidden, experts, dtype, self._wire, device) for _ in range(num_slots)]

    @property
    def wire_dtype(self) -> torch.dtype:
        return self._wire

    def seconds(self, nbytes: int) -> float:
        """Modelled seconds of a transfer of ``nbytes`` bytes."""
        return self.link.latency + nbytes / self.link.bandwidth

    def scale_bandwidth(self, factor: float) -> None:
        """Make the link's bandwidth ``factor`` times the *base* link's (latency unchanged)."""
        if not factor > 0:
            raise ValueError(f"bandwidth factor must be > 0, got {factor!r}")
        b = self.base_link
        self.link = LinkProfile(f"{b.name} (bandwidth x{factor:.4g})", latency=b.latency, bandwidth=b.bandwidth * factor)

    def describe(self) -> dict:
        return {
            "transport": self.name,
            "link": self.link.name,
            "base_link": self.base_link.name,
            "latency_s": self.link.latency,
            "bandwidth_Bps": self.link.bandwidth,
            "wire_dtype": str(self._wire).replace("torch.", ""),
        }

    # -- helpers ------------------------------------------------------------------------------------
    def _cost(self, name: str, nbytes: int) -> float:
        s = self.seconds(nbytes)
        if self.logging:
            with self._log_lock:
                self.log.append((name, nbytes, s))
        return s

    def _recv_view(self, slot: int, rows: int) -> torch.Tensor:
        return self._slots[slot].recv[: rows * self._hidden].view(rows, self._hidden)

    def _landing_view(self, slot: int, rows: int) -> torch.Tensor:
        return self._slots[slot].landing[: rows * self._hidden].view(rows, self._hidden)

    def _out_view(self, slot: int, tokens: int) -> torch.Tensor:
        return self._slots[slot].out[: tokens * self._hidden].view(tokens, self._hidden)

    def _in_flight(self, slot: int, fn: Callable, args: tuple, name: str, nbytes: int) -> tuple[Any, Any]:
        """Launch a transfer on the link queue after the current stream's work so far; return
        (sender's stream, arrival event). One queue for all ubatches: the link carries one transfer
        at a time anyway, in the order they were sent."""
        stream = dbo.current_stream()
        backend = stream.backend
        link = backend.stream(LINK_QUEUE)
        sent = backend.new_event()
        sent.record(stream)
        link.wait_event(sent)
        link.launch(fn, *args, name=name, kind="comm", cost=self._cost(name, nbytes))
        arrived = backend.new_event()
        arrived.record(link)
        return stream, arrived

    # -- high-throughput style ----------------------------------------------------------------------
    def dispatch(self, x, plan, *, slot, name, previous_event=None):
        recv = self._recv_view(slot, plan.rows)
        stream = dbo.current_stream()
        if previous_event is not None:
            stream.wait_event(previous_event)
        nbytes = recv.numel() * recv.element_size()
        stream.launch(_dispatch_kernel, x, plan.src_token, recv, name=name, kind="comm", cost=self._cost(name, nbytes))
        return recv

    def combine(self, y, plan, *, slot, name, previous_event=None):
        landing = self._landing_view(slot, plan.rows)
        out = self._out_view(slot, plan.num_tokens)
        stream = dbo.current_stream()
        if previous_event is not None:
            stream.wait_event(previous_event)
        nbytes = y.numel() * y.element_size()
        stream.launch(
            _combine_sum_kernel, y, plan.row_of, landing, out, name=name, kind="comm", cost=self._cost(name, nbytes)
        )
        return out

    # -- low-latency style --------------------------------------------------------------------------
    # The modelled link plays every expert's owner: the layout is (experts, tokens of the ubatch,
    # hidden). The link model charges the valid rows only (DeepEP low-latency sends only them).
    def ll_batch(self, plan, *, slot):
        return LLBatch(self._experts, plan.num_tokens, 0, self._slots[slot].counts)

    def dispatch_send(self, x, plan, recv_into, *, slot, name, recv_cost=None):
        if plan.expert_sorted is None:
            raise ValueError("the low-latency dispatch needs plan.expert_sorted (the expert of each sorted row)")
        b = self._slots[slot]
        rows, cap, E, H = plan.rows, plan.num_tokens, self._experts, self._hidden
        if tuple(recv_into.shape) != (E, cap, H):
            raise ValueError(f"recv_into must be (experts, capacity, hidden) = {(E, cap, H)}, got {tuple(recv_into.shape)}")
        stage = self._recv_view(slot, rows)
        padded = b.padded[: E * cap * H].view(E * cap, H)
        nbytes = stage.numel() * stage.element_size()  # the valid rows travel
        args = (x, plan, cap, self._arange[:rows], b.pad_row[:rows], b.copy_row[:rows], b.counts, stage, padded)
        stream, arrived = self._in_flight(slot, _ll_dispatch_kernel, args, name, nbytes)
        rname = name.replace("dispatch", "dispatch_recv", 1)
        if recv_cost is None:
            recv_cost = Work(bytes=stage.numel() * (stage.element_size() + recv_into.element_size()))
        dst = recv_into.view(E * cap, H)

        def hook() -> None:
            stream.wait_event(arrived)
            stream.launch(_dequant_kernel, padded, dst, name=rname, kind="compute", cost=recv_cost)

        hook.__name__ = rname
        return hook

    def combine_send(self, y, plan, out, *, slot, name, recv_cost=None):
        landing = self._landing_view(slot, plan.rows)
        b = self._slots[slot]
        y_rows = y.reshape(-1, self._hidden)
        nbytes = landing.numel() * y.element_size()  # the valid rows travel
        stream, arrived = self._in_flight(slot, _combine_gather_kernel, (y_rows, b.copy_row[: plan.rows], landing), name, nbytes)
        rname = name.replace("combine", "combine_recv", 1)
        if recv_cost is None:
            isz = landing.element_size()
            recv_cost = Work(flops=2 * landing.numel(), bytes=(2 * landing.numel() + out.numel()) * isz)

        def hook() -> None:
            stream.wait_event(arrived)
            stream.launch(_weighted_sum_kernel, landing, plan.weights, out, name=rname, kind="compute", cost=recv_cost)

        hook.__name__ = rname
        return hook
