"""Where a validation point's error sits: each op's kernel time in a step, measured against predicted.

``breakdown(backend, profile, point)`` runs one grid point for real (eager) and predicts it on the
virtual backend over the link the real run calibrated, as ``validate`` does, and returns, for the
no-DBO and the DBO step, every op's kernel count and its kernels' time summed over the step
(measured: the median over the timed steps; predicted: the virtual step), with the step times and
the span from the first kernel's start to the last one's end. ``format_breakdown`` prints it.
``python -m demos.validate --breakdown`` runs it for each point it selects (docs/fidelity.md,
"Validating").

A graph point is broken down as its eager steps (the replays keep no kernel records on threads).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from demos.fidelity.comparison import Point
from demos.fidelity.validation import measured_link, planned_steps, prediction_config, profile_name
from demos.toy.run import run

__all__ = ["OpTimes", "StepBreakdown", "Breakdown", "breakdown", "step_ops", "format_breakdown"]


@dataclass(frozen=True)
class OpTimes:
    """One op in one kind of step: its kernels per step, and their seconds summed over the step."""

    op: str
    kind: str  # "compute" or "comm"
    kernels: int
    measured_s: float
    predicted_s: float


@dataclass
class StepBreakdown:
    dbo: bool
    measured_step_s: float
    predicted_step_s: float
    measured_span_s: float  # first kernel's start to last kernel's end (median over the steps)
    predicted_span_s: float
    ops: list[OpTimes] = field(default_factory=list)


@dataclass
class Breakdown:
    point: Point
    backend: str
    steps: int
    profile: str
    no_dbo: StepBreakdown
    dbo: StepBreakdown


def step_ops(steps: Sequence[Sequence[Any]]) -> tuple[dict[tuple[str, str], tuple[int, float]], float]:
    """Per (op, kind): (kernels per step, seconds summed over a step), medians over ``steps`` (each
    a step's kernel records; a step without the op counts as 0 of it), and the median span of a
    step's kernels; records of no op count under their name."""
    per_step = []
    spans = []
    for recs in steps:
        if not recs:
            continue
        one: dict[tuple[str, str], list[float]] = defaultdict(list)
        for r in recs:
            one[(r.op or r.name, r.kind)].append(r.end - r.start)
        per_step.append(one)
        spans.append(max(r.end for r in recs) - min(r.start for r in recs))
    keys = {k for one in per_step for k in one}
    out = {
        k: (
            round(statistics.median(len(one.get(k, ())) for one in per_step)),
            statistics.median(sum(one.get(k, ())) for one in per_step),
        )
        for k in keys
    }
    return out, statistics.median(spans) if spans else 0.0


def _step(dbo: bool, measured: Any, predicted: Any) -> StepBreakdown:
    recs = "step_records_dbo" if dbo else "step_records_no_dbo"
    last = "records_dbo" if dbo else "records_no_dbo"
    m, m_span = step_ops(getattr(measured, recs) or [getattr(measured, last)])
    p, p_span = step_ops(getattr(predicted, recs) or [getattr(predicted, last)])
    ops = []
    for key in sorted(set(m) | set(p)):
        (mk, ms), (pk, ps) = m.get(key, (0, 0.0)), p.get(key, (0, 0.0))
        ops.append(OpTimes(key[0], key[1], max(mk, pk), ms, ps))
    attr = "time_dbo_s" if dbo else "time_no_dbo_s"
    return StepBreakdown(dbo, getattr(measured, attr), getattr(predicted, attr), m_span, p_span, ops)


def breakdown(
    backend: str, profile: Any, point: Point, *, steps: int = 5, min_time: float = 0.1, truth: Any = None
) -> Breakdown:
    """Run ``point`` (eager) on ``backend`` and predict it with ``profile``, op by op (see the
    module docstring); ``steps``/``min_time`` as in ``validate``; ``truth``: the profile of the
    measured run when ``backend`` is "virtual" (tests)."""
    pt = replace(point, mode="eager")
    n = planned_steps(pt, profile, steps, min_time)
    measured = run(pt.config(backend=backend, steps=n, warmup=1, profile=truth))
    predicted = run(prediction_config(pt, profile, measured_link(measured), measured.resolved.ep))
    steps_of = (_step(dbo, measured, predicted) for dbo in (False, True))
    return Breakdown(pt, backend, n, profile_name(profile), *steps_of)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us"


def _diff(pred: float, meas: float) -> str:
    rel = f" ({(pred / meas - 1) * 100:+.0f}%)" if meas > 0 else ""
    return f"{(pred - meas) * 1e6:+,.0f} us{rel}"


def format_breakdown(b: Breakdown) -> str:
    """The breakdown as a table: per kind of step, the step, the kernels' span, then each op."""
    pt = b.point
    lines = [
        f"breakdown: {pt.label()} on {b.backend} ({b.steps} timed steps per kind, medians), "
        f"predicted with profile {b.profile} over the link that run calibrated"
    ]
    for s in (b.no_dbo, b.dbo):
        lines.append(
            f"  {'DBO' if s.dbo else 'no DBO'} step: measured {_us(s.measured_step_s)}, predicted "
            f"{_us(s.predicted_step_s)}, {_diff(s.predicted_step_s, s.measured_step_s)}; its kernels' span "
            f"{_us(s.measured_span_s)} against {_us(s.predicted_span_s)}"
        )
        lines.append(
            f"    {'op':<16} {'kind':<8} {'kernels':>7} {'measured':>12} {'predicted':>12}   predicted - measured"
        )
        for o in s.ops:
            lines.append(
                f"    {o.op:<16} {o.kind:<8} {o.kernels:>7} {_us(o.measured_s):>12} {_us(o.predicted_s):>12}   "
                f"{_diff(o.predicted_s, o.measured_s)}"
            )
    return "\n".join(lines)
