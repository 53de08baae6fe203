"""A toy MoE transformer written against ``dbo`` (streams, yields) and ``workspace`` (scratch).

Each layer: an attention block (decode-style: every token attends to a shared cached context
and to itself), a router (top-k of a softmax gate), an all-to-all *dispatch* of the token copies
to the experts' owner, the routed experts, an all-to-all *combine* back, and a shared expert;
the MoE output is added to the residual stream.

* Every kernel is launched through ``dbo.launch`` (or a stream's ``launch``) and writes into
  output tensors passed as arguments; nothing is computed synchronously on the host. Each kernel
  declares its cost (``dbo.costs.Work``) for the virtual backend, and its op and layer.
* Scratch memory comes from the process-global workspace manager, in the reference's patterns
  (docs/overlap.md): the attention output buffers are requested twice per layer with the same
  leading shapes, so the second request reuses (overwrites) the first one's memory after its
  result was consumed; the MoE layer requests one region shared by ``workspace13`` and
  ``fused_out`` plus a separate ``workspace2``; the shared expert runs in token chunks over a
  max-size buffer sliced per chunk. Every scratch view is used only until the ubatch's next
  ``get_simultaneous`` call; data that must outlive it lives in per-ubatch persistent buffers
  (``demos.moe.state.UbatchBuffers``, one per ubatch id, as the reference keeps per-ubatch state
  in arrays indexed by ``dbo_current_ubatch_id()``).
* ``schedule`` places the yields of one MoE layer as the reference does: "ll" (one stream, send
  + recv hook, two yields per layer, as DeepEP low-latency) or "ht" (compute and comm streams, three
  yields per layer, as DeepEP high-throughput). Without DBO every ``dbo_*`` call is a no-op, so the same
  code is the reference run.

Every kernel declares what it is: ``op=`` (one of ``demos.moe.ops.OPS``) and ``layer=``. The
demo's analysis and calibration read them off the kernel records; the display names
(``"<op> L<layer> u<ubatch>"``) are for people. The Work each kernel declares comes from
``demos.moe.cost_model``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

import torch

import dbo
from demos.moe.cost_model import KernelCosts, itemsize, kernel_costs
from demos.moe.kernels import (
    MIN_GEMM_ROWS,
    attn_context_kernel,
    attn_out_kernel,
    attn_qkv_kernel,
    attn_query_kernel,
    copy_kernel,
    experts_kernel,
    experts_ll_kernel,
    finalize_kernel,
    load_input_kernel,
    router_kernel,
    shared_kernel,
)
from demos.moe.ll_layout import LLBatch
from demos.moe.ops import kernel_name
from demos.moe.state import LayerWeights, UbatchBuffers
from demos.moe.transport import Transport
from workspace import current_workspace_manager

__all__ = [
    "ModelConfig",
    "ToyMoE",
    "SCHEDULES",
    "YIELDS_PER_LAYER",
    "MIN_GEMM_ROWS",
]

SCHEDULES = ("ll", "ht")
YIELDS_PER_LAYER = {"ll": 2, "ht": 3}


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of the toy model. ``None`` sizes take the balanced defaults (docs/overlap.md):
    ``expert_ffn = hidden``, ``shared_ffn = 2 * expert_ffn``, ``context = hidden // 2``, so that (with
    top-2 routing) per ubatch the attention, the routed experts and the shared expert cost about the same.

    ``ep`` is the expert-parallel group size the *cost model* assumes: each rank holds
    ``ceil(experts / ep)`` experts, so the experts kernel reads that many experts' weights (over the
    modelled link the math still runs every expert, since one process plays every expert's owner;
    with ``demos.moe.dist_comm.DistributedTransport`` each rank computes only its own experts' rows).
    ``device="meta"`` skips all math (shapes only; virtual backend).
    """

    layers: int = 8
    tokens: int = 512
    hidden: int = 384
    experts: int = 8
    topk: int = 2
    expert_ffn: int | None = None
    shared_ffn: int | None = None
    context: int | None = None
    head_dim: int = 64
    shared_chunk: int = 256
    ep: int = 1
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    seed: int = 0

    def resolved(self) -> "ModelConfig":
        f = self.expert_ffn or self.hidden
        return replace(
            self,
            expert_ffn=f,
            shared_ffn=self.shared_ffn or 2 * f,
            context=self.context or max(1, self.hidden // 2),
        )

    @property
    def heads(self) -> int:
        h = self.hidden
        if h >= self.head_dim and h % self.head_dim == 0:
            return h // self.head_dim
        return 1

    @property
    def experts_per_rank(self) -> int:
        return -(-self.experts // max(1, self.ep))

    def validate(self) -> None:
        """ValueError naming the first bad field."""
        for name in ("layers", "tokens", "hidden", "experts", "topk", "head_dim", "shared_chunk", "ep"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("expert_ffn", "shared_ffn", "context"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.topk > self.experts:
            raise ValueError(f"topk ({self.topk}) must not exceed the number of experts ({self.experts})")

    def weight_bytes(self) -> int:
        """Bytes of all weights (to decide when to use meta tensors)."""
        c = self.resolved()
        H, E, F, Fs, C = c.hidden, c.experts, c.expert_ffn, c.shared_ffn, c.context
        per_layer = 4 * H * H + 2 * C * H + H * E + E * 3 * H * F + 3 * H * Fs
        return per_layer * c.layers * itemsize(c.dtype)


# Each writes only into tensors it is given; small per-row temporaries come from the workspace too.


class ToyMoE:
    """The toy model. ``forward(rows)`` is the body one ubatch runs (pass it to
    ``UBatchOrchestrator.run`` with one token range per ubatch); ``hidden`` holds the result.

    ``num_ubatches``: ubatch ids that may run (each gets its ``UbatchBuffers``; the workspace
    manager must have as many ubatches). ``transport``: the all-to-all
    (``demos.moe.transport.Transport``); ``schedule``: "ll" or "ht".
    """

    def __init__(self, config: ModelConfig, transport: Transport, *, num_ubatches: int, schedule: str = "ll"):
        config.validate()
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.cfg = cfg = config.resolved()
        self.schedule = schedule
        self.transport = transport
        self.device = torch.device(cfg.device)
        self.meta = self.device.type == "meta"
        H, E, T, K = cfg.hidden, cfg.experts, cfg.tokens, cfg.topk
        self.heads = cfg.heads
        self.head_dim = H // self.heads
        transport.setup(
            num_ubatches=num_ubatches, max_tokens=T, topk=K, hidden=H, dtype=cfg.dtype, device=self.device, experts=E
        )
        self.wire = transport.wire_dtype
        gen = torch.Generator().manual_seed(cfg.seed)
        self.layers = [self._make_layer(gen) for _ in range(cfg.layers)]
        self.x0 = self._rand((T, H), gen, 1.0)
        self.hidden = torch.empty((T, H), dtype=cfg.dtype, device=self.device)
        self.buffers = [UbatchBuffers(cfg, self.wire, self.device) for _ in range(num_ubatches)]
        """Each ubatch id's persistent buffers."""
        self.arange_rows = torch.arange(T * K, dtype=torch.int64, device=self.device)
        self.edges = torch.arange(E + 1, dtype=torch.int64, device=self.device)
        self._costs: dict[int, KernelCosts] = {}

    # -- construction -------------------------------------------------------------------------------
    def _rand(self, shape: tuple[int, ...], gen: torch.Generator, scale: float) -> torch.Tensor:
        if self.meta:
            return torch.empty(shape, dtype=self.cfg.dtype, device="meta")
        t = torch.randn(shape, generator=gen, dtype=torch.float32).mul_(scale)
        return t.to(dtype=self.cfg.dtype, device=self.device)

    def _make_layer(self, gen: torch.Generator) -> LayerWeights:
        c = self.cfg
        H, E, F, Fs, C = c.hidden, c.experts, c.expert_ffn, c.shared_ffn, c.context
        nh, d = self.heads, self.head_dim
        return LayerWeights(
            w_qkv=self._rand((H, 3 * H), gen, H**-0.5),
            w_o=self._rand((H, H), gen, H**-0.5),
            k_ctx=self._rand((nh, d, C), gen, 1.0),
            v_ctx=self._rand((nh, C, d), gen, 1.0),
            w_gate=self._rand((H, E), gen, H**-0.5),
            w1=self._rand((E, H, 2 * F), gen, H**-0.5),
            w2=self._rand((E, F, H), gen, F**-0.5),
            ws1=self._rand((H, 2 * Fs), gen, H**-0.5),
            ws2=self._rand((Fs, H), gen, Fs**-0.5),
        )

    def costs(self, t: int) -> KernelCosts:
        """Modelled Work of every kernel for a ubatch of ``t`` tokens (``demos.moe.cost_model``; cached)."""
        cached = self._costs.get(t)
        if cached is None:
            cached = self._costs[t] = kernel_costs(self.cfg, self.wire, self.schedule, t)
        return cached

    # -- the ubatch body ----------------------------------------------------------------------------
    def forward(self, rows: range) -> torch.Tensor:
        """Run every layer for the tokens ``rows`` of the batch; returns the ubatch's view of
        ``hidden`` (complete once the step's streams are synchronized)."""
        ub = dbo.dbo_current_ubatch_id()
        st = self.buffers[ub].views(len(rows))
        h = self.hidden[rows.start : rows.stop]
        cost = self.costs(st.t)
        dbo.launch(
            load_input_kernel,
            self.x0[rows.start : rows.stop],
            h,
            name=kernel_name("load_input", 0, ub),
            cost=cost.load_input,
            op="load_input",
        )
        moe = self._moe_ll if self.schedule == "ll" else self._moe_ht
        for i, layer in enumerate(self.layers):
            self._attention(i, layer, h, st, ub, cost)
            self._router(i, layer, h, st, ub, cost)
            moe(i, layer, h, st, ub, cost)
        return h

    def _attention(
        self, i: int, L: LayerWeights, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: KernelCosts
    ) -> None:
        c, t = self.cfg, st.t
        nh, d, dt = self.heads, self.head_dim, c.dtype
        ws = current_workspace_manager()
        # 1st request: the context attention's output buffers (+ its temporaries)
        out, lse, denom, scores, xn, nrm = ws.get_simultaneous(
            ((nh, t, d), dt),
            ((nh, t, 1), dt),
            ((nh, t, 1), dt),
            ((nh, t, c.context), dt),
            ((t, c.hidden), dt),
            ((t, 1), dt),
        )
        dbo.launch(
            attn_qkv_kernel,
            h,
            nrm,
            xn,
            L.w_qkv,
            st.qkv,
            d**-0.5,
            name=kernel_name("attn_qkv", i, ub),
            cost=cost.qkv,
            op="attn_qkv",
            layer=i,
        )
        dbo.launch(
            attn_context_kernel,
            st.q,
            L.k_ctx,
            L.v_ctx,
            scores,
            out,
            lse,
            denom,
            st.acc_o,
            st.acc_lse,
            name=kernel_name("attn_context", i, ub),
            cost=cost.context,
            op="attn_context",
            layer=i,
        )
        del out, lse, denom, scores, xn, nrm  # consumed by the kernel above; the next request reuses the memory
        # 2nd request: the same leading shapes, so the query attention's outputs land where the
        # context attention's were (the reference's DCP pattern)
        out, lse, m, w, o_flat = ws.get_simultaneous(
            ((nh, t, d), dt), ((nh, t, 1), dt), ((nh, t, 1), dt), ((nh, t, 1), dt), ((t, c.hidden), dt)
        )
        dbo.launch(
            attn_query_kernel,
            st.q,
            st.k,
            st.v,
            out,
            lse,
            m,
            w,
            st.acc_o,
            st.acc_lse,
            name=kernel_name("attn_query", i, ub),
            cost=cost.query,
            op="attn_query",
            layer=i,
        )
        dbo.launch(
            attn_out_kernel,
            st.acc_o,
            o_flat,
            L.w_o,
            h,
            name=kernel_name("attn_out", i, ub),
            cost=cost.out,
            op="attn_out",
            layer=i,
        )

    def _router(
        self, i: int, L: LayerWeights, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: KernelCosts
    ) -> None:
        c, t = self.cfg, st.t
        ws = current_workspace_manager()
        nrm, logits, wtmp = ws.get_simultaneous(((t, 1), c.dtype), ((t, c.experts), c.dtype), ((t, 1), c.dtype))
        p = st.plan
        dbo.launch(
            router_kernel,
            h,
            nrm,
            st.moe_in,
            st.moe_wire,
            L.w_gate,
            logits,
            p.weights,
            st.topk_ids,
            wtmp,
            p.expert_sorted,
            st.src_copy,
            p.src_token,
            p.row_of,
            p.weights_sorted,
            p.offsets,
            self.arange_rows[: p.rows],
            self.edges,
            name=kernel_name("router", i, ub),
            cost=cost.router,
            op="router",
            layer=i,
        )

    def _moe_workspace(self, st: SimpleNamespace, lb: LLBatch | None = None) -> SimpleNamespace:
        """One request for the whole MoE layer: workspace13 and fused_out share one region,
        workspace2 is separate; plus the experts' dequantized input, a GEMM pad and the shared
        expert's max-size chunk buffers (sliced per chunk). With ``lb`` (the low-latency layout)
        the experts' buffers are ``(local_experts, capacity, ...)``."""
        c, t = self.cfg, st.t
        H, F, Fs, dt = c.hidden, c.expert_ffn, c.shared_ffn, c.dtype
        # rows this process's experts may get
        M = self.transport.expert_capacity(t * c.topk) if lb is None else lb.rows
        chunk = min(c.shared_chunk, c.tokens)
        common, ws2, x_in, pad, sh_h, sh_a = current_workspace_manager().get_simultaneous(
            ((max(M * 2 * F, M * H),), dt),
            ((M, F), dt),
            ((M, H), dt),
            ((MIN_GEMM_ROWS * max(2 * F, H),), dt),
            ((chunk, 2 * Fs), dt),
            ((chunk, Fs), dt),
        )
        lead = (M,) if lb is None else (lb.local_experts, lb.capacity)
        return SimpleNamespace(
            ws13=common[: M * 2 * F].view(*lead, 2 * F),
            fused_out=common[: M * H].view(*lead, H),
            ws2=ws2.view(*lead, F),
            x_in=x_in.view(*lead, H),
            pad=pad,
            sh_h=sh_h,
            sh_a=sh_a,
            chunk=chunk,
        )

    def _shared_expert(
        self, i: int, L: LayerWeights, st: SimpleNamespace, mw: SimpleNamespace, ub: int, cost: KernelCosts
    ) -> None:
        t, chunk = st.t, mw.chunk
        for n, a in enumerate(range(0, t, chunk)):
            b = min(a + chunk, t)
            r = b - a
            dbo.launch(
                shared_kernel,
                st.moe_in[a:b],
                L.ws1,
                L.ws2,
                mw.sh_h[:r],
                mw.sh_a[:r],
                st.shared_out[a:b],
                name=kernel_name("shared", i, ub, f"c{n}"),
                cost=cost.shared_cost(self.cfg, r),
                op="shared",
                layer=i,
            )

    def _moe_ll(
        self, i: int, L: LayerWeights, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: KernelCosts
    ) -> None:
        """Low-latency style: one stream, send + parked recv hook, 2 yields. DeepEP low-latency's
        layout (``LLBatch``): no host sync, no data-dependent shape (capturable)."""
        tr, p = self.transport, st.plan
        lb = tr.ll_batch(p, ubatch=ub)
        dbo.dbo_maybe_run_recv_hook()  # start of MoE prepare: the sibling's combine receive
        mw = self._moe_workspace(st, lb)
        hook = tr.dispatch_send(
            st.moe_wire,
            p,
            mw.x_in,
            ubatch=ub,
            name=kernel_name("dispatch", i, ub),
            layer=i,
            recv_cost=cost.dispatch_recv,
        )
        dbo.dbo_register_recv_hook(hook)
        dbo.dbo_yield()
        dbo.launch(
            experts_ll_kernel,
            mw.x_in,
            L.w1,
            L.w2,
            mw.ws13,
            mw.ws2,
            mw.fused_out,
            lb.first_expert,
            name=kernel_name("experts", i, ub),
            cost=cost.experts,
            op="experts_ll",
            layer=i,
        )
        dbo.dbo_maybe_run_recv_hook()  # before the combine: the sibling's dispatch receive
        hook = tr.combine_send(
            mw.fused_out,
            p,
            st.moe_out,
            ubatch=ub,
            name=kernel_name("combine", i, ub),
            layer=i,
            recv_cost=cost.combine_recv,
        )
        self._shared_expert(i, L, st, mw, ub, cost)
        dbo.dbo_register_recv_hook(hook)
        dbo.dbo_yield()
        dbo.launch(
            finalize_kernel,
            h,
            st.moe_out,
            st.shared_out,
            name=kernel_name("finalize", i, ub),
            cost=cost.finalize,
            op="finalize",
            layer=i,
        )

    def _moe_ht(
        self, i: int, L: LayerWeights, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: KernelCosts
    ) -> None:
        """High-throughput style: compute and comm streams, 3 yields."""
        tr, p = self.transport, st.plan
        eb = tr.expert_batch(p, ubatch=ub)
        mw = self._moe_workspace(st)
        prev = dbo.dbo_get_previous_event(tr.record_event)  # captured before the yield (vllm#38451)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        recv = tr.dispatch(st.moe_wire, p, ubatch=ub, name=kernel_name("dispatch", i, ub), layer=i, previous_event=prev)
        dbo.dbo_switch_to_compute_sync()
        dbo.launch(
            experts_kernel,
            mw.x_in,
            eb.offsets,
            L.w1,
            L.w2,
            mw.ws13,
            mw.ws2,
            mw.fused_out,
            mw.pad,
            recv,
            eb.weights,
            eb.first_expert,
            eb.num_experts,
            name=kernel_name("experts", i, ub),
            cost=cost.experts,
            op="experts",
            layer=i,
        )
        prev = dbo.dbo_get_previous_event(tr.record_event)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        landing = tr.combine(
            mw.fused_out, p, ubatch=ub, name=kernel_name("combine", i, ub), layer=i, previous_event=prev
        )
        dbo.dbo_switch_to_compute()
        self._shared_expert(i, L, st, mw, ub, cost)
        dbo.dbo_switch_to_comm()
        dbo.launch(
            copy_kernel,
            landing,
            st.moe_out,
            name=kernel_name("moe_copy", i, ub),
            kind="comm",
            cost=cost.copy,
            op="moe_copy",
            layer=i,
        )
        dbo.dbo_yield_and_switch_from_comm_to_compute()
        dbo.launch(
            finalize_kernel,
            h,
            st.moe_out,
            st.shared_out,
            name=kernel_name("finalize", i, ub),
            cost=cost.finalize,
            op="finalize",
            layer=i,
        )
