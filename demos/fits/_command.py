"""The ``python -m demos.fits`` command (needs the ``measured`` extra):

    python -m demos.fits write     # fit every family and GPU, print how far each moved from the file, write it
    python -m demos.fits check     # fit them and compare with the file within FIT_TOLERANCE; exit 1 if not
    python -m demos.fits ablate    # what each part of the GEMM curve's form buys (the kept form is unchanged)

Each family (pooled over its GPUs) and each GPU with tables (alone) is fitted in a process of its own, two
side by side (each fit is deterministic on one machine). ``check`` compares by ``demos.fits.compare``: every
curve's times on a fixed grid of shapes within ``FIT_TOLERANCE`` of the file's, and the non-numeric fields
equal.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

from demos._cli import OneLineParser, say, write_whole
from demos.fits.amd import AMD_FIT_GPUS, BORROWED, fit_amd_family
from demos.fits.compare import FIT_TOLERANCE, compare_fits
from demos.fits.module import fitted_family, own_fit
from demos.zoo.hardware import get_gpu
from demos.zoo.measured import SYSTEMS, MeasuredTablesError, package_version
from demos.zoo.rooflines import FIT_GPUS, FITS_PATH, FamilyFit, load_fits

PROG = "python -m demos.fits"


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog=PROG,
        description="Fit the kernel-time curves per GPU family and per GPU to the measured tables (the measured "
        "extra) and write or check demos/zoo/rooflines.json (docs/kernels.md).",
    )
    sub = p.add_subparsers(dest="action", metavar="write|check|ablate", required=True)
    sub.add_parser("write", help="fit, print how far each curve moved from the file, and write the file")
    sub.add_parser(
        "check",
        help=f"fit and compare with the file: every curve's times on a fixed grid within {FIT_TOLERANCE * 100:.1f}%%, "
        "the sources equal (exit 1 if not)",
    )
    sub.add_parser("ablate", help="fit five forms of the FP8 GEMM curve and print what each part buys")
    return p


def _worker_leaves_signals_to_the_command() -> None:
    """A fitting process ignores Ctrl-C (a terminal sends it to the whole group; the command stops
    its workers) and dies of SIGTERM as a plain process does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's processes: the fits run half a minute, which Ctrl-C must not wait for (the pool's
    own shutdown waits for the running fits)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.terminate()
        except (OSError, ValueError, AttributeError):
            pass


def _fitted(job: tuple[str, tuple[str, ...]]) -> FamilyFit:
    family, gpus = job
    return fitted_family(family, gpus)


def fit_all() -> tuple[dict[str, FamilyFit], dict[str, FamilyFit]]:
    """The curves per family (pooled over ``FIT_GPUS``) and per GPU (every GPU with tables, ``SYSTEMS``, each
    on its own tables alone: ``demos.fits.module.own_fit``), one process per fit
    (``demos.fits.module.fitted_family``), then the AMD families (``demos.fits.amd``: AMD's own tables, the
    rest borrowed from the freshly fitted Hopper family)."""
    jobs = [(family, gpus) for family, gpus in FIT_GPUS.items()]
    jobs += [(get_gpu(g).family, (g,)) for g in SYSTEMS]
    for family, gpus in jobs:
        print(f"{PROG}: fitting {family} on {', '.join(gpus)} ...", file=sys.stderr, flush=True)
    pool = ProcessPoolExecutor(max_workers=2, initializer=_worker_leaves_signals_to_the_command)
    try:
        done = list(pool.map(_fitted, jobs))
    except BaseException:
        _stop_workers(pool)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    fits = dict(zip(FIT_GPUS, done))
    own = {g: own_fit(fit, fits[fit.family]) for g, fit in zip(SYSTEMS, done[len(FIT_GPUS) :])}
    for family, gpus in AMD_FIT_GPUS.items():
        print(f"{PROG}: fitting {family} on {', '.join(gpus)} (AMD's tables) ...", file=sys.stderr, flush=True)
        fits[family] = fit_amd_family(family, fits[BORROWED])
    return fits, own


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; the exit status (0 ok, 1 the file differs from the fit, 2 bad input)."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    try:
        package_version()  # the measured extra, or one line saying how to install it
        if ns.action == "ablate":
            from demos.fits.ablation import ablation_lines

            for line in ablation_lines():
                say(line)
            return 0
        fits, own = fit_all()
    except MeasuredTablesError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    stored = load_fits() if FITS_PATH.exists() else ({}, {})
    comparison = compare_fits({**stored[0], **stored[1]}, {**fits, **own})
    say(f"the fit against {FITS_PATH.name} (each curve's largest relative difference on the grid):")
    for line in comparison.lines():
        say("  " + line)
    if ns.action == "check":
        verdict = "matches" if comparison.same else "differs from"
        say(f"{FITS_PATH.name} {verdict} the fit (tolerance {FIT_TOLERANCE:.1%} on every grid time)")
        return 0 if comparison.same else 1
    data = {
        "about": "Kernel-time curves fitted per GPU family by python -m demos.fits (docs/kernels.md)",
        "aiconfigurator_core": package_version(),
        "families": {name: f.to_dict() for name, f in fits.items()},
        "gpus": {name: f.to_dict() for name, f in own.items()},
    }
    text = json.dumps(data, indent=2) + "\n"

    def write(path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    write_whole(str(FITS_PATH), write)  # the old file or the new one, never half of it
    say(f"wrote {FITS_PATH}")
    return 0
