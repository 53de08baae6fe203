"""Calibration from whole steps: the model's host time per launch, the ubatch threads' start, the
engines' turnaround between kernels, and the wake-up latency across engines (idle, and while
ubatch threads run), each taken from or fitted to measured steps of the toy MoE, so that the
virtual backend reproduces them."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

import workspace
from dbo.costs import DeviceProfile, LinkProfile, fit_scalar
from demos.toy.config import ConfigError, OverlapConfig, resolve
from demos.toy.run import run
from demos.toy.runner import Runner

__all__ = [
    "StepSample",
    "engine_gaps",
    "turnarounds",
    "fit_launch",
    "fit_thread_start",
    "fit_engine_gap",
    "fit_wake_latency",
    "fit_event_latency",
]

Progress = Callable[[str], None]


@dataclass
class StepSample:
    """One measured run: its config, the link it calibrated, its no-DBO and DBO step times."""

    config: OverlapConfig
    link: LinkProfile
    no_dbo_s: float
    dbo_s: float
    start_s: float | None = None  # median start phase of its DBO steps (OverlapResult.start_phases_dbo_s)
    gaps: dict = field(default_factory=dict)  # engine_gaps of its no-DBO steps
    turns_no_dbo: dict = field(default_factory=dict)  # turnarounds of its no-DBO steps
    turns_dbo: dict = field(default_factory=dict)  # turnarounds of its DBO steps


def _next_kernel_gaps(
    steps: list[list[Any]], group: Callable[[Any], Any], keep: Callable[[Any, Any], bool]
) -> dict[tuple[str, str], float]:
    """Median seconds from a kernel's end to the start of the next kernel of its ``group`` (by
    start time) where ``keep(kernel, next)``, by (kernel name, next kernel name), over ``steps``
    (each a list of ``KernelRecord``)."""
    out: dict[tuple[str, str], list[float]] = {}
    for recs in steps:
        by: dict[Any, list[Any]] = {}
        for r in recs:
            by.setdefault(group(r), []).append(r)
        for rs in by.values():
            rs.sort(key=lambda r: r.start)
            for a, b in zip(rs, rs[1:]):
                if keep(a, b):
                    out.setdefault((a.name, b.name), []).append(b.start - a.end)
    return {k: statistics.median(v) for k, v in out.items()}


def engine_gaps(steps: list[list[Any]]) -> dict[tuple[str, str], float]:
    """Median gap from a kernel's end to the start of the same ubatch's next kernel when that one
    runs on the other engine, by (kernel name, next kernel name)."""
    return _next_kernel_gaps(steps, lambda r: r.ubatch, lambda a, b: a.kind != b.kind)


def turnarounds(steps: list[list[Any]]) -> dict[tuple[str, str], float]:
    """Median gap from a kernel's end to the start of the next kernel on the same engine, by
    (kernel name, next kernel name)."""
    return _next_kernel_gaps(steps, lambda r: r.kind, lambda a, b: True)


def _issue_seconds(cfg: OverlapConfig, profile: Any = None, steps: int = 9) -> tuple[float, int]:
    """(median host seconds from a no-DBO step's start until its forward returned, launches)."""
    res = resolve(replace(cfg, profile=profile, comm_ratio=1.0))
    old = torch.get_num_threads()
    if res.torch_threads is not None:
        torch.set_num_threads(res.torch_threads)
    runner = Runner(cfg, res)
    try:
        marks: list[float] = []
        forward = runner.model.forward

        def timed(rows: range) -> Any:
            out = forward(rows)
            marks.append(runner.backend.now())
            return out

        runner.model.forward = timed  # type: ignore[method-assign]
        runner.step(False, traced=False)
        issue, launches = [], 0
        for _ in range(steps):
            t0 = runner.backend.now()
            _, recs = runner.step(False, traced=True)
            issue.append(marks[-1] - t0)
            launches = len(recs)
        return statistics.median(issue), launches
    finally:
        runner.close()
        workspace.reset_workspace_manager()
        torch.set_num_threads(old)


def fit_launch(
    backend: str, p: Any, profile: DeviceProfile, progress: Progress | None = None, *, truth: Any = None
) -> float:
    """``HostCosts.launch``: the model's host seconds per launch beyond what ``profile`` predicts
    (``truth``: the profile of a virtual "machine", for tests)."""
    per = []
    for i, kw in enumerate(p.issue_runs):
        if progress:
            progress(f"host: model issue time {i + 1}/{len(p.issue_runs)}")
        cfg = OverlapConfig(backend=backend, steps=1, warmup=1, **kw)
        real, n = _issue_seconds(cfg, profile=truth)
        virt, _ = _issue_seconds(replace(cfg, backend="virtual"), profile=profile)
        per.append((real - virt) / max(n, 1))
    return max(0.0, statistics.median(per))


def fit_thread_start(steps: list[StepSample], profile: DeviceProfile) -> float:
    """``HostCosts.thread_start`` from the model's own DBO steps: the profile's value plus the
    median excess of the measured start phase (step start to the first ubatch entering the
    forward) over the virtual backend's, per ubatch thread (the virtual start phase is one
    ``thread_start`` per thread). On threads a step that follows a real step starts its threads
    slower than an empty step does (docs/fidelity.md, "Calibrating", has the figures). Never below
    the profile's value (the empty-step measurement)."""
    per = []
    for s in steps:
        if s.start_s is None:
            continue
        try:
            virt = statistics.median(_virtual(s, profile).start_phases_dbo_s)
        except (ConfigError, statistics.StatisticsError):
            continue
        per.append((s.start_s - virt) / s.config.ubatches)
    return profile.host.thread_start + max(0.0, statistics.median(per)) if per else profile.host.thread_start


def fit_engine_gap(steps: list[StepSample], profile: DeviceProfile, rounds: int = 3) -> tuple[float, float]:
    """(``engine_gap``, ``engine_gap_threaded``) from the model's own steps: the mean measured
    turnaround where the virtual backend starts the next kernel exactly one engine gap after the
    last one on its engine ended (it was waiting for the engine), in the no-DBO steps, and in the
    DBO steps less that. Means, not medians: every turnaround adds to the step. Which kernels
    waited depends on the gaps themselves (a later start moves what follows), so the fit starts
    from none and re-predicts with its estimate, ``rounds`` times (typical values: docs/fidelity.md,
    "Calibrating"). The profile's values where nothing was measured."""
    gap, threaded = 0.0, 0.0
    for _ in range(rounds):
        p = replace(profile, engine_gap=gap, engine_gap_threaded=threaded)
        meas: dict[bool, list[float]] = {False: [], True: []}
        for s in steps:
            if not s.turns_no_dbo:
                continue
            try:
                res = _virtual(s, p)
            except ConfigError:
                continue
            for dbo, measured, pred in (
                (False, s.turns_no_dbo, res.step_records_no_dbo),
                (True, s.turns_dbo, res.step_records_dbo),
            ):
                waited = (gap, gap + threaded) if dbo else (gap,)
                for k, g in turnarounds(pred).items():
                    if k in measured and any(abs(g - w) <= 1e-9 for w in waited):
                        meas[dbo].append(measured[k])
        if not meas[False]:
            return profile.engine_gap, profile.engine_gap_threaded
        gap = max(0.0, statistics.fmean(meas[False]))
        threaded = max(0.0, statistics.fmean(meas[True]) - gap) if meas[True] else profile.engine_gap_threaded
    return gap, threaded


def fit_wake_latency(steps: list[StepSample], profile: DeviceProfile) -> float:
    """``DeviceProfile.event_latency`` from the model's own no-DBO steps: the median measured gap
    at the engine changes where the virtual backend's gap is the wake-up latency itself (the next
    kernel was issued in time and waits only for the other engine; not, for instance, behind a
    host sync). These gaps are longer than an empty micro-benchmark's (docs/fidelity.md,
    "Calibrating", has the figures). The profile's value when no such gap was measured."""
    lat = profile.event_latency
    meas = []
    for s in steps:
        if not s.gaps:
            continue
        try:
            pred = engine_gaps(_virtual(s, profile).step_records_no_dbo)
        except ConfigError:
            continue
        for k, g in pred.items():
            if k in s.gaps and abs(g - lat) <= 0.01 * lat + 1e-8:
                meas.append(s.gaps[k])
    return max(0.0, statistics.median(meas)) if meas else lat


def _virtual(s: StepSample, profile: DeviceProfile) -> Any:
    """The sample's run predicted on virtual with ``profile`` over the link it calibrated."""
    cfg = replace(
        s.config,
        backend="virtual",
        profile=profile,
        meta=True,
        comm_ratio=None,
        link=s.link,
        steps=1,
        warmup=1,
        dtype=s.config.dtype if s.config.dtype != "auto" else "float32",
        ep=s.config.ep if s.config.ep is not None else 1,  # one process ran every expert
    )
    return run(cfg)


def _predict(s: StepSample, profile: DeviceProfile) -> tuple[float, float]:
    res = _virtual(s, profile)
    return res.time_no_dbo_s, res.time_dbo_s


def fit_event_latency(
    steps: list[StepSample],
    profile: DeviceProfile,
    *,
    lo: float = 0.0,
    hi: float = 2e-3,
    progress: Progress | None = None,
) -> float:
    """``DeviceProfile.event_latency_threaded`` in [lo, hi] that makes the virtual backend
    reproduce the measured speedups best: least absolute log error of the DBO step's time over the
    no-DBO step's, over the link each run calibrated. The latency acts on DBO steps only; judged
    by the ratio, an error the model makes on both steps alike (a kernel a few percent off) is not
    pushed into it."""
    if not steps:
        return lo
    calls = [0]

    def loss(latency: float) -> float:
        calls[0] += 1
        if progress:
            progress(f"steps: wake-up latency, try {calls[0]} ({latency * 1e6:.0f} us)")
        p = replace(profile, event_latency_threaded=latency)
        err = 0.0
        for s in steps:
            try:
                no, d = _predict(s, p)
            except ConfigError:
                continue
            err += abs(
                math.log((d / no) / (s.dbo_s / s.no_dbo_s))
            )  # absolute, not squared: one disturbed run pulls less
        return err

    return fit_scalar(loss, lo, hi)
