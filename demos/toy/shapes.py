"""The toy MoE model's shapes: ``ModelConfig``, its balanced defaults, its checks and its weight bytes.

``demos.toy.model.ToyMoE`` is built from one (and re-exports it); ``demos.toy.config.model_config``
makes one from an overlap run's config.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from demos.toy.cost_model import itemsize
from demos.vocabulary import Schedule

__all__ = ["ModelConfig"]


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of the toy model. ``None`` sizes take the balanced defaults (docs/overlap.md):
    ``expert_ffn = hidden``, ``shared_ffn = 2 * expert_ffn``, ``context = hidden // 2``, so that (with
    top-2 routing) per ubatch the attention, the routed experts and the shared expert cost about the same.

    ``ep`` is the expert-parallel group size the *cost model* assumes: each rank holds
    ``ceil(experts / ep)`` experts, so the experts kernel reads that many experts' weights (over the
    modelled link the math still runs every expert, since one process plays every expert's owner;
    with ``demos.toy.dist_comm.DistributedTransport`` each rank computes only its own experts' rows).
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

    def activation_bytes(self, ubatches: int, schedule: str = "ht", wire_itemsize: int = 2) -> int:
        """Bytes of everything that grows with the tokens, for ``ubatches`` ubatch ids (an estimate
        from the model's own buffers, a little above what it allocates): the input and hidden states,
        each ubatch id's persistent buffers, the modelled transport's receive buffers (the ll layout's
        ``experts x tokens x hidden`` included) and the workspace slots, all sized for every token (the
        no-DBO step runs them all in slot 0, and the slots grow in lockstep). On ``schedule`` "ll" the
        experts' workspace is the fixed-capacity layout, ``experts x tokens`` rows."""
        c = self.resolved()
        T, H, K, E, F, Fs = c.tokens, c.hidden, c.topk, c.experts, c.expert_ffn, c.shared_ffn
        isz, i64 = itemsize(c.dtype), 8
        model = 2 * T * H * isz + T * K * i64
        per_ubatch = T * (7 * H + c.heads) * isz + T * H * wire_itemsize + T * K * (2 * isz + 5 * i64)
        transport = T * K * H * (wire_itemsize + isz) + T * H * isz + E * T * H * wire_itemsize + 2 * T * K * i64
        chunk = min(c.shared_chunk, T)
        rows = E * T if schedule == Schedule.LL else T * K
        slot = rows * (3 * F + 2 * H) * isz + T * 4 * H * isz + chunk * 3 * Fs * isz
        return model + ubatches * (per_ubatch + transport + slot)

    def weight_bytes(self) -> int:
        """Bytes of all weights (to decide when to use meta tensors)."""
        c = self.resolved()
        H, E, F, Fs, C = c.hidden, c.experts, c.expert_ffn, c.shared_ffn, c.context
        per_layer = 4 * H * H + 2 * C * H + H * E + E * 3 * H * F + 3 * H * Fs
        return per_layer * c.layers * itemsize(c.dtype)
