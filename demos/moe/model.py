"""A toy MoE transformer written against ``dbo`` (streams, yields) and ``workspace`` (scratch).

Each layer: an attention block (decode-style: every token attends to a shared cached context
and to itself), a router (top-k of a softmax gate), an all-to-all *dispatch* of the token copies
to the experts' owner, the routed experts, an all-to-all *combine* back, and a shared expert;
the MoE output is added to the residual stream.

* Every kernel is launched through ``dbo.launch`` (or a stream's ``launch``) and writes into
  output tensors passed as arguments; nothing is computed synchronously on the host. Each kernel
  declares its cost (``dbo.costs.Work``) for the virtual backend.
* Scratch memory comes from the process-global workspace manager, in the reference's patterns
  (docs/overlap.md): the attention output buffers are requested twice per layer with the same
  leading shapes, so the second request reuses (overwrites) the first one's memory after its
  result was consumed; the MoE layer requests one region shared by ``workspace13`` and
  ``fused_out`` plus a separate ``workspace2``; the shared expert runs in token chunks over a
  max-size buffer sliced per chunk. Every scratch view is used only until the ubatch's next
  ``get_simultaneous`` call; data that must outlive it lives in per-ubatch persistent buffers
  (``_Slot``, one per ubatch id, as the reference keeps per-ubatch state in arrays indexed by
  ``dbo_current_ubatch_id()``).
* ``schedule`` places the yields of one MoE layer as the reference does: "ll" (one stream, send
  + recv hook, two yields per layer, as DeepEP low-latency) or "ht" (compute and comm streams, three
  yields per layer, as DeepEP high-throughput). Without DBO every ``dbo_*`` call is a no-op, so the same
  code is the reference run.

Kernel names are ``"<op> L<layer> u<ubatch>"`` (``parse_kernel_name`` reads them back); the
demo's analysis relies on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import torch

import dbo
from dbo.costs import Work
from workspace import current_workspace_manager

from .comm import RoutePlan, Transport

__all__ = [
    "ModelConfig",
    "ToyMoE",
    "SCHEDULES",
    "YIELDS_PER_LAYER",
    "parse_kernel_name",
    "kernel_name",
    "OP_LETTERS",
    "MIN_GEMM_ROWS",
]

SCHEDULES = ("ll", "ht")
YIELDS_PER_LAYER = {"ll": 2, "ht": 3}
MIN_GEMM_ROWS = 4
"""Expert segments shorter than this are computed through a padded 4-row window: CPU GEMMs take
a different code path (with different rounding) for 1-3 rows, which would make a row's result
depend on how many rows its expert got, i.e. on the ubatch split."""

OP_LETTERS = {
    "load_input": "i",
    "attn_qkv": "A",
    "attn_context": "A",
    "attn_query": "A",
    "attn_out": "A",
    "router": "R",
    "dispatch": "D",
    "dispatch_recv": "d",
    "experts": "E",
    "combine": "C",
    "combine_recv": "c",
    "shared": "S",
    "moe_copy": "c",
    "finalize": "F",
}
"""One letter per kernel op, for the timeline's kernel rows."""


def kernel_name(op: str, layer: int, ubatch: int, extra: str = "") -> str:
    return f"{op} L{layer} u{ubatch}" + (f" {extra}" if extra else "")


def parse_kernel_name(name: str) -> tuple[str, int, int] | None:
    """``(op, layer, ubatch)`` of a model kernel name, or None for other names."""
    parts = name.split()
    if len(parts) < 3 or not parts[1].startswith("L") or not parts[2].startswith("u"):
        return None
    try:
        return parts[0], int(parts[1][1:]), int(parts[2][1:])
    except ValueError:
        return None


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
        return per_layer * c.layers * _itemsize(c.dtype)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


# --- kernels -------------------------------------------------------------------------------------
# Each writes only into tensors it is given; small per-row temporaries come from the workspace too.


def _k_load_input(src: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(src)


def _rmsnorm(x: torch.Tensor, nrm: torch.Tensor, out: torch.Tensor) -> None:
    torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True, out=nrm)
    nrm.mul_(x.shape[-1] ** -0.5).add_(1e-6)
    torch.div(x, nrm, out=out)


def _k_attn_qkv(h, nrm, xn, w_qkv, qkv, q_scale: float) -> None:
    _rmsnorm(h, nrm, xn)
    torch.mm(xn, w_qkv, out=qkv)
    qkv[:, : w_qkv.shape[0]].mul_(q_scale)


def _k_attn_context(q, k_ctx, v_ctx, scores, out, lse, l, acc_o, acc_lse) -> None:
    """Attention of each token over the shared cached context into scratch (out, lse), then
    consumed into the persistent accumulator (the scratch is free after this kernel)."""
    torch.bmm(q, k_ctx, out=scores)
    torch.amax(scores, dim=-1, keepdim=True, out=lse)
    scores.sub_(lse).exp_()
    torch.sum(scores, dim=-1, keepdim=True, out=l)
    torch.bmm(scores, v_ctx, out=out)
    out.div_(l)
    lse.add_(l.log_())
    acc_o.copy_(out)
    acc_lse.copy_(lse)


def _k_attn_query(q, k, v, out, lse, m, w, acc_o, acc_lse) -> None:
    """Attention of each token to itself into scratch (out, lse), merged into the accumulator
    by log-sum-exp weights."""
    torch.mul(q, k, out=out)
    torch.sum(out, dim=-1, keepdim=True, out=lse)
    out.copy_(v)
    torch.maximum(acc_lse, lse, out=m)
    torch.sub(acc_lse, m, out=w).exp_()
    lse.sub_(m).exp_()
    acc_o.mul_(w).add_(out.mul_(lse))
    w.add_(lse)
    acc_o.div_(w)


def _k_attn_out(acc_o, o_flat, w_o, h) -> None:
    nh, t, d = acc_o.shape
    o_flat.view(t, nh, d).copy_(acc_o.transpose(0, 1))
    h.addmm_(o_flat, w_o)


def _k_router(h, nrm, moe_in, moe_wire, w_gate, logits, topk_w, topk_ids, wtmp, sorted_ids, src_slot, src_token, row_of, w_sorted, offsets, arange_rows, edges) -> None:
    _rmsnorm(h, nrm, moe_in)
    moe_wire.copy_(moe_in)  # "quant": the dispatch payload in the wire dtype
    torch.mm(moe_in, w_gate, out=logits)
    torch.topk(logits, topk_w.shape[1], dim=-1, out=(topk_w, topk_ids))
    torch.amax(topk_w, dim=-1, keepdim=True, out=wtmp)
    topk_w.sub_(wtmp).exp_()
    torch.sum(topk_w, dim=-1, keepdim=True, out=wtmp)
    topk_w.div_(wtmp)
    torch.sort(topk_ids.view(-1), stable=True, out=(sorted_ids, src_slot))
    torch.div(src_slot, topk_w.shape[1], rounding_mode="floor", out=src_token)
    row_of.scatter_(0, src_slot, arange_rows)
    torch.index_select(topk_w.view(-1), 0, src_slot, out=w_sorted)
    torch.searchsorted(sorted_ids, edges, out=offsets)


def _mm_rows(x: torch.Tensor, a: int, b: int, w: torch.Tensor, out: torch.Tensor, pad: torch.Tensor) -> None:
    """out[a:b] = x[a:b] @ w, through a MIN_GEMM_ROWS-row window when b - a is smaller."""
    m = b - a
    total = x.shape[0]
    if m >= MIN_GEMM_ROWS or total < MIN_GEMM_ROWS:
        torch.mm(x[a:b], w, out=out[a:b])
        return
    s = min(a, total - MIN_GEMM_ROWS)
    p = pad[: MIN_GEMM_ROWS * w.shape[1]].view(MIN_GEMM_ROWS, w.shape[1])
    torch.mm(x[s : s + MIN_GEMM_ROWS], w, out=p)
    out[a:b].copy_(p[a - s : a - s + m])


def _k_experts(x, offsets, w1, w2, ws13, ws2, fused_out, pad, wire_in, w_sorted, first=0, num_experts=None) -> None:
    """The routed experts over expert-sorted rows: gate_up into workspace13, SiLU-and-mul into
    workspace2, down into fused_out (which reuses workspace13's memory: it is dead by then).
    Segment j of ``offsets`` belongs to expert ``first + j % num_experts`` (``demos.moe.comm.ExpertBatch``;
    by default one segment per expert); only the first ``offsets[-1]`` rows are present.
    ``wire_in``: dequantize it into ``x`` first (high-throughput path). ``w_sorted``: apply the
    router weights to the outputs (the high-throughput "weight and reduce" before the combine)."""
    bounds = offsets.tolist()
    n = bounds[-1]
    if num_experts is None:
        num_experts = len(bounds) - 1
    if wire_in is not None:
        x[:n].copy_(wire_in[:n])
    f = ws2.shape[1]
    for j in range(len(bounds) - 1):
        a, b = bounds[j], bounds[j + 1]
        if a < b:
            _mm_rows(x, a, b, w1[first + j % num_experts], ws13, pad)
    gate, up = ws13[:n, :f], ws13[:n, f:]
    torch.sigmoid(gate, out=ws2[:n])
    ws2[:n].mul_(gate).mul_(up)
    for j in range(len(bounds) - 1):
        a, b = bounds[j], bounds[j + 1]
        if a < b:
            _mm_rows(ws2, a, b, w2[first + j % num_experts], fused_out, pad)
    if w_sorted is not None:
        fused_out[:n].mul_(w_sorted[:n].unsqueeze(1))


def _k_shared(x, w1, w2, hbuf, abuf, out) -> None:
    torch.mm(x, w1, out=hbuf)
    f = abuf.shape[1]
    gate, up = hbuf[:, :f], hbuf[:, f:]
    torch.sigmoid(gate, out=abuf)
    abuf.mul_(gate).mul_(up)
    torch.mm(abuf, w2, out=out)


def _k_copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(src)


def _k_finalize(h, routed, shared) -> None:
    h.add_(routed).add_(shared)


# --- per-ubatch persistent state ----------------------------------------------------------------


class _Slot:
    """Buffers one ubatch keeps across its yields and workspace calls (capacity: all tokens)."""

    def __init__(self, cfg: ModelConfig, wire: torch.dtype, device: Any):
        T, H, K, E = cfg.tokens, cfg.hidden, cfg.topk, cfg.experts
        dt, i64 = cfg.dtype, torch.int64

        def buf(n: int, dtype: torch.dtype = dt) -> torch.Tensor:
            return torch.empty((n,), dtype=dtype, device=device)

        self.cfg = cfg
        self.qkv = buf(T * 3 * H)
        self.acc_o = buf(T * H)
        self.acc_lse = buf(T * cfg.heads)
        self.moe_in = buf(T * H)
        self.moe_wire = buf(T * H, wire)
        self.topk_w = buf(T * K)
        self.topk_ids = buf(T * K, i64)
        self.src_slot = buf(T * K, i64)
        self.src_token = buf(T * K, i64)
        self.row_of = buf(T * K, i64)
        self.w_sorted = buf(T * K)
        self.offsets = buf(E + 1, i64)
        self.shared_out = buf(T * H)
        self.moe_out = buf(T * H)
        self._views: dict[int, SimpleNamespace] = {}

    def views(self, t: int) -> SimpleNamespace:
        """Views of the buffers for a ubatch of ``t`` tokens (cached: built once per size)."""
        v = self._views.get(t)
        if v is not None:
            return v
        c = self.cfg
        H, K, nh = c.hidden, c.topk, c.heads
        d = H // nh
        qkv = self.qkv[: t * 3 * H].view(t, 3 * H)
        v = SimpleNamespace(
            t=t,
            qkv=qkv,
            q=qkv[:, :H].view(t, nh, d).transpose(0, 1),
            k=qkv[:, H : 2 * H].view(t, nh, d).transpose(0, 1),
            v=qkv[:, 2 * H :].view(t, nh, d).transpose(0, 1),
            acc_o=self.acc_o[: t * H].view(nh, t, d),
            acc_lse=self.acc_lse[: t * nh].view(nh, t, 1),
            moe_in=self.moe_in[: t * H].view(t, H),
            moe_wire=self.moe_wire[: t * H].view(t, H),
            shared_out=self.shared_out[: t * H].view(t, H),
            moe_out=self.moe_out[: t * H].view(t, H),
            topk_ids=self.topk_ids[: t * K].view(t, K),
            src_slot=self.src_slot[: t * K],
            plan=RoutePlan(
                num_tokens=t,
                topk=K,
                src_token=self.src_token[: t * K],
                row_of=self.row_of[: t * K],
                weights=self.topk_w[: t * K].view(t, K),
                weights_sorted=self.w_sorted[: t * K],
                offsets=self.offsets,
            ),
        )
        self._views[t] = v
        return v


@dataclass
class _Layer:
    w_qkv: torch.Tensor
    w_o: torch.Tensor
    k_ctx: torch.Tensor
    v_ctx: torch.Tensor
    w_gate: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    ws1: torch.Tensor
    ws2: torch.Tensor


@dataclass
class _Costs:
    """Modelled Work of each kernel for a ubatch of ``t`` tokens (used by the virtual backend)."""

    load_input: Work
    qkv: Work
    context: Work
    query: Work
    out: Work
    router: Work
    experts: Work
    dispatch_recv: Work
    combine_recv: Work
    finalize: Work
    copy: Work
    shared: dict[int, Work] = field(default_factory=dict)


class ToyMoE:
    """The toy model. ``forward(rows)`` is the body one ubatch runs (pass it to
    ``UBatchOrchestrator.run`` with one token range per ubatch); ``hidden`` holds the result.

    ``num_slots``: ubatch ids that may run (the workspace manager must have as many slots).
    ``transport``: the all-to-all (``demos.moe.comm.Transport``); ``schedule``: "ll" or "ht".
    """

    def __init__(self, config: ModelConfig, transport: Transport, *, num_slots: int, schedule: str = "ll"):
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
        transport.setup(num_slots=num_slots, max_tokens=T, topk=K, hidden=H, dtype=cfg.dtype, device=self.device)
        self.wire = transport.wire_dtype
        gen = torch.Generator().manual_seed(cfg.seed)
        self.layers = [self._make_layer(gen) for _ in range(cfg.layers)]
        self.x0 = self._rand((T, H), gen, 1.0)
        self.hidden = torch.empty((T, H), dtype=cfg.dtype, device=self.device)
        self.slots = [_Slot(cfg, self.wire, self.device) for _ in range(num_slots)]
        self.arange_rows = torch.arange(T * K, dtype=torch.int64, device=self.device)
        self.edges = torch.arange(E + 1, dtype=torch.int64, device=self.device)
        self._costs: dict[int, _Costs] = {}

    # -- construction -------------------------------------------------------------------------------
    def _rand(self, shape: tuple[int, ...], gen: torch.Generator, scale: float) -> torch.Tensor:
        if self.meta:
            return torch.empty(shape, dtype=self.cfg.dtype, device="meta")
        t = torch.randn(shape, generator=gen, dtype=torch.float32).mul_(scale)
        return t.to(dtype=self.cfg.dtype, device=self.device)

    def _make_layer(self, gen: torch.Generator) -> _Layer:
        c = self.cfg
        H, E, F, Fs, C = c.hidden, c.experts, c.expert_ffn, c.shared_ffn, c.context
        nh, d = self.heads, self.head_dim
        return _Layer(
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

    def costs(self, t: int) -> _Costs:
        """Modelled Work of every kernel for a ubatch of ``t`` tokens (roofline inputs)."""
        cached = self._costs.get(t)
        if cached is not None:
            return cached
        c = self.cfg
        H, E, K, F, Fs, C = c.hidden, c.experts, c.topk, c.expert_ffn, c.shared_ffn, c.context
        nh = self.heads
        isz, wsz = _itemsize(c.dtype), _itemsize(self.wire)
        M = t * K
        local = min(c.experts_per_rank, M)
        costs = _Costs(
            load_input=Work(bytes=2 * t * H * isz),
            qkv=Work(flops=2 * t * H * 3 * H + 4 * t * H, bytes=(3 * t * H + 3 * H * H + 3 * t * H) * isz),
            context=Work(flops=4 * t * C * H + 5 * nh * t * C, bytes=(t * H + 2 * C * H + 3 * nh * t * C + 3 * t * H) * isz),
            query=Work(flops=8 * t * H, bytes=8 * t * H * isz),
            out=Work(flops=2 * t * H * H, bytes=(H * H + 4 * t * H) * isz),
            router=Work(
                flops=2 * t * H * E + 4 * t * H + 8 * M,
                bytes=(3 * t * H + H * E + 2 * t * E) * isz + t * H * wsz + 8 * 8 * M,
            ),
            experts=Work(
                flops=2 * M * H * 2 * F + 2 * M * F * H + 4 * M * F,
                bytes=local * 3 * H * F * isz + (M * H + 3 * M * 2 * F + 2 * M * F + M * H) * isz,
            ),
            dispatch_recv=Work(bytes=M * H * (wsz + isz)),
            combine_recv=Work(flops=2 * M * H, bytes=(2 * M * H + t * H) * isz),
            finalize=Work(flops=2 * t * H, bytes=4 * t * H * isz),
            copy=Work(bytes=2 * t * H * isz),
        )
        self._costs[t] = costs
        return costs

    def _shared_cost(self, costs: _Costs, rows: int) -> Work:
        w = costs.shared.get(rows)
        if w is None:
            c = self.cfg
            H, Fs = c.hidden, c.shared_ffn
            isz = _itemsize(c.dtype)
            w = costs.shared[rows] = Work(
                flops=6 * rows * H * Fs + 4 * rows * Fs, bytes=(3 * H * Fs + 2 * rows * H + 6 * rows * Fs) * isz
            )
        return w

    # -- the ubatch body ----------------------------------------------------------------------------
    def forward(self, rows: range) -> torch.Tensor:
        """Run every layer for the tokens ``rows`` of the batch; returns the ubatch's view of
        ``hidden`` (complete once the step's streams are synchronized)."""
        ub = dbo.dbo_current_ubatch_id()
        st = self.slots[ub].views(len(rows))
        h = self.hidden[rows.start : rows.stop]
        cost = self.costs(st.t)
        dbo.launch(_k_load_input, self.x0[rows.start : rows.stop], h, name=kernel_name("load_input", 0, ub), cost=cost.load_input)
        moe = self._moe_ll if self.schedule == "ll" else self._moe_ht
        for i, layer in enumerate(self.layers):
            self._attention(i, layer, h, st, ub, cost)
            self._router(i, layer, h, st, ub, cost)
            moe(i, layer, h, st, ub, cost)
        return h

    def _attention(self, i: int, L: _Layer, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: _Costs) -> None:
        c, t = self.cfg, st.t
        nh, d, dt = self.heads, self.head_dim, c.dtype
        ws = current_workspace_manager()
        # 1st request: the context attention's output buffers (+ its temporaries)
        out, lse, l, scores, xn, nrm = ws.get_simultaneous(
            ((nh, t, d), dt), ((nh, t, 1), dt), ((nh, t, 1), dt), ((nh, t, c.context), dt), ((t, c.hidden), dt), ((t, 1), dt)
        )
        dbo.launch(_k_attn_qkv, h, nrm, xn, L.w_qkv, st.qkv, d**-0.5, name=kernel_name("attn_qkv", i, ub), cost=cost.qkv)
        dbo.launch(
            _k_attn_context, st.q, L.k_ctx, L.v_ctx, scores, out, lse, l, st.acc_o, st.acc_lse,
            name=kernel_name("attn_context", i, ub), cost=cost.context,
        )
        del out, lse, l, scores, xn, nrm  # consumed by the kernel above; the next request reuses the memory
        # 2nd request: the same leading shapes, so the query attention's outputs land where the
        # context attention's were (the reference's DCP pattern)
        out, lse, m, w, o_flat = ws.get_simultaneous(
            ((nh, t, d), dt), ((nh, t, 1), dt), ((nh, t, 1), dt), ((nh, t, 1), dt), ((t, c.hidden), dt)
        )
        dbo.launch(
            _k_attn_query, st.q, st.k, st.v, out, lse, m, w, st.acc_o, st.acc_lse,
            name=kernel_name("attn_query", i, ub), cost=cost.query,
        )
        dbo.launch(_k_attn_out, st.acc_o, o_flat, L.w_o, h, name=kernel_name("attn_out", i, ub), cost=cost.out)

    def _router(self, i: int, L: _Layer, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: _Costs) -> None:
        c, t = self.cfg, st.t
        ws = current_workspace_manager()
        nrm, logits, wtmp, sorted_ids = ws.get_simultaneous(
            ((t, 1), c.dtype), ((t, c.experts), c.dtype), ((t, 1), c.dtype), ((t * c.topk,), torch.int64)
        )
        p = st.plan
        dbo.launch(
            _k_router, h, nrm, st.moe_in, st.moe_wire, L.w_gate, logits, p.weights, st.topk_ids, wtmp, sorted_ids,
            st.src_slot, p.src_token, p.row_of, p.weights_sorted, p.offsets, self.arange_rows[: p.rows], self.edges,
            name=kernel_name("router", i, ub), cost=cost.router,
        )

    def _moe_workspace(self, st: SimpleNamespace) -> SimpleNamespace:
        """One request for the whole MoE layer: workspace13 and fused_out share one region,
        workspace2 is separate; plus the experts' dequantized input, a GEMM pad and the shared
        expert's max-size chunk buffers (sliced per chunk)."""
        c, t = self.cfg, st.t
        H, F, Fs, dt = c.hidden, c.expert_ffn, c.shared_ffn, c.dtype
        M = self.transport.expert_capacity(t * c.topk)  # rows this process's experts may get
        chunk = min(c.shared_chunk, c.tokens)
        common, ws2, x_in, pad, sh_h, sh_a = current_workspace_manager().get_simultaneous(
            ((max(M * 2 * F, M * H),), dt),
            ((M, F), dt),
            ((M, H), dt),
            ((MIN_GEMM_ROWS * max(2 * F, H),), dt),
            ((chunk, 2 * Fs), dt),
            ((chunk, Fs), dt),
        )
        return SimpleNamespace(
            ws13=common[: M * 2 * F].view(M, 2 * F),
            fused_out=common[: M * H].view(M, H),
            ws2=ws2,
            x_in=x_in,
            pad=pad,
            sh_h=sh_h,
            sh_a=sh_a,
            chunk=chunk,
        )

    def _shared_expert(self, i: int, L: _Layer, st: SimpleNamespace, mw: SimpleNamespace, ub: int, cost: _Costs) -> None:
        t, chunk = st.t, mw.chunk
        for n, a in enumerate(range(0, t, chunk)):
            b = min(a + chunk, t)
            r = b - a
            dbo.launch(
                _k_shared, st.moe_in[a:b], L.ws1, L.ws2, mw.sh_h[:r], mw.sh_a[:r], st.shared_out[a:b],
                name=kernel_name("shared", i, ub, f"c{n}"), cost=self._shared_cost(cost, r),
            )

    def _moe_ll(self, i: int, L: _Layer, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: _Costs) -> None:
        """Low-latency style: one stream, send + parked recv hook, 2 yields."""
        tr, p = self.transport, st.plan
        eb = tr.expert_batch(p, slot=ub)
        dbo.dbo_maybe_run_recv_hook()  # start of MoE prepare: the sibling's combine receive
        mw = self._moe_workspace(st)
        hook = tr.dispatch_send(
            st.moe_wire, p, mw.x_in, slot=ub, name=kernel_name("dispatch", i, ub), recv_cost=cost.dispatch_recv
        )
        dbo.dbo_register_recv_hook(hook)
        dbo.dbo_yield()
        dbo.launch(
            _k_experts, mw.x_in, eb.offsets, L.w1, L.w2, mw.ws13, mw.ws2, mw.fused_out, mw.pad, None, None,
            eb.first_expert, eb.num_experts, name=kernel_name("experts", i, ub), cost=cost.experts,
        )
        dbo.dbo_maybe_run_recv_hook()  # before the combine: the sibling's dispatch receive
        hook = tr.combine_send(
            mw.fused_out, p, st.moe_out, slot=ub, name=kernel_name("combine", i, ub), recv_cost=cost.combine_recv
        )
        self._shared_expert(i, L, st, mw, ub, cost)
        dbo.dbo_register_recv_hook(hook)
        dbo.dbo_yield()
        dbo.launch(_k_finalize, h, st.moe_out, st.shared_out, name=kernel_name("finalize", i, ub), cost=cost.finalize)

    def _moe_ht(self, i: int, L: _Layer, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: _Costs) -> None:
        """High-throughput style: compute and comm streams, 3 yields."""
        tr, p = self.transport, st.plan
        eb = tr.expert_batch(p, slot=ub)
        mw = self._moe_workspace(st)
        prev = dbo.dbo_get_previous_event(tr.record_event)  # captured before the yield (vllm#38451)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        recv = tr.dispatch(st.moe_wire, p, slot=ub, name=kernel_name("dispatch", i, ub), previous_event=prev)
        dbo.dbo_switch_to_compute_sync()
        dbo.launch(
            _k_experts, mw.x_in, eb.offsets, L.w1, L.w2, mw.ws13, mw.ws2, mw.fused_out, mw.pad, recv, eb.weights,
            eb.first_expert, eb.num_experts, name=kernel_name("experts", i, ub), cost=cost.experts + cost.dispatch_recv,
        )
        prev = dbo.dbo_get_previous_event(tr.record_event)
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        landing = tr.combine(mw.fused_out, p, slot=ub, name=kernel_name("combine", i, ub), previous_event=prev)
        dbo.dbo_switch_to_compute()
        self._shared_expert(i, L, st, mw, ub, cost)
        dbo.dbo_switch_to_comm()
        dbo.launch(_k_copy, landing, st.moe_out, name=kernel_name("moe_copy", i, ub), kind="comm", cost=cost.copy)
        dbo.dbo_yield_and_switch_from_comm_to_compute()
        dbo.launch(_k_finalize, h, st.moe_out, st.shared_out, name=kernel_name("finalize", i, ub), cost=cost.finalize)
