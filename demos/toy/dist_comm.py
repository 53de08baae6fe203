"""``DistributedTransport``: the toy MoE's all-to-all over ``torch.distributed``.

The same four methods as the modelled link (demos.toy.comm, the ``demos.toy.transport``
interface) over
``torch.distributed.all_to_all_single`` (gloo on CPU, nccl on GPUs) between ranks that each own
``experts / world_size`` experts, one process group per ubatch (docs/distributed.md). Tokens
really travel to the rank that owns their experts and come back.

Here: the transport's setup, its helpers (groups, the fault seam, the collectives, the link
queue) and the high-throughput path; the low-latency path is its base class
``demos.toy.dist_ll.LowLatencyPath``, and one ubatch's buffers are
``demos.toy.dist_buffers.DistBuffers``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import torch

import dbo
from demos.ranks.faults import CollectiveError
from demos.toy.dist_buffers import DistBuffers
from demos.toy.dist_ll import LowLatencyPath
from demos.toy.ll_layout import byte_view
from demos.toy.routing import RoutePlan
from demos.toy.transport import LINK_QUEUE, ExpertBatch, Transport, wire_dtype_for

__all__ = ["DistributedTransport", "CollectiveError"]


class DistributedTransport(LowLatencyPath, Transport):
    """Expert-parallel all-to-all over ``torch.distributed.all_to_all_single``.

    Rank r owns experts ``r * E/W ... (r+1) * E/W - 1`` (E experts, W ranks; E % W == 0). A
    dispatch first exchanges the per-expert row counts (so that each rank knows how many rows it
    gets from whom), then sends each rank the rows of its experts, in the sender's expert-sorted
    order (and, for the high-throughput schedule, their router weights); the receiver's experts
    compute them segment by segment (``ExpertBatch``); the combine sends the results back the same
    way and the sender sums each token's top-k rows in the same order as the modelled link, so
    the outputs are bit-identical to a single-process run.

    ``groups[u]``: the process group of ubatch u. A collective uses the group of the ubatch that
    *launches* it (``dbo_current_ubatch_id()`` in the launching thread, which must equal the
    ``ubatch`` the model passes), never a group shared by two ubatches: see docs/distributed.md.

    Where the collectives run: the low-latency style puts them in flight on the transport's link
    queue (one per process), the high-throughput style on the caller's current stream (the
    ubatch's comm stream) -- unless ``serialize`` is set, which routes those through the link
    queue too. On the threads backend every collective of a process must come from one stream,
    in the order the ubatch threads launched them (the same on every rank): all comm kernels of a
    process run on one executor thread, one at a time, and a blocking collective holds it. The
    executor takes the earliest-launched kernel whose stream is ready, and which streams are ready
    depends on timing: with collectives on two streams, two ranks could start different ones, each
    then blocked in a collective the other cannot start. So ``serialize`` is needed there with
    per-ubatch streams (the demo's default; a shared comm stream is one queue already). On cuda
    the kernel function runs in the launching thread, so issue order is launch order whatever the
    streams.

    Collectives are issued with ``async_op=True`` and waited for inside the same kernel (gloo:
    the thread running the comm kernel blocks without the GIL while the other ubatch's compute
    runs; nccl: the wait only orders the stream). The split sizes must be known on the host, so the dispatch
    reads the router's offsets and the received counts with ``.tolist()`` (a device sync on
    cuda, as DeepEP's normal kernels do on the CPU).

    The low-latency style needs no host-known split: as DeepEP low-latency, every rank sends every
    rank a chunk of one fixed size, ``(local_experts, max_tokens, hidden)`` (zeros past each
    expert's count), and the per-expert counts travel as a fixed-size tensor that stays on the
    device. The receiver's experts see ``(local_experts, world_size * max_tokens, hidden)``
    (``ll_batch``); the combine sends the same chunks back. No ``.tolist()``, no ``.item()``.

    ``fault(op, n)``: a test seam called before the n-th collective this transport issues.
    """

    name = "torch.distributed"

    def __init__(
        self,
        groups: Sequence[Any],
        *,
        rank: int,
        world_size: int,
        experts: int,
        max_tokens: int,
        serialize: bool = False,
        fault: Callable[[str, int], None] | None = None,
    ):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"bad rank {rank} of world size {world_size}")
        if experts % world_size:
            raise ValueError(f"experts ({experts}) must be a multiple of the world size ({world_size})")
        if not groups:
            raise ValueError("DistributedTransport needs at least one process group (one per ubatch)")
        self.groups = list(groups)
        self.rank = rank
        self.world_size = world_size
        self.experts = experts
        self.local_experts = experts // world_size
        self.max_tokens = max_tokens
        self.serialize = serialize
        self.fault = fault
        self._buffers: list[DistBuffers] = []
        self._rows_max = 0
        self._tokens = 0
        self._arange: torch.Tensor | None = None
        self._hidden = 0
        self._dtype = torch.float32
        self._wire = torch.bfloat16
        self._count_lock = threading.Lock()
        self.collectives = 0
        self.bytes_to_peers = 0
        """Bytes this rank sent to other ranks so far (the part of each all-to-all that leaves the process)."""

    # -- setup ----------------------------------------------------------------------------------------
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
        if num_ubatches > len(self.groups):
            raise ValueError(f"{num_ubatches} ubatches but only {len(self.groups)} process groups (one per ubatch)")
        tokens = min(max_tokens, self.max_tokens)
        self._hidden = hidden
        self._dtype = dtype
        self._wire = wire_dtype_for(dtype)
        self._rows_max = tokens * topk
        self._tokens = tokens
        self._arange = torch.arange(self._rows_max, dtype=torch.int64, device=device)
        cap = self.world_size * self._rows_max
        self._buffers = [
            DistBuffers(self._rows_max, cap, tokens, hidden, self.experts, dtype, self._wire, device)
            for _ in range(num_ubatches)
        ]

    @property
    def wire_dtype(self) -> torch.dtype:
        return self._wire

    def expert_capacity(self, rows: int) -> int:
        # every rank may send all its token copies to this rank's experts
        return self.world_size * self._rows_max

    def expert_batch(self, plan: RoutePlan, *, ubatch: int) -> ExpertBatch:
        b = self._buffers[ubatch]
        return ExpertBatch(
            b.recv_offsets,
            b.recv_w,
            self.rank * self.local_experts,
            self.local_experts,
            self.world_size * self._rows_max,
        )

    def describe(self) -> dict:
        backend = None
        try:
            import torch.distributed as dist

            backend = str(dist.get_backend(self.groups[0]))
        except Exception:  # not initialized (a unit test with fake groups)
            pass
        return {
            "transport": self.name,
            "link": f"torch.distributed all_to_all_single ({backend})",
            "base_link": f"torch.distributed ({backend})",
            "dist_backend": backend,
            "latency_s": None,
            "bandwidth_Bps": None,
            "world_size": self.world_size,
            "rank": self.rank,
            "local_experts": self.local_experts,
            "process_groups": "one per ubatch",
            "serialize": self.serialize,
            "wire_dtype": str(self._wire).replace("torch.", ""),
        }

    # -- helpers ----------------------------------------------------------------------------------------
    def _group(self, ubatch: int) -> Any:
        """The process group of the ubatch launching now (read in the launching thread)."""
        ub = dbo.dbo_current_ubatch_id()
        if ub != ubatch:
            raise ValueError(
                f"ubatch {ub} launched a collective with ubatch {ubatch}'s buffers; each ubatch must use its own group"
            )
        if ub >= len(self.groups):
            raise ValueError(f"ubatch {ub} has no process group ({len(self.groups)} groups)")
        return self.groups[ub]

    def _before(self, op: str) -> None:
        with self._count_lock:
            self.collectives += 1
            n = self.collectives
        if self.fault is not None:
            self.fault(op, n)

    def _a2a(self, out: torch.Tensor, inp: torch.Tensor, out_splits, in_splits, group: Any, what: str) -> Any:
        import torch.distributed as dist

        try:
            return dist.all_to_all_single(out, inp, out_splits, in_splits, group=group, async_op=True)
        except Exception as e:
            raise CollectiveError(f"{what}: all_to_all_single failed on rank {self.rank}: {e}") from e

    def _wait(self, works: list, what: str) -> None:
        for w in works:
            try:
                w.wait()
            except Exception as e:
                raise CollectiveError(f"{what}: all_to_all_single failed on rank {self.rank}: {e}") from e

    def _rows(self, flat: torch.Tensor, rows: int) -> torch.Tensor:
        return flat[: rows * self._hidden].view(rows, self._hidden)

    def _in_flight(self, stream: Any, fn: Callable, args: tuple, name: str, op: str, layer: int | None) -> Any:
        """Run ``fn`` on the link queue after ``stream``'s work so far; return the arrival event."""
        backend = stream.backend
        link = backend.stream(LINK_QUEUE)
        sent = backend.new_event()
        sent.record(stream)
        link.wait_event(sent)
        link.launch(fn, *args, name=name, kind="comm", op=op, layer=layer)
        arrived = backend.new_event()
        arrived.record(link)
        return arrived

    def _on_current_stream(
        self, fn: Callable, args: tuple, name: str, op: str, layer: int | None, previous_event: Any
    ) -> None:
        stream = dbo.current_stream()
        if previous_event is not None:
            stream.wait_event(previous_event)
        if self.serialize:
            stream.wait_event(self._in_flight(stream, fn, args, name, op, layer))
        else:
            stream.launch(fn, *args, name=name, kind="comm", op=op, layer=layer)

    # -- kernels ----------------------------------------------------------------------------------------
    def _k_dispatch(
        self, group: Any, b: DistBuffers, x: torch.Tensor, plan: RoutePlan, with_weights: bool, what: str
    ) -> None:
        self._before(what)
        W, El = self.world_size, self.local_experts
        off = plan.offsets.tolist()
        rows = off[-1]
        # 1. how many rows go to whom: per-expert counts, E/W of them to each rank
        torch.diff(plan.offsets, out=b.counts_send)
        self._wait([self._a2a(b.counts_recv, b.counts_send, None, None, group, what + " (counts)")], what + " (counts)")
        send_splits = [off[(q + 1) * El] - off[q * El] for q in range(W)]
        rc = b.counts_recv.tolist()  # source-major: El counts from each rank
        recv_splits = [sum(rc[p * El : (p + 1) * El]) for p in range(W)]
        n = sum(recv_splits)
        # 2. the rows themselves, expert-sorted (and their router weights)
        send = self._rows(b.send, rows)
        torch.index_select(byte_view(x), 0, plan.src_token[:rows], out=byte_view(send))
        works = [self._a2a(byte_view(self._rows(b.recv, n)), byte_view(send), recv_splits, send_splits, group, what)]
        if with_weights:
            w = plan.weights_sorted[:rows]
            works.append(self._a2a(b.recv_w[:n], w, recv_splits, send_splits, group, what + " (weights)"))
        torch.cumsum(b.counts_recv, 0, out=b.recv_offsets[1:])
        self._wait(works, what)
        b.send_splits, b.recv_splits = send_splits, recv_splits
        row_bytes = self._hidden * send.element_size() + (b.recv_w.element_size() if with_weights else 0)
        self.bytes_to_peers += (rows - send_splits[self.rank]) * row_bytes

    def _k_combine(
        self, group: Any, b: DistBuffers, y: torch.Tensor, plan: RoutePlan, landing: torch.Tensor, out, what: str
    ) -> None:
        self._before(what)
        rows, n = plan.rows, sum(b.recv_splits)
        back = self._rows(b.back, rows)
        self._wait([self._a2a(back, y[:n], b.send_splits, b.recv_splits, group, what)], what)
        torch.index_select(back, 0, plan.row_of, out=landing)
        if out is not None:  # the receiver sums each token's top-k rows (high-throughput style)
            torch.sum(landing.view(out.shape[0], -1, out.shape[1]), dim=1, out=out)
        self.bytes_to_peers += (n - b.recv_splits[self.rank]) * self._hidden * y.element_size()

    # -- high-throughput style ----------------------------------------------------------------------------
    def dispatch(self, x, plan, *, ubatch, name, layer=None, previous_event=None):
        b = self._buffers[ubatch]
        group = self._group(ubatch)
        args = (group, b, x, plan, True, name)
        self._on_current_stream(self._k_dispatch, args, name, "dispatch", layer, previous_event)
        return self._rows(b.recv, self.world_size * self._rows_max)

    def combine(self, y, plan, *, ubatch, name, layer=None, previous_event=None):
        b = self._buffers[ubatch]
        group = self._group(ubatch)
        landing = self._rows(b.landing, plan.rows)
        out = self._rows(b.out, plan.num_tokens)
        args = (group, b, y, plan, landing, out, name)
        self._on_current_stream(self._k_combine, args, name, "combine", layer, previous_event)
        return out
