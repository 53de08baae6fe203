"""What every attention kind gives the step (``demos.zoo.attention``, ``demos.zoo.linear_attention``):
``AttentionCosts`` (its ops' costs on one rank for one ubatch), ``AttentionKind`` (the interface each kind
fills in), ``attention_pairs`` (query-key pairs of a ubatch), ``timed_core`` (a core's ``Work`` timed on
its family's attention curve) and ``module_costs`` (a layer's attention ops as the step charges them: a
kind's costs with its module's fixed time covering its kernels' floors).

Why the cover: an MLA decode core carries the whole module's fixed time (``KernelTimes.module_extra``,
fitted to TRT-LLM's measured modules, or SGLang's for its sparse MLA: ``demos.zoo.attention_module``), and every
op also pays its kernels' floor (``kernels x min_kernel``, ``dbo.costs.kernel_time``). Both stand for the same
thing, the module's small kernels and the gaps between them; charged one on top of the other, a module of few
heads (attention TP 4 to 8,
whose projections are below their floors) came out 31-47% longer than the measured modules on B200 and GB300
at up to 64 requests, while the 64- and 128-head rows sat within 4%. So the fixed time is a floor of the whole
module: the core's share is cut by what the floors already add to the projections and the output, and the three
ops take ``max(their floored times, their kernels' work + the fixed time)``. A kind's other ops (an indexer,
a compressor) are more kernels than the fitted module had, and keep their floors.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any

import torch

from dbo.costs import DeviceProfile, Work, kernel_time
from demos.vocabulary import Phase
from demos.zoo.fold import Folder
from demos.zoo.launch import Launcher
from demos.zoo.work import causal_pairs, decode_pairs
from demos.zoo.workload import Workload

__all__ = [
    "AttentionCosts",
    "AttentionKind",
    "attention_pairs",
    "floor_slack",
    "module_costs",
    "module_key",
    "timed_core",
]


def module_key(module: str | None, spec: Any) -> str | None:
    """The module whose fixed time an MLA decode core of ``spec`` carries (``KernelTimes.module_extra``): ``module``
    ("mla", "dsa"), qualified ":bfloat16" when every projection of the module is a BF16 GEMM (its weights and its
    output projection stored in BF16: no activation is quantized, and TRT-LLM's tables time such modules apart,
    ``demos.zoo.attention_module.MODULE_GEMMS``). A module with one quantized GEMM among BF16 ones (an NVFP4
    ``o_proj``) keeps the quantized modules' time: a guess, as no table times such a mix."""
    if module is None:
        return None
    p = spec.precision
    return (
        f"{module}:bfloat16" if p.store("weights") == "bfloat16" and p.store("attention_out") == "bfloat16" else module
    )


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
    module: str | None = None
    """The module whose fixed time the kind's decode core carries (``KernelTimes.module_extra``): "mla" for the
    kinds built on MLA, "dsa" for DeepSeek sparse attention (SGLang has its own), None for the others."""

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


def timed_core(
    w: Workload,
    fold: Folder,
    flops: float,
    nbytes: float,
    shape: tuple | None,
    fp8_cache: bool = False,
    units: float = 0.0,
    module: str = "mla",
) -> Work:
    """The attention core's Work: its time on the family's attention curve (``KernelTimes.attention``; a core over
    an FP8 cache, ``fp8_cache``, on the family's curve of such a cache; a GQA core's ``units``, requests x KV
    heads, its work items; an MLA core's ``module``, whose fixed time it carries, qualified by ``w.spec``'s
    projections as ``module_costs`` qualifies it: ``module_key``)."""
    seconds = fold.kernels.attention(w.phase, flops, nbytes, shape, fp8_cache, units, module_key(module, w.spec))
    return Work(seconds=seconds, bytes=nbytes, dtype="bfloat16")


def floor_slack(name: str, cost: Work, profile: DeviceProfile) -> float:
    """Seconds op ``name``'s per-kernel floor adds above its work on ``profile`` (0 where the work is longer):
    the op's time with its kernels' floor less its time without it (``dbo.costs.kernel_time``)."""
    _, kernels = profile.host.launch_cost(name)
    return kernel_time(cost, profile, kernels=kernels) - kernel_time(cost, profile, kernels=0)


def module_costs(
    kind: AttentionKind, w: Workload, a: Any, t: int, layer: int, fold: Folder, costs: AttentionCosts | None = None
) -> AttentionCosts:
    """``kind``'s attention ops of layer ``layer`` for a ubatch of ``t`` tokens (``costs``: already built,
    e.g. with a residual folded in; default ``kind.costs``), the module's fixed time in the core cut by the
    floor slack of the module's projections and output (``floor_slack``; module docstring), never below 0.
    A kind's ops beyond the three (a sparse attention's indexer, DeepSeek-V4's compressors) keep their floors
    whole: the fixed time was fitted on modules without them, and their kernels are more of the layer's."""
    c = kind.costs(w, a, t, layer, fold) if costs is None else costs
    # the kind's decode core carries it (``module``); any shape stands for "an MLA core" here
    fp8 = w.spec.precision.bytes_of("kv_cache") == 1
    extra = fold.kernels.module_extra(w.phase, (), fp8, module_key(kind.module, w.spec)) if kind.module else 0.0
    if extra <= 0.0:
        return c
    proj, _, out = c.names
    slack = floor_slack(proj, c.proj, fold.p) + floor_slack(out, c.out, fold.p)
    cut = min(extra, slack)
    if cut <= 0.0:
        return c
    return replace(c, core=replace(c.core, seconds=c.core.seconds - cut))
