"""Validate the virtual backend against a real one: run a grid for real, predict it with a profile.

``validate(backend, profile, quick=...)`` runs every grid point (schedule x size x comm ratio, each
with and without DBO; eager, and graph where the demo supports it) on the real backend and on the
virtual backend with ``profile``, and returns a ``Validation``: one ``Row`` per point with the
measured and predicted no-DBO and DBO step times, speedups and hidden fractions, their errors, and
per schedule the crossover (the smallest token count from which DBO pays). ``format_table`` prints
it. ``compare_h200`` compares the built-in ``h200`` profile with the H200 measurements.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

from dbo.costs import LinkProfile
from dbo.trace import fmt_seconds
from demos.experiment.run import run
from demos.moe.config import ConfigError, OverlapConfig

__all__ = [
    "Point",
    "Row",
    "Validation",
    "grid",
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
    "MAX_STEPS",
]

RATIOS = (0.5, 1.0, 2.0)
TARGETS = {"median": 0.10, "max": 0.25, "speedup": 0.10}
"""What calibrate + validate aim at on threads (reported, not enforced)."""
SCHEDULES = ("ht", "ll")


class ValidationError(ValueError):
    """Validation cannot run as asked (a bad option)."""


def graph_supported() -> bool:
    """Whether the demo's run API takes a ``graph`` option (CUDA-graph replay of the DBO step)."""
    return any(f.name == "graph" for f in dataclasses.fields(OverlapConfig))


@dataclass(frozen=True)
class Point:
    """One grid point: schedule, token count, comm ratio, eager or graph; the other shapes fixed."""

    schedule: str
    tokens: int
    comm_ratio: float
    mode: str = "eager"
    shapes: tuple = ()  # (field, value) pairs of OverlapConfig, common to the grid

    def config(self, **kw: Any) -> OverlapConfig:
        extra = dict(self.shapes)
        if self.mode == "graph":
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


@dataclass
class Row:
    point: Point
    measured: Figures
    predicted: Figures

    @property
    def err_no_dbo(self) -> float:
        return self.predicted.no_dbo_s / self.measured.no_dbo_s - 1

    @property
    def err_dbo(self) -> float:
        return self.predicted.dbo_s / self.measured.dbo_s - 1

    @property
    def err_speedup(self) -> float:
        return self.predicted.speedup - self.measured.speedup


@dataclass
class Validation:
    backend: str
    profile: str
    rows: list[Row]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


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
        modes = ("eager", "graph") if graph_supported() else ("eager",)
    base = dict(layers=2 if quick else 4, hidden=2048 if gpu else 256)
    if gpu:
        base["dtype"] = "bfloat16"
    base.update(shapes)
    sh = tuple(sorted(base.items()))
    # a graph cannot hold ht's host sync (the demo refuses --graph with ht): graph rows are ll only
    return [
        Point(s, t, r, m, sh)
        for s in schedules
        for t in sizes
        for r in ratios
        for m in modes
        if not (m == "graph" and s == "ht")
    ]


def _figures(cfg: OverlapConfig) -> tuple[Figures, LinkProfile]:
    """The run's figures and the link it calibrated (latency, bandwidth)."""
    res = run(cfg)
    link = LinkProfile("measured", res.link["latency_s"], res.link["bandwidth_Bps"])
    return Figures(res.time_no_dbo_s, res.time_dbo_s, res.hidden_fraction), link


def _median_figures(figs: Sequence[Figures]) -> Figures:
    hid = [f.hidden for f in figs if f.hidden is not None]
    return Figures(
        statistics.median(f.no_dbo_s for f in figs),
        statistics.median(f.dbo_s for f in figs),
        statistics.median(hid) if hid else None,
    )


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
) -> Validation:
    """Measure every point on ``backend`` and predict it on virtual with ``profile`` over the link
    the real run calibrated; ``repeats`` runs of each, medians of their figures. The grid runs in
    ``repeats`` passes (every point once per pass), so that a slowdown of the machine that lasts
    a few points spoils one run of each of them, which the median drops, and not all of one
    point's runs. Each run times ``steps`` steps per DBO mode, more where the profile predicts a
    step shorter than ``min_time / steps`` (``steps_for``). ``truth``: the profile of the measured
    runs when ``backend`` is "virtual" (a machine with known figures, tests)."""
    t0 = time.perf_counter()
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
            dtype = dict(pt.shapes).get("dtype", "float32")
            try:
                if i not in sizes:
                    n = steps
                    if min_time > 0:  # a first guess of the step time, over the profile's own link
                        guess, _ = _figures(
                            pt.config(backend="virtual", profile=profile, steps=1, warmup=1, meta=True, dtype=dtype)
                        )
                        n = steps_for(guess.no_dbo_s, steps, min_time)
                    sizes[i] = n
                m, link = _figures(pt.config(backend=backend, steps=sizes[i], warmup=1, profile=truth))
                # the prediction runs over the link the real run calibrated (not a virtual
                # recalibration), so both see the same transfers
                q, _ = _figures(
                    replace(
                        pt.config(backend="virtual", profile=profile, steps=1, warmup=1, meta=True, dtype=dtype),
                        comm_ratio=None,
                        link=link,
                    )
                )
            except ConfigError as e:  # e.g. a comm ratio too small for the link's fixed costs at this size
                skipped[i] = f"{pt.schedule} {pt.tokens} tokens comm {pt.comm_ratio:g}x {pt.mode}: skipped ({e})"
                runs.pop(i, None)
                continue
            meas, pred = runs.setdefault(i, ([], []))
            meas.append(m)
            pred.append(q)
    rows = [
        Row(pt, _median_figures(runs[i][0]), _median_figures(runs[i][1])) for i, pt in enumerate(points) if i in runs
    ]
    name = profile if isinstance(profile, str) else getattr(profile, "name", str(profile))
    return Validation(backend, name, rows, time.perf_counter() - t0, [skipped[i] for i in sorted(skipped)])


def crossover(
    rows: Sequence[Row], schedule: str, which: str, comm_ratio: float = 1.0, mode: str = "eager"
) -> int | None:
    """The smallest token count of the grid from which DBO pays (speedup > 1 there and at every
    larger size) for ``schedule`` at ``comm_ratio``, ``which`` = "measured" or "predicted"; None
    when DBO does not pay at the largest size."""
    pts = sorted(
        (r.point.tokens, getattr(r, which).speedup)
        for r in rows
        if r.point.schedule == schedule and r.point.comm_ratio == comm_ratio and r.point.mode == mode
    )
    best = None
    for tokens, sp in reversed(pts):
        if sp <= 1:
            break
        best = tokens
    return best


def summarize(v: Validation) -> dict[str, Any]:
    """Median and max |step-time error| (no-DBO and DBO together), max |speedup error|, crossovers."""
    errs = [abs(e) for r in v.rows for e in (r.err_no_dbo, r.err_dbo)]
    sizes = sorted({r.point.tokens for r in v.rows})
    cross = {}
    for s in sorted({r.point.schedule for r in v.rows}):
        for m in sorted({r.point.mode for r in v.rows}):
            for ratio in sorted({r.point.comm_ratio for r in v.rows}):
                if not any(r.point.schedule == s and r.point.mode == m and r.point.comm_ratio == ratio for r in v.rows):
                    continue  # e.g. graph rows of ht: the demo cannot capture ht
                meas, pred = crossover(v.rows, s, "measured", ratio, m), crossover(v.rows, s, "predicted", ratio, m)
                ok = None
                if meas is not None or pred is not None:
                    steps = [sizes.index(x) if x is not None else len(sizes) for x in (meas, pred)]
                    ok = abs(steps[0] - steps[1]) <= 1
                cross[f"{s} {m} comm {ratio:g}x"] = {"measured": meas, "predicted": pred, "within_one_step": ok}
    sp_ok = sum(abs(r.err_speedup) <= TARGETS["speedup"] for r in v.rows)
    cr = [c["within_one_step"] for c in cross.values() if c["within_one_step"] is not None]
    return {
        "targets": {
            "median_abs_step_error <= 10%": bool(errs) and statistics.median(errs) <= TARGETS["median"],
            "max_abs_step_error <= 25%": bool(errs) and max(errs) <= TARGETS["max"],
            "speedups within 0.1": f"{sp_ok}/{len(v.rows)}",
            "crossover within one grid step": f"{sum(cr)}/{len(cr)}",
        },
        "median_abs_step_error": statistics.median(errs) if errs else None,
        "max_abs_step_error": max(errs) if errs else None,
        "max_abs_speedup_error": max((abs(r.err_speedup) for r in v.rows), default=None),
        "speedups_off": [
            f"{r.point.schedule} {r.point.mode} {r.point.tokens} tokens comm {r.point.comm_ratio:g}x: "
            f"{r.err_speedup:+.2f}"
            for r in v.rows
            if abs(r.err_speedup) > TARGETS["speedup"]
        ],
        "crossover": cross,
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
    for r in v.rows:
        p, m, q = r.point, r.measured, r.predicted
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
    if s["speedups_off"]:
        lines.append("speedups off by more than 0.1: " + "; ".join(s["speedups_off"]))
    for k, c in s["crossover"].items():
        fmt = lambda x: "never" if x is None else f"{x} tokens"  # noqa: E731
        lines.append(f"crossover {k}: DBO pays from {fmt(c['measured'])} measured, {fmt(c['predicted'])} predicted")
    for n in v.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)


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
                "measured": dataclasses.asdict(r.measured) | {"speedup": r.measured.speedup},
                "predicted": dataclasses.asdict(r.predicted) | {"speedup": r.predicted.speedup},
                "err_no_dbo": r.err_no_dbo,
                "err_dbo": r.err_dbo,
                "err_speedup": r.err_speedup,
            }
            for r in v.rows
        ],
        "summary": summarize(v),
        "notes": list(v.notes),
    }


# --- the H200 measurements ---------------------------------------------------------------------------
# One H200 SXM, eager, link calibrated so that comm = 1 x compute, two measurement runs per small
# config (median wall step times of 7 steps each); the low and high run are kept.
H200_MEASURED = (
    ("default ht", dict(schedule="ht"), (22.5e-3, 24.7e-3), (0.43, 0.50)),
    ("default ll", dict(schedule="ll"), (20.3e-3, 32.6e-3), (0.42, 0.66)),
    (
        "ll, 4 layers, 8192 tokens, hidden 4096, 16 experts, bf16",
        dict(schedule="ll", layers=4, tokens=8192, hidden=4096, experts=16, dtype="bfloat16"),
        (117.5e-3, 117.5e-3),
        (1.31, 1.31),
    ),
)


@contextlib.contextmanager
def _ll_experts_synced() -> Iterator[None]:
    """The ll experts kernel as the measured code ran it: reading the expert offsets on the host
    (one sync per layer). The current ll kernel is sync-free; marking it for the comparison only."""
    from demos.moe.kernels import experts_ll_kernel as fn

    if getattr(fn, "dbo_syncs_host", False):
        yield
        return
    fn.dbo_syncs_host = True
    try:
        yield
    finally:
        del fn.dbo_syncs_host


def compare_h200(profile: Any = "h200") -> list[dict[str, Any]]:
    """Predict the H200-measured configs with ``profile``; errors against the nearest measured run
    (and against both runs: ``*_range``). The ll configs are predicted as the measured code ran
    (its experts kernel synced the host once per layer); ``now_*``: the current, sync-free ll."""
    out = []
    for label, kw, t_no, sp in H200_MEASURED:
        cfg = OverlapConfig(
            backend="virtual",
            profile=profile,
            comm_ratio=1.0,
            steps=1,
            warmup=1,
            meta=True,
            **{"dtype": "float32", **kw},
        )
        now = run(cfg)
        if kw.get("schedule") == "ll":
            with _ll_experts_synced():
                res = run(cfg)
        else:
            res = now
        errs = [res.time_no_dbo_s / t - 1 for t in t_no]
        serrs = [res.speedup - x for x in sp]
        out.append(
            dict(
                config=label,
                predicted_no_dbo_s=res.time_no_dbo_s,
                measured_no_dbo_s=list(t_no),
                err_no_dbo=min(errs, key=abs),
                err_no_dbo_range=[min(errs), max(errs)],
                predicted_speedup=res.speedup,
                measured_speedup=list(sp),
                err_speedup=min(serrs, key=abs),
                err_speedup_range=[min(serrs), max(serrs)],
                right_side_of_1=all((res.speedup > 1) == (x > 1) for x in sp),
                now_no_dbo_s=now.time_no_dbo_s,
                now_speedup=now.speedup,
            )
        )
    return out


def _span(best: float, rng: list[float], pct: bool) -> str:
    f = (lambda x: f"{x * 100:+.0f}%") if pct else (lambda x: f"{x:+.2f}")
    return f(best) if rng[0] == rng[1] else f"{f(best)}; {f(rng[0])} to {f(rng[1])}"


def format_h200(rows: list[dict[str, Any]]) -> str:
    lines = [
        "h200 profile vs the H200 measurements (virtual, comm ratio 1; error against the nearest of the two runs, "
        "and against both; ll as measured: its experts kernel then synced the host once per layer)"
    ]
    for r in rows:
        lo, hi = r["measured_no_dbo_s"]
        slo, shi = r["measured_speedup"]
        rng = fmt_seconds(lo) if lo == hi else f"{fmt_seconds(lo)}-{fmt_seconds(hi)}"
        srng = f"{slo:.2f}x" if slo == shi else f"{slo:.2f}-{shi:.2f}x"
        lines.append(
            f"{r['config']}: no DBO {fmt_seconds(r['predicted_no_dbo_s'])} predicted, {rng} measured "
            f"({_span(r['err_no_dbo'], r['err_no_dbo_range'], True)}); "
            f"speedup {r['predicted_speedup']:.2f}x predicted, "
            f"{srng} measured ({_span(r['err_speedup'], r['err_speedup_range'], False)}"
            f"{'' if r['right_side_of_1'] else ', WRONG side of 1'})"
            + (
                ""
                if r["now_no_dbo_s"] == r["predicted_no_dbo_s"]
                else f"; the current sync-free ll: {fmt_seconds(r['now_no_dbo_s'])}, {r['now_speedup']:.2f}x"
            )
        )
    return "\n".join(lines)
