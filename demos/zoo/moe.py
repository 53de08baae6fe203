"""The MoE block of the generic transformer and its schedules: where a ubatch yields, on which streams.

``MoEBlock(spec, workload, launcher, layers, num_ubatches, meta)`` runs one MoE layer of one ubatch
(``forward``): the router, then the schedule of ``workload.schedule``, each op launched by name with the
layer plan's cost (``demos.zoo.plan``):

* ``ll`` (DeepEP's low-latency kernels, one stream): each all-to-all's SM-held send half on the compute
  stream, its flight on the link stream (``LINK_STREAM``), and its receive half parked as the next
  ubatch's receive hook; two yields per layer, as vLLM's DBO places them with DeepEP low-latency;
* ``ht`` (DeepEP's normal kernels, compute and comm streams): the dispatch and the combine on the comm
  stream after the compute stream's work so far (DeepEP's "previous event"); three yields per layer;
* single-batch overlap (``sbo``, SGLang's with DeepEP's low-latency kernels, no split): the shared expert
  beside the dispatch in flight, the combine in flight beside the down GEMM (its blocks sent as they
  finish), no yield;
* ``fused`` (DeepGEMM's fused MoE kernel, no split): the shared experts, then one kernel for the dispatch,
  the routed experts and the combine, never yielding;
* without an all-to-all (EP 1, or attention TP = EP) every schedule copies the tokens into the experts'
  layout and back, on the compute stream, and never yields. Where the engine runs the shared experts on a second stream
  (``demos.zoo.side_streams``: the plan's ``shared_side``), they go first on the side stream
  (``demos.zoo.launch.side_stream``) after the compute stream's work so far, and the compute stream waits
  for them before the finalize.

All three schedules send through one helper (``_in_flight``: the send half, then the flight on the link
stream after the current stream's work) and receive through one (``_receive``: the receive half after the
arrival event), so the overlap each one models differs only in where it places them. Its real-math
buffers per ubatch are ``MoEBuffers``; its workspace request per layer is one (``_views``), with the real
shapes (meta views at full size), as vLLM's ``workspace13`` / ``workspace2``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

import dbo
from demos.vocabulary import Schedule
from demos.zoo import kernels as K
from demos.zoo.launch import LINK_STREAM, Launcher, kernel_name, record_event, side_stream
from demos.zoo.models import ModelSpec
from demos.zoo.plan import LayerPlan
from demos.zoo.workload import Workload

__all__ = ["MoEBlock", "MoEBuffers"]


@dataclass
class MoEBuffers:
    """One ubatch's persistent real-math buffers of the MoE block (``gates``: ``(tokens, routed experts)``;
    the rest ``(tokens, hidden)``, those the all-to-all carries ``(tokens, routed)``: a latent MoE's width);
    a ubatch uses its first rows."""

    moe_in: torch.Tensor
    routed_in: torch.Tensor
    stage: torch.Tensor
    moe_out: torch.Tensor
    landing: torch.Tensor
    lifted: torch.Tensor
    shared_out: torch.Tensor
    gates: torch.Tensor

    ROUTED = ("routed_in", "stage", "moe_out", "landing")

    @classmethod
    def zeros(cls, tokens: int, hidden: int, experts: int, routed: int | None = None) -> MoEBuffers:
        width = {f.name: (routed or hidden) if f.name in cls.ROUTED else hidden for f in fields(cls)}
        rows = {name: torch.zeros((tokens, w)) for name, w in width.items() if name != "gates"}
        return cls(**rows, gates=torch.zeros((tokens, experts)))


@dataclass
class _Views:
    """One layer's views of the block: the workspace (``ws13``, ``ws2``, ``recv``, ``tmp``, ``y``, ``sh_h``,
    ``sh_o``) and the ubatch's rows of its buffers (None at full size on meta)."""

    ws13: Any
    ws2: Any
    recv: Any
    tmp: Any
    y: Any
    sh_h: Any
    sh_o: Any
    x: Any = None
    gates: Any = None
    stage: Any = None
    out: Any = None
    landing: Any = None
    shared_out: Any = None
    xr: Any = None  # the rows the dispatch sends: ``x``, or a latent MoE's projection of it
    lifted: Any = None  # the combined rows at the hidden size: ``out``, or a latent MoE's projection of it


class MoEBlock:
    """The MoE layers of the generic transformer (module docstring)."""

    def __init__(
        self, spec: ModelSpec, workload: Workload, run: Launcher, layers: list, num_ubatches: int, meta: bool
    ) -> None:
        self.spec, self.w, self.run, self.layers, self.meta = spec, workload, run, layers, meta
        self.dtype = torch.bfloat16 if meta else torch.float32
        self.sbo = False  # ZooRun sets it for the step with single-batch overlap (one ubatch, ll)
        self.fused = False  # ZooRun sets it for the step with DeepGEMM's fused MoE kernel (one ubatch)
        m = spec.moe
        T, H = workload.tokens, spec.hidden_size
        self.buffers = (
            [None] * num_ubatches
            if meta or m is None
            else [MoEBuffers.zeros(T, H, m.routed_experts, spec.routed_width) for _ in range(num_ubatches)]
        )

    # -- one layer -----------------------------------------------------------------------------------
    def forward(self, i: int, h: torch.Tensor, t: int, ub: int, lp: LayerPlan) -> None:
        """MoE layer ``i`` of the ubatch ``ub`` of ``t`` tokens whose hidden rows are ``h``."""
        w = self.w
        if w.schedule == Schedule.LL:
            dbo.dbo_maybe_run_recv_hook()  # the sibling's combine receive
        if self.fused:
            costs = lp.fused
            if costs is None:
                raise ValueError("the fused MoE kernel cannot run this step (demos.zoo.fused_moe.fused_moe_refusal)")
        elif self.sbo and w.alltoall:
            costs = lp.sbo
            if costs is None:
                raise ValueError("single-batch overlap is a step without DBO on the ll schedule")
        else:
            costs = lp.plain
        v = self._views(i, h, t, ub, costs)
        if self.fused:
            self._fused(i, h, ub, v, costs)
        elif not w.alltoall:
            self._local(i, h, ub, v, costs)
        elif w.schedule == Schedule.HT:
            self._ht(i, h, ub, v, costs)
        elif self.sbo:
            self._sbo(i, h, ub, v, costs)
        else:
            self._ll(i, h, ub, v, costs)

    def _views(self, i: int, h: torch.Tensor, t: int, ub: int, costs: Mapping) -> _Views:
        """The router, and the layer's one workspace request (vLLM's ``workspace13`` shared with the
        experts' output, ``workspace2``, the received tokens, the shared expert's buffers)."""
        m, dt, H, Hr = self.spec.moe, self.dtype, self.spec.hidden_size, self.spec.routed_width
        # meta: a rank's slice of each expert under MoE tensor parallelism; real math computes every expert whole
        inter = self.w.expert_intermediate if self.meta else m.intermediate_size
        si = m.intermediate_size * max(1, m.shared_experts)
        # rows the busiest rank's experts receive (meta: of its MoE tokens) or every token (real math, masked)
        mt, rt = (self.w.moe_tokens(t), self.w.routed_tokens(t)) if self.meta else (t, t)
        M = max(1, round(rt * m.top_k * self.w.imbalance_at(rt))) if self.meta else t
        ws13, ws2, recv, tmp, y, sh_h, sh_o = self.run.workspace(
            ((M, max(2 * inter, Hr)), dt),
            ((M, inter), dt),
            ((M, Hr), dt),
            ((M, Hr), dt),
            ((M, Hr), dt),
            ((mt, 2 * si), dt),
            ((mt, H), dt),
        )
        v = _Views(ws13[:, : 2 * inter], ws2, recv, tmp, y, sh_h, sh_o)
        b = self.buffers[ub]
        if b is not None:
            v.x, v.gates, v.stage = b.moe_in[:t], b.gates[:t], b.stage[:t]
            v.out, v.landing, v.shared_out = b.moe_out[:t], b.landing[:t], b.shared_out[:t]
        latent = "latent_down" in costs
        v.xr = b.routed_in[:t] if latent and b is not None else v.x
        v.lifted = b.lifted[:t] if latent and b is not None else v.out
        L = self.layers[i]
        args = () if L is None else (L.w_gate, L.bias, m.top_k, m.scoring == "sigmoid", m.norm_topk_prob)
        scale = () if L is None else (m.routed_scaling_factor,)
        self.run(costs, "router", K.router_kernel, h, *args, *scale, v.x, v.gates, layer=i, ub=ub)
        if latent:
            w = None if L is None else L.w_down
            self.run(costs, "latent_down", K.project_kernel, v.x, w, v.xr, layer=i, ub=ub)
        return v

    # -- the parts every schedule shares ------------------------------------------------------------
    def _experts(self, i: int, v: _Views, ub: int, costs: Mapping, name: str, x: Any = None, y: Any = None) -> None:
        """The routed experts ``name`` over ``x`` (default: the received tokens) into ``y`` (default: their
        output before the combine)."""
        L = self.layers[i]
        w = (None, None) if L is None else (L.w1, L.w2)
        x, y = v.recv if x is None else x, v.y if y is None else y
        self.run(costs, name, K.experts_kernel, x, v.gates, *w, v.ws13, v.ws2, v.tmp, y, layer=i, ub=ub)

    def _shared(self, i: int, v: _Views, ub: int, costs: Mapping, name: str = "shared", stream: Any = None) -> None:
        """The shared experts as op ``name`` (where the plan holds it), on ``stream`` (None: the current one)."""
        if name not in costs:
            return
        L = self.layers[i]
        w = (None, None) if L is None else (L.ws1, L.ws2)
        self.run(costs, name, K.mlp_kernel, v.x, *w, v.sh_h, v.shared_out, layer=i, ub=ub, stream=stream)

    def _finalize(self, i: int, h: torch.Tensor, v: _Views, ub: int, costs: Mapping) -> None:
        shared = v.shared_out if "shared" in costs or "shared_side" in costs else None
        if "latent_up" in costs:
            w = None if self.layers[i] is None else self.layers[i].w_up
            self.run(costs, "latent_up", K.latent_up_kernel, v.out, w, v.lifted, layer=i, ub=ub)
        self.run(costs, "finalize", K.finalize_kernel, h, v.lifted, shared, layer=i, ub=ub)

    def _in_flight(self, src: Any, dst: Any, kernel: str, i: int, ub: int, costs: Mapping) -> tuple[Any, Any]:
        """A low-latency ``kernel`` ("dispatch" or "combine"): its SM-held send half (staging ``src`` into
        the send buffer ``dst``; docs/predict.md, "What overlapping costs") on the current stream, where
        the plan has one, then the flight on the link stream after the current stream's work so far;
        returns (the sender's stream, the arrival event)."""
        if f"{kernel}_send" in costs:
            self.run(costs, f"{kernel}_send", K.copy_kernel, src, dst, layer=i, ub=ub)
        stream = dbo.current_stream()
        backend = stream.backend
        link = backend.stream(LINK_STREAM)
        sent = backend.new_event()
        sent.record(stream)
        link.wait_event(sent)
        self.run(costs, f"{kernel}_ll", K.copy_kernel, src, dst, layer=i, ub=ub, stream=link)
        arrived = backend.new_event()
        arrived.record(link)
        return stream, arrived

    def _receive(
        self, stream: Any, arrived: Any, src: Any, dst: Any, name: str, i: int, ub: int, costs: Mapping
    ) -> Callable[[], None]:
        """The receive half ``name`` as a hook: on ``stream``, after ``arrived``, copies ``src`` into ``dst``."""

        def hook() -> None:
            stream.wait_event(arrived)
            self.run(costs, name, K.copy_kernel, src, dst, layer=i, ub=ub, stream=stream)

        hook.__name__ = kernel_name(name, i, ub)
        return hook

    # -- the schedules ------------------------------------------------------------------------------
    def _local(self, i: int, h: torch.Tensor, ub: int, v: _Views, costs: Mapping) -> None:
        """No all-to-all, on the compute stream: the tokens copied into the experts' layout and back, or (a
        local fused MoE, whose plan has no copies) read and written in place by the experts' kernel; where the
        plan has ``shared_side``, the shared experts first on the side stream, joined before the finalize."""
        joined = self._shared_beside(i, v, ub, costs) if "shared_side" in costs else None
        experts = "experts_ll" if "experts_ll" in costs else "experts"
        if "dispatch_recv" not in costs:
            self._experts(i, v, ub, costs, experts, v.xr, v.out)
        else:
            self.run(costs, "dispatch_recv", K.copy_kernel, v.xr, v.recv, layer=i, ub=ub)
            self._experts(i, v, ub, costs, experts)
            self.run(costs, "combine_recv", K.copy_kernel, v.y, v.out, layer=i, ub=ub)
        self._shared(i, v, ub, costs)
        if joined is not None:
            dbo.current_stream().wait_event(joined)
        self._finalize(i, h, v, ub, costs)

    def _shared_beside(self, i: int, v: _Views, ub: int, costs: Mapping) -> Any:
        """The shared experts on the side stream after the compute stream's work so far (the engines fork it
        at the router); returns the event their end is recorded on."""
        side = side_stream()
        side.wait_event(record_event())
        self._shared(i, v, ub, costs, "shared_side", side)
        done = side.backend.new_event()
        done.record(side)
        return done

    def _ll(self, i: int, h: torch.Tensor, ub: int, v: _Views, costs: Mapping) -> None:
        """Low-latency: one stream, send plus parked receive hook, 2 yields (DeepEP low-latency)."""
        stream, arrived = self._in_flight(v.xr, v.stage, "dispatch", i, ub, costs)
        dbo.dbo_register_recv_hook(self._receive(stream, arrived, v.stage, v.recv, "dispatch_recv", i, ub, costs))
        dbo.dbo_yield()
        self._experts(i, v, ub, costs, "experts_ll")
        dbo.dbo_maybe_run_recv_hook()  # the sibling's dispatch receive
        stream, arrived = self._in_flight(v.y, v.landing, "combine", i, ub, costs)
        self._shared(i, v, ub, costs)
        dbo.dbo_register_recv_hook(self._receive(stream, arrived, v.landing, v.out, "combine_recv", i, ub, costs))
        dbo.dbo_yield()
        self._finalize(i, h, v, ub, costs)

    def _sbo(self, i: int, h: torch.Tensor, ub: int, v: _Views, costs: Mapping) -> None:
        """Single-batch overlap: the shared expert beside the dispatch in flight, the combine in flight
        beside the down GEMM (its blocks sent as they finish), no split, no yield."""
        stream, arrived = self._in_flight(v.xr, v.stage, "dispatch", i, ub, costs)
        self._shared(i, v, ub, costs)
        self._receive(stream, arrived, v.stage, v.recv, "dispatch_recv", i, ub, costs)()
        self.run(costs, "experts_up", K.meta_kernel, layer=i, ub=ub)
        stream, arrived = self._in_flight(v.y, v.landing, "combine", i, ub, costs)
        self._experts(i, v, ub, costs, "experts_down")  # the real math runs here, whole
        self._receive(stream, arrived, v.landing, v.out, "combine_recv", i, ub, costs)()
        self._finalize(i, h, v, ub, costs)

    def _fused(self, i: int, h: torch.Tensor, ub: int, v: _Views, costs: Mapping) -> None:
        """DeepGEMM's fused MoE kernel: the shared experts, then one kernel that moves the tokens to the
        experts, runs them and brings the results back (real math: the same copies and experts, in one
        launch), on the compute stream; no yield (it leaves DBO nothing to overlap)."""
        self._shared(i, v, ub, costs)
        L = self.layers[i]
        w = (None, None) if L is None else (L.w1, L.w2)
        args = (v.xr, v.recv, v.gates, *w, v.ws13, v.ws2, v.tmp, v.y, v.out)
        self.run(costs, "fused_moe", K.fused_moe_kernel, *args, layer=i, ub=ub)
        self._finalize(i, h, v, ub, costs)

    def _ht(self, i: int, h: torch.Tensor, ub: int, v: _Views, costs: Mapping) -> None:
        """High-throughput: compute and comm streams, 3 yields (DeepEP normal kernels)."""
        prev = dbo.dbo_get_previous_event(record_event)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        dbo.current_stream().wait_event(prev)
        self.run(costs, "dispatch", K.copy_kernel, v.xr, v.recv, layer=i, ub=ub)
        dbo.dbo_switch_to_compute_sync()
        self._experts(i, v, ub, costs, "experts")
        prev = dbo.dbo_get_previous_event(record_event)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        dbo.current_stream().wait_event(prev)
        self.run(costs, "combine", K.copy_kernel, v.y, v.landing, layer=i, ub=ub)
        dbo.dbo_switch_to_compute()
        self._shared(i, v, ub, costs)
        dbo.dbo_switch_to_comm()
        self.run(costs, "moe_copy", K.copy_kernel, v.landing, v.out, layer=i, ub=ub)
        dbo.dbo_yield_and_switch_from_comm_to_compute()
        self._finalize(i, h, v, ub, costs)
