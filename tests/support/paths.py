"""Where the repository is, and the environment a test's Python subprocess needs to import it."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOT = str(REPO)


def python_env(drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """This process's environment without ``drop``, with the repository first on PYTHONPATH, plus ``extra``."""
    gone = set(drop)
    env = {k: v for k, v in os.environ.items() if k not in gone}
    env["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    env.update(extra)
    return env
