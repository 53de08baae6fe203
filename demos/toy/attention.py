"""One layer's attention block and router of the toy MoE (``demos.toy.model.ToyMoE`` calls them).

``attention`` is decode-style: every token attends to the layer's shared cached context and to
itself. Its output buffers are requested from the workspace twice with the same leading shapes, so
the query attention's outputs land where the context attention's were, after the kernel that read
them (the reference's DCP pattern, docs/overlap.md). ``router`` is the top-k of a softmax gate: it
writes the ubatch's ``RoutePlan`` and the MoE input. Each takes the model (for its shapes, weights
and index tensors), the layer index and weights, the ubatch's hidden rows, its persistent views,
its id and the Work its kernels declare.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

import dbo
from demos.toy.cost_model import KernelCosts
from demos.toy.kernels import (
    attn_context_kernel,
    attn_out_kernel,
    attn_qkv_kernel,
    attn_query_kernel,
    router_kernel,
)
from demos.toy.ops import kernel_name
from demos.toy.state import LayerWeights
from workspace import current_workspace_manager

__all__ = ["attention", "router"]

# ``model``: the ToyMoE whose layer runs (demos.toy.model, which imports this module)


def attention(
    model: Any, i: int, L: LayerWeights, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: KernelCosts
) -> None:
    """Layer ``i``'s attention block for the ubatch's rows ``h`` (updated in place)."""
    c, t = model.cfg, st.t
    nh, d, dt = model.heads, model.head_dim, c.dtype
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


def router(
    model: Any, i: int, L: LayerWeights, h: torch.Tensor, st: SimpleNamespace, ub: int, cost: KernelCosts
) -> None:
    """Layer ``i``'s router: the top-k experts of each row of ``h``, the ubatch's plan and MoE input."""
    c, t = model.cfg, st.t
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
        model.arange_rows[: p.rows],
        model.edges,
        name=kernel_name("router", i, ub),
        cost=cost.router,
        op="router",
        layer=i,
    )
