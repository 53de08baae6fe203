"""Where the time of a layer goes: the device seconds of each op of one MoE layer and of one dense layer
of the no-DBO step (``layer_breakdown``), summed from the step's plan (``demos.zoo.plan``) the step itself
launches, so the breakdown and the step cannot disagree about which ops run or what each costs.

The no-DBO step runs the whole batch as one ubatch of ``t = workload.tokens`` tokens. Each op's seconds
are what the virtual backend charges its launch (``demos.zoo.plan.launch_seconds``: a ``Work``'s
``kernel_time`` with the per-kernel floor paid once per device kernel the op issues, a comm kernel's or a
collective's seconds as they are, and the op's ``OpCost`` correction, none on the zoo's profiles). Each
op's seconds go to its group (``demos.zoo.ops``: ``Op.group``), and the groups are the keys:

* an MoE layer (``MOE_GROUPS``): ``attention`` (``attn_proj`` + ``attn_core`` + ``attn_out``: norm,
  projections, attention, o_proj), ``router``, ``dispatch`` / ``combine`` (the all-to-all kernels: on ll
  the SM-held send half plus the flight, the normal kernels on ht; 0.0 without an all-to-all),
  ``dispatch_recv`` / ``combine_recv`` (the copies on the receiving side: ll's receive hooks, ht's copy out
  of the combine's landing buffer (``moe_copy``), or without an all-to-all the local copies into and out of
  the experts' layout), ``experts`` (the routed experts' grouped GEMMs, with ht's permute and un-permute),
  ``shared`` (0.0 without shared experts) and ``finalize`` (the routed and shared outputs added into the
  residual);
* a dense layer (``DENSE_GROUPS``): ``attention`` and ``mlp`` (``dense_mlp``);
* with attention TP (``Workload.attention_tp`` > 1), the collectives the layer launches (``TP_GROUPS``) as
  further keys, after the others.

A layer's ops add up to the device time of its kernels. The step is that sum over its layers plus the
embedding (with attention TP, its all-reduce too), the LM head and, eager, the host's launch costs; on
ll with EP > 1 the shared experts run while the combine is in flight, and where the engine runs them on a
side stream (``shared_side``, ``demos.zoo.side_streams``) beside the routed path, so there the step is a
little less than the sum. Layers differ only in their attention (a sliding-window layer reads less KV cache):
each dict is the mean over the model's MoE (or dense) layers, so that it times the number of such
layers is their total.
"""

from __future__ import annotations

from dbo.costs import DeviceProfile
from demos.zoo.attention import layer_attention
from demos.zoo.attention_base import module_costs
from demos.zoo.fold import Folder
from demos.zoo.kernel_times import KernelTimes
from demos.zoo.ops import DENSE_GROUPS, MOE_GROUPS, TP_GROUPS, op
from demos.zoo.plan import LayerPlan, StepPlan, launch_seconds
from demos.zoo.workload import Workload

__all__ = ["attention_seconds", "layer_breakdown", "layer_ops"]


def layer_ops(plan: StepPlan, lp: LayerPlan) -> dict[str, float]:
    """The seconds per group of one layer's plain launches (module docstring): the ``MOE_GROUPS`` or
    ``DENSE_GROUPS`` keys (0.0 for a group no launch fills), then the ``TP_GROUPS`` the layer launches."""
    groups = MOE_GROUPS if lp.moe else DENSE_GROUPS
    parts: dict[str, list[float]] = {g: [] for g in groups}
    for name, seconds in plan.seconds(lp.plain).items():
        group = op(name).group
        if group not in parts and group not in TP_GROUPS:
            raise ValueError(f"op {name!r} of group {group!r} has no place in a {'MoE' if lp.moe else 'dense'} layer")
        parts.setdefault(group, []).append(seconds)
    out = {g: sum(parts[g]) for g in groups}
    out.update({g: sum(parts[g]) for g in TP_GROUPS if g in parts})
    return out


def layer_breakdown(
    w: Workload,
    t: int,
    profile: DeviceProfile,
    kernels: KernelTimes | None = None,
) -> dict[str, dict | None]:
    """``{"moe_layer_s": {op: seconds}, "dense_layer_s": {op: seconds}, "attention_kinds_s": ...}`` of one
    layer of a ubatch of ``t`` tokens of ``w`` (the no-DBO step: ``t = w.tokens``) on ``profile`` (module
    docstring); each of the first two is the mean over the model's layers of that kind, None when the model
    has none; ``attention_kinds_s``, for a model whose layers differ in attention kind (a hybrid model's
    linear and full layers; DeepSeek-V4's SWA, CSA and HCA layers), the attention group's seconds per layer of
    each kind with its layer count (``{label: {"layers": n, "seconds": s}}``, ``AttentionKind.layer_label``;
    a wide residual's kernels around the attention included), None for a model of one kind.
    ``kernels``: where the plan's kernel times come from (default: the roofline of ``w``'s GPU; pass the
    run's ``ZooRun.kernels`` to time what the run times)."""
    plan = StepPlan(w, profile, kernels)
    per_plan: dict[int, dict[str, float]] = {}
    sums: dict[bool, dict[str, float]] = {}
    counts = {True: 0, False: 0}
    kinds: dict[str, list[float]] = {}
    for i, lp in enumerate(plan.ubatch(t).layers):
        ops = per_plan.get(id(lp))
        if ops is None:
            ops = per_plan[id(lp)] = layer_ops(plan, lp)
        moe = lp.moe
        counts[moe] += 1
        acc = sums.setdefault(moe, dict.fromkeys(ops, 0.0))
        for group, s in ops.items():
            acc[group] += s
        kind, a = layer_attention(w.spec.attention, i)
        kinds.setdefault(kind.layer_label(a, i), []).append(ops["attention"])
    out = {
        name: None if not counts[moe] else {group: s / counts[moe] for group, s in sums[moe].items()}
        for name, moe in (("moe_layer_s", True), ("dense_layer_s", False))
    }
    out["attention_kinds_s"] = (
        {label: {"layers": len(s), "seconds": sum(s) / len(s)} for label, s in kinds.items()}
        if len(kinds) > 1
        else None
    )
    return out


def attention_seconds(w: Workload, t: int, layer: int, profile: DeviceProfile, kernels: KernelTimes) -> float:
    """The seconds of layer ``layer``'s attention ops for a ubatch of ``t`` tokens of ``w`` (its kind's ops,
    each charged as the plan charges it: ``launch_seconds``): ``layer_ops``' "attention" group, without
    costing the rest of the layer (a module check or fit composes the attention op of thousands of rows)."""
    kind, a = layer_attention(w.spec.attention, layer)
    costs = module_costs(kind, w, a, t, layer, Folder(profile, kernels))
    return sum(launch_seconds(name, cost, profile) for name, cost in costs.ops)
