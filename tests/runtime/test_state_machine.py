"""A hypothesis state machine over the workspace manager and the DBO runtime together.

Rules: DBO steps whose ubatches make random requests (shapes, dtypes) between random yields, with
or without a fault injected at a random point; requests from the main thread (growth outside a
step); lock and unlock. A model, run in the main thread, predicts the order of every request and
fault (the turn order is deterministic: round robin by ubatch id), hence each slot's capacity and
whether a step fails, where and why.

Invariants (after every rule): slot capacities equal the model (so in lockstep under lockstep
policies), slot buffers never overlap, the registry is empty, no ubatch thread is alive, nothing is
orphaned, nothing was allocated while locked (``allocations_after_lock`` stays 0 and the
allocation count does not move between ``lock()`` and ``unlock()``). Inside every step: every view
lies in its own slot, the views of a call never overlap, no live view of one ubatch overlaps one
of another, and canaries survive the other ubatches. Locked requests that do not fit raise
``WorkspaceLockedError`` and change nothing. All data is drawn in the main thread.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import dbo
from dbo import registry
from dbo.api import dbo_yield
from dbo.testing import with_seams
from tests.support.faults import Injected
from tests.support.isolation import Isolation
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.timing import slack
from tests.support.views import DTYPES, as_bytes, pattern
from workspace import WorkspaceLockedError, WorkspaceManager
from workspace.layout import canonical_request, plan

specs_strategy = st.lists(
    st.tuples(
        st.lists(st.integers(0, 24), min_size=0, max_size=3).map(tuple),
        st.sampled_from(DTYPES),
    ),
    min_size=1,
    max_size=3,
).map(tuple)


def total_of(specs) -> int:
    return plan(canonical_request(specs)).total


@dataclass(frozen=True)
class StepPlan:
    segments: tuple[tuple[tuple, ...], ...]  # per ubatch: per segment, the requests (specs)
    fault: tuple | None  # ("enter", u) | ("start", u) | ("exit", u) | ("after_barrier",) | ("at", u, seg, pos)


class Model:
    """Capacities per slot, and the expected outcome of a step."""

    def __init__(self, n: int, growth: str):
        self.n = n
        self.growth = growth
        self.capacity = [0] * n
        self.locked = False

    def request(self, slot: int, total: int) -> bool:
        """Apply one request; False if it must raise WorkspaceLockedError."""
        if total <= self.capacity[slot]:
            return True
        if self.locked:
            return False
        if self.growth == "requester":
            self.capacity[slot] = total
        else:
            self.capacity = [total] * self.n
        return True

    def run_step(self, sp: StepPlan) -> tuple[str, int | None] | None:
        """Simulate a step in turn order; return None (success) or (cause, ubatch id)."""
        f = sp.fault
        if f is not None and f[0] == "enter":
            return "injected", f[1]
        if f is not None and f[0] == "after_barrier":
            return "injected", None
        rounds = max(len(s) for s in sp.segments)
        for r in range(rounds):
            for u in range(self.n):
                segs = sp.segments[u]
                if r >= len(segs):
                    continue
                if r == 0 and f == ("start", u):
                    return "injected", u
                for pos, specs in enumerate(segs[r]):
                    if f == ("at", u, r, pos):
                        return "injected", u
                    if not self.request(u, total_of(specs)):
                        return "locked", u
                if f == ("at", u, r, len(segs[r])):
                    return "injected", u
                if r == len(segs) - 1 and f == ("exit", u):
                    return "injected", u
        return None


class DBOWorkspaceMachine(RuleBasedStateMachine):
    @initialize(
        n=st.integers(2, 4),
        growth=st.sampled_from(["lockstep", "deferred-lockstep", "requester"]),
        backend=st.sampled_from(["virtual", "threads"]),
        layout=st.sampled_from(["per-ubatch", "shared"]),
    )
    def setup(self, n, growth, backend, layout):
        self.n = n
        self.ws = WorkspaceManager("cpu", n, growth=growth)
        self.model = Model(n, growth)
        self.orch = dbo.UBatchOrchestrator(
            n, backend=backend, stream_layout=layout, handoff_timeout=HANDOFF_TIMEOUT, step_timeout=slack(60.0)
        )
        self.allocations_at_lock: int | None = None
        self.steps = 0

    def teardown(self):
        orch = getattr(self, "orch", None)
        if orch is not None:
            orch.close()

    # -- rules ----------------------------------------------------------------------------------
    @precondition(lambda self: hasattr(self, "ws"))
    @rule(data=st.data())
    def step(self, data):
        n = self.n
        segments = tuple(
            tuple(
                tuple(data.draw(st.lists(specs_strategy, max_size=2), label=f"u{u} seg{s}"))
                for s in range(data.draw(st.integers(1, 4), label=f"u{u} segments"))
            )
            for u in range(n)
        )
        fault_choices = [None, ("after_barrier",)]
        for u in range(n):
            fault_choices += [("enter", u), ("start", u), ("exit", u)]
            for s, reqs in enumerate(segments[u]):
                fault_choices += [("at", u, s, p) for p in range(len(reqs) + 1)]
        fault = data.draw(st.sampled_from(fault_choices) if data.draw(st.booleans(), label="inject") else st.none())
        sp = StepPlan(segments, fault)
        self._run_step(sp)

    def _run_step(self, sp: StepPlan) -> None:
        ws, n = self.ws, self.n
        iso = Isolation(ws)
        ranges_before = ws.slot_ranges()
        expected = self.model.run_step(sp)  # updates the model's capacities up to the failure
        injected: dict[str, BaseException] = {}

        def maybe_fail(point):
            if point == sp.fault:
                injected["e"] = Injected(str(point))
                raise injected["e"]

        def fault_hook(point, uid):
            maybe_fail((point,) if uid is None else (point, uid))

        def fn(uid):
            views, pats = [], []
            for s, reqs in enumerate(sp.segments[uid]):
                if s > 0:
                    dbo_yield()
                    for i, (v, p) in enumerate(zip(views, pats)):
                        if not torch.equal(as_bytes(v), p):
                            iso.problem(f"ubatch {uid}: canary {i} lost across yield {s - 1}")
                for pos, specs in enumerate(reqs):
                    maybe_fail(("at", uid, s, pos))
                    iso.drop(uid)
                    views = pats = None
                    views = ws.get_simultaneous(*specs)
                    iso.handed_out(uid, views, specs)
                    pats = [
                        pattern(hash((self.steps, uid, s, pos, i)) & 0x7FFFFFFF, v.numel() * v.element_size())
                        for i, v in enumerate(views)
                    ]
                    for v, p in zip(views, pats):
                        as_bytes(v).copy_(p)
                maybe_fail(("at", uid, s, len(reqs)))
                if views is None:
                    views, pats = [], []
            iso.drop(uid)
            return uid

        with_seams(self.orch, fault_hook=fault_hook)
        self.steps += 1
        try:
            if expected is None:
                assert self.orch.run(fn, list(range(n))) == list(range(n))
            else:
                cause, owner = expected
                with pytest.raises(dbo.UBatchFailed) as info:
                    self.orch.run(fn, list(range(n)))
                assert info.value.ubatch_id == owner, (str(info.value), sp)
                if cause == "injected":
                    assert info.value.__cause__ is injected["e"]
                else:
                    assert isinstance(info.value.__cause__, WorkspaceLockedError), repr(info.value.__cause__)
                del info
        finally:
            # Our references to the failure (its traceback holds the failed ubatch's frame and views).
            with_seams(self.orch, fault_hook=None)
            injected.clear()
        assert not iso.problems, iso.problems
        if self.model.locked:
            assert ws.slot_ranges() == ranges_before, "a locked step reallocated a slot"

    @precondition(lambda self: hasattr(self, "ws"))
    @rule(specs=specs_strategy)
    def request_outside_a_step(self, specs):
        """The main thread (no step active: slot 0) asks for views, as warmup code does."""
        ws = self.ws
        before = (ws.slot_sizes(), ws.slot_ranges(), ws.stats()["allocations"])
        if self.model.request(0, total_of(specs)):
            iso = Isolation(ws)
            views = ws.get_simultaneous(*specs)
            iso.handed_out(0, views, specs)
            assert not iso.problems, iso.problems
        else:
            with pytest.raises(WorkspaceLockedError) as info:
                ws.get_simultaneous(*specs)
            assert info.value.required_bytes == total_of(specs)
            assert "test_state_machine.py" in info.value.caller
            assert (ws.slot_sizes(), ws.slot_ranges(), ws.stats()["allocations"]) == before

    @precondition(lambda self: hasattr(self, "ws") and not self.model.locked)
    @rule()
    def lock(self):
        self.ws.lock()
        self.model.locked = True
        self.allocations_at_lock = self.ws.stats()["allocations"]
        assert self.ws.pending_slots() == []

    @precondition(lambda self: hasattr(self, "ws") and self.model.locked)
    @rule()
    def unlock(self):
        self.ws.unlock()
        self.model.locked = False
        self.allocations_at_lock = None

    # -- invariants -----------------------------------------------------------------------------
    @invariant()
    def capacities_follow_the_model(self):
        if hasattr(self, "ws"):
            assert self.ws.slot_sizes() == self.model.capacity
            if self.model.growth != "requester":
                assert len(set(self.ws.slot_sizes())) == 1

    @invariant()
    def slot_buffers_are_disjoint(self):
        if hasattr(self, "ws"):
            held = [(b, s) for b, s in self.ws.slot_ranges() if s > 0]
            for i, (b0, s0) in enumerate(held):
                for b1, s1 in held[i + 1 :]:
                    assert b0 + s0 <= b1 or b1 + s1 <= b0

    @invariant()
    def nothing_left_behind(self):
        assert registry.snapshot() == []
        assert not [t for t in threading.enumerate() if t.name.startswith("dbo-ubatch")]
        if hasattr(self, "ws"):
            assert self.ws.orphaned_bytes() == 0

    @invariant()
    def no_allocation_while_locked(self):
        if hasattr(self, "ws"):
            st_ = self.ws.stats()
            assert st_["allocations_after_lock"] == 0
            if self.allocations_at_lock is not None:
                assert st_["allocations"] == self.allocations_at_lock
            assert st_["locked"] == self.model.locked


@pytest.mark.slow
def test_workspace_and_runtime_state_machine(stress_count):
    """40 example programs of up to 20 rules each (x --stress-count)."""
    run_state_machine_as_test(
        DBOWorkspaceMachine,
        settings=settings(
            max_examples=40 * stress_count,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        ),
    )
