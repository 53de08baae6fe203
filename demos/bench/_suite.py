"""The bench's sections (``SECTIONS``), each a function ``(Config) -> list of records`` whose
docstring explains the section in the markdown report. ``python -m demos.bench`` (its ``__main__``) runs them.

A record is a dict:

    name      what was measured
    value     the figure (median over repeats for timings)
    unit      "us/call", "bytes", "count", ...
    baseline  name of the record it is compared with, or None
    ratio     value / baseline value, or None
    target    a condition on ratio (or on value when there is no baseline), e.g. "<= 0.2", or None
    ok        whether the target is met (None without a target)

Timings also carry ``min``, ``max`` (per-call seconds over the repeats, shown in us) and ``noisy``
(max/min > 1.5: the figure is reported, flagged, and not to be trusted alone).

To add a section: write ``def section_x(cfg) -> list[dict]`` and append it to ``SECTIONS``.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import torch

from dbo.registry import use_ubatch
from demos.bench._core import Config, progress, samples_timing, time_together, timing_record, value_record
from demos.bench._overlap import section_overlap
from demos.bench._report import Record
from demos.bench._zoo import predict_sweep_records, zoo_step_records
from workspace import WorkspaceManager
from workspace.layout import align_up, canonical_request, plan


def reference_views(buffer: torch.Tensor, specs: Any) -> list[torch.Tensor]:
    """The plain reference algorithm, recomputed in full on every call (the benchmark's baseline).

    Sizes, rounding, running offsets, then slice + view + reshape; no caching, no validation.
    """
    sizes = [math.prod(shape) * dtype.itemsize for shape, dtype in specs]
    placed = [align_up(s) for s in sizes]
    offsets = [0]
    for p in placed[:-1]:
        offsets.append(offsets[-1] + p)
    return [
        buffer[offsets[i] : offsets[i] + sizes[i]].view(specs[i][1]).reshape(specs[i][0]) for i in range(len(specs))
    ]


# ---------------------------------------------------------------------- sections

# Realistic mixed requests: activations, index vectors, small metadata, FP8-ish bytes, odd sizes.
WORKSPACE_SPECS = [
    ((256, 1024), torch.bfloat16),
    ((256, 8), torch.int32),
    ((256, 8), torch.float32),
    ((4096,), torch.uint8),
    ((33, 7), torch.float16),
    ((64, 64), torch.float32),
    ((1000,), torch.int64),
    ((2, 3, 5), torch.float64),
]


def section_workspace(cfg: Config) -> list[Record]:
    """get_simultaneous on a warmed and locked manager, called from a registered ubatch thread,
    against the plain reference algorithm (sizes, round up to 256, running offsets, slice + view +
    reshape, all recomputed on every call, on a preallocated buffer) and against the same number of
    `torch.empty` calls. Targets: for 3 tensors, at most 1/5 of the reference and no slower than
    3 `torch.empty` calls. Memory: bytes each slot reserves for the largest request vs its exact
    bytes (alignment padding only, < 256 B per tensor); buffer allocations after lock must be 0."""
    section = "workspace"
    records: list[Record] = []
    for k in (1, 3, 8):
        specs = tuple(WORKSPACE_SPECS[:k])
        progress(f"workspace: {k} tensor(s)")
        manager = WorkspaceManager(cfg.device, 2)
        buffer = torch.empty(plan(canonical_request(specs)).total, dtype=torch.uint8, device=cfg.device)
        get = manager.get_simultaneous
        with use_ubatch(1):
            get(*specs)
            manager.lock()
            timings = time_together(
                {
                    "ws": lambda: get(*specs),
                    "ref": lambda: reference_views(buffer, specs),
                    "empty": lambda: [torch.empty(s, dtype=d, device=cfg.device) for s, d in specs],
                },
                cfg,
            )
        ref_name, empty_name = f"reference algorithm [{k}]", f"torch.empty x{k}"
        target_ref = "<= 0.2" if k == 3 else None
        target_empty = "<= 1.0" if k == 3 else None
        records.append(timing_record(section, ref_name, timings["ref"]))
        records.append(timing_record(section, empty_name, timings["empty"]))
        records.append(
            timing_record(section, f"get_simultaneous [{k}]", timings["ws"], (ref_name, timings["ref"]), target_ref)
        )
        records.append(
            timing_record(
                section, f"get_simultaneous [{k}] vs empty", timings["ws"], (empty_name, timings["empty"]), target_empty
            )
        )
        if k == 8:
            stats = manager.stats()
            exact = stats["largest_request_exact_bytes"]
            overhead = (stats["capacity_bytes"] - exact) / k
            records.append(value_record(section, f"slot bytes reserved [{k}]", stats["capacity_bytes"], "bytes"))
            records.append(value_record(section, f"exact bytes requested [{k}]", exact, "bytes"))
            records.append(value_record(section, "padding per tensor", overhead, "bytes", "< 256"))
            records.append(
                value_record(section, "allocations after lock", stats["allocations_after_lock"], "count", "== 0")
            )

    progress("workspace: 3 tensors outside a DBO step (num_ubatches=1)")
    specs = tuple(WORKSPACE_SPECS[:3])
    manager = WorkspaceManager(cfg.device, 1)
    manager.get_simultaneous(*specs)
    manager.lock()
    buffer = torch.empty(plan(canonical_request(specs)).total, dtype=torch.uint8, device=cfg.device)
    get = manager.get_simultaneous
    timings = time_together({"ws": lambda: get(*specs), "ref": lambda: reference_views(buffer, specs)}, cfg)
    ref_name = "reference algorithm [3], no step"
    records.append(timing_record(section, ref_name, timings["ref"]))
    records.append(
        timing_record(section, "get_simultaneous [3], no step", timings["ws"], (ref_name, timings["ref"]), "<= 0.2")
    )
    return records


def section_handoff(cfg: Config) -> list[Record]:
    """Cost of one handoff (one thread giving the CPU to the next), per yield, on the threads backend,
    for N = 2, 4 and 8 ubatches, timed inside ubatch 0 over K yields (each a full turn around the
    ring of N handoffs). Each repeat alternates short chunks of every candidate, so bursts of load
    on a shared machine hit them all alike. Every thread of every candidate is pinned to the same
    CPU: a handoff whose wake-up crosses CPUs costs several times one between threads that share a
    CPU, and unpinned runs flip between the two at random. Baselines, measured interleaved in the
    same repeats: a bare ping-pong between two threads over two `threading.Lock`s, and a ping-pong
    over two `threading.Event`s that sets, waits and clears as the reference does; for N > 2 also a
    ring of N threads over N locks, the same primitive an N-ubatch yield uses. Target: a DBO yield
    costs at most 1.2x the lock ping-pong for N = 2, and at most 1.2x the N-lock ring for N > 2 (the
    bare ring of 4 or 8 threads already costs more than the two-thread ping-pong, so a design with
    one thread per ubatch cannot be held to the two-thread figure there; that ratio is shown without
    a target). The step fixed cost is a step whose function does nothing (spawn N daemon threads,
    start barrier, bounded join, stream sync); threads are spawned every step, as in the reference."""
    from dbo import UBatchOrchestrator
    from demos.bench._handoff import dbo_yield_cost, event_ping_pong, lock_ping_pong, lock_ring, step_fixed_cost

    section = "handoff"
    handoffs = 2_000 if cfg.quick else 10_000
    ns = (2, 4, 8)
    orchs = {n: UBatchOrchestrator(n, backend="threads", handoff_timeout=30.0) for n in ns}
    samples: dict[str, list[float]] = {"lock": [], "event": []}
    samples.update({f"ring{n}": [] for n in ns if n > 2})
    samples.update({f"yield{n}": [] for n in ns})
    samples.update({f"step{n}": [] for n in ns})
    try:
        for n in ns:  # warm up each orchestrator (first thread spawns, allocator)
            dbo_yield_cost(orchs[n], 50)
        chunks = 10
        per_chunk = handoffs // chunks
        for r in range(cfg.repeat):
            progress(f"handoff: repeat {r + 1}/{cfg.repeat}")
            acc = {k: 0.0 for k in samples}
            for _ in range(chunks):
                acc["lock"] += lock_ping_pong(per_chunk) / chunks
                acc["event"] += event_ping_pong(per_chunk) / chunks
                for n in ns:
                    if n > 2:
                        acc[f"ring{n}"] += lock_ring(n, per_chunk) / chunks
                    acc[f"yield{n}"] += dbo_yield_cost(orchs[n], max(per_chunk // n, 10)) / chunks
            for n in ns:
                acc[f"step{n}"] = step_fixed_cost(orchs[n])
            for k, v in acc.items():
                samples[k].append(v)
    finally:
        for o in orchs.values():
            o.close()
    unit = "us/handoff"
    lock = ("lock ping-pong", samples_timing(samples["lock"]))
    records = [
        {**timing_record(section, lock[0], lock[1]), "unit": unit},
        {**timing_record(section, "event ping-pong (reference)", samples_timing(samples["event"]), lock), "unit": unit},
    ]
    for n in ns:
        yield_t = samples_timing(samples[f"yield{n}"])
        target = "<= 1.2" if n == 2 else None  # for N > 2 the N-lock ring is the fair baseline (below)
        records.append({**timing_record(section, f"dbo_yield, N={n}", yield_t, lock, target), "unit": unit})
        if n > 2:
            ring = (f"lock ring, N={n}", samples_timing(samples[f"ring{n}"]))
            records.append({**timing_record(section, ring[0], ring[1], lock), "unit": unit})
            rec = timing_record(section, f"dbo_yield, N={n} vs ring", yield_t, ring, "<= 1.2")
            records.append({**rec, "unit": unit})
    for n in ns:
        rec = timing_record(section, f"step fixed cost, N={n}", samples_timing(samples[f"step{n}"]))
        records.append({**rec, "unit": "us/step"})
    return records


def section_simulation(cfg: Config) -> list[Record]:
    """Wall time to simulate one DeepSeek-V3-shaped decode step of the toy MoE (61 layers, hidden
    7168, 256 experts, top-8, 256 tokens per rank, 2 ubatches, ht schedule) on the `virtual` backend
    with meta tensors and the h200 / ib400 profiles: the time to run the DBO step's host code (two
    ubatch threads, every handoff, every modelled kernel), median over repeats. Target: under 1 s.
    Then the model zoo's generic transformer (`demos.zoo`) running the real DeepSeek-V3 preset at
    full size (meta tensors) on 9 x 8 H800 with EP 72, eager, on `virtual`: a decode step (256
    tokens per rank, context 2048, ll schedule) and a 16,384-token prefill step (prompts of 2048
    tokens, ht schedule), each timed with DBO (2 ubatches) and without, interleaved, after a warmup
    that grows and locks the workspace (garbage collected before each timed step), median over
    repeats. Targets: the DBO decode step under 0.1 s, the DBO prefill step under 0.5 s. Beside
    each: the simulated (virtual) step times, which do not depend on the machine. Last, `demos.predict`'s
    default decode sweep of DeepSeek-V3 on 9 x 8 H100 at EP 72 in both modes (8 token counts x graph and
    eager, each point with and without DBO and, on the ll schedule, with single-batch overlap; target
    under 20 s) and one point (128 tokens, graph; under 1 s), once each, imports excluded."""
    from demos.toy.config import OverlapConfig, resolve
    from demos.toy.runner import Runner as _Runner

    section = "simulation"
    oc = OverlapConfig(
        backend="virtual",
        profile="h200",
        link="ib400",
        hidden=7168,
        experts=256,
        topk=8,
        layers=61,
        tokens=256,
        meta=True,
        schedule="ht",
    )
    runner = _Runner(oc, resolve(oc))
    samples, virtual = [], []
    try:
        runner.step(True, False)  # warmup: the workspace grows
        runner.manager.lock()
        for r in range(3 if cfg.quick else 7):
            progress(f"simulation: DeepSeek-V3 decode step {r + 1}")
            t0 = time.perf_counter()
            vt, _ = runner.step(True, False)
            samples.append(time.perf_counter() - t0)
            virtual.append(vt)
    finally:
        runner.close()
        import workspace

        workspace.reset_workspace_manager()
    t = samples_timing(samples)
    rec = {**timing_record(section, "DeepSeek-V3 decode step, virtual, wall", t), "unit": "s/step"}
    rec.update(value=t.median, min=t.min, max=t.max, target="< 1", ok=t.median < 1.0)
    records = [
        rec,
        value_record(section, "simulated step time (virtual clock)", statistics.median(virtual) * 1e3, "ms"),
    ]
    for phase, tokens, target in (("decode", 256, 0.1), ("prefill", 16384, 0.5)):
        records += zoo_step_records(cfg, section, phase, tokens, target)
    records += predict_sweep_records(cfg, section)
    return records


def section_host(cfg: Config) -> list[Record]:
    """Host time per kernel, with and without DBO, eager and replayed, on the backend at hand
    (`--backend`; auto: cuda with a GPU, else threads). Two workloads: `synthetic`, a step of tiny
    kernels shaped like a DBO layer (8 layers of 6 compute kernels, a yield-and-switch to comm, 2
    comm kernels, a yield-and-switch back); and `demo ll`, the demo's MoE model with the ll schedule
    at tiny shapes (8 layers, 64 tokens, hidden 64, 8 experts top-2), so its kernels are short and
    the step is host-bound. Each figure is the wall time of a whole step (eager: `run`, with its
    threads, handoffs, model Python and final synchronize; replayed: `capture` once, then
    `CapturedStep.replay()`, which synchronizes) divided by the step's kernels; without DBO the
    step runs as one ubatch, with DBO as two (twice the kernels). A step the capture refuses (a
    host sync in it) is shown as not capturable, with the refusal. Target, on cuda only: eager DBO
    at most 1.15x eager no DBO per kernel (on the CPU backends the ratio also carries the thread
    handoffs between the host's cores; it is shown without a target). On cuda one more row times the DBO
    step with the launch path as it was before (a `torch.cuda.stream` context entered per launch),
    against today's (one stream switch per `set_stream`). On threads the kernels run on
    executor threads that share the CPUs with the issuing threads, and these figures move from
    run to run on a shared machine (replay against eager included): read them as
    plumbing and orders of magnitude; the figures that matter come from a GPU (docs/gpu.md)."""
    from demos.bench._host import host_records

    return host_records(cfg)


def section_signals(cfg: Config) -> list[Record]:
    """SIGINT and SIGTERM sent at random moments (seeded) into short runs of `demos.predict`, `demos.overlap`,
    `demos.validate deepep`, `demos.bench --section workspace` and `demos.serving` (a closed loop of 20
    requests), each with a `--json` file
    (`demos.bench._signals`): per command 1 run started as its own process (`--quick`: none), so that a
    signal can land in its imports, and 6 (`--quick`: 2) forked from a runner that imported the commands,
    four at a time on the machine's cores. A trial whose run ends before its moment is not counted. Figures:
    the trials, the signals lost (exit status 0 or no one-line message; target 0), those that ended their
    command wrong in any other way (a status other than 130/143, other lines or a traceback on stderr, a
    half-written file; target 0), and the seconds from the signal to the command's exit: median, p99 and
    max, and how many took over a second (no target: it depends on how busy the machine is). The storm of
    200+ trials that asserts none is lost is tests/stress/test_signal_storm.py."""
    from demos.bench._signals import COMMANDS, LATE_S, lost, problems, run_storm, summary

    section = "signals"
    progress("signals: " + ("8 forked runs" if cfg.quick else "4 runs from the start, 24 forked"))
    _, trials = run_storm(exec_trials=0 if cfg.quick else 1, fork_trials=2 if cfg.quick else 6, seed=47)
    s = summary(trials)
    modules = {c.name: c.module for c in COMMANDS}
    wrong = sum(1 for t in trials if t.sent and not lost(t) and problems(t, modules[t.command]))
    records = [
        value_record(section, "trials (signal sent)", s["trials"], "count"),
        value_record(section, "signals lost", s["lost"], "count", "<= 0"),
        value_record(section, "commands ended wrong otherwise", wrong, "count", "<= 0"),
        value_record(section, f"late (over {LATE_S:g} s)", s["late"], "count"),
    ]
    for key, label in (("median_s", "median"), ("p99_s", "p99"), ("max_s", "max")):
        if s[key] is not None:
            records.append(value_record(section, f"signal to exit, {label}", s[key], "s"))
    return records


def section_serving(cfg: Config) -> list[Record]:
    """`demos.serving`'s own cost (`demos.bench._serving`), imports excluded. (a) A closed-loop row end to end:
    aiconfigurator's silicon row of DeepSeek-R1 FP8 on 8 x H200 (EP 8, DP attention), TRT-LLM, 1024 -> 1024
    tokens at concurrency 32, as `demos.validate serving --quick` runs it (64 requests measured after 32
    warm-up, no overlap): cold (a fresh step pricer: the model, the pricer's setup and every grid point the run
    needs, each a predictor run) and warm (the first run's pricer reused: the loop and its pricing only), median
    of 3 and 5 (`--quick`: 1 and 3); target for each under 0.5 s (wall; the process CPU time beside it says how
    much of the wall a shared machine added); the share of the cold run that is not the loop says which
    dominates. (b) The Azure LLM inference conversation trace (one hour, 19,366 requests) on DeepSeek-V3 on 8 x
    H200 at EP 8 (8 data-parallel ranks) under vLLM's scheduler, one run without overlap (the command runs one
    per overlap: twice for vLLM, and nine more for its threshold search unless `--no-search`), once cold and
    once warm, target under 30 s each. The trace is not in the repository: `--azure-trace PATH` or
    `$DBO_AZURE_CONV_TRACE` names it; without either the shipped head (its first 300 requests) is repeated to
    19,366 requests and scaled to the full trace's mean rate (5.53 requests/s), and the records say so
    (`--quick`: the first 2,000 requests). (c) The loop's cost against its steps: the row of (a) without warm-up
    at 64 and 128 requests (2 and 4 cohorts of 32, so twice the steps), warm, interleaved: wall time per step at
    2N over wall time per step at N, target at most 1.15 (and the same ratio of CPU time). (d) The step-time
    grid's interpolation (linear in tokens and context between grid points) against direct predictor runs at
    points between grid points in both (`StepPricer.interpolation_error`, the plain step): decode at 6 token
    counts from 5 to 160 per rank (graph) and prefill at 5 from 640 to 10,240 tokens (eager), for DeepSeek-V3 on
    8 x H200 and Qwen3-30B-A3B on 8 x H100, both EP 8; median and largest |error| (`--quick`: 2 points each).
    Where a cold run's time goes: its grid points, each a predictor point (three steps of the zoo on `virtual`,
    none, DBO and SBO, each captured and replayed; 0.3-0.5 s of CPU, what the simulation section's one point
    costs); runs that share a pricer (the vLLM threshold search, `demos.validate serving`'s rows of one
    deployment) pay each point once."""
    from demos.bench._serving import interpolation_records, row_records, scaling_records, trace_records

    return row_records(cfg) + trace_records(cfg) + scaling_records(cfg) + interpolation_records(cfg)


SECTIONS: list[Callable[[Config], list[Record]]] = [
    section_workspace,
    section_handoff,
    section_overlap,
    section_simulation,
    section_host,
    section_signals,
    section_serving,
]
