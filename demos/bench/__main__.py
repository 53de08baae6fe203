"""``python -m demos.bench``: the performance suite (docs/performance.md)."""

import sys

from demos._cli import run_main
from demos.bench._command import main

if __name__ == "__main__":
    sys.exit(run_main(main, "python -m demos.bench"))
