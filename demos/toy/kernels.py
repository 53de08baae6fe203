"""The toy MoE's kernels: plain functions that write into the output tensors passed to them.

``demos.toy.model`` launches each through ``dbo.launch`` with its modelled cost and the op it is
(``demos.toy.ops``); nothing here knows about streams, ubatches or the workspace.
"""

from __future__ import annotations

import torch

from dbo.costs import syncs_host

__all__ = [
    "MIN_GEMM_ROWS",
    "expert_gemm_rows",
    "load_input_kernel",
    "attn_qkv_kernel",
    "attn_context_kernel",
    "attn_query_kernel",
    "attn_out_kernel",
    "router_kernel",
    "experts_kernel",
    "experts_ll_kernel",
    "shared_kernel",
    "copy_kernel",
    "finalize_kernel",
]

MIN_GEMM_ROWS = 4
"""Expert segments shorter than this are computed through a padded 4-row window: CPU GEMMs take
a different code path (with different rounding) for 1-3 rows, which would make a row's result
depend on how many rows its expert got, i.e. on the ubatch split."""


def load_input_kernel(src: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(src)


def _rmsnorm(x: torch.Tensor, nrm: torch.Tensor, out: torch.Tensor) -> None:
    torch.linalg.vector_norm(x, 2, dim=-1, keepdim=True, out=nrm)
    nrm.mul_(x.shape[-1] ** -0.5).add_(1e-6)
    torch.div(x, nrm, out=out)


def attn_qkv_kernel(h, nrm, xn, w_qkv, qkv, q_scale: float) -> None:
    _rmsnorm(h, nrm, xn)
    torch.mm(xn, w_qkv, out=qkv)
    qkv[:, : w_qkv.shape[0]].mul_(q_scale)


def attn_context_kernel(q, k_ctx, v_ctx, scores, out, lse, denom, acc_o, acc_lse) -> None:
    """Attention of each token over the shared cached context into scratch (out, lse), then
    consumed into the persistent accumulator (the scratch is free after this kernel)."""
    torch.bmm(q, k_ctx, out=scores)
    torch.amax(scores, dim=-1, keepdim=True, out=lse)
    scores.sub_(lse).exp_()
    torch.sum(scores, dim=-1, keepdim=True, out=denom)
    torch.bmm(scores, v_ctx, out=out)
    out.div_(denom)
    lse.add_(denom.log_())
    acc_o.copy_(out)
    acc_lse.copy_(lse)


def attn_query_kernel(q, k, v, out, lse, m, w, acc_o, acc_lse) -> None:
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


def attn_out_kernel(acc_o, o_flat, w_o, h) -> None:
    nh, t, d = acc_o.shape
    o_flat.view(t, nh, d).copy_(acc_o.transpose(0, 1))
    h.addmm_(o_flat, w_o)


def router_kernel(
    h,
    nrm,
    moe_in,
    moe_wire,
    w_gate,
    logits,
    topk_w,
    topk_ids,
    wtmp,
    sorted_ids,
    src_copy,
    src_token,
    row_of,
    w_sorted,
    offsets,
    arange_rows,
    edges,
) -> None:
    _rmsnorm(h, nrm, moe_in)
    moe_wire.copy_(moe_in)  # "quant": the dispatch payload in the wire dtype
    torch.mm(moe_in, w_gate, out=logits)
    torch.topk(logits, topk_w.shape[1], dim=-1, out=(topk_w, topk_ids))
    torch.amax(topk_w, dim=-1, keepdim=True, out=wtmp)
    topk_w.sub_(wtmp).exp_()
    torch.sum(topk_w, dim=-1, keepdim=True, out=wtmp)
    topk_w.div_(wtmp)
    torch.sort(topk_ids.view(-1), stable=True, out=(sorted_ids, src_copy))
    torch.div(src_copy, topk_w.shape[1], rounding_mode="floor", out=src_token)
    row_of.scatter_(0, src_copy, arange_rows)
    torch.index_select(topk_w.view(-1), 0, src_copy, out=w_sorted)
    torch.searchsorted(sorted_ids, edges, out=offsets)


def expert_gemm_rows(rows: int, experts: int, padded: bool) -> float:
    """Rows of each expert's GEMM when ``rows`` token copies spread evenly over ``experts`` experts
    (the average, fractional): ``_mm_rows`` runs an expert with fewer than MIN_GEMM_ROWS rows on a
    MIN_GEMM_ROWS-row window (``padded``, the high-throughput kernel); the low-latency kernel
    does not use this: it multiplies its layout's whole capacity (``demos.toy.cost_model``). The
    cost model's GEMM efficiency curve needs
    these per-GEMM rows: at a decode-sized step each expert gets a handful of rows, far below the
    whole step's ``rows``."""
    per = rows / max(1, experts)
    if padded and rows >= MIN_GEMM_ROWS:
        per = max(per, float(MIN_GEMM_ROWS))
    return per


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


@syncs_host  # it reads the offsets on the host below: a host sync on a GPU (dbo.costs.syncs_host)
def experts_kernel(x, offsets, w1, w2, ws13, ws2, fused_out, pad, wire_in, w_sorted, first=0, num_experts=None) -> None:
    """The routed experts over expert-sorted rows: gate_up into workspace13, SiLU-and-mul into
    workspace2, down into fused_out (which reuses workspace13's memory: it is dead by then).
    Segment j of ``offsets`` belongs to expert ``first + j % num_experts``
    (``demos.toy.transport.ExpertBatch``; by default one segment per expert); only the first
    ``offsets[-1]`` rows are present.
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


def experts_ll_kernel(x, w1, w2, ws13, ws2, fused_out, first: int) -> None:
    """The routed experts over the low-latency layout (DeepEP low-latency): ``x`` is
    ``(local_experts, capacity, hidden)``, expert ``first + e``'s rows in ``x[e]``; one batched GEMM
    per projection over the whole padded buffer. No host sync, no data-dependent shape: the rows
    past an expert's count are zeros (the dispatch writes them), so they stay zeros (SiLU(0) * 0 = 0)
    and the combine never reads them."""
    n = x.shape[0]
    f = ws2.shape[-1]
    torch.bmm(x, w1[first : first + n], out=ws13)
    gate, up = ws13[..., :f], ws13[..., f:]
    torch.sigmoid(gate, out=ws2)
    ws2.mul_(gate).mul_(up)
    torch.bmm(ws2, w2[first : first + n], out=fused_out)


def shared_kernel(x, w1, w2, hbuf, abuf, out) -> None:
    torch.mm(x, w1, out=hbuf)
    f = abuf.shape[1]
    gate, up = hbuf[:, :f], hbuf[:, f:]
    torch.sigmoid(gate, out=abuf)
    abuf.mul_(gate).mul_(up)
    torch.mm(abuf, w2, out=out)


def copy_kernel(src: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(src)


def finalize_kernel(h, routed, shared) -> None:
    h.add_(routed).add_(shared)
