"""The generic transformer's kernels with real math (``threads``, ``inline``) and the meta stand-in.

Every kernel writes only into tensors it is given (its outputs, workspace views, or the ubatch's own
rows of the hidden states), so a DBO step and the same split run one ubatch after another compute the
same values bitwise. Shapes are static (no host sync, no data-dependent size): the routed experts run
masked over the ubatch's tokens, each expert weighted by its gate (0 for a token that did not pick it).

What the real math simplifies, and why it does not matter for timing (the cost model, not these
kernels, sets the modelled time; docs/models.md, "Real math"): attention attends to one cached
context per layer shared by every request plus the token itself, without rotary embeddings; a Gated
DeltaNet layer applies each token's delta-rule update to one random initial state per layer (every
request's, as the cached context is) and reads its output from it; routing is plain top-k of the scores
(plus DeepSeek-V3's selection bias), without group limits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "meta_kernel",
    "rmsnorm",
    "embed_kernel",
    "gqa_proj_kernel",
    "gqa_core_kernel",
    "block_index_kernel",
    "gqa_sparse_core_kernel",
    "mla_proj_kernel",
    "mla_core_kernel",
    "dsa_index_kernel",
    "sparse_mla_core_kernel",
    "mla_out_kernel",
    "out_kernel",
    "gated_out_kernel",
    "gdn_proj_kernel",
    "gdn_conv_kernel",
    "gdn_delta_kernel",
    "gdn_out_kernel",
    "fused_moe_kernel",
    "gated_mla_out_kernel",
    "kda_delta_kernel",
    "latent_up_kernel",
    "project_kernel",
    "kda_out_kernel",
    "kda_proj_kernel",
    "router_kernel",
    "copy_kernel",
    "experts_kernel",
    "mlp_kernel",
    "dense_kernel",
    "finalize_kernel",
]


def meta_kernel(*_args) -> None:
    """Stands in for every kernel at full size on meta tensors: only the declared cost matters."""


def rmsnorm(x: torch.Tensor) -> torch.Tensor:
    """Each row of ``x`` over its root mean square (no scale: the real math leaves the norms unweighted)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def embed_kernel(x0: torch.Tensor, h: torch.Tensor) -> None:
    h.copy_(x0)


def gqa_proj_kernel(h: torch.Tensor, w_qkv: torch.Tensor, qkv: torch.Tensor) -> None:
    torch.mm(rmsnorm(h), w_qkv, out=qkv)


def gqa_core_kernel(
    qkv: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor, heads: int, kv_heads: int, out: torch.Tensor
) -> None:
    """Each token attends to the cached context (``k_ctx``/``v_ctx``: (kv_heads, C, d)) and to itself."""
    t = qkv.shape[0]
    d = k_ctx.shape[-1]
    q = qkv[:, : heads * d].view(t, kv_heads, heads // kv_heads, d)
    k = qkv[:, heads * d : (heads + kv_heads) * d].view(t, kv_heads, 1, d)
    v = qkv[:, (heads + kv_heads) * d : (heads + 2 * kv_heads) * d].view(t, kv_heads, 1, d)
    scale = d**-0.5
    s_ctx = torch.einsum("tgrd,gcd->tgrc", q, k_ctx) * scale
    s_self = (q * k).sum(-1, keepdim=True) * scale
    p = torch.softmax(torch.cat([s_ctx, s_self], dim=-1), dim=-1)
    o = torch.einsum("tgrc,gcd->tgrd", p[..., :-1], v_ctx) + p[..., -1:] * v
    out.copy_(o.reshape(t, heads * d))


def block_index_kernel(h: torch.Tensor, w_iq: torch.Tensor, k_index: torch.Tensor, heads: int, sel: torch.Tensor):
    """A block-sparse layer's index at a shrunken size: each token's score of every cached index key
    (``k_index``: (C, dim)), the best over its ``heads`` index heads, and the indices of its
    ``sel.shape[1]`` best cached tokens into ``sel`` (the real index keeps whole blocks: their tokens' best)."""
    q = (rmsnorm(h) @ w_iq).reshape(h.shape[0], heads, -1)
    scores = torch.einsum("thd,cd->thc", q, k_index).amax(1)
    sel.copy_(torch.topk(scores, sel.shape[1], dim=-1).indices)


def gqa_sparse_core_kernel(
    qkv: torch.Tensor,
    k_ctx: torch.Tensor,
    v_ctx: torch.Tensor,
    sel: torch.Tensor,
    heads: int,
    kv_heads: int,
    out: torch.Tensor,
) -> None:
    """``gqa_core_kernel`` over each token's selected cached tokens only (``sel``: (t, k) of the context)."""
    t, d = qkv.shape[0], k_ctx.shape[-1]
    q = qkv[:, : heads * d].view(t, kv_heads, heads // kv_heads, d)
    k = qkv[:, heads * d : (heads + kv_heads) * d].view(t, kv_heads, 1, d)
    v = qkv[:, (heads + kv_heads) * d : (heads + 2 * kv_heads) * d].view(t, kv_heads, 1, d)
    kp, vp = k_ctx[:, sel], v_ctx[:, sel]  # (kv_heads, t, k, d)
    scale = d**-0.5
    s_ctx = torch.einsum("tgrd,gtkd->tgrk", q, kp) * scale
    s_self = (q * k).sum(-1, keepdim=True) * scale
    p = torch.softmax(torch.cat([s_ctx, s_self], dim=-1), dim=-1)
    o = torch.einsum("tgrk,gtkd->tgrd", p[..., :-1], vp) + p[..., -1:] * v
    out.copy_(o.reshape(t, heads * d))


def mla_proj_kernel(
    h: torch.Tensor,
    w_q: tuple[torch.Tensor, ...],
    w_kv_a: torch.Tensor,
    w_uk: torch.Tensor,
    nope: int,
    q_lat: torch.Tensor,
    q_rope: torch.Tensor,
    kv_self: torch.Tensor,
) -> None:
    """MLA's projections, absorbed: the query into the latent space (``q_lat``: (t, heads, latent)) and
    its RoPE part (``q_rope``), the token's own latent and RoPE key (``kv_self``: (t, latent + rope))."""
    x = rmsnorm(h)
    q = x
    for w in w_q:
        q = q @ w
    t, heads = h.shape[0], q_lat.shape[1]
    q = q.view(t, heads, -1)
    q_lat.copy_(torch.einsum("thn,hnl->thl", q[..., :nope], w_uk))
    q_rope.copy_(q[..., nope:])
    torch.mm(x, w_kv_a, out=kv_self)


def mla_core_kernel(
    q_lat: torch.Tensor, q_rope: torch.Tensor, kv_self: torch.Tensor, kv_ctx: torch.Tensor, o_lat: torch.Tensor
) -> None:
    """Attention in the latent space over the cached latents (``kv_ctx``: (C, latent + rope)) and the
    token's own, values the latents themselves."""
    lat = q_lat.shape[-1]
    scale = (lat + q_rope.shape[-1]) ** -0.5
    s_ctx = torch.einsum("thl,cl->thc", q_lat, kv_ctx[:, :lat]) + torch.einsum("thr,cr->thc", q_rope, kv_ctx[:, lat:])
    s_self = (q_lat * kv_self[:, None, :lat]).sum(-1, keepdim=True) + (q_rope * kv_self[:, None, lat:]).sum(
        -1, keepdim=True
    )
    p = torch.softmax(torch.cat([s_ctx, s_self], dim=-1) * scale, dim=-1)
    o = torch.einsum("thc,cl->thl", p[..., :-1], kv_ctx[:, :lat]) + p[..., -1:] * kv_self[:, None, :lat]
    o_lat.copy_(o)


def dsa_index_kernel(
    h: torch.Tensor, w_iq: torch.Tensor, w_iw: torch.Tensor, k_index: torch.Tensor, heads: int, sel: torch.Tensor
) -> None:
    """A lightning indexer: each token's score of every cached key (``k_index``: (C, dim)), the sum over
    its ``heads`` query heads of a per-head weight times the ReLU of the query-key product, and the indices
    of its ``sel.shape[1]`` best keys into ``sel`` (the real indexer's queries come from the query latent;
    here from the normed hidden state, the same shape of work)."""
    x = rmsnorm(h)
    q = (x @ w_iq).reshape(h.shape[0], heads, -1)
    scores = (torch.einsum("thd,cd->thc", q, k_index).relu() * (x @ w_iw)[..., None]).sum(1)
    sel.copy_(torch.topk(scores, sel.shape[1], dim=-1).indices)


def sparse_mla_core_kernel(
    q_lat: torch.Tensor,
    q_rope: torch.Tensor,
    kv_self: torch.Tensor,
    kv_ctx: torch.Tensor,
    sel: torch.Tensor,
    o_lat: torch.Tensor,
) -> None:
    """``mla_core_kernel`` over each token's selected cached latents only (``sel``: (t, k) rows of
    ``kv_ctx``) and its own."""
    lat = q_lat.shape[-1]
    scale = (lat + q_rope.shape[-1]) ** -0.5
    picked = kv_ctx[sel]  # (t, k, latent + rope)
    s_ctx = torch.einsum("thl,tkl->thk", q_lat, picked[..., :lat]) + torch.einsum(
        "thr,tkr->thk", q_rope, picked[..., lat:]
    )
    s_self = (q_lat * kv_self[:, None, :lat]).sum(-1, keepdim=True) + (q_rope * kv_self[:, None, lat:]).sum(
        -1, keepdim=True
    )
    p = torch.softmax(torch.cat([s_ctx, s_self], dim=-1) * scale, dim=-1)
    o = torch.einsum("thk,tkl->thl", p[..., :-1], picked[..., :lat]) + p[..., -1:] * kv_self[:, None, :lat]
    o_lat.copy_(o)


def mla_out_kernel(o_lat: torch.Tensor, w_uv: torch.Tensor, w_o: torch.Tensor, h: torch.Tensor) -> None:
    o = torch.einsum("thl,hlv->thv", o_lat, w_uv).reshape(h.shape[0], -1)
    h.add_(o @ w_o)


def gated_mla_out_kernel(
    o_lat: torch.Tensor, w_uv: torch.Tensor, w_g: torch.Tensor, w_o: torch.Tensor, h: torch.Tensor
):
    """``mla_out_kernel`` with an output gate: the sigmoid of the normed layer input times ``w_g`` multiplied
    into the heads' outputs before ``o_proj`` (Kimi-K3's MLA layers)."""
    o = torch.einsum("thl,hlv->thv", o_lat, w_uv).reshape(h.shape[0], -1)
    h.add_((o * torch.sigmoid(rmsnorm(h) @ w_g)) @ w_o)


def out_kernel(attn: torch.Tensor, w_o: torch.Tensor, h: torch.Tensor) -> None:
    h.add_(attn @ w_o)


def gated_out_kernel(attn: torch.Tensor, qkv: torch.Tensor, w_o: torch.Tensor, h: torch.Tensor) -> None:
    """``out_kernel`` with the output gate (the last ``attn``-wide columns of ``qkv``) applied first."""
    gate = qkv[:, qkv.shape[1] - attn.shape[1] :]
    h.add_((attn * torch.sigmoid(gate)) @ w_o)


def gdn_proj_kernel(h: torch.Tensor, w_qkvz: torch.Tensor, w_ba: torch.Tensor, qkvz: torch.Tensor, ba: torch.Tensor):
    """A Gated DeltaNet layer's input projections of the normed hidden states: query, key, value and the
    output gate (``qkvz``), and each value head's write strength and decay (``ba``)."""
    x = rmsnorm(h)
    torch.mm(x, w_qkvz, out=qkvz)
    torch.mm(x, w_ba, out=ba)


def gdn_conv_kernel(qkvz: torch.Tensor, w_conv: torch.Tensor, conv_state: torch.Tensor, channels: int) -> None:
    """The causal convolution of each token's first ``channels`` columns (query, key, value) over the conv
    state before it (``conv_state``: (channels, width - 1)), SiLU, in place."""
    x = qkvz[:, :channels]
    past = (conv_state * w_conv[:, :-1]).sum(-1)
    x.copy_(F.silu(past + x * w_conv[:, -1]))


def gdn_delta_kernel(qkvz: torch.Tensor, ba: torch.Tensor, s0: torch.Tensor, key_heads: int, o: torch.Tensor) -> None:
    """One gated delta-rule step per token from the state ``s0`` ((value heads, dk, dv)): the state decayed,
    the token's value written in along its key with strength ``beta`` (the delta rule), and the output
    read along its query; queries and keys L2-normed, each key head shared by its group of value heads."""
    t, (nv, dk, dv) = qkvz.shape[0], s0.shape
    kd = key_heads * dk
    group = nv // key_heads
    q = F.normalize(qkvz[:, :kd].view(t, key_heads, dk), dim=-1).repeat_interleave(group, dim=1)
    k = F.normalize(qkvz[:, kd : 2 * kd].view(t, key_heads, dk), dim=-1).repeat_interleave(group, dim=1)
    v = qkvz[:, 2 * kd : 2 * kd + nv * dv].view(t, nv, dv)
    beta, decay = torch.sigmoid(ba[:, :nv]), torch.exp(-F.softplus(ba[:, nv:]))
    delta = beta[..., None] * (v - decay[..., None] * torch.einsum("thk,hkv->thv", k, s0))
    out = decay[..., None] * torch.einsum("thk,hkv->thv", q, s0) + (q * k).sum(-1, keepdim=True) * delta
    o.copy_(out.reshape(t, nv * dv) * dk**-0.5)


def gdn_out_kernel(o: torch.Tensor, qkvz: torch.Tensor, w_o: torch.Tensor, h: torch.Tensor) -> None:
    """The gated RMSNorm (the output gate: the last columns of ``qkvz``) and ``out_proj`` into ``h``."""
    z = qkvz[:, qkvz.shape[1] - o.shape[1] :]
    h.add_((rmsnorm(o) * F.silu(z)) @ w_o)


def kda_proj_kernel(h, w_qkvg, w_fa, w_fb, w_b, qkvg: torch.Tensor, fb: torch.Tensor) -> None:
    """A KDA layer's input projections of the normed hidden states: query, key, value and the output gate
    (``qkvg``), the per-channel decay logits through the rank-``head_dim`` pair and each head's write
    strength (``fb``)."""
    x = rmsnorm(h)
    torch.mm(x, w_qkvg, out=qkvg)
    p = w_fb.shape[1]
    torch.mm(x @ w_fa, w_fb, out=fb[:, :p])
    torch.mm(x, w_b, out=fb[:, p:])


def kda_delta_kernel(qkvg: torch.Tensor, fb: torch.Tensor, s0: torch.Tensor, o: torch.Tensor) -> None:
    """One KDA step per token from the state ``s0`` ((heads, dk, dv)): the state decayed per key channel (by
    ``exp(-5 sigmoid(f))``, Kimi-K3's bounded gate), the token's value written in along its key with strength
    ``beta`` (the delta rule), the output read along its query; queries and keys L2-normed."""
    t, (n, dk, dv) = qkvg.shape[0], s0.shape
    p = n * dk
    q = F.normalize(qkvg[:, :p].view(t, n, dk), dim=-1)
    k = F.normalize(qkvg[:, p : 2 * p].view(t, n, dk), dim=-1)
    v = qkvg[:, 2 * p : 3 * p].view(t, n, dv)
    alpha = torch.exp(-5.0 * torch.sigmoid(fb[:, :p].view(t, n, dk)))
    beta = torch.sigmoid(fb[:, p:])
    delta = beta[..., None] * (v - torch.einsum("thk,hkv->thv", k * alpha, s0))
    out = torch.einsum("thk,hkv->thv", q * alpha, s0) + (q * k).sum(-1, keepdim=True) * delta
    o.copy_(out.reshape(t, p) * dk**-0.5)


def kda_out_kernel(o: torch.Tensor, qkvg: torch.Tensor, w_o: torch.Tensor, h: torch.Tensor) -> None:
    """The gated RMSNorm (sigmoid of the output gate: the last columns of ``qkvg``) and ``o_proj`` into ``h``."""
    g = qkvg[:, qkvg.shape[1] - o.shape[1] :]
    h.add_((rmsnorm(o) * torch.sigmoid(g)) @ w_o)


def router_kernel(
    h: torch.Tensor,
    w_gate: torch.Tensor,
    bias: torch.Tensor | None,
    top_k: int,
    sigmoid: bool,
    renorm: bool,
    scale: float,
    x_out: torch.Tensor,
    gates: torch.Tensor,
) -> None:
    """The MoE input (``x_out``: the normed hidden states) and each token's gate per expert (``gates``:
    (t, experts), 0 for the experts it did not pick)."""
    x = rmsnorm(h)
    x_out.copy_(x)
    logits = x @ w_gate
    scores = torch.sigmoid(logits) if sigmoid else torch.softmax(logits, dim=-1)
    pick = scores if bias is None else scores + bias
    idx = torch.topk(pick, top_k, dim=-1).indices
    w = torch.gather(scores, 1, idx)
    if renorm:
        w = w / w.sum(-1, keepdim=True)
    gates.zero_()
    gates.scatter_(1, idx, w * scale)


def copy_kernel(src: torch.Tensor, dst: torch.Tensor) -> None:
    dst.copy_(src)


def experts_kernel(
    x: torch.Tensor,
    gates: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    ws13: torch.Tensor,
    ws2: torch.Tensor,
    tmp: torch.Tensor,
    y: torch.Tensor,
) -> None:
    """Every routed expert over every token, weighted by its gate (static shapes: no token sort)."""
    inter = w2.shape[1]
    y.zero_()
    for e in range(w1.shape[0]):
        torch.mm(x, w1[e], out=ws13)
        torch.mul(F.silu(ws13[:, :inter]), ws13[:, inter:], out=ws2)
        torch.mm(ws2, w2[e], out=tmp)
        y.addcmul_(tmp, gates[:, e : e + 1])


def fused_moe_kernel(x, recv, gates, w1, w2, ws13, ws2, tmp, y, out) -> None:
    """DeepGEMM's fused MoE kernel as one launch: the tokens copied to the experts' rows, every routed expert
    over them (``experts_kernel``), the results copied back."""
    recv.copy_(x)
    experts_kernel(recv, gates, w1, w2, ws13, ws2, tmp, y)
    out.copy_(y)


def mlp_kernel(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, hbuf: torch.Tensor, out: torch.Tensor) -> None:
    """A gated MLP (gate and up fused in ``w1``) of ``x`` into ``out``."""
    inter = w2.shape[0]
    torch.mm(x, w1, out=hbuf)
    torch.mm(F.silu(hbuf[:, :inter]) * hbuf[:, inter:], w2, out=out)


def dense_kernel(h: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, hbuf: torch.Tensor, out: torch.Tensor) -> None:
    """A dense layer's MLP with its norm and residual: ``h += mlp(norm(h))``."""
    mlp_kernel(rmsnorm(h), w1, w2, hbuf, out)
    h.add_(out)


def project_kernel(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor) -> None:
    """``out = x @ w`` (a latent MoE's down-projection of the normed MoE input)."""
    torch.mm(x, w, out=out)


def latent_up_kernel(y: torch.Tensor, w_up: torch.Tensor, out: torch.Tensor) -> None:
    """A latent MoE's combined rows normed and projected back to the hidden size."""
    torch.mm(rmsnorm(y), w_up, out=out)


def finalize_kernel(h: torch.Tensor, moe_out: torch.Tensor, shared_out: torch.Tensor | None) -> None:
    h.add_(moe_out)
    if shared_out is not None:
        h.add_(shared_out)
