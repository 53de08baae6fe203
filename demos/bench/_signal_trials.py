"""A trial of the signals section (``demos.bench._signals``): the command lines it covers (``COMMANDS``) and
what one run records (``Trial``): its signal and moment, its exit status, its stderr, the seconds from the
signal to its exit, and what became of its ``--json`` file. The caller (``run_storm``) and the runner
(``demos.bench._signal_runner``) both read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

JSON = "{json}"
"""In a command line, the place of its ``--json`` file (one per trial, in the runner's folder)."""


@dataclass(frozen=True)
class Command:
    """A command line of a trial: ``module`` run with ``args`` (``JSON`` where its --json file goes)."""

    name: str
    module: str
    args: tuple[str, ...]


COMMANDS: tuple[Command, ...] = (
    Command(
        "predict",
        "demos.predict",
        ("--model", "deepseek-v3", "--gpu", "h100", "--nodes", "9", "--ep", "72", "--tokens", "64", "--json", JSON),
    ),
    Command(
        "overlap",
        "demos.overlap",
        ("--backend", "virtual", "--layers", "1", "--steps", "1", "--tokens", "256", "--hidden", "256", "--json", JSON),
    ),
    Command("validate", "demos.validate", ("deepep", "--json", JSON)),
    Command("bench", "demos.bench", ("--quick", "--section", "workspace", "--json", JSON)),
    Command(
        "serving",
        "demos.serving",
        tuple("--model deepseek-v2-lite --gpu h100 --nodes 1 --ep 8 --concurrency 8 --isl 128 --osl 16".split())
        + ("--requests", "20", "--no-search", "--json", JSON),
    ),
)
"""Short runs of the commands the storm covers (each about a second of CPU once imported, validate's a few
milliseconds: its argument checks and its file)."""


@dataclass
class Trial:
    """One run and, unless ``sig`` is 0 (a clean run), one signal ``at`` seconds after its start."""

    id: int
    kind: str  # "exec" or "fork"
    command: str
    sig: int
    frac: float = 0.0  # the moment, as a fraction of the command's clean run (from its guard to its exit)
    at: float = 0.0  # seconds from the guard in place to the signal
    sent: bool = False  # False: the run ended before its moment (not a trial)
    status: int | None = None
    seconds: float = 0.0  # the whole run
    latency: float | None = None  # from the signal to the exit
    stderr: str = ""
    json: str = "absent"  # "absent", "whole" or "broken"
    partials: list[str] = field(default_factory=list)  # temporary files left beside it
    hung: bool = False  # killed past the runner's limit
    ready: float | None = None  # seconds from the start until the guard was in place (None: never)
