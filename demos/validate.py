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
    python -m demos.validate silicon --imbalance power-law   # the same, under aiconfigurator's skewed routing
    python -m demos.validate serving [--quick] [--peer]   # simulated serving runs against measured ones
    python -m demos.validate serving --imbalance power-law   # the same, under aiconfigurator's skewed routing
    python -m demos.validate published     # published overlap results (LMSYS's 96-H100 decode) against the predictor
    python -m demos.validate published --ablation   # ... and what each overlap mechanism moves

Each check takes only its own flags (``python -m demos.validate CHECK --help``) and is one library call
(``demos.fidelity.checks``) whose result the command prints (``text()``) and writes (``--json``:
``to_dict()``). The old spellings, ``--h200``, ``--deepep``, ``--kernels``, ``--silicon [--silicon-kernels
K]`` and ``--published [--ablation]``, still run the same check and say the new one on stderr. The checks'
flags are ``demos._validate_flags``'s (``build_parser``); the old spellings, the refusals and the runs are here.
"""

from __future__ import annotations

import argparse
import json
import sys
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import torch

import demos._cli as cli_common
from dbo.costs import get_profile
from demos._cli import ProgressLine
from demos._validate_flags import CHECKS, PROG, build_parser
from demos.fidelity import checks
from demos.fidelity.breakdown import format_breakdown
from demos.fidelity.calibration import CalibrationError
from demos.toy.config import ConfigError

__all__ = ["CHECKS", "PROG", "build_parser", "main", "new_spelling"]

OLD_FLAGS = {f"--{c}": c for c in CHECKS if c != "grid"}
"""The old spelling of each check but the grid: a flag (``--kernels`` is now ``kernels``)."""


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
            result = checks.kernels_check(progress, cross_validation=ns.cross_validation, family=ns.family)
        else:
            result = checks.silicon_check(ns.kernels, progress, ns.imbalance)
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
        result = checks.serving_check(
            quick=ns.quick, full=ns.full, peer=ns.peer, progress=progress, imbalance=ns.imbalance
        )
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
