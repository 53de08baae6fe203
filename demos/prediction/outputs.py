"""What ``demos.predict`` prints and writes: one record per point (``point_record``), the text of the
whole report (``format_prediction``: the dict ``Prediction.to_dict()`` gives, with its points,
crossovers, recommendation, sources and what is not modelled; with ``detail``, ``--detail``'s table of
each point's seconds per op of one layer), ``--csv`` (``write_csv``) and ``--plot`` (``write_plot``).
The keys are in docs/predict.md.
"""

from __future__ import annotations

import csv
import math
from typing import Any

from demos.vocabulary import Overlap

__all__ = [
    "CSV_COLUMNS",
    "NOT_MODELLED",
    "OVERLAP_FLAGS",
    "detail_lines",
    "format_prediction",
    "point_record",
    "workload_lines",
    "write_csv",
    "write_plot",
]

NOT_MODELLED = (
    "the scheduler and sampling between steps (each step is the model's forward and its LM head only)",
    "the GEMMs' wave quantization and their tiles beyond the grouped GEMMs' row blocks (smooth curves per GPU "
    "family; a GPU they were not fitted on takes its family's curves over its own datasheet)",
    "per-GPU variation: every rank is the busiest one (the step waits for it), with the imbalance given",
    "DeepEP's SM count effect on its own bandwidth (the normal kernels run at the fitted bandwidth whatever "
    "--comm-sms is; only the SMs they take from compute are modelled)",
    "node-limited routing and the group limits of the router (routing is uniform over the expert slots)",
    "the host of a real serving engine: eager host costs are our H200 host's per-launch figures",
)
"""What the prediction leaves out (also in docs/predict.md)."""

OVERLAP_FLAGS = {
    "dbo": "vLLM --enable-dbo with the threshold below; SGLang --enable-two-batch-overlap",
    "sbo": "SGLang --enable-single-batch-overlap (with --moe-a2a-backend deepep); vLLM has no single-batch overlap",
    "fused": "SGLang --moe-a2a-backend megamoe; vLLM --moe-backend deep_gemm_mega_moe (DeepGEMM's fused MoE)",
}
"""The engine flags that select each overlap strategy (docs/predict.md, "Which overlap pays"), where the
recommendation does not say them for its model (``demos.prediction.engines.overlap_flags``)."""

CSV_COLUMNS = (
    "tokens",
    "mode",
    "ubatches",
    "comm_sms",
    "step_no_dbo_s",
    "step_dbo_s",
    "speedup",
    "tokens_per_s_gpu_no_dbo",
    "tokens_per_s_gpu_dbo",
    "tokens_per_s_node_no_dbo",
    "tokens_per_s_node_dbo",
    "hidden_fraction",
    "attention_s",
    "dispatch_s",
    "mlp_s",
    "combine_s",
    "fits",
    "step_sbo_s",
    "overlap",
    "step_fused_s",
)


def point_record(r: Any, gpus_per_node: int, overlaps: tuple[str, ...] = ()) -> dict[str, Any]:
    """One swept point as ``points`` of the JSON holds it; ``overlaps``: the strategies compared, the
    fastest of which is its ``overlap`` (None when none are)."""
    p = r.point
    sbo = getattr(p, "sbo", None)  # the toy's points have no single-batch overlap, nor a fused kernel
    fused = getattr(p, "fused", None)
    steps = {"none": p.no_dbo.seconds, "dbo": p.dbo.seconds, "sbo": None if sbo is None else sbo.seconds}
    steps["fused"] = None if fused is None else fused.seconds
    cands = [o for o in overlaps if steps.get(o) is not None]
    st = p.no_dbo.stages
    mem = p.memory
    return {
        "tokens": r.tokens,
        "mode": r.mode,
        "ubatches": r.ubatches,
        "comm_sms": r.comm_sms,
        "step_no_dbo_s": p.no_dbo.seconds,
        "step_dbo_s": p.dbo.seconds,
        "speedup": p.speedup,
        "tokens_per_s_gpu_no_dbo": p.tokens_per_s(False),
        "tokens_per_s_gpu_dbo": p.tokens_per_s(True),
        "tokens_per_s_node_no_dbo": p.tokens_per_s(False) * gpus_per_node,
        "tokens_per_s_node_dbo": p.tokens_per_s(True) * gpus_per_node,
        "hidden_fraction": p.hidden_fraction,
        "fits": None if mem is None else mem.fits,
        "fits_without_dbo": None if mem is None else mem.fits_without_dbo,
        "memory_total_bytes": None if mem is None else mem.total,
        "step_sbo_s": steps["sbo"],
        "step_fused_s": steps["fused"],
        "overlap": min(cands, key=lambda o: steps[o]) if cands else None,
        "stages": {k: st.get(k, 0.0) for k in ("attention", "dispatch", "mlp", "combine", "other")},
        "moe_layer_s": None if p.moe_layer_s is None else dict(p.moe_layer_s),
        "dense_layer_s": None if p.dense_layer_s is None else dict(p.dense_layer_s),
        "attention_kinds_s": getattr(p, "attention_kinds_s", None),  # the toy's points have none
    }


def _fmt_fit(p: dict[str, Any]) -> str:
    """Both steps' fit: "yes" (both), "-DBO" (only the step without DBO), "NO" (neither), "-" (toy)."""
    if p["fits"] is None:
        return "-"
    return "yes" if p["fits"] else ("-DBO" if p["fits_without_dbo"] else "NO")


def _op_rows(points: list[dict[str, Any]], key: str) -> list[str]:
    """One row per point: the ms of each op of ``points[i][key]`` (``moe_layer_s`` or ``dense_layer_s``)."""
    ops = next(p[key] for p in points if p[key] is not None)
    widths = [max(len(op), 7) for op in ops]
    lines = [
        f"{'tokens':>7} {'mode':>5} {'ub':>2} {'sms':>3} "
        + " ".join(f"{op:>{w}}" for op, w in zip(ops, widths))
        + f" {'total':>8}"
    ]
    for p in points:
        ms = p[key]
        cells = ["-" if ms is None else f"{ms[op] * 1e3:.4f}" for op in ops]
        total = "-" if ms is None else f"{sum(ms.values()) * 1e3:.4f}"
        lines.append(
            f"{p['tokens']:>7} {p['mode']:>5} {p['ubatches']:>2} {p['comm_sms']:>3} "
            + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths))
            + f" {total:>8}"
        )
    return lines


def detail_lines(rep: dict[str, Any]) -> list[str]:
    """``--detail``: each point's device ms per op of one MoE layer, and of one dense layer, of the no-DBO
    step (the points' ``moe_layer_s`` and ``dense_layer_s``)."""
    pts = rep["points"]
    out = []
    for key, what in (("moe_layer_s", "one MoE layer"), ("dense_layer_s", "one dense layer")):
        if any(p[key] is not None for p in pts):
            out += ["", f"per op: ms of device time of {what} of the no-DBO step ({key})"] + _op_rows(pts, key)
    if not out:
        out = ["", "per op: not broken down for this model (the toy's layers are not the zoo's)"]
    kinds = [p for p in pts if p.get("attention_kinds_s")]
    if kinds:
        out += [
            "",
            "attention per kind: ms of device time of one layer's attention ops of the no-DBO step (attention_kinds_s)",
        ]
        for p in kinds:
            parts = [f"{k} x{v['layers']} {v['seconds'] * 1e3:.4f}" for k, v in p["attention_kinds_s"].items()]
            out.append(f"{p['tokens']:>7} {p['mode']:>5} {p['ubatches']:>2} {p['comm_sms']:>3}  " + ", ".join(parts))
    return out


def _pair(p: dict[str, Any]) -> str:
    return "/".join("-" if p[k] is None else f"{p[k]:.1f}" for k in ("p50", "p99"))


def workload_lines(w: dict[str, Any]) -> list[str]:
    """The workload run's lines (the JSON's ``workload``: ``demos.serving``'s JSON with ``spec`` and
    ``command``): what ran, then per overlap its output tokens/s (and per GPU), TTFT and TPOT p50/p99 and
    the share of steps split, why the others were not, each vLLM decode threshold searched (its output
    tokens/s and share of steps split) and the best for this workload."""
    out = [
        f"workload {w['spec']}: {w['workload']}; {w['engine']}'s scheduler and split rule, {w['pool']} pool",
        f"         {w['command']}",
        f"{'overlap':<8} {'tok/s':>9} {'tok/s/GPU':>9} {'TTFT p50/p99 ms':>17} {'TPOT p50/p99 ms':>16} {'split':>6}",
    ]
    for r in w["runs"]:
        out.append(
            f"{r['overlap']:<8} {r['output_tokens_per_s']:>9,.0f} {r['output_tokens_per_s_gpu']:>9,.0f} "
            f"{_pair(r['ttft_ms']):>17} {_pair(r['tpot_ms']):>16} {r['split_share']:>6.0%}"
        )
    for r in w["runs"]:
        if r["not_split"] and r["overlap"] != Overlap.NONE:
            why = ", ".join(f"{k} {v}" for k, v in r["not_split"].items())
            out.append(f"not split ({r['overlap']}): {why} steps")
    b = w.get("best")
    if b:
        th = w["thresholds"]
        out.append(
            f"(dbo ran at --dbo-decode-token-threshold {th['decode']} and --dbo-prefill-token-threshold "
            f"{th['prefill']}; the search below varies the decode one)"
        )
        out.append(
            "searched --dbo-decode-token-threshold: tok/s (steps split) "
            + "; ".join(f"{k} {v['output_tokens_per_s']:,.0f} ({v['split']:.0%})" for k, v in b["thresholds"].items())
        )
        t, calm = b["by_throughput"], b["by_p99_itl"]
        itl = "-" if calm["itl_p99_ms"] is None else f"{calm['itl_p99_ms']:.1f} ms"
        out.append(
            f"best     --dbo-decode-token-threshold {t['decode_threshold']} by throughput "
            f"({t['output_tokens_per_s']:,.0f} tok/s); {calm['decode_threshold']} by p99 ITL within "
            f"{calm['floor']:.0%} of it ({itl})"
        )
    return out


def _no_difference(points: list[dict[str, Any]], mode: str) -> bool:
    """Whether ``mode`` swept more than one (ubatches, comm SMs) setting and every token count gave them
    all the same DBO step (a tie-break is not a finding)."""
    mine = [p for p in points if p["mode"] == mode]
    if len({(p["ubatches"], p["comm_sms"]) for p in mine}) < 2:
        return False
    by_t: dict[int, set] = {}
    for p in mine:
        by_t.setdefault(p["tokens"], set()).add(round(p["step_dbo_s"], 12))
    return all(len(v) == 1 for v in by_t.values())


def format_prediction(rep: dict[str, Any], *, detail: bool = False) -> str:
    """The text of a prediction's dict (``Prediction.to_dict()``); ``detail``: with ``detail_lines``."""
    lines = [rep["title"], ""]
    head = (
        f"{'tokens':>7} {'mode':>5} {'ub':>2} {'sms':>3} {'no DBO ms':>10} {'DBO ms':>9} {'speedup':>7} "
        f"{'tok/s/GPU':>10} {'DBO tok/s/GPU':>13} {'tok/s/node':>11} {'hidden':>6} "
        f"{'attn':>7} {'disp':>7} {'mlp':>7} {'comb':>7} {'fits':>4}"
    )
    lines.append(head)
    for p in rep["points"]:
        st = p["stages"]
        hf = p["hidden_fraction"]
        lines.append(
            f"{p['tokens']:>7} {p['mode']:>5} {p['ubatches']:>2} {p['comm_sms']:>3} {p['step_no_dbo_s'] * 1e3:>10.3f} "
            f"{p['step_dbo_s'] * 1e3:>9.3f} {p['speedup']:>7.3f} {p['tokens_per_s_gpu_no_dbo']:>10,.0f} "
            f"{p['tokens_per_s_gpu_dbo']:>13,.0f} {p['tokens_per_s_node_dbo']:>11,.0f} "
            f"{'-' if hf is None else f'{hf:.0%}':>6} "
            + " ".join(f"{st[k] * 1e3:>7.2f}" for k in ("attention", "dispatch", "mlp", "combine"))
            + f" {_fmt_fit(p):>4}"
        )
    lines.append(
        "(stages: busy ms of the no-DBO step's kernels per stage; hidden: the share of the hideable "
        "all-to-all the DBO step hid; fits: yes both steps fit in HBM, -DBO only the step without DBO, NO neither)"
    )
    tp = rep.get("attention_tp") or 1
    if tp > 1:
        lines.append(
            f"(attention TP {tp}: tokens are each TP group's batch, what every GPU's attention sees; "
            f"tok/s/GPU is a GPU's share, tokens / {tp})"
        )
    if detail:
        lines += detail_lines(rep)
    lines.append("")
    for mode, c in rep["crossover"].items():
        if c is None:
            lines.append(f"crossover ({mode}): DBO does not pay at any swept token count")
        elif c["interpolated"]:
            lines.append(
                f"crossover ({mode}): ~{math.ceil(c['tokens'] - 1e-9)} tokens per GPU (interpolated between the "
                f"swept {c['below']} and {c['at']}); DBO pays from {c['at']} on"
            )
        else:
            lines.append(f"crossover ({mode}): DBO pays from the smallest swept count, {c['at']} tokens per GPU")
        lines.append(f"  why: {rep['reasons'][mode]}")
    b = rep["best"]
    for m, ranges in (rep.get("overlap") or {}).items():
        where = ", ".join(
            f"{x['overlap']} from {x['from']}"
            if x["to"] is None
            else f"{x['overlap']} at {x['from']}" + ("" if x["to"] == x["from"] else f"-{x['to']}")
            for x in ranges
        )
        dbo = f"; DBO's best tool setting --ubatches {b[m]['ubatches']} --comm-sms {b[m]['comm_sms']}" if m in b else ""
        if m in b and _no_difference(rep["points"], m):
            dbo = "; the swept --ubatches and --comm-sms make no difference"
        lines.append(f"best     {m}: {where} (the fastest of {', '.join(rep['overlaps'])} at each swept count{dbo})")
        flags = {x["overlap"] for x in ranges}
        says = rep["recommendation"].get("overlap_flags") or OVERLAP_FLAGS
        for o in (o for o in ("sbo", "dbo", "fused") if o in flags):
            lines.append(f"         {o}: {says[o]}")
    if rep.get("workload"):
        lines += [""] + workload_lines(rep["workload"])
    r = rep["recommendation"]
    lines.append("")
    eng = r.get("engines") or {}
    for name, key in (("vLLM", "vllm"), ("SGLang", "sglang"), ("ATOM", "atom")):
        if key not in r:
            continue
        cmd = r[key].splitlines()
        if len(cmd) == 1 and key not in eng:
            lines.append(f"{name:<8} {cmd[0]}")
            continue
        lines.append(f"{name} {eng[key]}" if key in eng else name)
        lines += [f"  {x}" for x in cmd]
    lines += [("notes    " if i == 0 else "         ") + n for i, n in enumerate(r.get("notes") or ())]
    if r.get("memory"):
        lines.append(f"memory   {r['memory']}")
    lines.append(f"reason   {r['reason']}")
    if r.get("basis"):
        lines.append(f"basis    {r['basis']}")
    lines.append("")
    k = rep.get("kernels")
    if k is not None:
        fell = "; ".join(f"{op}: {why}" for op, why in k["fallbacks"].items())
        lines.append(f"kernels  {k['source']}" + (f" (fell back to the roofline: {fell})" if fell else ""))
    lines.append("rests on: " + "; ".join(rep["sources"]))
    lines.append("not modelled: " + "; ".join(rep["not_modelled"]))
    if rep.get("checked"):
        lines.append("checked: " + rep["checked"])
    return "\n".join(lines)


def write_csv(rep: dict[str, Any], path: str) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for p in rep["points"]:
            st = p["stages"]
            row = dict(
                p, attention_s=st["attention"], dispatch_s=st["dispatch"], mlp_s=st["mlp"], combine_s=st["combine"]
            )
            w.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS])


def write_plot(rep: dict[str, Any], path: str) -> str | None:
    """Step time (log axis; with single-batch overlap where it ran) and speedup against tokens per GPU (the
    swept counts as ticks), each mode, the break-even marked and each step that does not fit in HBM
    crossed out in red; a note (str) instead when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "--plot needs matplotlib (pip install 'dbo-sim[plot]'); no plot written"
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for i, mode in enumerate(sorted({p["mode"] for p in rep["points"]})):
        pts = sorted((p for p in rep["points"] if p["mode"] == mode), key=lambda p: p["tokens"])
        xs = [p["tokens"] for p in pts]
        ax1.plot(xs, [p["step_no_dbo_s"] * 1e3 for p in pts], "o--", label=f"no DBO ({mode})")
        ax1.plot(xs, [p["step_dbo_s"] * 1e3 for p in pts], "o-", label=f"DBO ({mode})")
        if any(p["step_sbo_s"] is not None for p in pts):
            ax1.plot(xs, [(p["step_sbo_s"] or math.nan) * 1e3 for p in pts], "s:", label=f"SBO ({mode})")
        if any(p.get("step_fused_s") is not None for p in pts):
            ax1.plot(xs, [(p["step_fused_s"] or math.nan) * 1e3 for p in pts], "d:", label=f"fused MoE ({mode})")
        ax2.plot(xs, [p["speedup"] for p in pts], "o-", label=mode)
        for key, fit in (("step_no_dbo_s", "fits_without_dbo"), ("step_dbo_s", "fits")):
            out = [p for p in pts if p[fit] is False]  # a step that does not fit in HBM: crossed out
            ax1.plot([p["tokens"] for p in out], [p[key] * 1e3 for p in out], "x", color="red", markersize=10)
        bad = [p for p in pts if p["fits"] is False]
        ax2.plot([p["tokens"] for p in bad], [p["speedup"] for p in bad], "x", color="red", markersize=10)
        c = rep["crossover"].get(mode)
        if c is not None:
            ax2.axvline(c["tokens"], linestyle=":", color="gray")
            ax2.annotate(
                f"{mode}: ~{math.ceil(c['tokens'] - 1e-9)}",
                (c["tokens"], 1.0),
                textcoords="offset points",
                xytext=(4, 6 + 14 * i),
            )
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ticks = sorted({p["tokens"] for p in rep["points"]})
    ax2.set_xticks(ticks, [str(t) for t in ticks])
    ax2.minorticks_off()
    if any(p["fits"] is False for p in rep["points"]):
        ax1.plot([], [], "x", color="red", label="does not fit in HBM")
    ax1.set_ylabel("step time (ms, log)")
    ax2.set_ylabel("speedup (no DBO / DBO)")
    ax2.set_xlabel("tokens per GPU")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=8)
    ax1.set_title(rep["title"].replace("; ", "\n"), fontsize=9)  # the dtypes on a line of their own
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
