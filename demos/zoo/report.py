"""The report of one zoo step with and without DBO: ``step_report`` (a JSON-ready dict, the keys
docs/models.md lists) and ``format_step_report`` (the text ``demos.overlap --model`` prints).

``measure_point(workload, backend=, mode=, sbo=, fused=)`` runs the two steps (and, with ``sbo``, the step
with single-batch overlap; with ``fused``, the step with DeepGEMM's fused MoE kernel) (``demos.zoo.run.ZooRun``)
and returns a ``Point``: both steps' times and stages, the speedup, the hidden fraction (the share of the hideable
comm the DBO step hid, as the toy's report defines it: docs/overlap.md), the memory estimate, the
seconds per op of one MoE and one dense layer of the no-DBO step (``demos.zoo.breakdown``) and, on
real math, the exactness check. ``format_step_report(rep, detail=True)`` adds those seconds as a table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dbo.trace import engine_sums, overlap_seconds
from demos.engine_times import EngineTimes, overlap_hidden_fraction
from demos.zoo.breakdown import layer_breakdown
from demos.zoo.memory import MemoryEstimate, memory_estimate
from demos.zoo.models import count_params
from demos.zoo.ops import DENSE_GROUPS, MOE_GROUPS
from demos.zoo.run import StepTimes, ZooRun
from demos.zoo.workload import Workload

__all__ = ["Point", "format_step_report", "layer_table", "measure_point", "step_report"]


@dataclass
class Point:
    """One workload measured with and without DBO (module docstring)."""

    workload: Workload
    mode: str
    backend: str
    no_dbo: StepTimes
    dbo: StepTimes
    memory: MemoryEstimate
    slot_bytes: list[int]
    exact: tuple[bool, float] | None = None
    moe_layer_s: dict[str, float] | None = None
    dense_layer_s: dict[str, float] | None = None
    kernels: dict[str, Any] | None = None
    sbo: StepTimes | None = None
    attention_kinds_s: dict[str, dict[str, float]] | None = None
    fused: StepTimes | None = None

    @property
    def speedup(self) -> float:
        return self.no_dbo.seconds / self.dbo.seconds

    @property
    def engine(self) -> EngineTimes:
        a, b = engine_sums(self.no_dbo.records), engine_sums(self.dbo.records)
        return EngineTimes(
            compute_s=a["compute"],
            comm_s=a["comm"],
            overlapped_s=overlap_seconds(self.no_dbo.records),
            dbo_compute_s=b["compute"],
            dbo_comm_s=b["comm"],
            dbo_overlapped_s=overlap_seconds(self.dbo.records),
        )

    @property
    def hidden_fraction(self) -> float | None:
        return overlap_hidden_fraction(self.engine)

    def tokens_per_s(self, dbo_on: bool) -> float:
        """Tokens per second per GPU: the GPU's share of the step's tokens (all of them under DP
        attention, 1/N of its TP group's under attention TP N) over the step's time."""
        return self.workload.tokens_per_gpu / (self.dbo if dbo_on else self.no_dbo).seconds


def measure_point(
    w: Workload,
    *,
    backend: str = "virtual",
    mode: str = "eager",
    check: bool = False,
    profile: Any = None,
    kernels: Any = None,
    sbo: bool = False,
    fused: bool = False,
) -> Point:
    """Both steps of ``w`` (module docstring); ``check``: also the bitwise check (real math only);
    ``kernels``: where kernel times come from (``demos.zoo.kernel_times``; default the roofline);
    ``sbo``: also the step with single-batch overlap (``Point.sbo``; the ll schedule with EP > 1 only);
    ``fused``: also the step with DeepGEMM's fused MoE kernel (``Point.fused``; where it can run)."""
    with ZooRun(w, backend=backend, mode=mode, profile=profile, kernels=kernels) as r:
        no = r.step(False)
        yes = r.step(True)
        single = r.step(False, sbo=True) if sbo else None
        one_kernel = r.step(False, fused=True) if fused else None
        slots = r.slot_sizes()
        exact = r.check_exact() if check else None
        ops = layer_breakdown(w, w.tokens, r.profile, r.kernels)
        kernels = {"source": r.kernels.source, "fallbacks": dict(r.kernels.fallbacks)}
    return Point(
        w,
        mode,
        backend,
        no,
        yes,
        memory_estimate(w, slots),
        slots,
        exact,
        ops["moe_layer_s"],
        ops["dense_layer_s"],
        kernels,
        single,
        ops["attention_kinds_s"],
        one_kernel,
    )


def step_report(p: Point) -> dict[str, Any]:
    """The JSON-ready report of ``p``."""
    w = p.workload
    c = count_params(w.spec)
    e = p.engine
    return {
        "model": w.spec.name,
        "model_source": w.spec.source,
        "gpu": w.gpu.name,
        "nodes": w.cluster.nodes,
        "gpus_per_node": w.cluster.gpus_per_node,
        "network": w.cluster.network,
        "ep": w.cluster.ep,
        "attention_tp": w.attention_tp,
        "phase": w.phase,
        "tokens": w.tokens,
        "context": w.context,
        "ubatches": w.ubatches,
        "schedule": w.schedule,
        "mode": p.mode,
        "backend": p.backend,
        "imbalance": w.imbalance,
        "comm_sms": w.comm_sms,
        "experts_per_rank": w.experts_per_rank,
        "redundant_experts": w.redundant_experts,
        "params_total": c.total,
        "params_active": c.active,
        "params_active_with_embedding": c.active_with_embedding,
        "step_no_dbo_s": p.no_dbo.seconds,
        "step_dbo_s": p.dbo.seconds,
        "speedup": p.speedup,
        "hidden_fraction": p.hidden_fraction,
        "tokens_per_s_gpu_no_dbo": p.tokens_per_s(False),
        "tokens_per_s_gpu_dbo": p.tokens_per_s(True),
        "compute_s": e.compute_s,
        "comm_s": e.comm_s,
        "stages": dict(p.no_dbo.stages),
        "stages_dbo": dict(p.dbo.stages),
        "moe_layer_s": None if p.moe_layer_s is None else dict(p.moe_layer_s),
        "dense_layer_s": None if p.dense_layer_s is None else dict(p.dense_layer_s),
        "attention_kinds_s": p.attention_kinds_s,
        "kernel_times": p.kernels,
        "kernels_no_dbo": p.no_dbo.kernels,
        "kernels_dbo": p.dbo.kernels,
        "workspace_slot_bytes": list(p.slot_bytes),
        "memory": p.memory.as_dict(),
        "exact": None if p.exact is None else {"bitwise_equal": p.exact[0], "max_abs_diff": p.exact[1]},
    }


def _gb(x: float) -> str:
    return f"{x / 1e9:.2f} GB"


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f} ms"


def layer_table(moe: dict[str, float] | None, dense: dict[str, float] | None) -> list[str]:
    """``--detail``'s lines: the device ms of each op of one MoE and one dense layer of the no-DBO step."""
    lines = [f"  {'op':<14} {'MoE layer':>10} {'dense layer':>12}"]
    for op in dict.fromkeys([*MOE_GROUPS, *DENSE_GROUPS, *(moe or {}), *(dense or {})]):
        a = "-" if moe is None or op not in moe else f"{moe[op] * 1e3:.4f}"
        b = "-" if dense is None or op not in dense else f"{dense[op] * 1e3:.4f}"
        lines.append(f"  {op:<14} {a:>10} {b:>12}")
    a = "-" if moe is None else f"{sum(moe.values()) * 1e3:.4f}"
    b = "-" if dense is None else f"{sum(dense.values()) * 1e3:.4f}"
    lines.append(f"  {'total':<14} {a:>10} {b:>12}")
    return lines


def _kernels_line(k: dict[str, Any] | None) -> str:
    if k is None:
        return "kernels  roofline"
    fell = "; ".join(f"{op}: {why}" for op, why in k["fallbacks"].items())
    return f"kernels  {k['source']}" + (f" (fell back to the roofline: {fell})" if fell else "")


def format_step_report(rep: dict[str, Any], *, detail: bool = False) -> str:
    """The text report of a ``step_report`` dict; ``detail``: with the per-op table of one layer."""
    m = rep["memory"]
    st = rep["stages"]
    hf = rep["hidden_fraction"]
    lines = [
        f"model    {rep['model']} ({rep['model_source']}): {rep['params_total'] / 1e9:.1f}B parameters, "
        f"{rep['params_active'] / 1e9:.2f}B active",
        f"cluster  {rep['nodes']} x {rep['gpus_per_node']} {rep['gpu']}"
        + ("" if rep.get("network", "ib") == "ib" else f" over {rep['network']}")
        + f", EP {rep['ep']}"
        + (f", attention TP {rep['attention_tp']}" if rep.get("attention_tp", 1) > 1 else "")
        + " "
        f"({rep['experts_per_rank']} expert slots per GPU, {rep['redundant_experts']} redundant)",
        f"step     {rep['phase']}, {rep['tokens']} tokens per "
        + ("GPU" if rep.get("attention_tp", 1) == 1 else "TP group")
        + f", context {rep['context']}, "
        f"{rep['ubatches']} ubatches, "
        f"schedule {rep['schedule']}, {rep['mode']}, imbalance {rep['imbalance']}, comm SMs {rep['comm_sms']} "
        f"({rep['backend']})",
        _kernels_line(rep.get("kernel_times")),
        f"no DBO   {_ms(rep['step_no_dbo_s'])}  ({rep['tokens_per_s_gpu_no_dbo']:,.0f} tokens/s per GPU)",
        f"DBO      {_ms(rep['step_dbo_s'])}  ({rep['tokens_per_s_gpu_dbo']:,.0f} tokens/s per GPU)",
        f"speedup  {rep['speedup']:.3f}x"
        + ("" if hf is None else f", hidden fraction {hf:.1%}")
        + ("  (DBO does not pay here)" if rep["speedup"] < 1 else ""),
        "stages   " + ", ".join(f"{k} {_ms(v)}" for k, v in st.items()) + " (no-DBO step, busy time)",
        f"memory   weights {_gb(m['weights'])}, KV cache {_gb(m['kv_cache'])}, activations {_gb(m['activations'])}, "
        f"workspace {_gb(m['workspace'])}, comm buffers {_gb(m['comm_buffers'])}",
        f"         total {_gb(m['total'])} of {_gb(m['usable'])} usable ({_gb(m['capacity'])} HBM): "
        + ("fits" if m["fits"] else "DOES NOT FIT")
        + f"; DBO's extra slots and buffers {_gb(m['dbo_extra'])}"
        + ("" if m["fits"] or not m["fits_without_dbo"] else " (fits without DBO)"),
        "slots    " + ", ".join(f"{b / 2**20:.1f} MiB" for b in rep["workspace_slot_bytes"]),
    ]
    ex = rep["exact"]
    if ex is not None:
        verdict = "bitwise equal" if ex["bitwise_equal"] else f"DIFFER (max |diff| {ex['max_abs_diff']:.3g})"
        lines.append(f"outputs  DBO vs the same split run one ubatch after another: {verdict}")
    if detail:
        lines.append("per op   ms of device time of one layer of the no-DBO step (moe_layer_s, dense_layer_s):")
        lines += layer_table(rep["moe_layer_s"], rep["dense_layer_s"])
    return "\n".join(lines)
