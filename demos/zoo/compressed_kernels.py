"""DeepSeek-V4's attention kernels and the wide residual's, with real math (``threads``, ``inline``), for
``demos.zoo.compressed_attention`` and the model's hyper-connections (``demos.zoo.model``).

As every kernel of ``demos.zoo.kernels``, each writes only into tensors it is given (its outputs,
workspace views, the ubatch's own rows of the hidden states or of the wide stream), so a DBO step and the
same split run one ubatch after another compute the same values bitwise. What the math simplifies
(docs/models.md, "Real math"): one cached window and one compressed cache per layer shared by every
request; the compressor pools the ubatch's own tokens into a workspace entry the core does not read back;
the indexer scores the cached compressed keys only; no rotary embeddings; the hyper-connections mix with
fixed weights (no Sinkhorn normalisation of weights computed from the stream).
"""

from __future__ import annotations

import torch

from demos.zoo.kernels import rmsnorm

__all__ = [
    "v4_proj_kernel",
    "v4_compress_kernel",
    "v4_index_kernel",
    "v4_core_kernel",
    "v4_out_kernel",
    "mhc_pre_kernel",
    "mhc_post_kernel",
    "wide_embed_kernel",
]


def v4_proj_kernel(
    h: torch.Tensor,
    w_q_a: torch.Tensor,
    w_q_b: torch.Tensor,
    w_kv: torch.Tensor,
    q_lat: torch.Tensor,
    q: torch.Tensor,
    kv_self: torch.Tensor,
) -> None:
    """The query latent (``q_lat``, normed), the heads' queries from it (``q``: (t, heads, head_dim)) and the
    token's own latent entry (``kv_self``, normed)."""
    x = rmsnorm(h)
    q_lat.copy_(rmsnorm(x @ w_q_a))
    q.copy_((q_lat @ w_q_b).view(q.shape))
    kv_self.copy_(rmsnorm(x @ w_kv))


def v4_compress_kernel(h: torch.Tensor, w_ckv: torch.Tensor, w_gate: torch.Tensor, entries: torch.Tensor) -> None:
    """The ubatch's tokens pooled into ``entries`` ((n, head_dim)): consecutive groups of ``t // n`` tokens
    (the last takes the rest), each entry the softmax-over-tokens weighted sum of their projected rows (the
    first ``head_dim`` columns of a wider, overlapping projection), normed."""
    x = rmsnorm(h)
    d = entries.shape[1]
    kv, gate = (x @ w_ckv)[:, :d], (x @ w_gate)[:, :d]
    n, t = entries.shape[0], h.shape[0]
    size = max(1, t // n)
    for i in range(n):
        stop = t if i == n - 1 else (i + 1) * size
        rows = slice(i * size, stop)
        entries[i].copy_((kv[rows] * torch.softmax(gate[rows], dim=0)).sum(0))
    entries.copy_(rmsnorm(entries))


def v4_index_kernel(
    h: torch.Tensor,
    q_lat: torch.Tensor,
    w_iq: torch.Tensor,
    w_iw: torch.Tensor,
    k_index: torch.Tensor,
    heads: int,
    sel: torch.Tensor,
) -> None:
    """The lightning indexer of a ratio-4 layer: queries from the query latent, per-head weights from the
    normed hidden state, each token's score of every cached compressed key (``k_index``), and the indices
    of its ``sel.shape[1]`` best into ``sel``."""
    q = (q_lat @ w_iq).reshape(h.shape[0], heads, -1)
    weights = rmsnorm(h) @ w_iw
    scores = (torch.einsum("thd,cd->thc", q, k_index).relu() * weights[..., None]).sum(1)
    sel.copy_(torch.topk(scores, sel.shape[1], dim=-1).indices)


def v4_core_kernel(
    q: torch.Tensor,
    kv_self: torch.Tensor,
    win_ctx: torch.Tensor,
    comp_ctx: torch.Tensor | None,
    sel: torch.Tensor | None,
    o: torch.Tensor,
) -> None:
    """Every head against its entries, key and value the same latent vector: the cached window
    (``win_ctx``), the compressed entries (``comp_ctx``: all of them, or the rows ``sel`` picks per token)
    and the token's own."""
    t, d = q.shape[0], q.shape[-1]
    keys = [win_ctx.expand(t, *win_ctx.shape)]
    if comp_ctx is not None:
        keys.append(comp_ctx[sel] if sel is not None else comp_ctx.expand(t, *comp_ctx.shape))
    keys.append(kv_self[:, None, :])
    kv = torch.cat(keys, dim=1)  # (t, entries, d)
    p = torch.softmax(torch.einsum("thd,ted->the", q, kv) * d**-0.5, dim=-1)
    o.copy_(torch.einsum("the,ted->thd", p, kv))


def v4_out_kernel(o: torch.Tensor, w_o_a: torch.Tensor, w_o_b: torch.Tensor, h: torch.Tensor) -> None:
    """The grouped output projection: each of the ``w_o_a.shape[0]`` groups of heads to its low rank, all
    groups back to the hidden size, added into ``h``."""
    t, groups = o.shape[0], w_o_a.shape[0]
    low = torch.einsum("tgi,gir->tgr", o.reshape(t, groups, -1), w_o_a)
    h.add_(low.reshape(t, -1) @ w_o_b)


def wide_embed_kernel(x0: torch.Tensor, h: torch.Tensor, stream: torch.Tensor) -> None:
    """The embedding into a wide residual: ``h`` and every row of the stream (``stream``: (t, hc, hidden))."""
    h.copy_(x0)
    stream.copy_(x0[:, None, :].expand_as(stream))


def mhc_pre_kernel(stream: torch.Tensor, w_pre: torch.Tensor, h: torch.Tensor) -> None:
    """A sub-layer's input from the wide stream: its rows combined by softmax(``w_pre``) into ``h``."""
    h.copy_(torch.einsum("tcd,c->td", stream, torch.softmax(w_pre, dim=0)))


def mhc_post_kernel(h: torch.Tensor, w_comb: torch.Tensor, w_post: torch.Tensor, stream: torch.Tensor) -> None:
    """The sub-layer's output (``h``, its input plus its output) back into the stream: the rows mixed by the
    row-softmax of ``w_comb``, plus ``w_post`` times ``h`` per row."""
    mixed = torch.einsum("tcd,kc->tkd", stream, torch.softmax(w_comb, dim=1))
    stream.copy_(mixed + w_post[None, :, None] * h[:, None, :])
