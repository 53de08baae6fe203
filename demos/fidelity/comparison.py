"""The records of a validation and their comparison: measured against predicted.

``Point`` (one grid point), ``Figures`` (the step times of one run), ``Row`` (a point's measured
and predicted figures, their errors) and ``Validation`` (the rows of one grid); ``crossover`` (the
smallest token count from which DBO pays), ``summarize`` (the errors against ``TARGETS``, the
crossovers), ``format_table`` (the text table) and ``to_dict`` (the JSON form).
``demos.fidelity.validation`` runs the grid that fills them (and re-exports these names).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dbo.trace import fmt_seconds
from demos.toy.config import OverlapConfig
from demos.vocabulary import Mode

__all__ = ["Point", "Figures", "Row", "Validation", "TARGETS", "crossover", "summarize", "format_table", "to_dict"]

HELD_OUT_FIELDS = ("topk", "experts", "hidden", "layers")
"""The shapes a held-out point's label names."""

TARGETS = {"median": 0.10, "max": 0.25, "speedup": 0.10}
"""What calibrate + validate aim at on threads (reported, not enforced). A speedup passes within
``speedup`` or within its point's own spread when that is larger (``speedup_tolerance``)."""


@dataclass(frozen=True)
class Point:
    """One grid point: schedule, token count, comm ratio, eager or graph; the other shapes fixed."""

    schedule: str
    tokens: int
    comm_ratio: float
    mode: str = "eager"
    shapes: tuple = ()  # (field, value) pairs of OverlapConfig, common to the grid
    held_out: bool = False
    """A shape the grid and the calibration hold fixed (top-k, experts, hidden): counted in the
    errors and speedups, not in the crossovers (``demos.fidelity.validation.held_out_points``)."""

    def shape_text(self) -> str:
        """The shapes a held-out point varies, in words: ``topk 1, experts 8, hidden 256, layers 2``."""
        sh = dict(self.shapes)
        return ", ".join(f"{k} {sh[k]}" for k in HELD_OUT_FIELDS if k in sh)

    def label(self) -> str:
        """The point in words: schedule, mode, tokens, comm ratio (and a held-out point's shapes)."""
        text = f"{self.schedule} {self.mode} {self.tokens} tokens comm {self.comm_ratio:g}x"
        return text + f" ({self.shape_text()})" if self.held_out else text

    def config(self, **kw: Any) -> OverlapConfig:
        extra = dict(self.shapes)
        if self.mode == Mode.GRAPH:
            extra["graph"] = True
        return OverlapConfig(schedule=self.schedule, tokens=self.tokens, comm_ratio=self.comm_ratio, **{**extra, **kw})


@dataclass
class Figures:
    """Step times (s), speedup and hidden fraction of one run."""

    no_dbo_s: float
    dbo_s: float
    hidden: float | None

    @property
    def speedup(self) -> float:
        return self.no_dbo_s / self.dbo_s


def _speedup_error(measured: Figures, predicted: Figures) -> float:
    return predicted.speedup - measured.speedup


@dataclass
class Row:
    point: Point
    measured: Figures  # the medians over ``runs``
    predicted: Figures
    runs: tuple[tuple[Figures, Figures], ...] = ()
    """Each repeat's (measured, predicted) figures, in the order they ran (empty: not kept)."""

    # The errors pair each run with its own prediction (over the link that run calibrated) and take
    # the median over the runs. The difference of the two medians would compare figures of
    # different runs: the measured no-DBO median may be run 2's and the predicted one run 3's, at
    # another link, and a speedup of run 2's no-DBO over run 3's DBO step belongs to no run.
    # Without runs (a Row built from medians alone) they compare the medians.

    def _paired(self, err: Callable[[Figures, Figures], float]) -> float:
        if self.runs:
            return statistics.median(err(m, q) for m, q in self.runs)
        return err(self.measured, self.predicted)

    @property
    def err_no_dbo(self) -> float:
        return self._paired(lambda m, q: q.no_dbo_s / m.no_dbo_s - 1)

    @property
    def err_dbo(self) -> float:
        return self._paired(lambda m, q: q.dbo_s / m.dbo_s - 1)

    @property
    def err_speedup(self) -> float:
        return self._paired(_speedup_error)

    def run_speedup_errors(self) -> list[float]:
        """Each run's own speedup error, in the order the runs ran (``err_speedup`` is their median)."""
        return [_speedup_error(m, q) for m, q in self.runs]

    def measured_speedup_spread(self) -> float | None:
        """How far the measured speedup moved between this point's runs (largest minus smallest;
        None with fewer than two runs): the measurement's own noise, beside the target's 0.1."""
        sp = [m.speedup for m, _ in self.runs]
        return max(sp) - min(sp) if len(sp) > 1 else None

    def speedup_tolerance(self) -> float:
        """What the speedup target allows this point: 0.1, or the spread of its own measured
        speedup over its runs when that is larger (no model can be held closer than the machine
        repeats itself); 0.1 alone with fewer than two runs."""
        return max(TARGETS["speedup"], self.measured_speedup_spread() or 0.0)

    def speedup_within(self) -> bool:
        return abs(self.err_speedup) <= self.speedup_tolerance()


@dataclass
class Validation:
    backend: str
    profile: str
    rows: list[Row]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    machine: Any = None  # demos.fidelity.machine.MachineLoad over the run (None: not measured)

    def to_dict(self) -> dict[str, Any]:
        """The JSON record (``to_dict`` below)."""
        return to_dict(self)

    def text(self) -> str:
        """The printed table (``format_table`` below)."""
        return format_table(self)


def crossover(
    rows: Sequence[Row], schedule: str, which: str, comm_ratio: float = 1.0, mode: str = "eager"
) -> int | None:
    """The smallest token count of the grid from which DBO pays (speedup > 1 there and at every
    larger size) for ``schedule`` at ``comm_ratio``, ``which`` = "measured" or "predicted"; None
    when DBO does not pay at the largest size."""
    pts = sorted(
        (r.point.tokens, getattr(r, which).speedup)
        for r in rows
        if r.point.schedule == schedule
        and r.point.comm_ratio == comm_ratio
        and r.point.mode == mode
        and not r.point.held_out
    )
    best = None
    for tokens, sp in reversed(pts):
        if sp <= 1:
            break
        best = tokens
    return best


def summarize(v: Validation) -> dict[str, Any]:
    """Median and max |step-time error| (no-DBO and DBO together), max |speedup error|, crossovers;
    the speedups that missed 0.1 and their own spread (``speedups_off``) and those that missed 0.1
    but not their spread (``speedups_within_spread``: point, error, spread)."""
    errs = [abs(e) for r in v.rows for e in (r.err_no_dbo, r.err_dbo)]
    grid_rows = [r for r in v.rows if not r.point.held_out]
    sizes = sorted({r.point.tokens for r in grid_rows})
    cross = {}
    for s in sorted({r.point.schedule for r in grid_rows}):
        for m in sorted({r.point.mode for r in grid_rows}):
            for ratio in sorted({r.point.comm_ratio for r in grid_rows}):
                if not any(
                    r.point.schedule == s and r.point.mode == m and r.point.comm_ratio == ratio for r in grid_rows
                ):
                    continue  # e.g. graph rows of ht: the demo cannot capture ht
                meas, pred = crossover(v.rows, s, "measured", ratio, m), crossover(v.rows, s, "predicted", ratio, m)
                ok = None
                if meas is not None or pred is not None:
                    steps = [sizes.index(x) if x is not None else len(sizes) for x in (meas, pred)]
                    ok = abs(steps[0] - steps[1]) <= 1
                cross[f"{s} {m} comm {ratio:g}x"] = {"measured": meas, "predicted": pred, "within_one_step": ok}
    sp_ok = sum(r.speedup_within() for r in v.rows)
    cr = [c["within_one_step"] for c in cross.values() if c["within_one_step"] is not None]
    return {
        "targets": {
            "median_abs_step_error <= 10%": bool(errs) and statistics.median(errs) <= TARGETS["median"],
            "max_abs_step_error <= 25%": bool(errs) and max(errs) <= TARGETS["max"],
            "speedups within 0.1 or their spread": f"{sp_ok}/{len(v.rows)}",
            "crossover within one grid step": f"{sum(cr)}/{len(cr)}",
        },
        "median_abs_step_error": statistics.median(errs) if errs else None,
        "max_abs_step_error": max(errs) if errs else None,
        "max_abs_speedup_error": max((abs(r.err_speedup) for r in v.rows), default=None),
        "speedups_off": [_speedup_off(r) for r in v.rows if not r.speedup_within()],
        "speedups_within_spread": [
            {"point": r.point.label(), "err_speedup": r.err_speedup, "spread": r.measured_speedup_spread()}
            for r in v.rows
            if r.speedup_within() and abs(r.err_speedup) > TARGETS["speedup"]
        ],
        "measured_speedup_spread": _spread_summary(v.rows),
        "held_out": _held_out_summary(v.rows),
        "crossover": cross,
    }


def _speedup_off(r: Row) -> str:
    """A point whose speedup is off by more than the target allows it (0.1, or its spread when
    larger), with each of its runs' own error and in how many runs it was off by more than that:
    a miss in every run is the model's, one in a single run may be the machine's."""
    text = f"{r.point.label()}: {r.err_speedup:+.2f}"
    errs = r.run_speedup_errors()
    if len(errs) > 1:
        tol = r.speedup_tolerance()
        off = sum(abs(e) > tol for e in errs)
        text += f" (runs {', '.join(f'{e:+.2f}' for e in errs)}: off in {off} of {len(errs)})"
    return text


def _spread_summary(rows: Sequence[Row]) -> dict[str, Any] | None:
    """The median and largest spread of a point's measured speedup over its runs, and the point of
    the largest (None: no point has two runs)."""
    spreads = [(sp, r) for r in rows if (sp := r.measured_speedup_spread()) is not None]
    if not spreads:
        return None
    top, top_row = max(spreads, key=lambda x: x[0])
    return {
        "runs": max(len(r.runs) for _, r in spreads),
        "median": statistics.median(sp for sp, _ in spreads),
        "max": top,
        "max_point": top_row.point.label(),
    }


def _held_out_summary(rows: Sequence[Row]) -> dict[str, Any] | None:
    """The held-out points' own median and max |step-time error| and max |speedup error| (None: none)."""
    held = [r for r in rows if r.point.held_out]
    if not held:
        return None
    errs = [abs(e) for r in held for e in (r.err_no_dbo, r.err_dbo)]
    return {
        "points": len(held),
        "median_abs_step_error": statistics.median(errs),
        "max_abs_step_error": max(errs),
        "max_abs_speedup_error": max(abs(r.err_speedup) for r in held),
    }


def _pct(x: float | None) -> str:
    return "  n/a" if x is None else f"{x * 100:+.0f}%"


def _hid(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.0f}%"


def format_table(v: Validation) -> str:
    """The table: predicted vs measured per point, the errors, the summary and the crossovers."""
    head = (
        f"{'sched':5} {'mode':5} {'tokens':>6} {'comm':>4} | {'no DBO meas':>11} {'pred':>8} {'err':>5} | "
        f"{'DBO meas':>9} {'pred':>8} {'err':>5} | {'speedup m/p':>11} {'err':>6} | {'hidden m/p':>10}"
    )
    lines = [f"validate: {v.backend} measured vs virtual predicted with profile {v.profile}", head, "-" * len(head)]
    held_header = False
    for r in v.rows:
        p, m, q = r.point, r.measured, r.predicted
        if p.held_out and not held_header:
            held_header = True
            lines.append("held out (shapes the grid and the calibration hold fixed; not in the crossovers):")
        if p.held_out:
            lines.append(f"  {p.shape_text()}:")
        lines.append(
            f"{p.schedule:5} {p.mode:5} {p.tokens:6d} {p.comm_ratio:4g} | "
            f"{fmt_seconds(m.no_dbo_s):>11} {fmt_seconds(q.no_dbo_s):>8} "
            f"{_pct(r.err_no_dbo):>5} | {fmt_seconds(m.dbo_s):>9} {fmt_seconds(q.dbo_s):>8} {_pct(r.err_dbo):>5} | "
            f"{m.speedup:5.2f}/{q.speedup:<5.2f} {r.err_speedup:+6.2f} | {_hid(m.hidden):>4}/{_hid(q.hidden):<5}"
        )
    s = summarize(v)
    lines.append(
        f"step time |error|: median {_pct(s['median_abs_step_error']).strip('+')}, "
        f"max {_pct(s['max_abs_step_error']).strip('+')}; "
        f"speedup |error| max "
        f"{'n/a' if s['max_abs_speedup_error'] is None else format(s['max_abs_speedup_error'], '.2f')}"
    )
    lines.append(
        "targets: "
        + "; ".join(f"{k}: {'yes' if v is True else 'no' if v is False else v}" for k, v in s["targets"].items())
    )
    if v.machine is not None:
        lines.append(f"machine: {v.machine.describe()}")
        if v.machine.disturbances():
            lines.append(
                "note: the targets assume an idle machine; this run's figures are not evidence for or against them"
            )
    h = s["held_out"]
    if h:
        lines.append(
            f"held out ({h['points']} points): step time |error| median {_pct(h['median_abs_step_error']).strip('+')}, "
            f"max {_pct(h['max_abs_step_error']).strip('+')}; speedup |error| max {h['max_abs_speedup_error']:.2f}"
        )
    if s["speedups_within_spread"]:
        lines.append(
            "within their own spread (not 0.1): "
            + "; ".join(
                f"{w['point']}: {w['err_speedup']:+.2f} (spread {w['spread']:.2f})" for w in s["speedups_within_spread"]
            )
        )
    if s["speedups_off"]:
        lines.append("speedups off by more than 0.1 and their own spread: " + "; ".join(s["speedups_off"]))
    if sp := s["measured_speedup_spread"]:
        lines.append(
            f"measured speedup between a point's {sp['runs']} runs: moved by a median {sp['median']:.2f}, "
            f"at most {sp['max']:.2f} ({sp['max_point']}); "
            f"the target allows {TARGETS['speedup']:g} or a point's own spread"
        )
    for k, c in s["crossover"].items():
        fmt = lambda x: "never" if x is None else f"{x} tokens"  # noqa: E731
        lines.append(f"crossover {k}: DBO pays from {fmt(c['measured'])} measured, {fmt(c['predicted'])} predicted")
    for n in v.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def _figures_dict(f: Figures) -> dict[str, Any]:
    return dataclasses.asdict(f) | {"speedup": f.speedup}


def to_dict(v: Validation) -> dict[str, Any]:
    return {
        "backend": v.backend,
        "profile": v.profile,
        "seconds": v.seconds,
        "rows": [
            {
                "schedule": r.point.schedule,
                "tokens": r.point.tokens,
                "comm_ratio": r.point.comm_ratio,
                "mode": r.point.mode,
                "shapes": dict(r.point.shapes),
                "held_out": r.point.held_out,
                "measured": _figures_dict(r.measured),
                "predicted": _figures_dict(r.predicted),
                "err_no_dbo": r.err_no_dbo,
                "err_dbo": r.err_dbo,
                "err_speedup": r.err_speedup,
                "runs": [
                    {"measured": _figures_dict(m), "predicted": _figures_dict(q), "err_speedup": e}
                    for (m, q), e in zip(r.runs, r.run_speedup_errors())
                ],
            }
            for r in v.rows
        ],
        "summary": summarize(v),
        "machine": v.machine.to_dict() if v.machine is not None else None,
        "notes": list(v.notes),
    }
