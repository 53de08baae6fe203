"""The commands, listed once: every ``python -m demos.<name>`` entry point, what it answers, the page
that explains it and whom it is for.

The Ctrl-C import guard (``demos._cli._early``) takes its list of entry points from here, and the
tests check the guard on each of them and that README.md's command table and docs/design.md name
exactly these (tests/commands/test_commands.py). Only the standard library is imported here: the guard
reads this before torch.
"""

from __future__ import annotations

from typing import NamedTuple

AUDIENCES = ("users", "developers")
"""Who a command is for: ``users`` ask the simulator and the predictor questions; ``developers`` check the
project itself (its speed, its GPU paths)."""


class Command(NamedTuple):
    """One entry point: ``module`` (run as ``python -m module``), ``answers`` (one line), ``doc`` (its page)
    and ``audience`` (one of ``AUDIENCES``)."""

    module: str
    answers: str
    doc: str
    audience: str


COMMANDS: tuple[Command, ...] = (
    Command(
        "demos.overlap",
        "the toy MoE (or a real model) with and without DBO: speedup, hidden comm",
        "docs/overlap.md",
        "users",
    ),
    Command(
        "demos.predict",
        "does DBO pay for a model on a cluster, from which tokens/GPU, what to pass",
        "docs/predict.md",
        "users",
    ),
    Command(
        "demos.serving",
        "a serving run with and without each overlap: throughput, TTFT, TPOT, which steps split and why",
        "docs/serving.md",
        "users",
    ),
    Command("demos.calibrate", "measure this machine and write a device profile", "docs/fidelity.md", "users"),
    Command(
        "demos.validate",
        "the simulator's and the predictor's predictions against measurements, one check per run",
        "docs/fidelity.md",
        "users",
    ),
    Command("demos.scenarios", "the known DBO failure modes, reproduced", "docs/scenarios.md", "users"),
    Command("demos.bench", "the performance suite", "docs/performance.md", "developers"),
    Command(
        "demos.fits",
        "fit the kernel-time curves to measured tables; check the stored ones within a tolerance",
        "docs/kernels.md",
        "developers",
    ),
    Command(
        "demos.gpu_check",
        "everything that needs a GPU in one bounded run, and its targets' PASS/FAIL",
        "docs/gpu.md",
        "developers",
    ),
)
"""Every ``python -m`` entry point of the project, in the order the docs list them (users' first)."""

MODULES: tuple[str, ...] = tuple(c.module for c in COMMANDS)
"""The modules run with ``python -m``."""
