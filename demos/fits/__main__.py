"""``python -m demos.fits``: fit the kernel-time curves and write or check ``rooflines.json`` (docs/kernels.md)."""

import sys

from demos._cli import run_main
from demos.fits._command import main

if __name__ == "__main__":
    sys.exit(run_main(main, "python -m demos.fits"))
