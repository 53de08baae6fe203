"""The modelled link: ``ModelledLinkTransport``, the toy MoE's all-to-all in one process.

In one process there is nobody to send to, so ``ModelledLinkTransport`` simulates the exchange
(the ``demos.toy.transport.Transport`` interface, both styles): a transfer is a comm kernel
(``kind="comm"``) whose modelled duration is ``latency + bytes / bandwidth`` of a
``dbo.costs.LinkProfile`` and whose ``fn`` really permutes the rows into the receiver's buffer.
The math downstream is therefore real and the outputs exact; only the time is modelled. On the
``threads`` backend a transfer sleeps (without the GIL) for its modelled time and then lands its
data; on ``virtual`` it advances the virtual clock; on ``cuda`` it spins the stream.

``demos.toy.dist_comm.DistributedTransport`` is the real thing: the same four methods over
``torch.distributed.all_to_all_single`` between ranks (docs/distributed.md).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch

import dbo
from dbo.costs import LinkProfile, Work, get_link
from demos.toy.ll_layout import LLBatch, ll_layout_kernel, ll_pack_kernel, weighted_sum_kernel
from demos.toy.transport import LINK_QUEUE, Transport, wire_dtype_for

__all__ = ["ModelledLinkTransport"]


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


class _UbatchBuffers:
    """One ubatch's receive buffers (and its low-latency layout's indices and counts)."""

    __slots__ = ("recv", "landing", "out", "padded", "pad_row", "copy_row", "counts")

    def __init__(
        self, rows: int, tokens: int, hidden: int, experts: int, dtype: torch.dtype, wire: torch.dtype, device: Any
    ):
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
        self._buffers: list[_UbatchBuffers] = []
        self._hidden = 0
        self._experts = 1
        self._arange: torch.Tensor | None = None
        self._dtype = torch.float32
        self._wire = torch.bfloat16
        self.logging = False
        self.log: list[tuple[str, int, float]] = []
        self._log_lock = threading.Lock()

    # -- setup and link model -----------------------------------------------------------------------
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
        self._hidden = hidden
        self._experts = experts
        self._dtype = dtype
        self._wire = wire_dtype_for(dtype)
        rows = max_tokens * topk
        self._arange = torch.arange(rows, dtype=torch.int64, device=device)
        self._buffers = [
            _UbatchBuffers(rows, max_tokens, hidden, experts, dtype, self._wire, device) for _ in range(num_ubatches)
        ]

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
        self.link = LinkProfile(
            f"{b.name} (bandwidth x{factor:.4g})", latency=b.latency, bandwidth=b.bandwidth * factor
        )

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

    def _recv_view(self, ubatch: int, rows: int) -> torch.Tensor:
        return self._buffers[ubatch].recv[: rows * self._hidden].view(rows, self._hidden)

    def _landing_view(self, ubatch: int, rows: int) -> torch.Tensor:
        return self._buffers[ubatch].landing[: rows * self._hidden].view(rows, self._hidden)

    def _out_view(self, ubatch: int, tokens: int) -> torch.Tensor:
        return self._buffers[ubatch].out[: tokens * self._hidden].view(tokens, self._hidden)

    def _in_flight(
        self, fn: Callable, args: tuple, name: str, op: str, layer: int | None, nbytes: int
    ) -> tuple[Any, Any]:
        """Launch a transfer on the link queue after the current stream's work so far; return
        (sender's stream, arrival event). One queue for all ubatches: the link carries one transfer
        at a time anyway, in the order they were sent."""
        stream = dbo.current_stream()
        backend = stream.backend
        link = backend.stream(LINK_QUEUE)
        sent = backend.new_event()
        sent.record(stream)
        link.wait_event(sent)
        link.launch(fn, *args, name=name, kind="comm", cost=self._cost(name, nbytes), op=op, layer=layer)
        arrived = backend.new_event()
        arrived.record(link)
        return stream, arrived

    # -- high-throughput style ----------------------------------------------------------------------
    def dispatch(self, x, plan, *, ubatch, name, layer=None, previous_event=None):
        recv = self._recv_view(ubatch, plan.rows)
        stream = dbo.current_stream()
        if previous_event is not None:
            stream.wait_event(previous_event)
        nbytes = recv.numel() * recv.element_size()
        stream.launch(
            _dispatch_kernel,
            x,
            plan.src_token,
            recv,
            name=name,
            kind="comm",
            cost=self._cost(name, nbytes),
            op="dispatch",
            layer=layer,
        )
        return recv

    def combine(self, y, plan, *, ubatch, name, layer=None, previous_event=None):
        landing = self._landing_view(ubatch, plan.rows)
        out = self._out_view(ubatch, plan.num_tokens)
        stream = dbo.current_stream()
        if previous_event is not None:
            stream.wait_event(previous_event)
        nbytes = y.numel() * y.element_size()
        stream.launch(
            _combine_sum_kernel,
            y,
            plan.row_of,
            landing,
            out,
            name=name,
            kind="comm",
            cost=self._cost(name, nbytes),
            op="combine",
            layer=layer,
        )
        return out

    # -- low-latency style --------------------------------------------------------------------------
    # The modelled link plays every expert's owner: the layout is (experts, tokens of the ubatch,
    # hidden). The link model charges the valid rows only (DeepEP low-latency sends only them).
    def ll_batch(self, plan, *, ubatch):
        return LLBatch(self._experts, plan.num_tokens, 0, self._buffers[ubatch].counts)

    def dispatch_send(self, x, plan, recv_into, *, ubatch, name, layer=None, recv_cost=None):
        if plan.expert_sorted is None:
            raise ValueError("the low-latency dispatch needs plan.expert_sorted (the expert of each sorted row)")
        b = self._buffers[ubatch]
        rows, cap, E, H = plan.rows, plan.num_tokens, self._experts, self._hidden
        if tuple(recv_into.shape) != (E, cap, H):
            raise ValueError(
                f"recv_into must be (experts, capacity, hidden) = {(E, cap, H)}, got {tuple(recv_into.shape)}"
            )
        stage = self._recv_view(ubatch, rows)
        padded = b.padded[: E * cap * H].view(E * cap, H)
        nbytes = stage.numel() * stage.element_size()  # the valid rows travel
        args = (x, plan, cap, self._arange[:rows], b.pad_row[:rows], b.copy_row[:rows], b.counts, stage, padded)
        stream, arrived = self._in_flight(_ll_dispatch_kernel, args, name, "dispatch_ll", layer, nbytes)
        rname = name.replace("dispatch", "dispatch_recv", 1)
        if recv_cost is None:
            recv_cost = Work(bytes=stage.numel() * (stage.element_size() + recv_into.element_size()))
        dst = recv_into.view(E * cap, H)

        def hook() -> None:
            stream.wait_event(arrived)
            stream.launch(
                _dequant_kernel,
                padded,
                dst,
                name=rname,
                kind="compute",
                cost=recv_cost,
                op="dispatch_recv",
                layer=layer,
            )

        hook.__name__ = rname
        return hook

    def combine_send(self, y, plan, out, *, ubatch, name, layer=None, recv_cost=None):
        landing = self._landing_view(ubatch, plan.rows)
        b = self._buffers[ubatch]
        y_rows = y.reshape(-1, self._hidden)
        nbytes = landing.numel() * y.element_size()  # the valid rows travel
        args = (y_rows, b.copy_row[: plan.rows], landing)
        stream, arrived = self._in_flight(_combine_gather_kernel, args, name, "combine_ll", layer, nbytes)
        rname = name.replace("combine", "combine_recv", 1)
        if recv_cost is None:
            isz = landing.element_size()
            recv_cost = Work(flops=2 * landing.numel(), bytes=(2 * landing.numel() + out.numel()) * isz)

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
