"""An overlap run's result as the JSON report (``to_dict``), as text (``format_report``), and its
timeline and Chrome trace (``timeline_lines``, ``trace_of``). Formatting only: nothing here runs
the model, prints or writes files.
"""

from __future__ import annotations

import statistics
from operator import attrgetter
from typing import Any

from dbo.trace import KernelRecord, Tracer, fmt_seconds, fmt_seconds_group, legend_lines, render_ascii
from demos.toy.model import YIELDS_PER_LAYER
from demos.toy.ops import OP_LETTERS
from demos.toy.report_lines import (
    bound_lines,
    graph_line,
    growth_text,
    link_line,
    output_lines,
    pinned_text,
    sanitizer_lines,
)
from demos.toy.results import OverlapResult
from workspace.diagnostics import mib

__all__ = [
    "to_dict",
    "format_report",
    "format_output_line",
    "timeline_lines",
    "trace_of",
    "TIMELINE_LEGEND",
    "OP_NAMES",
]

OP_NAMES = {
    "i": "input load",
    "A": "attention",
    "R": "router",
    "D": "dispatch",
    "d": "dispatch recv",
    "E": "experts",
    "C": "combine",
    "c": "combine recv/copy",
    "S": "shared expert",
    "F": "finalize",
}
"""What each letter of the timeline's kernel rows stands for (the letters of ``OP_LETTERS``)."""

TIMELINE_LEGEND = tuple(legend_lines(OP_NAMES, OP_NAMES, 84))
"""The legend with every letter (the timeline itself lists only the letters it shows)."""


def timeline_lines(records: list[KernelRecord], result: OverlapResult) -> list[str]:
    """The ASCII timeline of the result's window over ``records`` (the owner digit of each kernel
    is its record's ubatch; the op letter comes from the op its record declares)."""
    return render_ascii(
        records,
        result.window,
        op_of=attrgetter("op"),
        op_letters=OP_LETTERS,
        op_names=OP_NAMES,
        width=result.config.timeline_width,
    )


def trace_of(result: OverlapResult) -> Tracer:
    """The last no-DBO step and the last DBO step as a Tracer (``.to_chrome(path)`` writes it). Off
    virtual, also the host spans and handoffs of that stretch."""
    out = Tracer()
    for rec in list(result.records_no_dbo) + list(result.records_dbo):
        out.kernel(rec.stream, rec.name, rec.kind, rec.ubatch, rec.start, rec.end, op=rec.op, layer=rec.layer)
    for s in result.host_spans:
        out.span(s.track, s.name, s.start, s.end, **s.args)
    for h in result.host_handoffs:
        out.handoff(h.src, h.dst, h.t_src, h.t_dst)
    return out


def to_dict(result: OverlapResult) -> dict[str, Any]:
    """The report as a JSON-ready dict (the keys ``--json`` writes; docs/overlap.md)."""
    cfg, res, eng, ws, outp = result.config, result.resolved, result.engine, result.workspace, result.outputs
    report: dict[str, Any] = {
        "backend": res.backend,
        "schedule": cfg.schedule,
        "num_ubatches": cfg.ubatches,
        "world_size": res.world_size,
        "time_no_dbo_s": result.time_no_dbo_s,
        "time_dbo_s": result.time_dbo_s,
        "speedup": result.speedup,
        "bound_s": result.bound_s,
        "hidden_fraction": result.hidden_fraction,
        # the exactness verdict, in the shape the real models' report uses (demos.zoo.report): None with
        # meta tensors (no math ran)
        "exact": None
        if outp.max_abs_diff is None
        else {"bitwise_equal": outp.passed, "max_abs_diff": outp.max_abs_diff},
        "allocations_after_lock": ws.allocations_after_lock,
        "slot_sizes": list(ws.slot_sizes),
        "config": {
            "backend": res.backend,
            "schedule": cfg.schedule,
            "yields_per_layer": YIELDS_PER_LAYER[cfg.schedule],
            "layers": cfg.layers,
            "tokens": cfg.tokens,
            "hidden": cfg.hidden,
            "experts": cfg.experts,
            "topk": cfg.topk,
            "ubatches": cfg.ubatches,
            "expert_ffn": res.model.expert_ffn,
            "shared_ffn": res.model.shared_ffn,
            "context": res.model.context,
            "heads": res.model.heads,
            "shared_chunk": cfg.shared_chunk,
            "ep": res.ep,
            "dtype": res.dtype_name,
            "meta": res.meta,
            "profile": res.modelled_profile,
            "link": res.link if not res.distributed else None,
            "comm_ratio": res.comm_ratio,
            "steps": cfg.steps,
            "warmup": cfg.warmup,
            "seed": cfg.seed,
            "torch_threads": result.torch_threads,
            "engine_cpus": result.engine_cpus,
            "stream_layout": cfg.stream_layout,
            "world_size": res.world_size,
            "dist_backend": res.dist_backend,
            "dist_timeout": cfg.dist_timeout if res.distributed else None,
            "launcher": cfg.launcher if res.distributed else None,
        },
        "link": result.link,
        "calibration": None
        if result.calibration is None
        else {
            "target_ratio": result.calibration.target_ratio,
            "bandwidth_factor": result.calibration.bandwidth_factor,
            "steps": result.calibration.steps,
        },
        "compute_s": eng.compute_s,
        "comm_s": eng.comm_s,
        "comm_ratio_measured": eng.comm_ratio,
        "hideable_s": eng.hideable_s,
        "overlapped_no_dbo_s": eng.overlapped_s,
        "compute_dbo_s": eng.dbo_compute_s,
        "comm_dbo_s": eng.dbo_comm_s,
        "overlapped_dbo_s": eng.dbo_overlapped_s,
        "ideal_speedup": result.ideal_speedup,
        "speedup_note": result.speedup_note,
        "times_no_dbo_s": list(result.times_no_dbo_s),
        "times_dbo_s": list(result.times_dbo_s),
        "tolerance": {"relative": outp.rtol, "absolute": outp.atol, "dtype": outp.dtype},
        "max_abs_ref": outp.max_abs_ref,
        "workspace": {
            "slot_sizes": list(ws.slot_sizes),
            "grows": ws.grows,
            "grows_in_warmup": ws.grows_in_warmup,
            "allocations": ws.allocations,
            "allocations_after_lock": ws.allocations_after_lock,
            "manager_allocations_after_lock": ws.manager_allocations_after_lock,
            "locked": ws.locked,
        },
        "timeline_layer": result.window.layer,
        "timeline": timeline_lines(result.records_dbo, result),
        "notes": list(res.notes),
    }
    report.update(_exactness_and_graph(result))
    if result.ranks:
        report["dist_backend"] = res.dist_backend
        report["ranks"] = [
            {
                "rank": x.rank,
                "rows": list(x.rows),
                "pid": x.pid,
                "time_no_dbo_s": statistics.median(x.times_no_dbo_s),
                "time_dbo_s": statistics.median(x.times_dbo_s),
                "compute_s": x.engine.compute_s,
                "comm_s": x.engine.comm_s,
                "overlapped_no_dbo_s": x.engine.overlapped_s,
                "allocations_after_lock": x.allocations_after_lock,
                "bytes_to_peers_per_step": x.bytes_to_peers_per_step,
            }
            for x in result.ranks
        ]
    if result.sanitizer_findings is not None:
        report.update(_sanitizer_fields(result.sanitizer_findings))
    if result.reference is not None:
        ref = result.reference
        report["reference"] = {
            "what": ref.what,
            "max_abs_diff_no_dbo": ref.max_abs_diff_no_dbo,
            "max_abs_diff_dbo": ref.max_abs_diff_dbo,
            "match": ref.match,
        }
    return report


def _exactness_and_graph(result: OverlapResult) -> dict[str, Any]:
    """The JSON keys of the exactness check and of ``--graph`` (docs/overlap.md)."""
    outp = result.outputs
    return {
        "exact_reference": "the same ubatch split, run one ubatch after another (no DBO interleaving)",
        "max_abs_diff_whole_batch": outp.max_abs_diff_whole_batch,
        "whole_batch_expected": {
            "relative": outp.rtol,
            "absolute": outp.atol,
            "dtype": outp.dtype,
            "within": outp.whole_batch_within,
        },
        "graph": result.graph,
        "graph_max_abs_diff": outp.graph_max_abs_diff,
        "graph_kernels": None
        if result.graph_kernels is None
        else {
            "no_dbo": result.graph_kernels[0],
            "dbo": result.graph_kernels[1],
        },
        "eager_time_no_dbo_s": statistics.median(result.eager_times_no_dbo_s) if result.eager_times_no_dbo_s else None,
        "eager_time_dbo_s": statistics.median(result.eager_times_dbo_s) if result.eager_times_dbo_s else None,
    }


def format_report(rep: dict) -> str:
    """The report as text (docs/overlap.md explains each line)."""
    c = rep["config"]
    link = rep["link"]
    lines = []
    ws = rep.get("world_size", 1)
    ranks_txt = f", {ws} ranks ({c.get('dist_backend')}, one process group per ubatch)" if ws > 1 else ""
    lines.append(
        f"dbo-sim overlap demo: toy MoE, schedule {c['schedule']} ({c['yields_per_layer']} yields per layer), "
        f"backend {c['backend']}{ranks_txt}"
    )
    per_rank = ""
    if ws > 1 and rep.get("ranks"):
        sizes = sorted({r["rows"][1] - r["rows"][0] for r in rep["ranks"]})
        per_rank = f" ({'/'.join(str(x) for x in sizes)} per rank, {c['experts'] // ws} experts per rank)"
    lines.append(
        f"config     layers {c['layers']}, tokens {c['tokens']}{per_rank}, hidden {c['hidden']}, "
        f"experts {c['experts']} "
        f"(top-{c['topk']}), ubatches {c['ubatches']}"
    )
    lines.append(
        f"           expert ffn {c['expert_ffn']}, shared ffn {c['shared_ffn']}, context {c['context']}, "
        f"heads {c['heads']}, "
        f"dtype {c['dtype']}{' (meta: math skipped)' if c['meta'] else ''}, "
        f"{'' if c.get('profile') is None else 'profile ' + str(c['profile']) + ', '}ep {c['ep']}, "
        f"torch threads {c['torch_threads']}{pinned_text(c.get('engine_cpus'))}"
    )
    bw = link["bandwidth_Bps"]
    if bw is None:  # a real link: torch.distributed
        sent = [r["bytes_to_peers_per_step"] for r in rep.get("ranks", [])]
        sent_txt = f"; {statistics.fmean(sent) / 2**20:.2f} MiB per rank and no-DBO step to other ranks" if sent else ""
        lines.append(
            f"link       real: all_to_all_single over {link.get('dist_backend')} between {ws} ranks (not modelled, not "
            f"calibrated); dispatch in {link['wire_dtype']}{sent_txt}"
        )
    else:
        lines.append(link_line(link, c["comm_ratio"]))
    ratio = rep["comm_ratio_measured"]
    lines.append(
        f"per step   compute {fmt_seconds(rep['compute_s'])}, comm {fmt_seconds(rep['comm_s'])} (ratio {ratio:.2f}) "
        f"in the no-DBO kernels; per layer "
        f"{' + '.join(fmt_seconds_group([rep['compute_s'] / c['layers'], rep['comm_s'] / c['layers']]))}"
        if ratio is not None
        else f"per step   compute {fmt_seconds(rep['compute_s'])}, comm {fmt_seconds(rep['comm_s'])}"
    )
    slowest = ", slowest rank per step" if ws > 1 else ""
    lines.append(f"no DBO     {fmt_seconds(rep['time_no_dbo_s'])} per step (median of {c['steps']}{slowest})")
    sp = rep["speedup"]
    lines.append(
        f"DBO        {fmt_seconds(rep['time_dbo_s'])} per step (median of {c['steps']}{slowest}), speedup {sp:.2f}x"
        if sp is not None
        else f"DBO        {fmt_seconds(rep['time_dbo_s'])} per step"
    )
    lines.extend(bound_lines(rep))
    lines.append(graph_line(rep))
    lines.extend(output_lines(rep))
    ref = rep.get("reference")
    if ref is not None:
        verdict = "PASS" if ref["match"] else "FAIL"
        lines.append(
            f"reference  max |ranks' rows - one process, whole batch, same seed| = "
            f"{ref['max_abs_diff_no_dbo']:.3g} (no DBO), "
            f"{ref['max_abs_diff_dbo']:.3g} (DBO): {verdict}"
        )
    if ws > 1 and rep.get("ranks"):
        lines.append(
            "ranks      "
            + "; ".join(
                f"{r['rank']}: no DBO {fmt_seconds(r['time_no_dbo_s'])}, DBO {fmt_seconds(r['time_dbo_s'])}, "
                f"comm {fmt_seconds(r['comm_s'])}"
                for r in rep["ranks"]
            )
        )
    w = rep["workspace"]
    sizes = w["slot_sizes"]
    same = len(set(sizes)) == 1
    plural = "s" if len(sizes) != 1 else ""
    size_txt = f"{len(sizes)} slot{plural} x {mib(sizes[0])}" if same and sizes else ", ".join(mib(s) for s in sizes)
    if ws > 1:
        size_txt += " (rank 0)"
    lines.append(
        f"workspace  {size_txt}, {growth_text(w['grows'], w['grows_in_warmup'])}, "
        f"allocations after lock: {w['allocations_after_lock']}{' (most on any rank)' if ws > 1 else ''}"
    )
    on_rank = " on rank 0" if ws > 1 else ""
    lines.append(
        f"timeline   layer {rep['timeline_layer']} of the last DBO step{on_rank}; "
        "digit = ubatch owning the kernel, '.' = idle"
    )
    if any(row.startswith("  link ") for row in rep["timeline"]):
        lines.append("           link = this process's one queue of transfers, shared by the ubatches")
        if ws > 1:
            lines.append(
                "           (the all-to-alls run there, in launch order; the comm rows hold only local copies)"
            )
    lines.extend(rep["timeline"])
    for note in rep.get("notes", []):
        lines.append(f"note       {note}")
    for key in ("trace", "plot"):
        if rep.get(f"{key}_path"):
            lines.append(format_output_line(key, rep[f"{key}_path"]))
    lines.extend(sanitizer_lines(rep))
    return "\n".join(lines)


def format_output_line(what: str, text: str) -> str:
    """One report line about a file written ("trace", "plot", "json") or a "note"."""
    if what == "trace":
        text = f"{text} (open in https://ui.perfetto.dev or chrome://tracing)"
    return f"{what:<10} {text}"


SANITIZER_SHOWN = 5


def _sanitizer_fields(found: list) -> dict[str, Any]:
    """--sanitize: the count and the first few findings (workspace kinds first, then stream races)."""
    return {"sanitizer_findings": len(found), "sanitizer_first": [str(f) for f in found[:SANITIZER_SHOWN]]}
