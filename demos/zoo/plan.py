"""The step's plan: every op one ubatch of a step launches, each with its cost, and the LM head after it.

One function builds what a step costs, from one table of ops (``demos.zoo.ops``):
``StepPlan(workload, profile, kernels).ubatch(t)`` is a ``UbatchPlan`` for a ubatch of ``t`` tokens:

* ``embed``: the embedding (one BF16 pass over the ubatch's rows) and, under attention TP, the
  vocab-parallel embedding's all-reduce (``tp_embed_reduce``);
* ``layers``: one ``LayerPlan`` per layer, the ops the layer launches in a plain step (no DBO split
  needed: a DBO step launches the same ops per ubatch, with yields between them) in their order, each with
  its cost (``demos.zoo.costs.layer_costs``: a ``Work`` for compute, seconds for a link kernel or a
  collective), and for a step with single-batch overlap (``LayerPlan.sbo``) the same with the routed
  experts split in two (``experts_up``, ``experts_down``);

and ``StepPlan.head`` is the LM head's ops, after the forward on the whole batch (vLLM computes logits
outside the model's forward and its CUDA graph): one GEMM of the batch's logit rows through
``vocab x hidden`` (vocab-parallel under attention TP, as vLLM's ``ParallelLMHead``: ``vocab / attention_tp``
columns per rank, then the BF16 logits all-gathered over the group, ``tp_lm_head_gather``).

Which ops a MoE layer launches is decided here and only here, by its schedule and whether the MoE
block moves tokens over a link (``Workload.alltoall``):

=====================  ==========================================================================
ll, all-to-all         router, dispatch_send, dispatch_ll, dispatch_recv, experts_ll, combine_send,
                       combine_ll, shared, combine_recv, finalize (a send half only where it is > 0)
ht, all-to-all         router, dispatch, experts, combine, shared, moe_copy, finalize
no all-to-all          router, dispatch_recv, experts (ll: experts_ll), combine_recv, shared, finalize (no
                       receive copies with a local fused MoE: ``demos.zoo.costs``); where the engine runs the
                       shared experts on a side stream (``demos.zoo.side_streams``), shared_side first instead
fused MoE (its step)   router, shared, fused_moe, finalize (``LayerPlan.fused``: DeepGEMM's fused kernel)
=====================  ==========================================================================

(``shared`` only with shared experts), between the attention's ops (and ``tp_attn_reduce``) and the
attention-TP collectives after the MLP (``tp_moe_gather``, ``tp_mlp_reduce``); a dense layer is the
attention's ops, ``dense_mlp`` and its collectives. A wide residual (DeepSeek-V4) adds its pre and post
kernels around each sub-layer: ``mhc_attn_pre`` first, ``mhc_attn_post`` after ``tp_attn_reduce``,
``mhc_mlp_pre`` before the router and ``mhc_mlp_post`` after the finalize. The model (``demos.zoo.model``,
``demos.zoo.moe``) launches these ops by name with these costs, and the breakdown (``demos.zoo.breakdown``)
sums the same plan (``launch_seconds``: what the virtual backend charges each launch), so the two cannot
disagree about which ops run; ``tests/zoo/test_plan.py`` holds the launched ops to the plan's.

Layers that cost the same (``layer_key``: MoE or dense, and what the attention kind says makes its cost
differ, a sliding window) share one ``LayerPlan``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from dbo.costs import DeviceProfile, OpCost, Work, kernel_time, memory_seconds
from demos.vocabulary import Phase, Schedule
from demos.zoo.attention import layer_attention
from demos.zoo.costs import LayerCosts, layer_costs
from demos.zoo.fold import gemm, memory_pass
from demos.zoo.hardware.collectives import tp_collective
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.ops import op
from demos.zoo.side_streams import shared_beside
from demos.zoo.workload import Workload

__all__ = ["LayerPlan", "StepPlan", "UbatchPlan", "launch_seconds", "layer_key", "layer_launches"]

Cost = Work | float
_NO_CORRECTION = OpCost()


def launch_seconds(name: str, cost: Cost | None, profile: DeviceProfile) -> float:
    """Device seconds the virtual backend charges one launch of op ``name`` costing ``cost`` on
    ``profile`` (outside a DBO step): ``kernel_time`` with the op's kernel count (``demos.zoo.ops``) for a
    ``Work``, seconds as given for a number, corrected by the op's ``OpCost`` in the profile's host (none
    on the zoo's profiles); 0.0 for None (a kernel that does not run)."""
    if cost is None:
        return 0.0
    info = op(name)
    oc = profile.host.ops.get(name) or _NO_CORRECTION
    _, kernels = profile.host.launch_cost(name)
    model = kernel_time(cost, profile, kernels=kernels) if isinstance(cost, Work) else float(cost)
    memory = memory_seconds(info.stream, cost, (), profile) if oc.memory_scale else 0.0
    return oc.seconds(model, memory)


def layer_key(w: Workload, layer: int) -> Hashable:
    """What makes two layers of ``w`` cost the same: MoE or dense, the layer's attention kind
    (``layer_attention``: a hybrid model's linear layers differ from its full ones) and that kind's key."""
    kind, a = layer_attention(w.spec.attention, layer)
    return w.spec.is_moe_layer(layer), type(kind).__name__, kind.cost_key(a, layer)


def _ordered(pairs: list[tuple[str, Cost | None]]) -> Mapping[str, Cost]:
    """The launches among ``pairs`` that run (cost not None), in order, each op checked against the table."""
    out: dict[str, Cost] = {}
    for name, cost in pairs:
        op(name)  # an op missing from the table is an error here, before any launch
        if cost is not None:
            out[name] = cost
    return MappingProxyType(out)


def _send(seconds: float | None) -> Work | None:
    """A low-latency kernel's SM-held send half as a launch: ``seconds`` on the compute stream (None or 0:
    no launch)."""
    return Work(seconds=seconds, dtype="bfloat16") if seconds else None


def layer_launches(
    w: Workload, c: LayerCosts, *, sbo: bool = False, fused: bool = False, side: bool = False
) -> Mapping[str, Cost]:
    """The ops a layer whose costs are ``c`` launches, in order, with their costs (module docstring);
    ``sbo``: the step with single-batch overlap (ll with an all-to-all only); ``fused``: the step with
    DeepGEMM's fused MoE kernel (where ``c.fused`` is set); ``side``: the shared experts on a side stream
    (without an all-to-all only: ``demos.zoo.side_streams``)."""
    hc = c.mhc or (None, None, None, None)  # a wide residual's kernels around each sub-layer
    head = [("mhc_attn_pre", hc[0]), *c.attention_ops, ("tp_attn_reduce", c.tp_attn_reduce), ("mhc_attn_post", hc[1])]
    head.append(("mhc_mlp_pre", hc[2]))
    tail = [("mhc_mlp_post", hc[3]), ("tp_moe_gather", c.tp_moe_gather), ("tp_mlp_reduce", c.tp_mlp_reduce)]
    if c.experts is None:
        return _ordered(head + [("dense_mlp", c.dense_mlp)] + tail)
    down, up = c.latent or (None, None)  # a latent MoE's projections around the routed experts
    if fused:  # the shared experts, then one kernel for the dispatch, the routed experts and the combine
        moe = [("router", c.router), ("latent_down", down), ("shared", c.shared), ("fused_moe", c.fused)]
        moe += [("latent_up", up), ("finalize", c.finalize)]
    elif not w.alltoall:
        experts = "experts_ll" if w.schedule == Schedule.LL else "experts"
        moe = [("shared_side", c.shared if side else None), ("router", c.router), ("latent_down", down)]
        moe += [("dispatch_recv", c.dispatch_recv), (experts, c.experts), ("combine_recv", c.combine_recv)]
        moe += [("shared", None if side else c.shared), ("latent_up", up), ("finalize", c.finalize)]
    elif w.schedule == Schedule.HT:
        moe = [("router", c.router), ("latent_down", down), ("dispatch", c.dispatch), ("experts", c.experts)]
        moe += [("combine", c.combine), ("shared", c.shared), ("moe_copy", c.finalize), ("latent_up", up)]
        moe += [("finalize", c.finalize)]
    elif sbo:  # the shared expert beside the dispatch in flight, the combine beside the down GEMM
        e_up, e_down = c.experts_split
        moe = [("router", c.router), ("latent_down", down), ("dispatch_send", _send(c.dispatch_send))]
        moe += [("dispatch_ll", c.dispatch), ("shared", c.shared), ("dispatch_recv", c.dispatch_recv)]
        moe += [("experts_up", e_up), ("combine_send", _send(c.combine_send)), ("combine_ll", c.combine)]
        moe += [("experts_down", e_down), ("combine_recv", c.combine_recv), ("latent_up", up), ("finalize", c.finalize)]
    else:
        moe = [("router", c.router), ("latent_down", down), ("dispatch_send", _send(c.dispatch_send))]
        moe += [("dispatch_ll", c.dispatch), ("dispatch_recv", c.dispatch_recv), ("experts_ll", c.experts)]
        moe += [("combine_send", _send(c.combine_send)), ("combine_ll", c.combine), ("shared", c.shared)]
        moe += [("combine_recv", c.combine_recv), ("latent_up", up), ("finalize", c.finalize)]
    return _ordered(head + moe + tail)


@dataclass(frozen=True)
class LayerPlan:
    """One layer's launches (module docstring): ``plain`` (the step without single-batch overlap, with or
    without DBO), ``sbo`` (None where single-batch overlap cannot run) and ``fused`` (DeepGEMM's fused MoE
    kernel; None where it cannot run), each op -> cost; ``costs`` the kernels' ``LayerCosts`` they come from."""

    moe: bool
    costs: LayerCosts
    plain: Mapping[str, Cost]
    sbo: Mapping[str, Cost] | None
    fused: Mapping[str, Cost] | None = None

    def __contains__(self, name: str) -> bool:
        return name in self.plain


@dataclass(frozen=True)
class UbatchPlan:
    """The launches of one ubatch of ``tokens`` tokens (module docstring)."""

    tokens: int
    embed: Mapping[str, Cost]
    layers: tuple[LayerPlan, ...]


class StepPlan:
    """The plans of ``workload``'s ubatches (``ubatch(t)``, built once per size) and its LM head
    (``head``); every op costed for ``profile`` with ``kernels`` (None: the roofline of the workload's GPU)."""

    def __init__(self, workload: Workload, profile: DeviceProfile, kernels: KernelTimes | None = None):
        self.w = workload
        self.profile = profile
        self.kernels = KernelTimes(workload.gpu, profile) if kernels is None else kernels
        self._ubatches: dict[int, UbatchPlan] = {}
        self._keys = [layer_key(workload, i) for i in range(workload.spec.num_layers)]

    def layer(self, t: int, layer: int) -> LayerPlan:
        """The plan of ``layer`` for a ubatch of ``t`` tokens."""
        return self.ubatch(t).layers[layer]

    def ubatch(self, t: int) -> UbatchPlan:
        """The plan of a ubatch of ``t`` tokens."""
        plan = self._ubatches.get(t)
        if plan is None:
            plan = self._ubatches[t] = self._build(t)
        return plan

    def _build(self, t: int) -> UbatchPlan:
        w, H = self.w, self.w.spec.hidden_size
        by_key: dict[Hashable, LayerPlan] = {}
        layers = []
        for i, key in enumerate(self._keys):
            lp = by_key.get(key)
            if lp is None:
                c = layer_costs(w, t, i, self.profile, self.kernels)
                sbo = layer_launches(w, c, sbo=True) if c.experts_split is not None else None
                fused = layer_launches(w, c, fused=True) if c.fused is not None else None
                plain = layer_launches(w, c, side=shared_beside(self.kernels.engine, w, t))
                lp = by_key[key] = LayerPlan(c.experts is not None, c, plain, sbo, fused)
            layers.append(lp)
        tp = w.attention_tp
        reduce = self.kernels.all_reduce(2.0 * t * H, tp) if tp > 1 else None  # BF16 partial rows
        embed = _ordered([("embed", memory_pass(t, H, 1)), ("tp_embed_reduce", reduce)])
        return UbatchPlan(t, embed, tuple(layers))

    @property
    def head(self) -> Mapping[str, Cost]:
        """The LM head's launches on the step's whole batch (module docstring): its logit rows are the
        batch's tokens in decode, one per request (the last prompt token) in prefill."""
        w, s = self.w, self.w.spec
        tp = w.attention_tp
        rows = w.tokens if w.phase == Phase.DECODE else max(1, math.ceil(w.requests))
        work = gemm(rows, -(-s.vocab_size // tp), s.hidden_size, s.precision.weights)
        gather = tp_collective(w.gpu, "all_gather", 2.0 * rows * s.vocab_size, tp) if tp > 1 else None
        return _ordered([("lm_head", work), ("tp_lm_head_gather", gather)])

    def seconds(self, costs: Mapping[str, Cost]) -> dict[str, float]:
        """The device seconds of each launch of ``costs`` (``launch_seconds``), in order."""
        return {name: launch_seconds(name, cost, self.profile) for name, cost in costs.items()}
