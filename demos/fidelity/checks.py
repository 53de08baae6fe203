"""The checks ``python -m demos.validate`` runs, one call each (docs/fidelity.md, "Validating").

Each call returns a typed result: its rows, ``to_dict()`` (the JSON ``--json`` writes) and ``text()``
(what the command prints). None prints or writes anything; ``progress``, where a check takes it, is
called with one line saying what runs now.

* ``grid_check``: a grid of the toy run for real and predicted on the virtual backend (``Validation``);
  ``breakdown_check``: each selected point's ops instead (``BreakdownResult``).
* ``h200_check``: a profile against the H200 measurements (``H200Result``).
* ``deepep_check``: the all-to-all model against DeepEP's published H800 tables (``DeepEPResult``).
* ``kernels_check``: the fitted roofline against the measured kernel tables (``KernelsResult``; the
  measured extra).
* ``silicon_check``: predicted no-DBO steps against measured deployments (``SiliconResult``; the
  measured extra).
* ``published_check``: the predictor against published whole-deployment overlap results, and what each
  overlap mechanism moves (``PublishedResult``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from demos.fidelity import deepep, fused_moe, published
from demos.fidelity.breakdown import Breakdown, breakdown, format_breakdown
from demos.fidelity.calibration import calibrate
from demos.fidelity.comparison import Validation
from demos.fidelity.machine import LoadMeter, read_cpu_times
from demos.fidelity.serving_check import ServingResult, serving_check
from demos.fidelity.validation import (
    RATIOS,
    SCHEDULES,
    Point,
    compare_h200,
    format_h200,
    graph_supported,
    grid,
    held_out_points,
    validate,
)

__all__ = [
    "BreakdownResult",
    "DeepEPResult",
    "H200Result",
    "KernelsResult",
    "PublishedResult",
    "SiliconResult",
    "ServingResult",
    "breakdown_check",
    "deepep_check",
    "grid_check",
    "h200_check",
    "kernels_check",
    "published_check",
    "silicon_check",
    "serving_check",
]

Progress = Callable[[str], None]


def _quiet(text: str) -> None:
    pass


# --- the grid ---------------------------------------------------------------------------------------------


def _profile_and_points(
    backend: str,
    profile: Any,
    *,
    quick: bool,
    sizes: Sequence[int] | None,
    ratios: Sequence[float],
    schedules: Sequence[str],
    held_out: bool,
    progress: Progress,
    notes: list[str],
) -> tuple[Any, list[Point]]:
    """The profile (``None``: this machine calibrated first, a quick sweep, said in ``notes``) and the
    points: the grid, and the held-out points unless ``held_out`` is False."""
    if profile is None:
        progress("no profile given: calibrating this machine first (quick sweep)")
        profile, _ = calibrate(backend, quick=True, progress=progress)
        notes.append(f"profile calibrated just now on {backend} (quick sweep)")
    points = grid(quick, sizes=sizes, ratios=ratios, schedules=schedules, backend=backend)
    if held_out:
        points += held_out_points(quick, backend=backend)
    return profile, points


def grid_check(
    backend: str,
    profile: Any = None,
    *,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    ratios: Sequence[float] = RATIOS,
    schedules: Sequence[str] = SCHEDULES,
    steps: int = 5,
    min_time: float = 0.1,
    repeats: int | None = None,
    held_out: bool = True,
    rerun: bool = True,
    progress: Progress | None = None,
) -> Validation:
    """The grid (``demos.fidelity.validation.grid``: ``quick``, ``sizes``, ``ratios``, ``schedules``, and the
    held-out points unless ``held_out`` is False) run for real on ``backend`` and predicted with ``profile``
    (a profile or its name; None: calibrate this machine first); ``repeats`` per point (None: 3 when
    ``quick``, else 1); ``rerun``: run again a run during which the machine was disturbed. The machine's
    load over the run is in the result (``machine``), and its notes say what was not measured.
    Raises ``CalibrationError`` and ``ConfigError``."""
    progress = progress or _quiet
    notes: list[str] = []
    meter = LoadMeter().start()
    profile, points = _profile_and_points(
        backend,
        profile,
        quick=quick,
        sizes=sizes,
        ratios=ratios,
        schedules=schedules,
        held_out=held_out,
        progress=progress,
        notes=notes,
    )
    v = validate(
        backend,
        profile,
        points,
        steps=steps,
        repeats=repeats if repeats is not None else (3 if quick else 1),
        min_time=min_time,
        progress=progress,
        machine=read_cpu_times if rerun else None,
    )
    v.machine = meter.stop()
    if v.machine is None:
        notes.append(f"the machine's load was not measured: {meter.missing}")
    v.notes.extend(notes)
    if not graph_supported():
        v.notes.append("eager only: this demo has no CUDA-graph mode to validate")
    return v


@dataclass
class BreakdownResult:
    """Each selected point's breakdown (``demos.fidelity.breakdown``), in the order they ran."""

    breakdowns: list[Breakdown]

    def to_dict(self) -> dict[str, Any]:
        return {"breakdowns": [dataclasses.asdict(b) for b in self.breakdowns]}

    def text(self) -> str:
        return "\n".join(format_breakdown(b) for b in self.breakdowns)


def breakdown_check(
    backend: str,
    profile: Any = None,
    *,
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    ratios: Sequence[float] = RATIOS,
    schedules: Sequence[str] = SCHEDULES,
    steps: int = 5,
    min_time: float = 0.1,
    held_out: bool = True,
    progress: Progress | None = None,
    each: Callable[[Breakdown], None] | None = None,
) -> BreakdownResult:
    """One run of each point ``grid_check`` would select (its arguments; graph points as their eager steps,
    once), each op's kernel time measured against predicted; ``each(breakdown)`` as each one is done.
    Raises ``CalibrationError`` and ``ConfigError``."""
    progress = progress or _quiet
    profile, points = _profile_and_points(
        backend,
        profile,
        quick=quick,
        sizes=sizes,
        ratios=ratios,
        schedules=schedules,
        held_out=held_out,
        progress=progress,
        notes=[],
    )
    eager = list(dict.fromkeys(dataclasses.replace(pt, mode="eager") for pt in points))
    out = []
    for i, pt in enumerate(eager):
        progress(f"point {i + 1}/{len(eager)}: {pt.label()}")
        b = breakdown(backend, profile, pt, steps=steps, min_time=min_time)
        out.append(b)
        if each is not None:
            each(b)
    return BreakdownResult(out)


# --- the checks without runs ------------------------------------------------------------------------------


@dataclass
class H200Result:
    """The H200-measured configs predicted with one profile; ``label`` names the profile in the text."""

    rows: list[dict[str, Any]]
    label: str = "h200"

    def to_dict(self) -> dict[str, Any]:
        return {"h200": self.rows}

    def text(self) -> str:
        return format_h200(self.rows, self.label)


def h200_check(profile: Any = "h200", label: str = "h200") -> H200Result:
    """The H200-measured configs predicted with ``profile`` (a profile or its name; ``demos.fidelity.h200``)."""
    return H200Result(compare_h200(profile), label)


@dataclass
class DeepEPResult:
    """DeepEP's published H800 figures against the all-to-all model (``demos.fidelity.deepep``), and
    DeepGEMM's published fused MoE kernel against its model (``demos.fidelity.fused_moe``, held out)."""

    rows: list[dict[str, Any]]
    fused_moe: list[dict[str, Any]] = field(default_factory=list)
    other: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"deepep": self.rows, "fused_moe": self.fused_moe, "libraries": self.other}

    def text(self) -> str:
        from demos.fidelity import ep_published

        parts = [deepep.format_table(self.rows)]
        if self.fused_moe:
            parts.append(fused_moe.format_table(self.fused_moe))
        head = "MoRI (AMD) and EFA (AWS) all-to-all tables against the model, each group's parameters fitted on its "
        head += "fitted rows (demos.fidelity.ep_published):"
        if self.other:
            parts.append(head)
        parts += [ep_published.format_table(g, recs) for g, recs in self.other.items()]
        return "\n\n".join(parts)


def deepep_check() -> DeepEPResult:
    """Every published figure of DeepEP's tables against the model's (``deepep.compare``), and DeepGEMM's
    fused MoE tables (``fused_moe.compare``)."""
    from demos.fidelity import ep_published

    other = {g: ep_published.compare(g) for g in ep_published.GROUPS}
    return DeepEPResult(deepep.compare(), fused_moe.compare(), other)


@dataclass
class KernelsResult:
    """Predicted against measured kernel rows (``CheckRow``) and their summaries per GPU and op; with the
    cross-validation, its lines (fitted on one GPU, every GPU predicted)."""

    rows: list[Any]
    summary: list[dict[str, Any]]
    cross_validation: list[str] | None = None
    family: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = {
            "curves": "family" if self.family else "own",
            "rows": [r._asdict() for r in self.rows],
            "summary": self.summary,
        }
        if self.cross_validation is not None:
            out["cross_validation"] = list(self.cross_validation)
        return out

    def text(self) -> str:
        from demos.fidelity.silicon import format_kernels

        text = format_kernels(self.summary, self.family)
        if self.cross_validation is None:
            return text
        head = "cross-validation (fit on one GPU, predict the others; median |error|, signed median, max):"
        return "\n".join([text, "", head, *("  " + line for line in self.cross_validation)])


def kernels_check(
    progress: Progress | None = None, *, cross_validation: bool = False, family: bool = False
) -> KernelsResult:
    """The fitted roofline against every measured kernel row of the GPUs with tables (H100 to GB300, each on
    the curves the predictor takes for it, ``gpu_fit``; with ``family`` on its family's pooled curves,
    ``family_fit``), H800's published figures and AMD's tables; ``cross_validation``: also each GPU's own fit
    against every GPU (``demos.fidelity.kernels.cross_validation``). Raises ``MeasuredTablesError`` without
    the measured extra."""
    from demos.fidelity.amd_kernels import AMD_GPUS, amd_rows
    from demos.fidelity.kernels import cross_validation as cross
    from demos.fidelity.kernels import kernel_rows, summaries
    from demos.zoo.hardware import get_gpu
    from demos.zoo.measured import SYSTEMS
    from demos.zoo.rooflines import family_fit

    progress = progress or _quiet
    rows = []
    for gpu in (*SYSTEMS, "h800", *AMD_GPUS):
        progress(f"kernels: {gpu}")
        fit = family_fit(get_gpu(gpu).family) if family else None
        rows += amd_rows(gpu, fit) if gpu in AMD_GPUS else kernel_rows(gpu, fit)
    lines = None
    if cross_validation:
        progress("kernels: cross-validation (each GPU's own curves on every GPU)")
        lines = cross()
    return KernelsResult(rows, summaries(rows), lines, family)


@dataclass
class SiliconResult:
    """Predicted no-DBO steps (``SiliconCheck`` rows) against measured deployments, their summaries per GPU
    and phase, the gap's fit per row class, and ``{reason: rows}`` for the rows not predicted."""

    rows: list[Any]
    summary: list[dict[str, Any]]
    gaps: list[dict[str, Any]]
    skipped: dict[str, int]
    by_engine: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [c.to_dict() for c in self.rows],
            "summary": self.summary,
            "by_engine": self.by_engine,
            "gaps": self.gaps,
            "skipped": self.skipped,
        }

    def text(self) -> str:
        from demos.fidelity.silicon import format_silicon

        return format_silicon(self.summary, self.skipped, self.gaps, self.by_engine)


def silicon_check(
    kernels: str = "roofline", progress: Progress | None = None, imbalance: str = "auto"
) -> SiliconResult:
    """Every expressible measured deployment's step predicted without DBO, its kernel times from
    ``kernels`` ("roofline" or "measured"), its routing ``imbalance`` ("auto" or "power-law"). Raises
    ``MeasuredTablesError`` without the measured extra."""
    from demos.fidelity import silicon

    progress = progress or _quiet
    rows, skipped = silicon.silicon_rows(
        lambda d, n, what: progress(f"silicon: {d}/{n} {what}"), kernels=kernels, imbalance=imbalance
    )
    summary, gaps = silicon.silicon_summaries(rows), silicon.gap_fits(rows)
    return SiliconResult(rows, summary, gaps, skipped, silicon.engine_summaries(rows))


@dataclass
class PublishedResult:
    """One record per published quantity (``published.compare``), and with ``ablation`` asked for, each case
    predicted with each overlap mechanism turned off in turn (``published.ablation``; else None)."""

    rows: list[dict[str, Any]]
    ablation: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rows": self.rows}
        if self.ablation is not None:
            out["ablation"] = self.ablation
        return out

    def text(self) -> str:
        text = published.format_table(self.rows)
        if self.ablation is not None:
            text += "\n\n" + published.format_ablation(self.ablation)
        return text


def published_check(*, ablation: bool = False, progress: Progress | None = None) -> PublishedResult:
    """The predictor against every published case (``demos.fidelity.published``); ``ablation``: also what
    each overlap mechanism moves."""
    rows = published.compare(progress=progress)
    return PublishedResult(rows, published.ablation(progress=progress) if ablation else None)
