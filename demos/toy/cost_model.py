"""The toy MoE's cost model: the ``dbo.costs.Work`` each of its kernels declares for a ubatch of
``t`` tokens (``kernel_costs``), which the virtual backend turns into time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from dbo.costs import Work
from demos.toy.kernels import expert_gemm_rows
from demos.vocabulary import Schedule

__all__ = ["KernelCosts", "kernel_costs", "itemsize"]


def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``."""
    return torch.empty((), dtype=dtype, device="meta").element_size()


@dataclass
class KernelCosts:
    """Modelled Work of each kernel for a ubatch of ``t`` tokens (used by the virtual backend).

    ``shared`` holds the shared expert's Work per chunk of rows (``shared_cost`` fills it)."""

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

    def shared_cost(self, cfg: Any, rows: int) -> Work:
        """The shared expert's Work on ``rows`` rows (``cfg``: the resolved ModelConfig; cached)."""
        w = self.shared.get(rows)
        if w is None:
            H, Fs = cfg.hidden, cfg.shared_ffn
            isz = itemsize(cfg.dtype)
            w = self.shared[rows] = Work(
                flops=6 * rows * H * Fs + 4 * rows * Fs, bytes=(3 * H * Fs + 2 * rows * H + 6 * rows * Fs) * isz
            )
        return w


def kernel_costs(c: Any, wire: torch.dtype, schedule: str, t: int, *, ll_rows: str = "padded") -> KernelCosts:
    """The Work of every kernel of a ubatch of ``t`` tokens (roofline inputs) of the model ``c`` (a
    resolved ``demos.toy.model.ModelConfig``) whose dispatch sends ``wire`` on ``schedule``.

    ``ll_rows``: what the ll experts and their dispatch receive compute. "padded" (the toy's
    kernels): ``torch.bmm`` and the dequantizing copy run over the whole fixed-capacity layout,
    ``local experts x capacity`` rows, zeros included, where the capacity is one copy of each token
    of each of ``ep`` source ranks (``experts x tokens`` rows over the modelled link). "valid": only
    the ``tokens x topk`` routed rows (the ll code measured on the H200, whose experts read the
    offsets on the host; ``demos.fidelity.h200``)."""
    if ll_rows not in ("padded", "valid"):
        raise ValueError(f"ll_rows must be 'padded' or 'valid', got {ll_rows!r}")
    H, E, K, F, C = c.hidden, c.experts, c.topk, c.expert_ffn, c.context
    nh = c.heads
    isz, wsz = itemsize(c.dtype), itemsize(wire)
    M = t * K
    ht = schedule == Schedule.HT
    if schedule == Schedule.LL and ll_rows == "padded":
        local = c.experts_per_rank
        g = float(t * c.ep)  # each expert's rows: the layout's capacity
        R = local * t * c.ep  # rows the batched GEMMs and the receive touch
    else:
        local = min(c.experts_per_rank, M)
        g = expert_gemm_rows(M, local, padded=ht)
        R = M
    G = g * local
    return KernelCosts(
        load_input=Work(bytes=2 * t * H * isz),
        qkv=Work(flops=2 * t * H * 3 * H + 4 * t * H, bytes=(3 * t * H + 3 * H * H + 3 * t * H) * isz),
        context=Work(
            flops=4 * t * C * H + 5 * nh * t * C, bytes=(t * H + 2 * C * H + 3 * nh * t * C + 3 * t * H) * isz
        ),
        query=Work(flops=8 * t * H, bytes=8 * t * H * isz),
        out=Work(flops=2 * t * H * H, bytes=(H * H + 4 * t * H) * isz),
        router=Work(
            flops=2 * t * H * E + 4 * t * H + 8 * M,
            bytes=(3 * t * H + H * E + 2 * t * E) * isz + t * H * wsz + 8 * 8 * M,
        ),
        # each expert's GEMMs run on few rows at small t (GEMM efficiency), padded on ht
        experts=Work(
            flops=2 * G * H * 2 * F + 2 * G * F * H + 4 * R * F,
            bytes=local * 3 * H * F * isz
            + (R * H + 3 * R * 2 * F + 2 * R * F + R * H) * isz
            + (M * H * (wsz + isz) if ht else 0),  # ht: the kernel dequantizes its input too
            shape=(max(1, round(g)), 2 * F, H),
        ),
        dispatch_recv=Work(bytes=R * H * (wsz + isz)),
        combine_recv=Work(flops=2 * M * H, bytes=(2 * M * H + t * H) * isz),
        finalize=Work(flops=2 * t * H, bytes=4 * t * H * isz),
        copy=Work(bytes=2 * t * H * isz),
    )
