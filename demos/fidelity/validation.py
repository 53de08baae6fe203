"""Validate the virtual backend against a real one: run a grid for real, predict it with a profile.

``validate(backend, profile, quick=...)`` runs every grid point (schedule x size x comm ratio, each
with and without DBO; eager, and graph where the demo supports it) on the real backend and on the
virtual backend with ``profile``, and returns a ``Validation``: one ``Row`` per point with the
measured and predicted no-DBO and DBO step times, speedups and hidden fractions, their errors, and
per schedule the crossover (the smallest token count from which DBO pays). ``format_table`` prints
it. ``compare_h200`` compares the built-in ``h200`` profile with the H200 measurements.

Here: the grid and its runs. The records, their comparison and the table are in
``demos.fidelity.comparison``, the H200 comparison in ``demos.fidelity.h200``; this module
re-exports their names.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

from dbo.costs import LinkProfile
from demos.fidelity.comparison import (
    Figures,
    Point,
    Row,
    Validation,
    crossover,
    format_table,
    summarize,
    to_dict,  # noqa: F401 (re-exported: the JSON of a validation, Validation.to_dict)
)
from demos.fidelity.h200 import H200_MEASURED, compare_h200, format_h200
from demos.fidelity.machine import CpuTimes, Reruns, run_undisturbed
from demos.toy.config import ConfigError, OverlapConfig
from demos.toy.run import run
from demos.vocabulary import Mode, Schedule

__all__ = [
    "Point",
    "Row",
    "Validation",
    "grid",
    "held_out_points",
    "HELD_OUT",
    "validate",
    "crossover",
    "summarize",
    "format_table",
    "H200_MEASURED",
    "compare_h200",
    "format_h200",
    "graph_supported",
    "ValidationError",
    "steps_for",
    "planned_steps",
    "prediction_config",
    "measured_link",
    "profile_name",
    "MAX_STEPS",
]

RATIOS = (0.5, 1.0, 2.0)
SCHEDULES = (Schedule.HT, Schedule.LL)


class ValidationError(ValueError):
    """Validation cannot run as asked (a bad option)."""


def graph_supported() -> bool:
    """Whether the demo's run API takes a ``graph`` option (CUDA-graph replay of the DBO step)."""
    return any(f.name == Mode.GRAPH for f in dataclasses.fields(OverlapConfig))  # its flag is named after the mode


def _grid_shapes(quick: bool, backend: str) -> dict[str, Any]:
    """The shapes every grid point shares: layers, hidden size (and bfloat16 on cuda)."""
    gpu = backend == "cuda"
    return dict(layers=2 if quick else 4, hidden=2048 if gpu else 256, **({"dtype": "bfloat16"} if gpu else {}))


def grid(
    quick: bool = False,
    *,
    sizes: Sequence[int] | None = None,
    ratios: Sequence[float] = RATIOS,
    schedules: Sequence[str] = SCHEDULES,
    modes: Sequence[str] | None = None,
    backend: str = "threads",
    **shapes: Any,
) -> list[Point]:
    """The grid: every schedule x size x ratio x mode. Default sizes: small decode to large prefill
    (on cuda larger, in bfloat16)."""
    gpu = backend == "cuda"
    if sizes is None:
        if gpu:
            sizes = (16, 512, 8192) if quick else (8, 64, 512, 2048, 8192)
        else:
            sizes = (16, 128, 1024) if quick else (8, 32, 128, 512, 2048)
    if modes is None:
        modes = (Mode.EAGER, Mode.GRAPH) if graph_supported() else (Mode.EAGER,)
    sh = tuple(sorted({**_grid_shapes(quick, backend), **shapes}.items()))
    # a graph cannot hold ht's host sync (the demo refuses --graph with ht): graph rows are ll only
    return [
        Point(s, t, r, m, sh)
        for s in schedules
        for t in sizes
        for r in ratios
        for m in modes
        if not (m == Mode.GRAPH and s == Schedule.HT)
    ]


HELD_OUT = (
    dict(schedule="ht", tokens=256, topk=1, experts=8),
    dict(schedule="ll", tokens=384, topk=3, experts=8),
    dict(schedule="ht", tokens=512, topk=4, experts=16, hidden_scale=0.75),
    dict(schedule="ll", tokens=96, topk=2, experts=4, hidden_scale=1.25),
    dict(schedule="ll", tokens=640, topk=1, experts=16, hidden_scale=0.75),
)
"""Points off the grid: the grid and the calibration keep top-k 2, 8 experts and one hidden size;
these vary each (``hidden_scale``: of the grid's hidden size), at comm 1x, eager."""


def held_out_points(quick: bool = False, *, backend: str = "threads") -> list[Point]:
    """The held-out points (``HELD_OUT``) at the grid's layers and dtype for ``backend``: shapes
    neither the grid nor the calibration measure, so that a model that fits the grid and fails
    off it shows (a cost that folds a fixed top-k or expert count into a fitted scale)."""
    base = _grid_shapes(quick, backend)
    out = []
    for h in HELD_OUT:
        h = dict(h)
        schedule, tokens = h.pop("schedule"), h.pop("tokens")
        scale = h.pop("hidden_scale", 1.0)
        hidden = int(round(base["hidden"] * scale / 64)) * 64  # whole heads
        shapes = tuple(sorted({**base, **h, "hidden": hidden}.items()))
        out.append(Point(schedule, tokens, 1.0, "eager", shapes, held_out=True))
    return out


def _figures(cfg: OverlapConfig) -> tuple[Figures, LinkProfile, int]:
    """The run's figures, the link it calibrated (latency, bandwidth) and its expert-parallel size
    (1 for one process on threads or cuda: it runs every expert)."""
    res = run(cfg)
    return Figures(res.time_no_dbo_s, res.time_dbo_s, res.hidden_fraction), measured_link(res), res.resolved.ep


def measured_link(res: Any) -> LinkProfile:
    """The link a run calibrated (its ``link`` figures: latency, bandwidth)."""
    return LinkProfile("measured", res.link["latency_s"], res.link["bandwidth_Bps"])


def profile_name(profile: Any) -> str:
    """A profile's name in a report: the built-in name, or a ``DeviceProfile``'s ``name``."""
    return profile if isinstance(profile, str) else getattr(profile, "name", str(profile))


def _median_figures(figs: Sequence[Figures]) -> Figures:
    hid = [f.hidden for f in figs if f.hidden is not None]
    return Figures(
        statistics.median(f.no_dbo_s for f in figs),
        statistics.median(f.dbo_s for f in figs),
        statistics.median(hid) if hid else None,
    )


def planned_steps(pt: Point, profile: Any, steps: int, min_time: float) -> int:
    """Timed steps for a run of ``pt`` (``steps_for``), from a first guess of its step time: the
    profile's prediction over its own link."""
    if min_time <= 0:
        return steps
    guess, _, _ = _figures(_virtual_step(pt, profile, ep=1))
    return steps_for(guess.no_dbo_s, steps, min_time)


def prediction_config(pt: Point, profile: Any, link: LinkProfile, ep: int) -> OverlapConfig:
    """The virtual run that predicts ``pt`` with ``profile``: over the link the real run calibrated
    (not a virtual recalibration), so that both see the same transfers, and with its ``ep``."""
    return replace(_virtual_step(pt, profile, ep=ep), comm_ratio=None, link=link)


def _virtual_step(pt: Point, profile: Any, *, ep: int) -> OverlapConfig:
    """One shape-only step of ``pt`` on virtual with ``profile`` (the point's dtype, float32 by default)."""
    dtype = dict(pt.shapes).get("dtype", "float32")
    return pt.config(backend="virtual", profile=profile, steps=1, warmup=1, meta=True, dtype=dtype, ep=ep)


MAX_STEPS = 60
"""The most timed steps ``validate`` gives one run (``min_time`` asks for more on small steps)."""


def steps_for(predicted_step_s: float, steps: int, min_time: float) -> int:
    """Timed steps per DBO mode for a step predicted to take ``predicted_step_s``: at least
    ``steps``, and enough that each mode is timed for ``min_time`` seconds (at most ``MAX_STEPS``).
    Small steps are the noisy ones on a shared machine; more of them cost little."""
    if min_time <= 0 or not predicted_step_s > 0:
        return steps
    return max(steps, min(MAX_STEPS, math.ceil(min_time / predicted_step_s)))


def validate(
    backend: str,
    profile: Any,
    points: Sequence[Point],
    *,
    steps: int = 5,
    repeats: int = 1,
    min_time: float = 0.0,
    progress: Callable[[str], None] | None = None,
    truth: Any = None,
    machine: Callable[[], CpuTimes | None] | None = None,
) -> Validation:
    """Measure every point on ``backend`` and predict it on virtual with ``profile`` over the link
    the real run calibrated; ``repeats`` runs of each, medians of their figures, every run kept
    beside its own prediction (``Row.runs``, from which the errors are taken). The grid runs in
    ``repeats`` passes (every point once per pass), so that a slowdown of the machine that lasts
    a few points spoils one run of each of them, which the median drops, and not all of one
    point's runs. Each run times ``steps`` steps per DBO mode, more where the profile predicts a
    step shorter than ``min_time / steps`` (``steps_for``). ``truth``: the profile of the measured
    runs when ``backend`` is "virtual" (a machine with known figures, tests). ``machine``: a
    reader of the machine's CPU times (``demos.fidelity.machine.read_cpu_times``); with it, a run
    during which the machine was disturbed (``MachineLoad.disturbances``: CPU steal, other
    processes) is run once more and the second run kept, whatever its load (the count goes in
    the notes)."""
    t0 = time.perf_counter()
    reruns = Reruns()
    runs: dict[int, tuple[list[Figures], list[Figures]]] = {}
    skipped: dict[int, str] = {}
    sizes: dict[int, int] = {}
    for r in range(repeats):
        for i, pt in enumerate(points):
            if i in skipped:
                continue
            if progress:
                pass_ = f"pass {r + 1}/{repeats}, " if repeats > 1 else ""
                progress(
                    f"{pass_}point {i + 1}/{len(points)}: {pt.schedule} {pt.tokens} tokens, "
                    f"comm {pt.comm_ratio:g}x, {pt.mode}"
                )
            try:
                if i not in sizes:
                    sizes[i] = planned_steps(pt, profile, steps, min_time)
                cfg = pt.config(backend=backend, steps=sizes[i], warmup=1, profile=truth)
                m, link, ep = run_undisturbed(lambda: _figures(cfg), machine, reruns)
                q, _, _ = _figures(prediction_config(pt, profile, link, ep))
            except ConfigError as e:  # e.g. a comm ratio too small for the link's fixed costs at this size
                skipped[i] = f"{pt.schedule} {pt.tokens} tokens comm {pt.comm_ratio:g}x {pt.mode}: skipped ({e})"
                runs.pop(i, None)
                continue
            meas, pred = runs.setdefault(i, ([], []))
            meas.append(m)
            pred.append(q)
    rows = [
        Row(pt, _median_figures(runs[i][0]), _median_figures(runs[i][1]), tuple(zip(*runs[i])))
        for i, pt in enumerate(points)
        if i in runs
    ]
    name = profile_name(profile)
    notes = [skipped[i] for i in sorted(skipped)]
    if rerun_note := reruns.note():
        notes.append(rerun_note)
    return Validation(backend, name, rows, time.perf_counter() - t0, notes)
