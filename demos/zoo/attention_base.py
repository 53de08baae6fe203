"""What every attention kind gives the step (``demos.zoo.attention``, ``demos.zoo.linear_attention``):
``AttentionCosts`` (its ops' costs on one rank for one ubatch), ``AttentionKind`` (the interface each kind
fills in), ``attention_pairs`` (query-key pairs of a ubatch) and ``timed_core`` (a core's ``Work`` timed on
its family's attention curve).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from dbo.costs import Work
from demos.vocabulary import Phase
from demos.zoo.fold import Folder
from demos.zoo.launch import Launcher
from demos.zoo.work import causal_pairs, decode_pairs
from demos.zoo.workload import Workload

__all__ = ["AttentionCosts", "AttentionKind", "attention_pairs", "timed_core"]


@dataclass(frozen=True)
class AttentionCosts:
    """The attention ops' costs on one rank for one ubatch: the three every kind issues, and the core's
    work as counted (``core_work``: its flops and bytes, before its time was taken from the attention
    curve); ``extra``: the ops of a kind beyond the three, ``(op, Work)`` in launch order, each an entry of
    ``demos.zoo.ops.OPS``, launched between the projections and the core (a sparse attention's indexer);
    ``names``: the ops the three are launched as (a linear attention's are its own, ``gdn_*``)."""

    proj: Work
    core: Work
    out: Work
    core_work: tuple[float, float]
    extra: tuple[tuple[str, Work], ...] = ()
    names: tuple[str, str, str] = ("attn_proj", "attn_core", "attn_out")

    @property
    def ops(self) -> tuple[tuple[str, Work], ...]:
        """Every attention op with its cost, in launch order (what the step's plan launches)."""
        proj, core, out = self.names
        return ((proj, self.proj), *self.extra, (core, self.core), (out, self.out))


def attention_pairs(w: Workload, t: int) -> float:
    """Query-key pairs of a ubatch of ``t`` tokens per head, before any sliding window: decode ``t x
    (context + 1)``; prefill, causal within requests of ``context`` tokens (``demos.zoo.work``)."""
    if w.phase == Phase.DECODE:
        return decode_pairs(t, w.context)
    return causal_pairs(t, w.context)


class AttentionKind:
    """What a kind of attention costs and launches (module docstring); subclasses fill it in."""

    spec_type: type = object
    label: str = "attention"

    def costs(self, w: Workload, a: Any, t: int, layer: int, fold: Folder) -> AttentionCosts:
        raise NotImplementedError

    def cost_key(self, a: Any, layer: int) -> Hashable:
        return None

    def layer_label(self, a: Any, layer: int) -> str:
        """What a report calls layer ``layer`` of this kind (``label``; DeepSeek-V4 names its layers by ratio)."""
        return self.label

    def weights(self, a: Any, hidden: int, context: int, rand: Callable) -> SimpleNamespace:
        raise NotImplementedError

    def launch(
        self, run: Launcher, a: Any, L: Any, h: torch.Tensor, t: int, costs: Mapping, layer: int, ub: int, dt: Any
    ) -> None:
        raise NotImplementedError


def timed_core(w: Workload, fold: Folder, flops: float, nbytes: float, shape: tuple | None) -> Work:
    """The attention core's Work: its time on the family's attention curve (``KernelTimes.attention``)."""
    seconds = fold.kernels.attention(w.phase, flops, nbytes, shape)
    return Work(seconds=seconds, bytes=nbytes, dtype="bfloat16")
