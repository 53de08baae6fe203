"""The bench's overlap section: how much of the hideable time DBO hides, against the most the schedule's
yields allow (``overlap_bound``, from the no-DBO step's kernel records; docs/overlap.md, "The bound and the
hidden fraction"). ``section_overlap`` is one of ``demos.bench._suite.SECTIONS``; its docstring is the
section's text in the report."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dbo.trace import KernelRecord, engine_sums, overlap_seconds
from demos.bench._core import Config, progress, value_record
from demos.bench._report import NOISY_SPREAD, Record, format_cell

RATIOS = (0.25, 0.5, 1.0, 2.0, 4.0)
OVERLAP_TOLERANCE = {"virtual": 0.05, "threads": 0.15}
"""How far below the schedule's bound the hidden fraction may fall at ratio 1 (``section_overlap``)."""

# The part of a layer each op of the toy is (demos/toy/model.py); any other compute op runs in the
# first phase F (attention, router, and the previous layer's finalize and combine receive).
_PARTS = dict(dispatch="D", dispatch_ll="D", combine="K", combine_ll="K", moe_copy="K", shared="S")
_PARTS.update(dispatch_recv="X", experts="X", experts_ll="X")
OVERLAP_WINDOWS = {
    "ll": (("D", "F"), ("D", "XS"), ("K", "XSS"), ("K", "Sf")),
    "ht": (("D", "F"), ("D", "X"), ("K", "XSS"), ("K", "SSf")),
}
"""Per schedule, a layer's four transfers under DBO (D dispatch, K combine: ubatch 0's, then 1's)
and the compute between each one's launch and its receive, all it can hide under: F this layer's
first phase, f the next layer's, X experts (and ll's dispatch receive), S a shared expert, each
one ubatch's (docs/overlap.md, "The bound and the hidden fraction")."""


def overlap_bound(records: list[KernelRecord], schedule: str) -> float | None:
    """The most hidden fraction the schedule's yields allow, from the no-DBO step's kernel records
    (``op``, ``layer``, durations): each ubatch's transfer hides at most min(transfer, its window's
    compute) (``OVERLAP_WINDOWS``; a ubatch's op is half the layer's), O_max their sum, and
    ``(min(1, O_max / min(C, M)) - r_no) / (1 - r_no)`` with r_no = O / min(C, M) of the step.
    None for an unknown schedule or nothing hideable."""
    windows = OVERLAP_WINDOWS.get(schedule)
    sums = engine_sums(records)
    m = min(sums["compute"], sums["comm"])
    if windows is None or m <= 0:
        return None
    t: dict[tuple[int, str], float] = defaultdict(float)
    for r in records:
        layer, part = r.layer or 0, _PARTS.get(r.op or "")
        if part is None and r.kind == "compute":
            part, layer = "F", layer + (r.op in ("finalize", "combine_recv"))
        if part is not None:
            t[layer, part] += r.duration
    o_max = 0.0
    for layer in sorted({la for la, p in t if p == "D"}):
        for comm, window in windows:
            under = sum(t[layer + 1, "F"] if c == "f" else t[layer, c] for c in window)
            o_max += min(t[layer, comm], under) / 2
    r_no = overlap_seconds(records) / m
    return None if r_no >= 1 else (min(1.0, o_max / m) - r_no) / (1 - r_no)


def section_overlap(cfg: Config) -> list[Record]:
    """How much of the hideable time DBO hides, from `demos.toy.experiment.run_overlap` (8 layers, 2
    ubatches, the link calibrated so that comm = R x compute), for both schedules at comm/compute
    ratios R = 0.25 ... 4; on `virtual` (meta tensors: the timeline is the same, the math is
    skipped) and on `threads` (wall clock; smaller shapes to keep the run short; `--quick` runs
    ratio 1 only). hidden = (r_dbo - r_no) / (1 - r_no), r = overlapped / min(compute, comm) of each
    step's own kernels, as defined in docs/overlap.md ("The bound and the hidden fraction"), which
    also gives the schedule's bound beside it: the most its yields can hide at that ratio, from the
    no-DBO step's kernel times per op (a ubatch's dispatch and combine hide only under the compute
    between their launch and their receive). Beside each speedup stands the ideal (comm + compute)
    / max(comm, compute) of that run. Targets at ratio 1: hidden >= bound - 0.05 on virtual (the
    bound takes each transfer alone: the link's queue, the pipeline's fill and the DBO step's own
    kernel times are not in it), >= bound - 0.15 on threads (the old slack of 0.1 between the
    backends on top). At ratio 1 the bound is about 0.67 for ll and 0.99 for ht: ll's padded experts
    make its second phase about four times its first, so the dispatch, half the comm, has only the
    sibling's short first phase to hide under, and without DBO the combine already runs under the
    shared expert. The target was a flat 0.95 before, which ll never met here (0.937-0.940 while
    virtual charged its experts the routed rows only, 0.670 since it charges the padded rows). Threads figures are
    single wall-clock runs, flagged NOISY when their step times swing past the noise threshold or
    they fall outside [0, 1] (at small ratios the hideable time can be below the machine's noise)."""
    from demos.toy.experiment import run_overlap

    section = "overlap"
    records: list[Record] = []
    runs = [("virtual", sched, r) for sched in ("ll", "ht") for r in RATIOS]
    thread_ratios = (1.0,) if cfg.quick else RATIOS
    runs += [("threads", sched, r) for sched in ("ll", "ht") for r in thread_ratios]
    for i, (backend, sched, ratio) in enumerate(runs):
        progress(f"overlap: {backend} {sched} ratio {ratio} ({i + 1}/{len(runs)})")
        opts: dict[str, Any] = dict(backend=backend, schedule=sched, comm_ratio=ratio, layers=8, steps=3)
        if backend == "virtual":
            opts.update(meta=True)
        else:
            opts.update(tokens=384, hidden=256, steps=3 if cfg.quick else 5)
        details: dict[str, Any] = {}
        rep = run_overlap(**opts, details=details)
        ideal = (rep["compute_s"] + rep["comm_s"]) / max(rep["compute_s"], rep["comm_s"])
        tag = f"{backend} {sched} R={ratio:g}"
        hf, tol = rep["hidden_fraction"], OVERLAP_TOLERANCE[backend] if ratio == 1.0 else None
        records.append(overlap_record(section, tag, hf, overlap_bound(details["records_no_dbo"], sched), tol))
        spreads = [max(ts) / min(ts) for ts in (rep["times_no_dbo_s"], rep["times_dbo_s"]) if ts and min(ts) > 0]
        # Flag, not hide: step times that swing, or a fraction outside [0, 1] (noise larger than the
        # hideable time, typical at small ratios on a shared CPU).
        records[-1]["noisy"] = any(sp > NOISY_SPREAD for sp in spreads) or not (0.0 <= hf <= 1.0)
        records.append(
            {
                **value_record(section, f"speedup, {tag}", rep["speedup"], "x"),
                "baseline": f"ideal (C+M)/max(C,M) = {ideal:.3f}",
                "ratio": rep["speedup"] / ideal,
            }
        )
    return records


def overlap_record(section: str, tag: str, hidden: float, bound: float | None, tolerance: float | None) -> Record:
    """The hidden fraction's record: the bound beside it (``bound``, and in the baseline column)
    and, with a ``tolerance``, the target ``>= bound - tolerance`` (rounded as printed)."""
    target = None if tolerance is None or bound is None else f">= {bound - tolerance:.3f}"
    rec = value_record(section, f"hidden fraction, {tag}", hidden, "fraction", target)
    return {**rec, "baseline": f"schedule bound = {format_cell(bound)}", "bound": bound, "tolerance": tolerance}
