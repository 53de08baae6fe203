"""Where the time of a layer goes: the device seconds of each op of one MoE layer and of one dense layer
of the no-DBO step (``layer_breakdown``), from the same ``LayerCosts`` and profile the step runs on.

The no-DBO step runs the whole batch as one ubatch of ``t = workload.tokens`` tokens. Each op's seconds
are what the virtual backend charges its launch (``op_seconds``): a ``Work``'s ``kernel_time`` with the
per-kernel floor paid once per device kernel the op issues (``min_kernel`` x its ``ZOO_OPS`` count, read
from the profile's host ops), a comm kernel's modelled seconds as they are, and the op's ``OpCost``
correction (none on the zoo's profiles). The keys (``MOE_OPS``, ``DENSE_OPS``) group the model's ops
(``demos.zoo.model``):

* ``attention``: ``attn_proj`` + ``attn_core`` + ``attn_out`` (norm, projections, attention, o_proj);
* ``router``; ``shared`` (0.0 without shared experts); ``finalize`` (the routed and shared outputs added
  into the residual);
* ``dispatch`` / ``combine``: the all-to-all kernels (on ll the SM-held send half, ``dispatch_send`` /
  ``combine_send``, plus the flight, ``dispatch_ll`` / ``combine_ll``; the normal ``dispatch`` /
  ``combine`` on ht), 0.0 when EP is 1;
* ``dispatch_recv`` / ``combine_recv``: the copies on the receiving side (ll: the receive hooks; ht: the
  copy out of the combine's landing buffer, ``moe_copy``; EP 1: the local copies into and out of the
  experts' layout);
* ``experts``: the routed experts' grouped GEMMs (with ht's permute and un-permute);
* a dense layer: ``attention`` and ``mlp`` (``dense_mlp``);
* with attention TP (``Workload.attention_tp`` > 1), the TP collectives the layer's costs carry
  (``TP_OPS``) as further keys.

A layer's ops add up to the device time of its kernels. The step is that sum over its layers plus the
embedding (with attention TP, its all-reduce too), the LM head and, eager, the host's launch costs; on
ll with EP > 1 the shared experts run while the combine is in flight, so there the step is a little
less than the sum. Layers differ only in their attention (a sliding-window layer reads less KV cache):
each dict is the mean over the model's MoE (or dense) layers, so that it times the number of such
layers is their total.
"""

from __future__ import annotations

from typing import Any

from dbo.costs import DeviceProfile, OpCost, Work, kernel_time, memory_seconds
from demos.zoo.costs import LayerCosts, layer_costs
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.models import MLAAttention
from demos.zoo.workload import Workload

__all__ = ["DENSE_OPS", "MOE_OPS", "TP_OPS", "layer_breakdown", "layer_ops", "op_seconds"]

MOE_OPS = (
    "attention",
    "router",
    "dispatch",
    "dispatch_recv",
    "experts",
    "combine",
    "combine_recv",
    "shared",
    "finalize",
)
"""The keys of ``moe_layer_s`` (module docstring)."""

DENSE_OPS = ("attention", "mlp")
"""The keys of ``dense_layer_s``."""

TP_OPS = ("tp_attn_reduce", "tp_moe_gather", "tp_mlp_reduce")
"""The attention-TP collectives a layer's costs may carry (``LayerCosts`` fields, seconds): each one a
layer has (not None: attention TP > 1) is one more key of its dict, after the others."""

_NO_CORRECTION = OpCost()


def op_seconds(op: str, cost: Work | float | None, profile: DeviceProfile, kind: str = "compute") -> float:
    """Device seconds the virtual backend charges one launch of ``op`` costing ``cost`` on ``profile``
    (outside a DBO step): ``kernel_time`` with the op's kernel count for a ``Work``, seconds as given for
    a number, corrected by the op's ``OpCost``; 0.0 for None (a kernel that does not run)."""
    if cost is None:
        return 0.0
    oc = profile.host.ops.get(op) or _NO_CORRECTION
    _, kernels = profile.host.launch_cost(op)
    model = kernel_time(cost, profile, kernels=kernels) if isinstance(cost, Work) else float(cost)
    memory = memory_seconds(kind, cost, (), profile) if oc.memory_scale else 0.0
    return oc.seconds(model, memory)


def layer_ops(w: Workload, c: LayerCosts, profile: DeviceProfile) -> dict[str, float]:
    """The seconds per op of one layer whose costs are ``c``: the ``MOE_OPS`` or ``DENSE_OPS`` keys, then
    the ``TP_OPS`` the layer has."""
    parts = (("attn_proj", c.attn_proj), ("attn_core", c.attn_core), ("attn_out", c.attn_out))
    attention = sum(op_seconds(op, cost, profile) for op, cost in parts)
    tp = {op: op_seconds(op, getattr(c, op), profile) for op in TP_OPS if getattr(c, op, None) is not None}
    if c.experts is None:
        return {"attention": attention, "mlp": op_seconds("dense_mlp", c.dense_mlp, profile), **tp}
    ll, comm = w.schedule == "ll", w.alltoall
    if comm:
        dispatch = op_seconds("dispatch_ll" if ll else "dispatch", c.dispatch, profile, "comm")
        combine = op_seconds("combine_ll" if ll else "combine", c.combine, profile, "comm")
        dispatch += op_seconds("dispatch_send", c.dispatch_send, profile)
        combine += op_seconds("combine_send", c.combine_send, profile)
        d_recv = op_seconds("dispatch_recv", c.dispatch_recv, profile) if ll else 0.0
        c_recv = (
            op_seconds("combine_recv", c.combine_recv, profile)
            if ll
            else op_seconds("moe_copy", c.finalize, profile, "comm")
        )
    else:
        dispatch = combine = 0.0
        d_recv = op_seconds("dispatch_recv", c.dispatch_recv, profile)
        c_recv = op_seconds("combine_recv", c.combine_recv, profile)
    return {
        "attention": attention,
        "router": op_seconds("router", c.router, profile),
        "dispatch": dispatch,
        "dispatch_recv": d_recv,
        "experts": op_seconds("experts_ll" if ll else "experts", c.experts, profile),
        "combine": combine,
        "combine_recv": c_recv,
        "shared": op_seconds("shared", c.shared, profile),
        "finalize": op_seconds("finalize", c.finalize, profile),
        **tp,
    }


def _layer_key(w: Workload, layer: int) -> tuple[bool, Any]:
    """Layers that cost the same share a key: MoE or dense, and the attention's sliding window."""
    a = w.spec.attention
    return w.spec.is_moe_layer(layer), None if isinstance(a, MLAAttention) else a.window_of(layer)


def layer_breakdown(
    w: Workload,
    t: int,
    profile: DeviceProfile,
    kernels: KernelTimes | None = None,
) -> dict[str, dict[str, float] | None]:
    """``{"moe_layer_s": {op: seconds}, "dense_layer_s": {op: seconds}}`` of one layer of a ubatch of
    ``t`` tokens of ``w`` (the no-DBO step: ``t = w.tokens``) on ``profile`` (module docstring); each is
    the mean over the model's layers of that kind, None when the model has none. ``kernels``:
    ``demos.zoo.costs.layer_costs``'s (default: the roofline of ``w``'s GPU; pass the run's
    ``ZooRun.kernels`` to time what the run times)."""
    per_key: dict[tuple[bool, Any], dict[str, float]] = {}
    sums: dict[bool, dict[str, float]] = {}
    counts = {True: 0, False: 0}
    for i in range(w.spec.num_layers):
        key = _layer_key(w, i)
        ops = per_key.get(key)
        if ops is None:
            ops = per_key[key] = layer_ops(w, layer_costs(w, t, i, profile, kernels), profile)
        moe = key[0]
        counts[moe] += 1
        acc = sums.setdefault(moe, dict.fromkeys(ops, 0.0))
        for op, s in ops.items():
            acc[op] += s
    return {
        name: None if not counts[moe] else {op: s / counts[moe] for op, s in sums[moe].items()}
        for name, moe in (("moe_layer_s", True), ("dense_layer_s", False))
    }
