"""The toy MoE's state: each ubatch's persistent buffers (``UbatchBuffers``) and a layer's
weights (``LayerWeights``)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from demos.toy.routing import RoutePlan

__all__ = ["UbatchBuffers", "LayerWeights"]


class UbatchBuffers:
    """Buffers one ubatch keeps across its yields and workspace calls (capacity: all tokens)."""

    def __init__(self, cfg: Any, wire: torch.dtype, device: Any):  # cfg: a resolved demos.toy.model.ModelConfig
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
        self.src_copy = buf(T * K, i64)
        self.expert_sorted = buf(T * K, i64)
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
            src_copy=self.src_copy[: t * K],
            plan=RoutePlan(
                num_tokens=t,
                topk=K,
                src_token=self.src_token[: t * K],
                row_of=self.row_of[: t * K],
                weights=self.topk_w[: t * K].view(t, K),
                weights_sorted=self.w_sorted[: t * K],
                offsets=self.offsets,
                expert_sorted=self.expert_sorted[: t * K],
            ),
        )
        self._views[t] = v
        return v


@dataclass
class LayerWeights:
    """One layer's weights: attention (``w_qkv``, ``w_o``, the cached context ``k_ctx``, ``v_ctx``),
    the router's gate, the routed experts' ``w1`` (gate and up), ``w2`` (down) and the shared
    expert's ``ws1``, ``ws2``."""

    w_qkv: torch.Tensor
    w_o: torch.Tensor
    k_ctx: torch.Tensor
    v_ctx: torch.Tensor
    w_gate: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    ws1: torch.Tensor
    ws2: torch.Tensor
