"""``python -m demos.validate CHECK``: how far the simulator's predictions can be trusted, one check per run
(docs/fidelity.md, "Validating").

    python -m demos.calibrate --quick -o my.json
    python -m demos.validate --profile my.json --quick     # the grid (the default check: grid may be left out)
    python -m demos.validate grid --profile my.json --quick --schedules ht --sizes 128 --ratios 0.5 --breakdown
    python -m demos.validate h200          # the toy's h200 profile against the H200 measurements
    python -m demos.validate deepep        # DeepEP's published H800 all-to-all tables against the model
    python -m demos.validate kernels       # the fitted roofline against measured kernel tables (extra: measured)
    python -m demos.validate silicon       # predicted no-DBO steps against measured deployments (extra: measured)
    python -m demos.validate silicon --kernels measured   # the same, kernel times from the tables
    python -m demos.validate serving [--quick] [--peer]   # simulated serving runs against measured ones
    python -m demos.validate published     # published overlap results (LMSYS's 96-H100 decode) against the predictor
    python -m demos.validate published --ablation   # ... and what each overlap mechanism moves

Each check takes only its own flags (``python -m demos.validate CHECK --help``) and is one library call
(``demos.fidelity.checks``) whose result the command prints (``text()``) and writes (``--json``:
``to_dict()``). The old spellings, ``--h200``, ``--deepep``, ``--kernels``, ``--silicon [--silicon-kernels
K]`` and ``--published [--ablation]``, still run the same check and say the new one on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, NoReturn, Sequence

import torch

import demos._cli as cli_common
from dbo.costs import get_profile
from demos._cli import ProgressLine
from demos._cli.values import EmptyItemError, float_list, name_list, token_list
from demos.fidelity import checks
from demos.fidelity.breakdown import format_breakdown
from demos.fidelity.calibration import BACKENDS, CalibrationError
from demos.fidelity.machine import limits_text
from demos.fidelity.validation import MAX_STEPS, RATIOS, SCHEDULES
from demos.toy.config import ConfigError

__all__ = ["CHECKS", "PROG", "build_parser", "main", "new_spelling"]

PROG = "python -m demos.validate"
CHECKS = ("grid", "h200", "deepep", "kernels", "silicon", "serving", "published")
"""The checks, each a subcommand; ``grid`` is the default (a command line that names none runs it)."""
OLD_FLAGS = {f"--{c}": c for c in CHECKS if c != "grid"}
"""The old spelling of each check but the grid: a flag (``--kernels`` is now ``kernels``)."""


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
        help="the fitted roofline against the measured kernel tables of H100, H200, B200 and GB200 "
        "(needs the measured extra)",
        description="Compare the fitted roofline with the measured kernel tables of H100, H200, B200 and GB200, "
        "and H800's published figures (needs the measured extra; no runs here).",
    )
    kernels.add_argument(
        "--cross-validation",
        action="store_true",
        help="also refit the curves on each GPU's tables alone and predict every GPU with them (python -m "
        "demos.fits; several minutes)",
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


class _Refused(Exception):
    """A command line refused: one line, exit status 2."""


class Spelling(NamedTuple):
    """A command line in the new spelling (``new_spelling``)."""

    args: list[str]
    """The arguments: a check first."""
    note: str | None = None
    """The line to print when the old spelling was used (None: it was not)."""
    renamed: Mapping[str, str] = MappingProxyType({})
    """The flags renamed on the way (new -> old), so that a refusal names the flag as it was given."""


def new_spelling(argv: Sequence[str]) -> Spelling:
    """``argv`` in the new spelling. A command line that starts with a check or a word is the new spelling
    already (argparse judges the word); one that starts with a flag (or is empty) names the grid, unless it
    holds an old check flag (``OLD_FLAGS``): then that check, with ``--silicon-kernels`` as silicon's
    ``--kernels``, and a note. Two old check flags are refused (``_Refused``)."""
    args = list(argv)
    if args and (not args[0].startswith("-") or args[0] in ("-h", "--help")):
        return Spelling(args)
    found = list(dict.fromkeys(a for a in args if a in OLD_FLAGS))
    if not found:
        return Spelling(["grid", *args])
    if len(found) > 1:
        raise _Refused(f"{' and '.join(found)} are separate checks: pass one of them")
    (flag,) = found
    check = OLD_FLAGS[flag]
    rest = [a for a in args if a != flag]
    old, new, renamed = [flag], [check], {}
    if check == "silicon":
        for i, a in enumerate(rest):
            name, eq, value = a.partition("=")
            if name != "--silicon-kernels":
                continue
            rest[i] = "--kernels" + eq + value
            renamed["--kernels"] = "--silicon-kernels"
            given = [a] if eq or i + 1 >= len(rest) else [a, rest[i + 1]]
            old += given
            new += [rest[i], *given[1:]]
    if check == "published" and "--ablation" in rest:
        old.append("--ablation")
        new.append("--ablation")
    note = f"{PROG}: note: {' '.join(old)} is now '{PROG} {' '.join(new)}'"
    return Spelling([check, *rest], note, renamed)


_NO_PROFILE = {
    "deepep": "deepep checks the all-to-all model against DeepEP's tables; it uses no device profile",
    "kernels": "kernels uses the zoo's GPU profiles, not a device profile",
    "silicon": "silicon uses the zoo's GPU profiles, not a device profile",
    "published": "published uses the zoo's GPU profiles, not a device profile",
}


def _unrecognized(check: str, extras: list[str]) -> str:
    """The refusal of the arguments ``check`` does not take, with what to do instead where we know it."""
    names = [a.partition("=")[0] for a in extras]
    why = f"{PROG} {check} --help lists its flags"
    if "--silicon-kernels" in names:
        why = f"--silicon-kernels is silicon's --kernels now: {PROG} silicon --kernels K"
    elif "--kernels" in names:
        why = f"--kernels roofline|measured goes with silicon; the kernel tables' check is {PROG} kernels"
    elif "--ablation" in names:
        why = f"--ablation goes with the published check: {PROG} published --ablation"
    elif "--profile" in names and check in _NO_PROFILE:
        why = _NO_PROFILE[check]
    elif any(a in CHECKS or a in OLD_FLAGS for a in extras):
        why = f"one check per run, named first: {PROG} CHECK [its flags]"
    elif "--no-progress" in names:
        why = f"{check} shows no progress line"
    return f"{check} takes no {' '.join(extras)} ({why})"


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 2 bad arguments, 1 failure)."""
    try:
        spelling = new_spelling(sys.argv[1:] if argv is None else argv)
        try:
            ns, extras = build_parser(spelling.renamed).parse_known_args(spelling.args)
        except SystemExit as e:
            return int(e.code or 0)
        if extras:
            raise _Refused(_unrecognized(ns.check, extras))
        if ns.json is not None:
            try:
                cli_common.check_output_path(ns.json, "--json")
            except cli_common.OutputPathError as e:
                raise _Refused(str(e)) from None
        result = _RUN[ns.check](ns)
    except _Refused as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return cli_common.EXIT_USAGE
    code = _write(ns.json, result.to_dict())
    if code == 0 and spelling.note is not None:
        sys.stderr.write(spelling.note + "\n")
    return code


def _profile(name: str) -> Any:
    """``--profile NAME|PATH.json`` read (``_Refused``: one line naming the flag)."""
    try:
        return get_profile(name)
    except (ValueError, TypeError) as e:
        raise _Refused(f"--profile: {e}") from None


def _grid(ns: argparse.Namespace) -> Any:
    """The grid, or with ``--breakdown`` each selected point's ops (printed as each is done)."""
    if ns.backend == "cuda" and not torch.cuda.is_available():
        raise _Refused("--backend cuda needs a CUDA GPU, and torch.cuda.is_available() is False here")
    profile = None if ns.profile is None else _profile(ns.profile)
    progress = ProgressLine(enabled=not ns.no_progress)
    kw: dict[str, Any] = dict(
        quick=ns.quick,
        sizes=ns.sizes,
        ratios=ns.ratios,
        schedules=ns.schedules,
        steps=ns.steps,
        min_time=ns.min_time,
        held_out=not ns.no_held_out,
        progress=progress,
    )

    def each(b: Any) -> None:
        progress.done()
        cli_common.say(format_breakdown(b))

    try:
        if ns.breakdown:
            return checks.breakdown_check(ns.backend, profile, each=each, **kw)
        result = checks.grid_check(ns.backend, profile, repeats=ns.repeats, rerun=not ns.no_rerun, **kw)
    except (CalibrationError, ConfigError) as e:
        raise _Refused(str(e)) from None
    finally:
        progress.done()
    cli_common.say(result.text())
    return result


def _h200(ns: argparse.Namespace) -> Any:
    if ns.profile is None:
        result = checks.h200_check()
    else:
        result = checks.h200_check(_profile(ns.profile), f"--profile {ns.profile}")
    cli_common.say(result.text())
    return result


def _deepep(ns: argparse.Namespace) -> Any:
    result = checks.deepep_check()
    cli_common.say(result.text())
    return result


def _measured(ns: argparse.Namespace) -> Any:
    """``kernels`` and ``silicon``: against the measured tables (``demos.zoo.measured``); without them, one
    line naming the install."""
    from demos.zoo.measured import MeasuredTablesError

    progress = ProgressLine(enabled=not ns.no_progress)
    try:
        if ns.check == "kernels":
            result = checks.kernels_check(progress, cross_validation=ns.cross_validation)
        else:
            result = checks.silicon_check(ns.kernels, progress)
    except MeasuredTablesError as e:
        raise _Refused(str(e)) from None
    finally:
        progress.done()
    cli_common.say(result.text())
    return result


def _published(ns: argparse.Namespace) -> Any:
    progress = ProgressLine(enabled=not ns.no_progress)
    try:
        result = checks.published_check(ablation=ns.ablation, progress=progress)
    finally:
        progress.done()
    cli_common.say(result.text())
    return result


def _serving(ns: argparse.Namespace) -> Any:
    from demos.fidelity.peer import PeerError
    from demos.zoo.measured import MeasuredTablesError

    progress = ProgressLine(enabled=not ns.no_progress)
    try:
        result = checks.serving_check(quick=ns.quick, full=ns.full, peer=ns.peer, progress=progress)
    except (MeasuredTablesError, PeerError) as e:
        raise _Refused(str(e)) from None
    finally:
        progress.done()
    cli_common.say(result.text())
    return result


_RUN: dict[str, Callable[[argparse.Namespace], Any]] = {
    "grid": _grid,
    "h200": _h200,
    "deepep": _deepep,
    "kernels": _measured,
    "silicon": _measured,
    "serving": _serving,
    "published": _published,
}
"""Each check's run: its one library call (``demos.fidelity.checks``), its text printed; the result, whose
``to_dict()`` ``main`` writes (``--json``). A refusal raises ``_Refused``."""


def _write(path: str | None, obj: Any) -> int:
    """Write ``obj`` as JSON to ``path`` (if any); the exit status."""
    if not path:
        return 0

    def write(p: str) -> None:
        with open(p, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2)

    if not cli_common.write_output(path, "--json", write, PROG):
        return cli_common.EXIT_FAILED
    cli_common.say(f"json: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_common.run_main(main, PROG))
