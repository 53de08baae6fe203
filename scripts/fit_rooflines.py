"""Refit the per-family kernel-time curves to the measured tables and write demos/zoo/rooflines.json.

    python -m pip install -e '.[measured]'
    python scripts/fit_rooflines.py            # fit, print the cross-validation, write the file
    python scripts/fit_rooflines.py --check    # fit and compare with the file; exit 1 if it differs

The fitting code is demos.zoo.rooflines_fit; what the file holds is described in docs/kernels.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor

from demos.zoo.attention_module import fitted_family
from demos.zoo.kernel_check import cross_validation
from demos.zoo.measured import MeasuredTablesError, package_version
from demos.zoo.rooflines import FITS_PATH, load_fits
from demos.zoo.rooflines_fit import FIT_GPUS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare the fit with the file instead of writing it")
    args = ap.parse_args(argv)
    try:
        for family in FIT_GPUS:
            print(f"fitting {family} on {', '.join(FIT_GPUS[family])} ...", file=sys.stderr, flush=True)
        with ProcessPoolExecutor(max_workers=len(FIT_GPUS)) as pool:  # one process per family: deterministic
            fits = dict(zip(FIT_GPUS, pool.map(fitted_family, FIT_GPUS)))
    except MeasuredTablesError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    data = {
        "about": "Kernel-time curves fitted per GPU family by scripts/fit_rooflines.py (docs/kernels.md)",
        "aiconfigurator_core": package_version(),
        "families": {name: f.to_dict() for name, f in fits.items()},
    }
    if args.check:
        same = {n: f.to_dict() for n, f in load_fits().items()} == data["families"]
        print("rooflines.json matches the fit" if same else "rooflines.json differs from the fit")
        return 0 if same else 1
    print("cross-validation (fit on one GPU, predict the others; median |error|, signed median, max):")
    for line in cross_validation():
        print("  " + line)
    FITS_PATH.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {FITS_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
