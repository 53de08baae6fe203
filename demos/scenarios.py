"""``python -m demos.scenarios [NAME ...] [--list]``: the known failure modes, reproduced and explained.

Each scenario runs a small program on the DBO runtime (``dbo``) and the workspace (``workspace``),
prints what happens, what the sanitizer (``workspace.sanitizer``) and the growth policies show, and
a paragraph on why. ``run_scenario(name)`` returns the figures as a dict (the tests use it).
docs/scenarios.md walks through the output.

Every scenario is bounded: the whole set runs in a few seconds, and nothing can hang (the one that
models the reference's hang stops its model after a short patience).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Callable, Sequence

from demos._cli import OneLineParser
from demos.failures.race_cases import scenario_compute_streams, scenario_event_after_yield, scenario_recv_hook
from demos.failures.stream_cases import scenario_late_event, scenario_missing_wait, scenario_parked_failure
from demos.failures.text import WIDTH, say
from demos.failures.workspace_cases import (
    measure_policy,
    policy_table,
    scenario_foreign_thread,
    scenario_orphaned_views,
    scenario_policies,
    scenario_stale_view,
    scenario_undersized_at_lock,
)
from workspace.policy import DEFAULT_GROWTH

__all__ = ["SCENARIOS", "Scenario", "run_scenario", "measure_policy", "policy_table", "main", "DEFAULT_GROWTH"]


# ---------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    run: Callable[[], dict]


_ALL = (
    ("orphaned-views", "eager lockstep growth orphans a parked sibling's views", scenario_orphaned_views),
    ("undersized-at-lock", "requester-only growth locks a sibling slot at 0 bytes", scenario_undersized_at_lock),
    ("stale-view", "a view held across a yield, overwritten by the same ubatch's next call", scenario_stale_view),
    ("foreign-thread", "a thread that is not a ubatch thread asks for a slot during a step", scenario_foreign_thread),
    ("missing-wait", "no wait_event between the comm and compute streams: a real race", scenario_missing_wait),
    ("late-event", "the done-event captured after the yield destroys the overlap", scenario_late_event),
    (
        "parked-failure",
        "a ubatch fails while its sibling is parked: the reference hangs, ours aborts",
        scenario_parked_failure,
    ),
    ("policies", "the growth policies side by side: peak, orphaned bytes, sizes at lock", scenario_policies),
    (
        "race-compute-streams",
        "no wait_event between two compute streams: dbo.races finds it on every backend",
        scenario_compute_streams,
    ),
    ("race-recv-hook", "a recv hook launches the receive without waiting for the transfer", scenario_recv_hook),
    (
        "race-event-after-yield",
        "the event is recorded after the yield: the sibling's wait orders nothing",
        scenario_event_after_yield,
    ),
)
SCENARIOS: dict[str, Scenario] = {name: Scenario(name, summary, fn) for name, summary, fn in _ALL}


def run_scenario(name: str) -> dict:
    """Run one scenario (printing its report); return its figures. KeyError for an unknown name."""
    scenario = SCENARIOS[name]
    say("=" * WIDTH)
    say(f"{scenario.name}: {scenario.summary}")
    say("=" * WIDTH)
    t0 = time.perf_counter()
    result = scenario.run()
    say(f"({time.perf_counter() - t0:.2f} s)")
    say()
    return result


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m demos.scenarios",
        description="Reproduce and explain the known DBO failure modes (docs/scenarios.md).",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="scenarios to run (default: all); see --list")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the named scenarios (all without names) or list them; 2 (and one line on stderr) for an unknown name."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        if args.names:
            print(f"{parser.prog}: error: --list takes no scenario names (got {args.names[0]!r})", file=sys.stderr)
            return 2
        width = max(len(name) for name in SCENARIOS)
        for s in SCENARIOS.values():
            print(f"{s.name:<{width}}  {s.summary}")
        return 0
    unknown = [n for n in args.names if n not in SCENARIOS]
    if unknown:
        print(
            f"{parser.prog}: unknown scenario {unknown[0]!r}; valid: {', '.join(SCENARIOS)}",
            file=sys.stderr,
        )
        return 2
    for name in args.names or list(SCENARIOS):
        run_scenario(name)
    return 0


if __name__ == "__main__":
    from demos._cli import run_main

    sys.exit(run_main(main, "python -m demos.scenarios"))
