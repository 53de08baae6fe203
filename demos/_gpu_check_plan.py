"""What ``python -m demos.gpu_check`` runs (docs/gpu.md): its options from the environment (``Options``), its
steps in order, each with its command, output file and time limit (``plan``), and what a step's run left
(``StepRun``). Only the standard library is imported here, as in the command.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

QUICK_DEMO = ["--steps", "2", "--layers", "2"]
"""What ``GPU_CHECK_QUICK=1`` adds to every demo run (a dry run's shortening, named in the default
config's title)."""
STEPS = ("cuda-tests", "demo-eager", "demo-graph", "demo-big", "bench-host", "suite")


@dataclass
class StepRun:
    name: str
    rc: int | None = None  # None: not run
    seconds: float = 0.0
    timed_out: bool = False
    why_not: str = ""
    tail: str = ""  # the last lines of its output

    @property
    def ran(self) -> bool:
        return self.rc is not None


@dataclass
class Options:
    out: str
    backend: str = "cuda"
    big: list[str] = field(default_factory=lambda: ["--tokens", "4096", "--hidden", "2048"])
    quick: bool = False
    skip: set[str] = field(default_factory=set)
    budget_s: float = 480.0

    @classmethod
    def from_env(cls, out: str, env: dict[str, str]) -> "Options":
        skip = {s.strip() for s in env.get("GPU_CHECK_SKIP", "").split(",") if s.strip()}
        unknown = skip - set(STEPS)
        if unknown:
            raise ValueError(f"GPU_CHECK_SKIP names unknown steps {sorted(unknown)}; known: {', '.join(STEPS)}")
        opts = cls(
            out=out, backend=env.get("GPU_CHECK_BACKEND", "cuda"), quick=env.get("GPU_CHECK_QUICK") == "1", skip=skip
        )
        if env.get("GPU_CHECK_BIG"):
            opts.big = env["GPU_CHECK_BIG"].split()
        if env.get("GPU_CHECK_BUDGET_S"):
            try:
                opts.budget_s = float(env["GPU_CHECK_BUDGET_S"])
            except ValueError:
                raise ValueError(
                    f"GPU_CHECK_BUDGET_S must be a number of seconds, got {env['GPU_CHECK_BUDGET_S']!r}"
                ) from None
        return opts


def plan(o: Options) -> list[tuple[str, list[str], str, float]]:
    """(name, command, output file, time limit) of every step, in order."""
    py = sys.executable
    demo = [py, "-m", "demos.overlap", "--backend", o.backend, "--schedule", "ll", "--comm-ratio", "1"]
    if o.quick:
        demo += QUICK_DEMO
    log = os.path.join(o.out, "log.txt")
    bench = [
        py,
        "-m",
        "demos.bench",
        "--section",
        "host",
        "--backend",
        o.backend,
        "--json",
        os.path.join(o.out, "bench-host.json"),
    ]
    if o.quick:
        bench.append("--quick")
    return [
        (
            "cuda-tests",
            [py, "-m", "pytest", "-q", "-rA", "-m", "cuda", "-p", "no:cacheprovider"],
            os.path.join(o.out, "cuda-tests.txt"),
            120,
        ),
        ("demo-eager", demo + ["--json", os.path.join(o.out, "demo-eager.json")], log, 90),
        ("demo-graph", demo + ["--graph", "--json", os.path.join(o.out, "demo-graph.json")], log, 90),
        ("demo-big", demo + o.big + ["--graph", "--json", os.path.join(o.out, "demo-big.json")], log, 120),
        ("bench-host", bench, log, 120),
        ("suite", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"], os.path.join(o.out, "suite.txt"), 330),
    ]
