"""The commands, listed once: every ``python -m demos.<name>`` entry point, what it answers and the page
that explains it.

The Ctrl-C import guard (``demos._cli._early``) takes its list of entry points from here, and the
tests check the guard on each of them and that README.md's command table and docs/design.md name
exactly these (tests/commands/test_commands.py). Only the standard library is imported here: the guard
reads this before torch.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """One entry point: ``module`` (run as ``python -m module``), ``answers`` (one line), ``doc``."""

    module: str
    answers: str
    doc: str


COMMANDS: tuple[Command, ...] = (
    Command(
        "demos.overlap", "the toy MoE (or a real model) with and without DBO: speedup, hidden comm", "docs/overlap.md"
    ),
    Command(
        "demos.predict", "does DBO pay for a model on a cluster, from which tokens/GPU, what to pass", "docs/predict.md"
    ),
    Command("demos.calibrate", "measure this machine and write a device profile", "docs/fidelity.md"),
    Command("demos.validate", "the virtual backend's predictions against measured steps", "docs/fidelity.md"),
    Command("demos.scenarios", "the known DBO failure modes, reproduced", "docs/scenarios.md"),
    Command("demos.bench", "the performance suite", "docs/performance.md"),
)
"""Every command, in the order the docs list them."""

MODULES: tuple[str, ...] = tuple(c.module for c in COMMANDS)
"""The modules run with ``python -m``."""
