"""``python -m demos.validate``'s flags: one subcommand per check (``CHECKS``), each with only its own flags
(``build_parser``), and the refusals of a check's parser in the command's one line (in the old spelling's
words when the command line used it). The old spellings themselves are the command's (``demos.validate``,
``new_spelling``).
"""

from __future__ import annotations

import argparse
import math
import sys
from types import MappingProxyType
from typing import Any, Callable, Mapping, NoReturn

import demos._cli as cli_common
from demos._cli.values import EmptyItemError, float_list, name_list, token_list
from demos.fidelity.calibration import BACKENDS
from demos.fidelity.machine import limits_text
from demos.fidelity.validation import MAX_STEPS, RATIOS, SCHEDULES
from demos.zoo.workload import IMBALANCE_MODELS

PROG = "python -m demos.validate"
CHECKS = ("grid", "h200", "deepep", "kernels", "silicon", "serving", "published")
"""The checks, each a subcommand; ``grid`` is the default (a command line that names none runs it)."""


def _list(kind: Callable[[str], tuple]):
    """A list flag of positive values, the list parsed by ``kind`` (a list parser of ``demos._cli.values``,
    which refuses an empty item in its own words)."""

    def parse(text: str) -> list:
        try:
            out = list(kind(text))
        except EmptyItemError:
            raise
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of numbers, got {text!r}") from None
        if any(x <= 0 for x in out):
            raise argparse.ArgumentTypeError(f"expected positive values, got {text!r}")
        return out

    return parse


def _schedules(text: str) -> list[str]:
    out = list(name_list(text))
    bad = [x for x in out if x not in SCHEDULES]
    if bad:
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


class _CheckParser(cli_common.OneLineParser):
    """A check's parser: its refusals are the command's one line (``python -m demos.validate: error: ...``),
    in the old spelling's words when the command line used it (``renamed``: new flag -> old flag)."""

    def __init__(self, *args: Any, renamed: Mapping[str, str] = MappingProxyType({}), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.renamed = renamed

    def error(self, message: str) -> NoReturn:
        for new, old in self.renamed.items():
            message = message.replace(f"argument {new}:", f"argument {old}:")
        sys.stderr.write(f"{PROG}: error: {message}\n")
        raise SystemExit(2)


def _imbalance_flag(p: argparse.ArgumentParser) -> None:
    """``--imbalance``: the routing model the predicted steps take (silicon and serving)."""
    p.add_argument(
        "--imbalance",
        choices=IMBALANCE_MODELS,
        default="auto",
        help="the busiest EP rank's expert load: auto (uniform routing) or power-law (aiconfigurator's skewed "
        "routing), as demos.predict --imbalance (default auto)",
    )


def _json_flag(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--json", default=None, metavar="PATH", help=f"also write {what} as JSON")


def _progress_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="no progress line (shown only on a terminal)")


def _grid_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=BACKENDS, default="threads", help="what to measure (default threads)")
    p.add_argument(
        "--profile",
        default=None,
        metavar="NAME|PATH.json",
        help="the profile to predict with: a built-in name (cpu, h200) or a JSON file from python -m demos.calibrate; "
        "default: calibrate this machine first (--quick sweep)",
    )
    p.add_argument("--quick", action="store_true", help="a smaller grid (under 5 minutes on a 2-core machine)")
    _json_flag(p, "the table")
    p.add_argument(
        "--sizes",
        type=_list(token_list),
        default=None,
        metavar="T1,T2,...",
        help="token counts of the grid (k = 1024: 1k,2k)",
    )
    p.add_argument(
        "--ratios",
        type=_list(float_list),
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
    _progress_flag(p)


def build_parser(renamed: Mapping[str, str] = MappingProxyType({})) -> argparse.ArgumentParser:
    """The command's parser: one subcommand per check (``CHECKS``), each with only its own flags. ``main``
    names the grid when a command line names no check (``new_spelling``); ``renamed``: the flags the old
    spelling named otherwise (new -> old), for the refusals' words."""
    p = cli_common.OneLineParser(
        prog=PROG,
        usage=f"{PROG} [CHECK] [its flags]",
        description="How far the simulator's predictions can be trusted, one check per run. grid is the default "
        f"check: {PROG} [grid flags] runs it, as {PROG} grid [grid flags] does. {PROG} CHECK --help lists "
        "a check's flags.",
        epilog="The old spellings still work and print the new one on stderr: --h200, --deepep, --kernels, "
        "--silicon [--silicon-kernels K], --published [--ablation].",
    )
    sub = p.add_subparsers(dest="check", metavar="CHECK", title="checks", required=True, parser_class=_CheckParser)
    grid = sub.add_parser(
        "grid",
        prog=f"{PROG} grid",
        renamed=renamed,
        help="(the default) run a grid of the toy MoE for real, predict it with the virtual backend and a profile, "
        "print the errors and the crossovers",
        description="Run a grid of the toy MoE (schedules x sizes x comm ratios, without and with DBO) for real, "
        "predict each point with the virtual backend and a profile, and print predicted vs measured step times, "
        "speedups, hidden fractions, their errors and the crossover (where DBO starts to pay). The default "
        f"check: {PROG} [these flags] runs it too.",
    )
    _grid_flags(grid)
    h200 = sub.add_parser(
        "h200",
        prog=f"{PROG} h200",
        renamed=renamed,
        help="a profile (default: the toy's h200) against the H200 measurements (no runs here)",
        description="Predict the configs measured on one H200 with a profile and print the errors (no runs here).",
    )
    h200.add_argument(
        "--profile",
        default=None,
        metavar="NAME|PATH.json",
        help="the profile to compare: a built-in name (cpu, h200) or a JSON file from python -m demos.calibrate "
        "(default: the toy's h200)",
    )
    _json_flag(h200, "the rows")
    deepep = sub.add_parser(
        "deepep",
        prog=f"{PROG} deepep",
        renamed=renamed,
        help="the EP all-to-all model against DeepEP's published H800 tables (no runs here)",
        description="Compare the EP all-to-all model with DeepEP's published H800 tables (no runs here).",
    )
    _json_flag(deepep, "the records")
    kernels = sub.add_parser(
        "kernels",
        prog=f"{PROG} kernels",
        renamed=renamed,
        help="the fitted roofline against the measured kernel tables of H100 to GB300 (needs the measured extra)",
        description="Compare the fitted roofline with the measured kernel tables of H100, H200, B200, GB200, B300 "
        "and GB300 (each on the curves fitted to its own tables, which the predictor takes for it), H800's "
        "published figures and AMD's tables (needs the measured extra; no runs here).",
    )
    kernels.add_argument(
        "--family",
        action="store_true",
        help="check every GPU on its family's curves, pooled over H100 and H200 or B200 and GB200 (what a GPU "
        "without tables of its own takes; B300 and GB300 held out)",
    )
    kernels.add_argument(
        "--cross-validation",
        action="store_true",
        help="also predict every GPU with tables with each such GPU's own curves (fitted on its tables alone; "
        "about a minute)",
    )
    _json_flag(kernels, "the rows and their summaries")
    _progress_flag(kernels)
    silicon = sub.add_parser(
        "silicon",
        prog=f"{PROG} silicon",
        renamed=renamed,
        help="predicted no-DBO steps against measured end-to-end deployments (needs the measured extra)",
        description="Compare predicted no-DBO steps with measured end-to-end deployments (needs the measured "
        "extra; no runs here).",
    )
    silicon.add_argument(
        "--kernels",
        choices=("roofline", "measured"),
        default="roofline",
        help="where the predicted steps' kernel times come from, as demos.predict --kernels (default roofline)",
    )
    _imbalance_flag(silicon)
    _json_flag(silicon, "the rows, their summaries and the gap's fits")
    _progress_flag(silicon)
    serving = sub.add_parser(
        "serving",
        prog=f"{PROG} serving",
        renamed=renamed,
        help="simulated serving runs against measured ones: TTFT and TPOT (needs the measured extra)",
        description="Simulate every measured serving run the predictor can express, as its benchmark ran, and "
        "compare TTFT and TPOT (needs the measured extra; docs/serving.md).",
    )
    serving.add_argument("--quick", action="store_true", help="one row per deployment and lengths (a sample)")
    serving.add_argument("--full", action="store_true", help="aiperf's request counts (20 x concurrency; slow)")
    serving.add_argument(
        "--peer", action="store_true", help="aiconfigurator's own estimate of the same rows beside ours (extra: peer)"
    )
    _imbalance_flag(serving)
    _json_flag(serving, "the rows, their summaries and the side-by-side figures")
    _progress_flag(serving)
    pub = sub.add_parser(
        "published",
        prog=f"{PROG} published",
        renamed=renamed,
        help="the predictor against published whole-deployment overlap results (no runs here)",
        description="Compare the predictor with published whole-deployment overlap results (no runs here).",
    )
    pub.add_argument(
        "--ablation",
        action="store_true",
        help="also predict each case with each overlap mechanism turned off in turn",
    )
    _json_flag(pub, "the records")
    _progress_flag(pub)
    return p
