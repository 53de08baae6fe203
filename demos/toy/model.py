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
  (``demos.toy.state.UbatchBuffers``, one per ubatch id, as the reference keeps per-ubatch state
  in arrays indexed by ``dbo_current_ubatch_id()``).
* ``schedule`` places the yields of one MoE layer as the reference does: "ll" (one stream, send
  + recv hook, two yields per layer, as DeepEP low-latency) or "ht" (compute and comm streams, three
  yields per layer, as DeepEP high-throughput). Without DBO every ``dbo_*`` call is a no-op, so the same
  code is the reference run.

Every kernel declares what it is: ``op=`` (one of ``demos.toy.ops.OPS``) and ``layer=``. The
demo's analysis and calibration read them off the kernel records; the display names
(``"<op> L<layer> u<ubatch>"``) are for people. The Work each kernel declares comes from
``demos.toy.cost_model``.

Here: the model's setup (weights, per-ubatch buffers, the cached costs), its ubatch body and the
MoE half of a layer on either schedule. A layer's attention block and router are in
``demos.toy.attention``; the shapes, ``ModelConfig`` (re-exported here), in ``demos.toy.shapes``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

import dbo
from demos.toy.attention import attention, router
from demos.toy.cost_model import KernelCosts, kernel_costs
from demos.toy.kernels import (
    MIN_GEMM_ROWS,
    copy_kernel,
    experts_kernel,
    experts_ll_kernel,
    finalize_kernel,
    load_input_kernel,
    shared_kernel,
)
from demos.toy.ll_layout import LLBatch
from demos.toy.ops import kernel_name
from demos.toy.shapes import ModelConfig
from demos.toy.state import LayerWeights, UbatchBuffers
from demos.toy.transport import Transport
from demos.vocabulary import Schedule
from workspace import current_workspace_manager

__all__ = [
    "ModelConfig",
    "ToyMoE",
    "SCHEDULES",
    "YIELDS_PER_LAYER",
    "MIN_GEMM_ROWS",
]

SCHEDULES = Schedule.choices()
YIELDS_PER_LAYER = {Schedule.LL: 2, Schedule.HT: 3}


# Each writes only into tensors it is given; small per-row temporaries come from the workspace too.


class ToyMoE:
    """The toy model. ``forward(rows)`` is the body one ubatch runs (pass it to
    ``UBatchOrchestrator.run`` with one token range per ubatch); ``hidden`` holds the result.

    ``num_ubatches``: ubatch ids that may run (each gets its ``UbatchBuffers``; the workspace
    manager must have as many ubatches). ``transport``: the all-to-all
    (``demos.toy.transport.Transport``); ``schedule``: "ll" or "ht".
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
        self.on_layer: Any = None
        """Called as ``on_layer(layer, layers)`` before each layer of every ubatch (a heartbeat for long
        simulations; None: nothing)."""

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
        """Modelled Work of every kernel for a ubatch of ``t`` tokens (``demos.toy.cost_model``; cached)."""
        cached = self._costs.get(t)
        if cached is None:
            cached = self._costs[t] = kernel_costs(self.cfg, self.wire, self.schedule, t, ll_rows=self.ll_rows)
        return cached

    ll_rows = "padded"
    """What the ll experts' declared cost counts (``demos.toy.cost_model.kernel_costs``): "padded",
    the rows the batched GEMMs really compute; "valid" only for predicting the H200 measurements,
    whose ll code computed only the routed rows (``demos.fidelity.h200``)."""

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
        moe = self._moe_ll if self.schedule == Schedule.LL else self._moe_ht
        beat = self.on_layer
        for i, layer in enumerate(self.layers):
            if beat is not None:
                beat(i, len(self.layers))
            attention(self, i, layer, h, st, ub, cost)
            router(self, i, layer, h, st, ub, cost)
            moe(i, layer, h, st, ub, cost)
        return h

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
