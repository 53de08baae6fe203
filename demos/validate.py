"""``python -m demos.validate``: run a grid for real, predict it with the virtual backend and a
profile, and print the errors (docs/fidelity.md, "Validating").

    python -m demos.calibrate --quick -o my.json
    python -m demos.validate --profile my.json --quick
    python -m demos.validate --h200        # the toy's h200 profile against the H200 measurements
    python -m demos.validate --deepep      # DeepEP's published H800 all-to-all tables against the model
    python -m demos.validate --kernels     # the fitted roofline against measured kernel tables (extra: measured)
    python -m demos.validate --silicon     # predicted no-DBO steps against measured deployments (extra: measured)
    python -m demos.validate --silicon --silicon-kernels measured   # the same, kernel times from the tables
    python -m demos.validate --published   # published overlap results (LMSYS's 96-H100 decode) against the predictor
    python -m demos.validate --published --ablation   # ... and what each overlap mechanism moves
    python -m demos.validate --profile my.json --quick --schedules ht --sizes 128 --ratios 0.5 --breakdown

The work lives in ``demos.fidelity.validation`` (``--breakdown``: ``demos.fidelity.breakdown``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import Any, Callable, Sequence

import torch

import demos._cli as cli_common
from dbo.costs import get_profile
from demos._cli import ProgressLine
from demos.fidelity import deepep, published
from demos.fidelity.breakdown import breakdown, format_breakdown
from demos.fidelity.calibration import BACKENDS, CalibrationError, calibrate
from demos.fidelity.machine import LoadMeter, limits_text, read_cpu_times
from demos.fidelity.validation import (
    MAX_STEPS,
    RATIOS,
    SCHEDULES,
    compare_h200,
    format_h200,
    format_table,
    graph_supported,
    grid,
    held_out_points,
    to_dict,
    validate,
)
from demos.toy.config import ConfigError

__all__ = ["main", "build_parser"]


def _list(kind: type):
    def parse(text: str) -> list:
        try:
            out = [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of numbers, got {text!r}") from None
        if not out or any(x <= 0 for x in out):
            raise argparse.ArgumentTypeError(f"expected positive values, got {text!r}")
        return out

    return parse


def _schedules(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in out if x not in SCHEDULES]
    if not out or bad:
        raise argparse.ArgumentTypeError(
            f"unknown schedule(s) {', '.join(bad) or text!r}; choose from {', '.join(SCHEDULES)}"
        )
    return out


def _number(kind: type, ok: Callable[[Any], bool], expected: str) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)`` if ``ok`` of it, else the one-line ``expected ...`` error."""

    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return v

    return parse


_steps = _number(int, lambda v: v >= 1, "a positive integer")
_seconds = _number(float, lambda v: v >= 0 and math.isfinite(v), "a number of seconds >= 0")


def build_parser() -> argparse.ArgumentParser:
    p = cli_common.OneLineParser(
        prog="python -m demos.validate",
        description="Run a grid of the toy MoE (schedules x sizes x comm ratios, without and with DBO) for real, "
        "predict each point with the virtual backend and a profile, and print predicted vs measured step times, "
        "speedups, hidden fractions, their errors and the crossover (where DBO starts to pay).",
    )
    p.add_argument("--backend", choices=BACKENDS, default="threads", help="what to measure (default threads)")
    p.add_argument(
        "--profile",
        default=None,
        metavar="NAME|PATH.json",
        help="the profile to predict with: a built-in name (cpu, h200) or a JSON file from python -m demos.calibrate; "
        "default: calibrate this machine first (--quick sweep)",
    )
    p.add_argument("--quick", action="store_true", help="a smaller grid (under 5 minutes on a 2-core machine)")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the table as JSON")
    p.add_argument("--sizes", type=_list(int), default=None, metavar="T1,T2,...", help="token counts of the grid")
    p.add_argument(
        "--ratios",
        type=_list(float),
        default=list(RATIOS),
        metavar="R1,R2,...",
        help="comm ratios of the grid (default 0.5,1,2)",
    )
    p.add_argument(
        "--schedules", type=_schedules, default=list(SCHEDULES), metavar="ht,ll", help="schedules (default both)"
    )
    p.add_argument("--steps", type=_steps, default=5, help="timed steps per run and DBO mode (default 5)")
    p.add_argument(
        "--min-time",
        type=_seconds,
        default=0.1,
        metavar="SECONDS",
        help="time each run's steps for at least this long per DBO mode: more steps where a step is "
        f"short, at most {MAX_STEPS} (default 0.1; 0: exactly --steps)",
    )
    p.add_argument(
        "--repeats",
        type=_steps,
        default=None,
        help="run each grid point this many times and report the median of each figure; the whole grid is run "
        "once per repeat, point after point (default: 3 with --quick, 1 without)",
    )
    p.add_argument(
        "--h200",
        action="store_true",
        help="only compare a profile with the H200 measurements: the toy's h200, or --profile (no runs here)",
    )
    p.add_argument(
        "--deepep",
        action="store_true",
        help="only compare the EP all-to-all model with DeepEP's published H800 tables (no runs here)",
    )
    p.add_argument(
        "--kernels",
        action="store_true",
        help="only compare the fitted roofline with the measured kernel tables of H100, H200, B200 and GB200 "
        "(needs the measured extra; no runs here)",
    )
    p.add_argument(
        "--silicon",
        action="store_true",
        help="only compare predicted no-DBO steps with measured end-to-end deployments (needs the measured extra)",
    )
    p.add_argument(
        "--silicon-kernels",
        choices=("roofline", "measured"),
        default="roofline",
        help="with --silicon: where the predicted steps' kernel times come from, as demos.predict --kernels "
        "(default roofline)",
    )
    p.add_argument(
        "--published",
        action="store_true",
        help="only compare the predictor with published whole-deployment overlap results (no runs here)",
    )
    p.add_argument(
        "--ablation",
        action="store_true",
        help="with --published: also predict each case with each overlap mechanism turned off in turn",
    )
    p.add_argument(
        "--no-held-out",
        action="store_true",
        help="leave out the held-out points (shapes off the grid: other top-k, expert counts and hidden sizes)",
    )
    p.add_argument(
        "--no-rerun",
        action="store_true",
        help="keep every run as measured: by default a run during which the machine was disturbed "
        f"({limits_text()}) is run once more".replace("%", "%%"),
    )
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="instead of the table: for each point selected (--sizes, --ratios, --schedules, the held-out points), "
        "one run, and each op's kernel time in the no-DBO and the DBO step, measured against predicted "
        "(graph points as their eager steps)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress line (shown only on a terminal)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad arguments, 1 failure)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)

    def fail(msg: str, code: int = 2) -> int:
        sys.stderr.write(f"{parser.prog}: error: {msg}\n")
        return code

    if ns.backend == "cuda" and not ns.h200 and not ns.deepep and not torch.cuda.is_available():
        return fail("--backend cuda needs a CUDA GPU, and torch.cuda.is_available() is False here")
    if ns.json is not None:
        try:
            cli_common.check_output_path(ns.json, "--json")
        except cli_common.OutputPathError as e:
            return fail(str(e))
    checks = [f for f in ("deepep", "h200", "kernels", "silicon", "published") if getattr(ns, f)]
    if ns.ablation and not ns.published:
        return fail("--ablation goes with --published (it ablates the published cases)")
    if ns.silicon_kernels != "roofline" and not ns.silicon:
        return fail("--silicon-kernels goes with --silicon (it sets the kernel source of its predicted steps)")
    if len(checks) > 1:
        return fail(f"{' and '.join('--' + c for c in checks)} are separate checks: pass one of them")
    if ns.kernels or ns.silicon:
        if ns.profile is not None:
            return fail(f"--{checks[0]} uses the zoo's GPU profiles, not a device profile (--profile)")
        return _measured_check(ns, parser.prog, fail)
    if ns.deepep and ns.profile is not None:
        return fail(
            "--deepep checks the all-to-all model against DeepEP's tables; it uses no device profile (--profile)"
        )
    if ns.published:
        if ns.profile is not None:
            return fail("--published uses the zoo's GPU profiles, not a device profile (--profile)")
        progress = ProgressLine(enabled=not ns.no_progress)
        rows = published.compare(progress=progress)
        cli_common.say(published.format_table(rows))
        out: dict[str, Any] = {"rows": rows}
        if ns.ablation:
            out["ablation"] = published.ablation(progress=progress)
            cli_common.say("\n" + published.format_ablation(out["ablation"]))
        return _write(ns.json, out, parser.prog)
    if ns.deepep:
        records = deepep.compare()
        cli_common.say(deepep.format_table(records))
        return _write(ns.json, {"deepep": records}, parser.prog)
    if ns.h200:
        try:
            h200_profile = "h200" if ns.profile is None else get_profile(ns.profile)
        except (ValueError, TypeError) as e:
            return fail(f"--profile: {e}")
        rows = compare_h200(h200_profile)
        cli_common.say(format_h200(rows, "h200" if ns.profile is None else f"--profile {ns.profile}"))
        return _write(ns.json, {"h200": rows}, parser.prog)
    profile: Any = ns.profile
    if profile is not None:
        try:
            profile = get_profile(profile)
        except (ValueError, TypeError) as e:
            return fail(f"--profile: {e}")
    progress = ProgressLine(enabled=not ns.no_progress)
    notes = []
    meter = LoadMeter().start()
    try:
        if profile is None:
            progress("no --profile: calibrating this machine first (quick sweep)")
            profile, _ = calibrate(ns.backend, quick=True, progress=progress)
            notes.append(f"profile calibrated just now on {ns.backend} (quick sweep)")
        points = grid(ns.quick, sizes=ns.sizes, ratios=ns.ratios, schedules=ns.schedules, backend=ns.backend)
        if not ns.no_held_out:
            points += held_out_points(ns.quick, backend=ns.backend)
        if ns.breakdown:
            return _breakdowns(ns, profile, points, progress, parser.prog)
        repeats = ns.repeats if ns.repeats is not None else (3 if ns.quick else 1)
        v = validate(
            ns.backend,
            profile,
            points,
            steps=ns.steps,
            repeats=repeats,
            min_time=ns.min_time,
            progress=progress,
            machine=None if ns.no_rerun else read_cpu_times,
        )
    except (CalibrationError, ConfigError) as e:
        progress.done()
        return fail(str(e))
    progress.done()
    v.machine = meter.stop()
    if v.machine is None:
        notes.append(f"the machine's load was not measured: {meter.missing}")
    v.notes.extend(notes)
    if not graph_supported():
        v.notes.append("eager only: this demo has no CUDA-graph mode to validate")
    cli_common.say(format_table(v))
    return _write(ns.json, to_dict(v), parser.prog)


def _breakdowns(ns: argparse.Namespace, profile: Any, points: list, progress: ProgressLine, prog: str) -> int:
    """``--breakdown``: one run of each selected point (graph points as their eager steps, once)."""
    eager = list(dict.fromkeys(dataclasses.replace(pt, mode="eager") for pt in points))
    out = []
    for i, pt in enumerate(eager):
        progress(f"point {i + 1}/{len(eager)}: {pt.label()}")
        b = breakdown(ns.backend, profile, pt, steps=ns.steps, min_time=ns.min_time)
        progress.done()
        cli_common.say(format_breakdown(b))
        out.append(dataclasses.asdict(b))
    return _write(ns.json, {"breakdowns": out}, prog)


def _measured_check(ns: argparse.Namespace, prog: str, fail: Callable[[str], int]) -> int:
    """``--kernels`` / ``--silicon``: against the measured tables (``demos.zoo.measured``)."""
    from demos.fidelity.kernels import kernel_rows, summaries
    from demos.fidelity.silicon import format_kernels, format_silicon, gap_fits, silicon_rows, silicon_summaries
    from demos.zoo.measured import SYSTEMS, MeasuredTablesError

    progress = ProgressLine(enabled=not ns.no_progress)
    try:
        if ns.kernels:
            rows = []
            for gpu in (*SYSTEMS, "h800"):
                progress(f"kernels: {gpu}")
                rows += kernel_rows(gpu)
            progress.done()
            summary = summaries(rows)
            cli_common.say(format_kernels(summary))
            return _write(ns.json, {"rows": [r._asdict() for r in rows], "summary": summary}, prog)
        checks, skipped = silicon_rows(
            lambda d, n, what: progress(f"silicon: {d}/{n} {what}"), kernels=ns.silicon_kernels
        )
    except MeasuredTablesError as e:
        progress.done()
        return fail(str(e))
    progress.done()
    summary, gaps = silicon_summaries(checks), gap_fits(checks)
    cli_common.say(format_silicon(summary, skipped, gaps))
    data = {"rows": [c.to_dict() for c in checks], "summary": summary, "gaps": gaps, "skipped": skipped}
    return _write(ns.json, data, prog)


def _write(path: str | None, obj: Any, prog: str) -> int:
    """Write ``obj`` as JSON to ``path`` (if any); the exit status."""
    if not path:
        return 0

    def write(p: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)

    if not cli_common.write_output(path, "--json", write, prog):
        return cli_common.EXIT_FAILED
    cli_common.say(f"json: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, "python -m demos.validate"))
