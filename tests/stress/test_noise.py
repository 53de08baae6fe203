"""Noise: many handoffs with a tiny switch interval and random zero sleeps, zero violations.

``sys.setswitchinterval`` only changes how often the interpreter switches threads, not where (a
thread switch lands only at bytecode boundaries the interpreter picks), so the plan also puts
``time.sleep(0)`` at random points: in the model code before and after yields and inside the
registry-adjacent fault-hook points (right after a ubatch registers, right after it first gets the
turn, right before it exits and unregisters). Every segment checks strict alternation (nobody else
is inside a segment; the global order of segments is the round robin the plan implies, uneven
yield counts included) and the workspace canaries. The loop runs at least 10,000 handoffs, times
``--stress-count``.
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from dataclasses import dataclass

import pytest
import torch

import dbo
from dbo import registry
from dbo.api import dbo_yield
from dbo.testing import with_seams
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.timing import slack
from tests.support.views import DTYPES, as_bytes, pattern
from workspace import WorkspaceManager

HANDOFFS = 10_000
SWITCH_INTERVAL = 1e-6


@contextlib.contextmanager
def switch_interval(seconds: float):
    """Switch threads as often as asked for the block, and always restore the interval."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(seconds)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


@pytest.fixture
def tiny_switch_interval():
    before = sys.getswitchinterval()
    with switch_interval(SWITCH_INTERVAL):
        yield
    assert sys.getswitchinterval() == before


@dataclass(frozen=True)
class NoisyStep:
    n: int
    backend: str
    layout: str
    yields: tuple[int, ...]  # per ubatch (uneven)
    shapes: tuple[tuple[tuple[tuple[int, ...], torch.dtype], ...], ...]  # per ubatch: one request per segment
    sleeps: frozenset  # (uid, segment, where) with where in "before", "after", "enter", "start", "exit"

    def expected_order(self) -> list[tuple[int, int]]:
        out = []
        for k in range(max(self.yields) + 1):
            out += [(u, k) for u in range(self.n) if k <= self.yields[u]]
        return out

    @property
    def handoffs(self) -> int:
        """Handoffs the step performs: every yield that has a live successor, plus every exit but the last."""
        count = 0
        for k in range(max(self.yields) + 1):
            for u in range(self.n):
                if k > self.yields[u]:
                    continue
                # u's segment k ends in a yield or its exit; either hands off iff another ubatch is
                # still live: one with more segments, or one with its last segment later in this round
                live = [v for v in range(self.n) if v != u and (self.yields[v] > k or (self.yields[v] == k and v > u))]
                count += 1 if live else 0
        return count


def draw_steps(seed: int, handoffs: int) -> list[NoisyStep]:
    rng = random.Random(seed)
    steps, total = [], 0
    while total < handoffs:
        n = rng.randint(2, 4)
        yields = tuple(rng.randint(3, 20) for _ in range(n))
        shapes = tuple(
            tuple(
                (tuple(rng.randint(1, 12) for _ in range(rng.randint(1, 2))), rng.choice(DTYPES))
                for _ in range(yields[u] + 1)
            )
            for u in range(n)
        )
        sleeps = frozenset(
            (u, k, where)
            for u in range(n)
            for k in range(yields[u] + 1)
            for where in ("before", "after", "enter", "start", "exit")
            if rng.random() < 0.3
        )
        step = NoisyStep(
            n, rng.choice(("virtual", "threads")), rng.choice(("per-ubatch", "shared")), yields, shapes, sleeps
        )
        steps.append(step)
        total += step.handoffs
    return steps


class Alternation:
    def __init__(self):
        self.lock = threading.Lock()
        self.inside: int | None = None
        self.log: list[tuple[int, int]] = []
        self.violations: list[str] = []

    def begin(self, uid: int, k: int) -> None:
        with self.lock:
            if self.inside is not None:
                self.violations.append(f"ubatch {uid} began segment {k} while ubatch {self.inside} was inside one")
            self.inside = uid
            self.log.append((uid, k))

    def end(self, uid: int) -> None:
        with self.lock:
            if self.inside != uid:
                self.violations.append(f"ubatch {uid} ended a segment it was not in (inside: {self.inside})")
            self.inside = None


def run_noisy(steps: list[NoisyStep]) -> tuple[int, int]:
    """Run the steps; return (handoffs, canary checks). Asserts zero violations."""
    orchs: dict[tuple, dbo.UBatchOrchestrator] = {}
    managers: dict[int, WorkspaceManager] = {}
    handoffs = checks = 0
    try:
        for s, step in enumerate(steps):
            key = (step.n, step.backend, step.layout)
            if key not in orchs:
                orchs[key] = dbo.UBatchOrchestrator(
                    step.n,
                    backend=step.backend,
                    stream_layout=step.layout,
                    handoff_timeout=HANDOFF_TIMEOUT,
                    step_timeout=slack(60.0),
                )
            orch = orchs[key]
            ws = managers.setdefault(step.n, WorkspaceManager("cpu", step.n))
            alt = Alternation()
            canary: list[str] = []
            counted = [0]

            def hook(point, uid, step=step):
                if uid is not None and (uid, 0 if point != "exit" else step.yields[uid], point) in step.sleeps:
                    time.sleep(0)

            def fn(uid, step=step, alt=alt, canary=canary, ws=ws, counted=counted):
                views = pat = None
                for k in range(step.yields[uid] + 1):
                    if (uid, k, "after") in step.sleeps:
                        time.sleep(0)
                    alt.begin(uid, k)
                    if views is not None and not torch.equal(as_bytes(views[0]), pat):
                        canary.append(f"ubatch {uid}: canary of segment {k - 1} overwritten")
                    views = None
                    views = ws.get_simultaneous(step.shapes[uid][k])
                    pat = pattern(hash((s, uid, k)) & 0x7FFFFFFF, views[0].numel() * views[0].element_size())
                    as_bytes(views[0]).copy_(pat)
                    counted[0] += 1
                    if registry.registered_ubatch_id() != uid:
                        canary.append(f"ubatch {uid}: the registry says {registry.registered_ubatch_id()}")
                    alt.end(uid)
                    if (uid, k, "before") in step.sleeps:
                        time.sleep(0)
                    if k < step.yields[uid]:
                        dbo_yield()
                return uid

            with_seams(orch, fault_hook=hook)
            assert orch.run(fn, list(range(step.n))) == list(range(step.n)), f"step {s}"
            assert not alt.violations, f"step {s}: {alt.violations[:3]}"
            assert not canary, f"step {s}: {canary[:3]}"
            assert alt.log == step.expected_order(), f"step {s}: segments out of order"
            assert orch.last_step_handoffs == step.handoffs, (orch.last_step_handoffs, step.handoffs)
            handoffs += orch.last_step_handoffs
            checks += counted[0]
            assert registry.snapshot() == []
    finally:
        for orch in orchs.values():
            orch.close()
    return handoffs, checks


@pytest.mark.stress
def test_ten_thousand_noisy_handoffs(tiny_switch_interval, stress_count):
    target = HANDOFFS * stress_count
    steps = draw_steps(seed=20260 + stress_count, handoffs=target)
    started = time.monotonic()
    handoffs, checks = run_noisy(steps)
    elapsed = time.monotonic() - started
    print(
        f"\n{handoffs} handoffs in {len(steps)} steps, {checks} canary checks, {elapsed:.1f} s, "
        f"switch interval {SWITCH_INTERVAL:g} s"
    )
    assert handoffs >= target


def test_switch_interval_is_restored_after_a_failure():
    """The fixture's contract, checked directly: even a failing body restores the interval."""
    before = sys.getswitchinterval()
    with pytest.raises(RuntimeError):
        with switch_interval(SWITCH_INTERVAL):
            assert sys.getswitchinterval() == SWITCH_INTERVAL
            raise RuntimeError("the test body failed")
    assert sys.getswitchinterval() == before


def test_noise_harness_catches_a_double_turn(monkeypatch):
    """Positive control: a runtime that wakes two ubatches at once, with its own holder check
    disabled, is caught by this file's alternation checks (not by the runtime)."""
    from dbo.testing import StepState

    orig_yield, orig_bad_wake = StepState.yield_turn, StepState._bad_wake

    def yield_waking_two(self, ubatch_id):
        other = self._next[self._next[ubatch_id]]
        if other != ubatch_id:
            try:
                self._turn[other].release()  # a second ubatch may run now
            except RuntimeError:
                pass
        orig_yield(self, ubatch_id)

    def lenient_bad_wake(self, ubatch_id, acquired):
        if acquired and not self.aborted:
            return  # ignore "woke but the turn is with someone else"
        orig_bad_wake(self, ubatch_id, acquired)

    monkeypatch.setattr(StepState, "yield_turn", yield_waking_two)
    monkeypatch.setattr(StepState, "_bad_wake", lenient_bad_wake)
    steps = [s for s in draw_steps(seed=3, handoffs=2000) if s.n >= 3][:6]
    with pytest.raises(AssertionError, match="segment|order|handoff"):
        run_noisy(steps)
