"""``ZooModel``: one generic transformer for every architecture of the zoo, written against ``dbo`` and
``workspace`` as the toy MoE is.

Per layer: attention by kind (MLA absorbed, GQA/MHA), then a dense gated MLP (the first
``first_k_dense`` layers) or an MoE block: router, dispatch, routed experts, combine, shared experts,
finalize. The MoE block places its yields as vLLM's DBO does with DeepEP: "ll" (one stream: the send
half, the flight on the link stream, a parked receive hook; two yields per layer) or "ht" (compute and
comm streams, three yields per layer). Dense layers never yield. Without DBO every ``dbo_*`` call is a
no-op, so the same code is the reference.

Two ways to run (``device``):

* ``"meta"``, at full size on ``virtual``: no weights and nothing proportional to tokens is allocated;
  every kernel is ``meta_kernel`` and carries its modelled cost (``demos.zoo.costs``). The workspace
  requests still have their real shapes (meta views), so the manager's slot sizes are the real ones.
* ``"cpu"``, real float32 math at a shrunken size (``demos.zoo.models.shrink``) on ``threads`` or
  ``inline`` (``demos.zoo.kernels``); a single process plays every expert's owner, so the all-to-all
  is a copy with the modelled time of the cluster's all-to-all.

Every launch declares its op (``ZOO_OPS`` in ``demos.zoo.profile``) and layer.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch

import dbo
from dbo.costs import Work
from demos.zoo import kernels as K
from demos.zoo.costs import LayerCosts, layer_costs
from demos.zoo.hardware.collectives import tp_collective
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import MLAAttention
from demos.zoo.workload import Workload
from workspace import current_workspace_manager

__all__ = ["ZooModel", "LINK_STREAM"]

LINK_STREAM = "link"
"""The stream the low-latency all-to-all is in flight on (one for every ubatch, in send order)."""


def _record_event() -> Any:
    """An event recorded now on the current stream (DeepEP's "previous event" of a normal kernel)."""
    ev = dbo.current_stream().backend.new_event()
    ev.record(dbo.current_stream())
    return ev


def _name(op: str, layer: int, ub: int) -> str:
    return f"{op} L{layer} u{ub}"


class ZooModel:
    """The generic transformer of ``workload`` (module docstring). ``forward(rows)`` is a ubatch's body;
    ``hidden`` holds the result. ``profile``: the DeviceProfile the GEMMs are folded for and
    ``kernels``: where kernel times come from (``demos.zoo.costs.layer_costs``)."""

    def __init__(
        self, workload: Workload, *, num_ubatches: int, device: str = "meta", profile: Any, seed: int = 0,
        kernels: KernelTimes | None = None, real_context: int = 16,
    ):  # fmt: skip
        self.w = workload
        self.spec = s = workload.spec
        self.device = torch.device(device)
        self.meta = self.device.type == "meta"
        self.dtype = torch.bfloat16 if self.meta else torch.float32
        self.kernels = kernels
        self.profile = profile
        self.schedule = workload.schedule
        self.comm = workload.alltoall
        self.sbo = False  # ZooRun sets it for the single-batch-overlap step (one ubatch, ll)
        T, H = workload.tokens, s.hidden_size
        self.mla = isinstance(s.attention, MLAAttention)
        self._costs: dict[tuple[int, tuple], LayerCosts] = {}
        self._cost_key = [self._layer_key(i) for i in range(s.num_layers)]
        gen = torch.Generator().manual_seed(seed)
        self._gen = gen
        if self.meta:
            self.layers = [None] * s.num_layers
            self.x0 = self.hidden = torch.empty((T, H), dtype=self.dtype, device="meta")
            self.buffers = [None] * num_ubatches
            return
        self.real_context = real_context
        self.layers = [self._make_layer(i) for i in range(s.num_layers)]
        self.x0 = self._rand((T, H), 1.0)
        self.hidden = torch.zeros((T, H), dtype=self.dtype)
        E = s.moe.routed_experts if s.moe is not None else 1
        names = ("moe_in", "stage", "moe_out", "landing", "shared_out")
        self.buffers = [
            SimpleNamespace(**{k: torch.zeros((T, H)) for k in names}, gates=torch.zeros((T, E)))
            for _ in range(num_ubatches)
        ]

    # -- construction -------------------------------------------------------------------------------
    def _layer_key(self, i: int) -> tuple:
        """Layers that cost the same share a key: dense or MoE, and the sliding window."""
        a = self.spec.attention
        return (self.spec.is_moe_layer(i), None if self.mla else a.window_of(i))

    def _rand(self, shape: tuple[int, ...], scale: float) -> torch.Tensor:
        return torch.randn(shape, generator=self._gen, dtype=torch.float32).mul_(scale)

    def _make_layer(self, i: int) -> SimpleNamespace:
        s, H, C = self.spec, self.spec.hidden_size, self.real_context
        a = s.attention
        L = SimpleNamespace()
        if self.mla:
            qd = a.qk_nope_head_dim + a.qk_rope_head_dim
            L.w_q = (
                (self._rand((H, a.heads * qd), H**-0.5),)
                if a.q_lora_rank is None
                else (self._rand((H, a.q_lora_rank), H**-0.5), self._rand((a.q_lora_rank, a.heads * qd), 1.0))
            )
            L.w_kv_a = self._rand((H, a.kv_cache_width), H**-0.5)
            L.w_uk = self._rand((a.heads, a.qk_nope_head_dim, a.kv_lora_rank), a.qk_nope_head_dim**-0.5)
            L.w_uv = self._rand((a.heads, a.kv_lora_rank, a.v_head_dim), a.kv_lora_rank**-0.5)
            L.kv_ctx = self._rand((C, a.kv_cache_width), 1.0)
            L.w_o = self._rand((a.heads * a.v_head_dim, H), (a.heads * a.v_head_dim) ** -0.5)
        else:
            d = a.head_dim
            L.w_qkv = self._rand((H, (a.heads + 2 * a.kv_heads) * d), H**-0.5)
            L.k_ctx = self._rand((a.kv_heads, C, d), 1.0)
            L.v_ctx = self._rand((a.kv_heads, C, d), 1.0)
            L.w_o = self._rand((a.heads * d, H), (a.heads * d) ** -0.5)
        if not s.is_moe_layer(i):
            inter = s.dense_intermediate_size
            L.w1, L.w2 = self._rand((H, 2 * inter), H**-0.5), self._rand((inter, H), inter**-0.5)
            return L
        m = s.moe
        E, inter = m.routed_experts, m.intermediate_size
        L.w_gate = self._rand((H, E), H**-0.5)
        L.bias = self._rand((E,), 0.1) if m.score_correction_bias else None
        L.w1 = self._rand((E, H, 2 * inter), H**-0.5)
        L.w2 = self._rand((E, inter, H), inter**-0.5)
        if m.shared_experts:
            si = inter * m.shared_experts
            L.ws1, L.ws2 = self._rand((H, 2 * si), H**-0.5), self._rand((si, H), si**-0.5)
        return L

    def costs(self, t: int, layer: int) -> LayerCosts:
        """The modelled costs of ``layer`` for a ubatch of ``t`` tokens (cached per kind of layer)."""
        key = (t, self._cost_key[layer])
        c = self._costs.get(key)
        if c is None:
            c = self._costs[key] = layer_costs(self.w, t, layer, self.profile, self.kernels)
        return c

    # -- launching ----------------------------------------------------------------------------------
    def _launch(self, fn: Any, *args: Any, op: str, layer: int, ub: int, cost: Any, kind: str = "compute") -> None:
        dbo.launch(
            K.meta_kernel if self.meta else fn,
            *(() if self.meta else args),
            name=_name(op, layer, ub),
            kind=kind,
            cost=cost,
            op=op,
            layer=layer,
        )

    def _ws(self, *specs: tuple[tuple[int, ...], torch.dtype]) -> list[torch.Tensor]:
        return current_workspace_manager().get_simultaneous(*specs)

    # -- the ubatch body ----------------------------------------------------------------------------
    def forward(self, rows: range) -> torch.Tensor:
        """Every layer for the tokens ``rows`` of the batch; returns the ubatch's rows of ``hidden``."""
        ub = dbo.dbo_current_ubatch_id()
        t, H = len(rows), self.spec.hidden_size
        h = self.hidden[rows.start : rows.stop]
        c0 = self.costs(t, 0)
        emb = c0.finalize if c0.moe_t in (None, t) else Work(flops=t * H, bytes=4.0 * t * H)  # one BF16 pass
        self._launch(K.embed_kernel, self.x0[rows.start : rows.stop], h, op="embed", layer=0, ub=ub, cost=emb)
        if self.w.attention_tp > 1:  # the vocab-parallel embedding's partial rows, all-reduced
            ar = tp_collective(self.w.gpu, "all_reduce", 2.0 * t * H, self.w.attention_tp)
            self._tp(ar, "tp_embed_reduce", 0, ub)
        for i in range(self.spec.num_layers):
            c = self.costs(t, i)
            self._attention(i, h, t, ub, c)
            self._tp(c.tp_attn_reduce, "tp_attn_reduce", i, ub)
            if self.spec.is_moe_layer(i):
                (self._moe_ll if self.schedule == "ll" else self._moe_ht)(i, h, t, ub, c, rows)
                self._tp(c.tp_moe_gather, "tp_moe_gather", i, ub)
            else:
                self._dense(i, h, t, ub, c)
            self._tp(c.tp_mlp_reduce, "tp_mlp_reduce", i, ub)
        return h

    def _tp(self, seconds: float | None, op: str, i: int, ub: int) -> None:
        """An attention-TP collective of ``seconds`` on the compute stream (as vLLM runs it); moves nothing."""
        if seconds is not None:
            self._launch(K.meta_kernel, op=op, layer=i, ub=ub, cost=seconds)

    def _attention(self, i: int, h: torch.Tensor, t: int, ub: int, c: LayerCosts) -> None:
        a, L, dt = self.spec.attention, self.layers[i], self.dtype
        if self.mla:
            lat, rope = a.kv_lora_rank, a.qk_rope_head_dim
            q_lat, q_rope, kv_self, o_lat = self._ws(
                ((t, a.heads, lat), dt), ((t, a.heads, rope), dt), ((t, lat + rope), dt), ((t, a.heads, lat), dt)
            )
            w = () if L is None else (L.w_q, L.w_kv_a, L.w_uk, a.qk_nope_head_dim)
            self._launch(
                K.mla_proj_kernel, h, *w, q_lat, q_rope, kv_self, op="attn_proj", layer=i, ub=ub, cost=c.attn_proj
            )
            kv_ctx = None if L is None else L.kv_ctx
            self._launch(
                K.mla_core_kernel,
                q_lat,
                q_rope,
                kv_self,
                kv_ctx,
                o_lat,
                op="attn_core",
                layer=i,
                ub=ub,
                cost=c.attn_core,
            )
            w = () if L is None else (L.w_uv, L.w_o)
            self._launch(K.mla_out_kernel, o_lat, *w, h, op="attn_out", layer=i, ub=ub, cost=c.attn_out)
            return
        d = a.head_dim
        qkv, out = self._ws(((t, (a.heads + 2 * a.kv_heads) * d), dt), ((t, a.heads * d), dt))
        w_qkv = None if L is None else L.w_qkv
        self._launch(K.gqa_proj_kernel, h, w_qkv, qkv, op="attn_proj", layer=i, ub=ub, cost=c.attn_proj)
        ctx = (None, None) if L is None else (L.k_ctx, L.v_ctx)
        self._launch(
            K.gqa_core_kernel, qkv, *ctx, a.heads, a.kv_heads, out, op="attn_core", layer=i, ub=ub, cost=c.attn_core
        )
        self._launch(K.out_kernel, out, None if L is None else L.w_o, h, op="attn_out", layer=i, ub=ub, cost=c.attn_out)

    def _dense(self, i: int, h: torch.Tensor, t: int, ub: int, c: LayerCosts) -> None:
        inter, dt = self.spec.dense_intermediate_size, self.dtype
        hbuf, out = self._ws(((t, 2 * inter), dt), ((t, self.spec.hidden_size), dt))
        L = self.layers[i]
        w = (None, None) if L is None else (L.w1, L.w2)
        self._launch(K.dense_kernel, h, *w, hbuf, out, op="dense_mlp", layer=i, ub=ub, cost=c.dense_mlp)

    # -- the MoE block ------------------------------------------------------------------------------
    def _moe_prepare(self, i: int, h: torch.Tensor, t: int, ub: int, c: LayerCosts, rows: range) -> SimpleNamespace:
        """The router and the MoE block's workspace: one request (vLLM's ``workspace13`` shared with the
        experts' output, ``workspace2``, the received tokens, the shared expert's buffers)."""
        s, dt, H = self.spec, self.dtype, self.spec.hidden_size
        m = s.moe
        inter, si = m.intermediate_size, m.intermediate_size * max(1, m.shared_experts)
        # rows the busiest rank's experts receive (meta: of its MoE tokens) or every token (real math, masked)
        mt, rt = (self.w.moe_tokens(t), self.w.routed_tokens(t)) if self.meta else (t, t)
        M = max(1, round(rt * m.top_k * self.w.imbalance_at(rt))) if self.meta else t
        ws13, ws2, recv, tmp, y, sh_h, sh_o = self._ws(
            ((M, max(2 * inter, H)), dt),
            ((M, inter), dt),
            ((M, H), dt),
            ((M, H), dt),
            ((M, H), dt),
            ((mt, 2 * si), dt),
            ((mt, H), dt),
        )
        mw = SimpleNamespace(ws13=ws13[:, : 2 * inter], ws2=ws2, recv=recv, tmp=tmp, y=y, sh_h=sh_h, sh_o=sh_o)
        b = self.buffers[ub]
        if b is not None:
            mw.b = b
            mw.x = b.moe_in[:t]
            mw.gates = b.gates[:t]
            mw.stage, mw.out, mw.landing, mw.shared_out = b.stage[:t], b.moe_out[:t], b.landing[:t], b.shared_out[:t]
        else:
            mw.x = mw.gates = mw.stage = mw.out = mw.landing = mw.shared_out = None
        L = self.layers[i]
        args = () if L is None else (L.w_gate, L.bias, m.top_k, m.scoring == "sigmoid", m.norm_topk_prob)
        scale = () if L is None else (m.routed_scaling_factor,)
        self._launch(K.router_kernel, h, *args, *scale, mw.x, mw.gates, op="router", layer=i, ub=ub, cost=c.router)
        return mw

    def _experts(self, i: int, mw: SimpleNamespace, ub: int, c: LayerCosts, op: str) -> None:
        L = self.layers[i]
        w = (None, None) if L is None else (L.w1, L.w2)
        self._launch(
            K.experts_kernel,
            mw.recv,
            mw.gates,
            *w,
            mw.ws13,
            mw.ws2,
            mw.tmp,
            mw.y,
            op=op,
            layer=i,
            ub=ub,
            cost=c.experts,
        )

    def _shared(self, i: int, mw: SimpleNamespace, ub: int, c: LayerCosts) -> None:
        if c.shared is None:
            return
        L = self.layers[i]
        w = (None, None) if L is None else (L.ws1, L.ws2)
        self._launch(K.mlp_kernel, mw.x, *w, mw.sh_h, mw.shared_out, op="shared", layer=i, ub=ub, cost=c.shared)

    def _finalize(self, i: int, h: torch.Tensor, mw: SimpleNamespace, ub: int, c: LayerCosts) -> None:
        shared = mw.shared_out if c.shared is not None else None
        self._launch(K.finalize_kernel, h, mw.out, shared, op="finalize", layer=i, ub=ub, cost=c.finalize)

    def _in_flight(self, src: Any, dst: Any, op: str, i: int, ub: int, seconds: float, send: float | None):
        """A low-latency kernel: its SM-held send half (``send`` seconds, staging ``src`` into the send
        buffer ``dst``; docs/predict.md, "What overlapping costs") on the current stream, then the flight
        on the link stream after the current stream's work so far; returns (the sender's stream, the
        arrival event)."""
        if send:
            cost = Work(flops=send * self.profile.flops_rate("bfloat16"), dtype="bfloat16")
            self._launch(K.copy_kernel, src, dst, op=op.replace("_ll", "_send"), layer=i, ub=ub, cost=cost)
        stream = dbo.current_stream()
        backend = stream.backend
        link = backend.stream(LINK_STREAM)
        sent = backend.new_event()
        sent.record(stream)
        link.wait_event(sent)
        fn = K.meta_kernel if self.meta else K.copy_kernel
        args = () if self.meta else (src, dst)
        link.launch(fn, *args, name=_name(op, i, ub), kind="comm", cost=seconds, op=op, layer=i)
        arrived = backend.new_event()
        arrived.record(link)
        return stream, arrived

    def _hook(self, stream: Any, arrived: Any, src: Any, dst: Any, op: str, i: int, ub: int, cost: Any):
        def hook() -> None:
            stream.wait_event(arrived)
            fn, args = (K.meta_kernel, ()) if self.meta else (K.copy_kernel, (src, dst))
            stream.launch(fn, *args, name=_name(op, i, ub), kind="compute", cost=cost, op=op, layer=i)

        hook.__name__ = _name(op, i, ub)
        return hook

    def _moe_sbo(self, i: int, h: torch.Tensor, mw: SimpleNamespace, ub: int, c: LayerCosts) -> None:
        """Single-batch overlap (SGLang with DeepEP): the shared expert beside the dispatch in flight, the
        combine in flight beside the down GEMM (its blocks sent as they finish), no split, no yield."""
        stream, arrived = self._in_flight(mw.x, mw.stage, "dispatch_ll", i, ub, c.dispatch, c.dispatch_send)
        self._shared(i, mw, ub, c)
        self._hook(stream, arrived, mw.stage, mw.recv, "dispatch_recv", i, ub, c.dispatch_recv)()
        up, down = c.experts_split
        self._launch(K.meta_kernel, op="experts_up", layer=i, ub=ub, cost=up)
        stream, arrived = self._in_flight(mw.y, mw.landing, "combine_ll", i, ub, c.combine, c.combine_send)
        self._experts(i, mw, ub, replace(c, experts=down), "experts_down")  # the real math runs here, whole
        self._hook(stream, arrived, mw.landing, mw.out, "combine_recv", i, ub, c.combine_recv)()
        self._finalize(i, h, mw, ub, c)

    def _moe_ll(self, i: int, h: torch.Tensor, t: int, ub: int, c: LayerCosts, rows: range) -> None:
        """Low-latency style: one stream, send plus parked receive hook, 2 yields (DeepEP low-latency)."""
        dbo.dbo_maybe_run_recv_hook()  # the sibling's combine receive
        mw = self._moe_prepare(i, h, t, ub, c, rows)
        if self.sbo and self.comm:
            return self._moe_sbo(i, h, mw, ub, c)
        if self.comm:
            stream, arrived = self._in_flight(mw.x, mw.stage, "dispatch_ll", i, ub, c.dispatch, c.dispatch_send)
            dbo.dbo_register_recv_hook(
                self._hook(stream, arrived, mw.stage, mw.recv, "dispatch_recv", i, ub, c.dispatch_recv)
            )
            dbo.dbo_yield()
        else:
            self._launch(K.copy_kernel, mw.x, mw.recv, op="dispatch_recv", layer=i, ub=ub, cost=c.dispatch_recv)
        self._experts(i, mw, ub, c, "experts_ll")
        if self.comm:
            dbo.dbo_maybe_run_recv_hook()  # the sibling's dispatch receive
            stream, arrived = self._in_flight(mw.y, mw.landing, "combine_ll", i, ub, c.combine, c.combine_send)
            self._shared(i, mw, ub, c)
            dbo.dbo_register_recv_hook(
                self._hook(stream, arrived, mw.landing, mw.out, "combine_recv", i, ub, c.combine_recv)
            )
            dbo.dbo_yield()
        else:
            self._launch(K.copy_kernel, mw.y, mw.out, op="combine_recv", layer=i, ub=ub, cost=c.combine_recv)
            self._shared(i, mw, ub, c)
        self._finalize(i, h, mw, ub, c)

    def _moe_ht(self, i: int, h: torch.Tensor, t: int, ub: int, c: LayerCosts, rows: range) -> None:
        """High-throughput style: compute and comm streams, 3 yields (DeepEP normal kernels)."""
        mw = self._moe_prepare(i, h, t, ub, c, rows)
        if not self.comm:
            self._launch(K.copy_kernel, mw.x, mw.recv, op="dispatch_recv", layer=i, ub=ub, cost=c.dispatch_recv)
            self._experts(i, mw, ub, c, "experts")
            self._launch(K.copy_kernel, mw.y, mw.out, op="combine_recv", layer=i, ub=ub, cost=c.combine_recv)
            self._shared(i, mw, ub, c)
            self._finalize(i, h, mw, ub, c)
            return
        prev = dbo.dbo_get_previous_event(_record_event)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        dbo.current_stream().wait_event(prev)
        self._launch(K.copy_kernel, mw.x, mw.recv, op="dispatch", layer=i, ub=ub, cost=c.dispatch, kind="comm")
        dbo.dbo_switch_to_compute_sync()
        self._experts(i, mw, ub, c, "experts")
        prev = dbo.dbo_get_previous_event(_record_event)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        dbo.current_stream().wait_event(prev)
        self._launch(K.copy_kernel, mw.y, mw.landing, op="combine", layer=i, ub=ub, cost=c.combine, kind="comm")
        dbo.dbo_switch_to_compute()
        self._shared(i, mw, ub, c)
        dbo.dbo_switch_to_comm()
        self._launch(K.copy_kernel, mw.landing, mw.out, op="moe_copy", layer=i, ub=ub, cost=c.finalize, kind="comm")
        dbo.dbo_yield_and_switch_from_comm_to_compute()
        self._finalize(i, h, mw, ub, c)
