"""Interleaving exploration of the handoff protocol with a controlled scheduler.

``controlled_scheduler`` replaces the step's turn locks and start barrier (the ``SyncPrimitives``
seam) with instrumented ones: every acquire, release, barrier arrival/departure/abort and every
fault-hook call is a scheduling point where the test, not the OS, picks which thread goes on. We
enumerate every schedule with at most 2 preemptions (CHESS / loom style) of small protocol runs
and check, in every schedule: the results, strict alternation, no deadlock, an empty registry.
Then the same with a fault injected at each point. Counts are printed (``-s``) and asserted from
below, so the explorer cannot silently degenerate to one schedule.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest
import torch

import dbo
from dbo import registry
from dbo.api import dbo_current_ubatch_id, dbo_maybe_run_recv_hook, dbo_register_recv_hook, dbo_yield
from dbo.testing import with_seams
from tests.support import controlled_scheduler as cs
from tests.support.faults import Injected
from tests.support.orchestrators import (
    HANDOFF_TIMEOUT,  # never reached: the scheduler models waits as untimed
)
from tests.support.timing import slack
from workspace import WorkspaceManager

# ---------------------------------------------------------------------------------------------
# the scheduler itself, on toy programs


def _toy_run(prims: cs.ControlledPrimitives, bodies, *, prefix, replay, watchdog_s=slack(5.0)):
    """Run each body in its own thread under the scheduler (M only starts and joins them)."""
    out: dict[str, object] = {}

    def target():
        threads = [
            threading.Thread(target=lambda b=b, i=i: out.__setitem__(f"t{i}", b()), name=f"toy-{i}", daemon=True)
            for i, b in enumerate(bodies)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(watchdog_s + slack(5))
        return out

    return cs.run_controlled(target, prims, expected=len(bodies), prefix=prefix, replay=replay, watchdog_s=watchdog_s)


@pytest.mark.parametrize("bound, expected", [(0, 2), (1, 4), (2, 6), (3, 6)])
def test_explorer_counts_the_interleavings_of_two_threads(bound, expected):
    """Two threads with two steps each: C(4,2) = 6 interleavings; 2, 4, 6 within 0, 1, 2 preemptions."""
    prims = cs.ControlledPrimitives()
    seen = []

    def body(tag):
        def run():
            prims.scheduler.point(f"{tag}1")
            prims.scheduler.point(f"{tag}2")

        return run

    def check(ex):
        assert not ex.deadlocks and not ex.violations
        seen.append(tuple(d.operation for d in ex.trace))

    report = cs.explore(
        lambda prefix, replay: _toy_run(prims, [body("a"), body("b")], prefix=prefix, replay=replay),
        check,
        preemption_bound=bound,
    )
    assert report.schedules == expected == len(set(seen))
    assert all(len(s) == 4 for s in seen)


def test_deadlock_is_reported_at_once_not_after_a_timeout():
    """Lock-order inversion (AB / BA): some schedule deadlocks; it is found without waiting 30 s."""
    prims = cs.ControlledPrimitives()
    state = {}

    def execute(prefix, replay):
        sched_locks = {}

        def lock(name):
            if name not in sched_locks:
                sched_locks[name] = cs.ControlledLock(prims, name)
            return sched_locks[name]

        a, b = lock("A"), lock("B")

        def worker(first, second):
            def run():
                first.acquire()
                prims.scheduler.point("between")
                got = second.acquire(timeout=slack(30.0))  # only a deadlock resolution makes this return False
                if got:
                    second.release()
                first.release()
                return got

            return run

        return _toy_run(prims, [worker(a, b), worker(b, a)], prefix=prefix, replay=replay)

    deadlocks = []

    def check(ex):
        assert ex.elapsed < slack(5.0), f"an execution took {ex.elapsed:.1f} s: waits must not time out for real"
        assert not ex.violations
        deadlocks.extend(ex.deadlocks)
        state.setdefault("results", []).append(ex.result)

    report = cs.explore(execute, check, preemption_bound=2)
    assert deadlocks, "the AB/BA deadlock was not found"
    d = deadlocks[0]
    assert set(d.blocked) == {"toy-0", "toy-1"}
    assert all("acquire" in op and "held by" in op for op in d.blocked.values()), str(d)
    assert "deadlock" in str(d)
    assert report.schedules >= 3


@pytest.mark.slow
def test_watchdog_fails_fast_when_a_thread_blocks_outside_the_scheduler():
    prims = cs.ControlledPrimitives()
    gate = threading.Event()

    def body():
        prims.scheduler.point("p")
        gate.wait(1.0)  # an uncontrolled blocking wait: the scheduler cannot see it
        prims.scheduler.point("q")

    started = time.monotonic()
    with pytest.raises(cs.SchedulerError, match="watchdog"):
        _toy_run(prims, [body], prefix=(), replay=None, watchdog_s=0.3)
    assert time.monotonic() - started < slack(5.0)


# ---------------------------------------------------------------------------------------------
# the handoff protocol


@dataclass
class Protocol:
    """One small protocol run: N ubatches, Y yields each, a recv hook each, a workspace canary.

    Records segments (the code a ubatch runs between handoffs) and checks strict alternation.
    """

    n: int
    yields: int
    prims: cs.ControlledPrimitives
    fault: str | None = None  # a point label ("enter:0", "seg1.2", "yield0.1", "hook:0", ...)
    # Which labels are scheduling points: "all", "hooks" (the orchestrator's fault-hook points:
    # enter, start, exit, after_barrier) or "fault" (only the injected fault's point).
    points: str = "all"
    log: list = field(default_factory=list)
    hooks: list = field(default_factory=list)
    active: set = field(default_factory=set)
    problems: list = field(default_factory=list)
    injected: Injected | None = None
    step: object = None  # the StepState of the current execution (seen from the "enter" hook)
    workspace: WorkspaceManager | None = None  # a fresh one per execution

    def expected_log(self) -> list[tuple[int, int]]:
        return [(u, k) for k in range(self.yields + 1) for u in range(self.n)]

    def point(self, label: str, hook: bool = False) -> None:
        if self.points == "all" or (self.points == "hooks" and hook) or label == self.fault:
            self.prims.scheduler.point(label)
        if label == self.fault:
            self.injected = Injected(label)
            raise self.injected

    def fault_hook(self, point: str, uid: int | None) -> None:
        ctx = registry.current_context()
        if ctx is not None:  # "enter" runs in each ubatch thread before the barrier
            self.step = ctx.step
        self.point(f"{point}:{'M' if uid is None else uid}", hook=True)

    def fn(self, uid: int) -> int:
        ws: WorkspaceManager = self.workspace
        held = None
        for k in range(self.yields + 1):
            ctx = registry.current_context()
            if ctx.step.aborted:
                self.problems.append(f"ubatch {uid} began segment {k} after the step was aborted")
            if self.active:
                self.problems.append(f"ubatch {uid} began segment {k} while {sorted(self.active)} ran")
            self.active.add(uid)
            self.log.append((uid, k))
            try:
                if held is not None and not bool((held == uid * 100 + k - 1).all()):
                    self.problems.append(f"ubatch {uid}: canary of segment {k - 1} overwritten")
                # A different size per ubatch and segment: slots grow while siblings hold views.
                (held,) = ws.get_simultaneous(((8 + 8 * uid + 4 * k,), torch.int32))
                held.fill_(uid * 100 + k)
                self.point(f"seg{uid}.{k}")
                if k == 0:
                    dbo_register_recv_hook(lambda u=uid: self._hook(u))
                elif k == 1:
                    dbo_maybe_run_recv_hook()
            finally:
                self.active.discard(uid)
            if k < self.yields:
                self.point(f"yield{uid}.{k}")
                dbo_yield()
        return uid * 10

    def _hook(self, owner: int) -> None:
        self.hooks.append((owner, dbo_current_ubatch_id()))
        self.point(f"hook:{owner}")

    def check_decision(self, sched: cs.Scheduler) -> None:
        """At every decision: at most one ubatch runs user code or is about to take its turn."""
        if self.step is None or self.step.aborted:  # after an abort every lock is free: nobody runs user code
            return
        about_to_run = {
            name
            for name, op in sched.pending().items()
            if name.startswith("dbo-ubatch-") and op.startswith(f"acquire turn{name.rsplit('-', 1)[1]} (free)")
        }
        busy = {f"dbo-ubatch-{u}" for u in self.active} | about_to_run
        if len(busy) > 1:
            self.problems.append(f"decision {len(sched.trace)}: {sorted(busy)} could all run user code")


def _run_protocol(orch, proto: Protocol, prefix, replay) -> cs.Execution:
    proto.log.clear()
    proto.hooks.clear()
    proto.active.clear()
    proto.injected = None
    proto.step = None
    proto.workspace = WorkspaceManager("cpu", proto.n)
    with_seams(orch, fault_hook=proto.fault_hook)
    return cs.run_controlled(
        lambda: orch.run(proto.fn, list(range(proto.n))),
        proto.prims,
        expected=proto.n + 1,
        prefix=prefix,
        replay=replay,
        on_decision=proto.check_decision,
    )


def _fault_owner(fault: str, n: int) -> int | None:
    """Which ubatch the orchestrator must name for a fault at ``fault`` (None: the orchestrator)."""
    kind, _, where = fault.partition(":")
    if kind in ("enter", "start", "exit"):
        return int(where)
    if kind == "after_barrier":
        return None
    if kind == "hook":  # runs in the next ubatch
        return (int(where) + 1) % n
    return int(kind[len("seg") if kind.startswith("seg") else len("yield") :].split(".")[0])


def _all_fault_points(n: int, yields: int) -> list[str]:
    points = ["after_barrier:M"]
    for u in range(n):
        points += [f"enter:{u}", f"start:{u}", f"exit:{u}", f"hook:{u}"]
        points += [f"seg{u}.{k}" for k in range(yields + 1)]
        points += [f"yield{u}.{k}" for k in range(yields)]
    return points


def _check_common(ex: cs.Execution, proto: Protocol) -> None:
    where = ex.describe(last=12)
    assert not ex.violations, f"{ex.violations}\n{where}"
    assert not ex.deadlocks, f"{ex.deadlocks[0]}\n{where}"
    assert not proto.problems, f"{proto.problems}\n{where}"
    assert registry.snapshot() == [], where
    assert not [t for t in threading.enumerate() if t.name.startswith("dbo-ubatch")], where
    # Strict alternation: whatever the schedule, segments run in ring order (a prefix of it on a fault).
    assert proto.log == proto.expected_log()[: len(proto.log)], f"{proto.log}\n{where}"


def _explore_protocol(n: int, yields: int, bound: int, fault: str | None, points: str = "all") -> cs.ExplorationReport:
    prims = cs.ControlledPrimitives()
    proto = Protocol(n, yields, prims, fault, points)
    with cs.ScheduledOrchestrator(
        n,
        backend="virtual",
        handoff_timeout=HANDOFF_TIMEOUT,
        step_timeout=None,
        join_grace=slack(30.0),
        primitives=prims,
    ) as orch:

        def check(ex: cs.Execution) -> None:
            _check_common(ex, proto)
            if fault is None:
                assert ex.error is None, f"{ex.error!r}\n{ex.describe()}"
                assert ex.result == [u * 10 for u in range(n)]
                assert proto.log == proto.expected_log()
                assert sorted(proto.hooks) == [(u, (u + 1) % n) for u in range(n)]
            else:
                err = ex.error
                assert isinstance(err, dbo.UBatchFailed), f"{err!r}\n{ex.describe()}"
                assert err.__cause__ is proto.injected, f"cause {err.__cause__!r}\n{ex.describe()}"
                assert err.ubatch_id == _fault_owner(fault, n), f"{err}\n{ex.describe()}"

        report = cs.explore(
            lambda prefix, replay: _run_protocol(orch, proto, prefix, replay),
            check,
            preemption_bound=bound,
            time_limit_s=slack(240.0),
        )
    return report


def _bound_for(stress_count: int) -> int:
    """Stress explorations: preemption bound 0 by default, 1 with --stress-count 2, 2 from 3 on."""
    return min(2, stress_count - 1)


# Points: "all" = every primitive operation, every fault-hook point and the points in the model
# code (mid-segment, before each yield, in the recv hook); "hooks" = primitives + fault-hook points;
# "fault" = primitives + the one point where the fault is injected.


@pytest.mark.slow
@pytest.mark.parametrize(
    "n, yields, points, minimum",
    [(2, 2, "all", 200), (3, 1, "fault", 900)],
    ids=["N2-2yields-all-points", "N3-1yield-primitives"],
)
def test_every_schedule_within_two_preemptions_is_correct(n, yields, points, minimum):
    report = _explore_protocol(n, yields, bound=2, fault=None, points=points)
    print(f"\nN={n}, {yields} yield(s), points={points}, bound 2: {report}")
    assert report.complete and report.schedules >= minimum
    assert report.max_preemptions == 2


@pytest.mark.slow
@pytest.mark.parametrize("fault", _all_fault_points(2, 2))
def test_every_schedule_with_a_fault_at_each_point_n2(fault):
    report = _explore_protocol(2, 2, bound=2, fault=fault, points="hooks")
    print(f"\nN=2, 2 yields, points=hooks, bound 2, fault at {fault}: {report}")
    assert report.complete and report.schedules >= 20


@pytest.mark.stress
def test_every_schedule_n3_with_hook_points(stress_count):
    bound = _bound_for(stress_count)
    report = _explore_protocol(3, 1, bound=bound, fault=None, points="hooks")
    print(f"\nN=3, 1 yield, points=hooks, bound {bound}: {report}")
    assert report.complete and report.schedules >= 200


_N3_FAULTS = _all_fault_points(3, 1)
# By default: the faults of M and of the middle ubatch (neither first nor last in the ring).
_N3_DEFAULT = ["after_barrier:M"] + [f for f in _N3_FAULTS if f.endswith(":1") or f.startswith(("seg1.", "yield1."))]
_N3_MORE = [f for f in _N3_FAULTS if f not in _N3_DEFAULT]


@pytest.mark.stress
@pytest.mark.parametrize("fault", _N3_DEFAULT)
def test_every_schedule_with_a_fault_at_each_point_n3(fault, stress_count):
    bound = _bound_for(stress_count)
    report = _explore_protocol(3, 1, bound=bound, fault=fault, points="fault")
    print(f"\nN=3, 1 yield, points=fault, bound {bound}, fault at {fault}: {report}")
    assert report.complete and report.schedules >= 20


@pytest.mark.stress
def test_every_schedule_with_a_fault_at_the_other_points_n3(stress_count):
    """The faults of ubatches 0 and 2 (enter, start, exit, hooks, segments, yields): --stress-count >= 2."""
    if stress_count < 2:
        pytest.skip(f"{len(_N3_MORE)} more fault points for N=3: run with --stress-count 2 (bound 1) or 3 (bound 2)")
    bound = _bound_for(stress_count)
    total = 0
    for fault in _N3_MORE:
        report = _explore_protocol(3, 1, bound=bound, fault=fault, points="fault")
        print(f"\nN=3, 1 yield, points=fault, bound {bound}, fault at {fault}: {report}")
        assert report.complete and report.schedules >= 20
        total += report.schedules
    print(f"\nN=3 other fault points, bound {bound}: {total} schedules")


def test_a_real_deadlock_in_model_code_is_reported_at_once():
    """A ubatch keeps a (scheduler-controlled) user lock across a yield; its sibling wants it.

    With real primitives this would sit until the 10 s handoff timeout; the scheduler sees that
    every participant is blocked, reports the deadlock at once, and lets the step unwind.
    """
    prims = cs.ControlledPrimitives()
    holder = {}

    def fn(uid):
        if uid == 0:
            holder["lock"].acquire()
            dbo_yield()  # ubatch 1 now blocks on the user lock; ubatch 0 waits for the turn
            holder["lock"].release()
        else:
            if not holder["lock"].acquire(timeout=slack(30.0)):
                raise TimeoutError("user lock")
            holder["lock"].release()
        return uid

    with cs.ScheduledOrchestrator(
        2,
        backend="virtual",
        handoff_timeout=HANDOFF_TIMEOUT,
        step_timeout=None,
        join_grace=slack(30.0),
        primitives=prims,
    ) as orch:
        holder["lock"] = cs.ControlledLock(prims, "user")
        started = time.monotonic()
        ex = cs.run_controlled(lambda: orch.run(fn, [0, 1]), prims, expected=3)
        assert time.monotonic() - started < slack(3.0)
    assert len(ex.deadlocks) == 1, ex.describe()
    blocked = ex.deadlocks[0].blocked
    assert "acquire user (held by dbo-ubatch-0)" in blocked["dbo-ubatch-1"]
    assert blocked["dbo-ubatch-0"].startswith("acquire turn0")
    assert isinstance(ex.error, dbo.UBatchFailed)  # the resolution's "timeouts" unwound the step
    assert registry.snapshot() == []


def test_replaying_a_schedule_reproduces_it():
    prims = cs.ControlledPrimitives()
    proto = Protocol(2, 1, prims)
    with cs.ScheduledOrchestrator(
        2,
        backend="virtual",
        handoff_timeout=HANDOFF_TIMEOUT,
        step_timeout=None,
        join_grace=slack(30.0),
        primitives=prims,
    ) as orch:
        # a schedule with one preemption: M arrives first, then ubatch 1 overtakes ubatch 0
        first = _run_protocol(orch, proto, [], None)
        prefix = first.schedule[:1] + ["dbo-ubatch-1"]
        again = _run_protocol(orch, proto, prefix, [d.enabled for d in first.trace[:2]])
        twice = _run_protocol(orch, proto, again.schedule, [d.enabled for d in again.trace])
    assert again.schedule[:2] == prefix
    assert [d.operation for d in twice.trace] == [d.operation for d in again.trace]
    assert twice.result == again.result == [0, 10]


# ---------------------------------------------------------------------------------------------
# positive controls: broken protocols must be caught


def _double_turn(monkeypatch):
    from dbo.testing import StepState

    orig = StepState.pass_turn

    def pass_turn_to_two(self, ubatch_id, reason):
        nxt = orig(self, ubatch_id, reason)
        if nxt >= 0:
            other = self._next[nxt]
            if other not in (ubatch_id, nxt) and not self.exited[other]:
                self.give_turn(other)
        return nxt

    monkeypatch.setattr(StepState, "pass_turn", pass_turn_to_two)


def _exit_without_handoff(monkeypatch):
    from dbo.testing import UBatchContext

    def exit_(self):
        if self.fault_hook is not None:
            self.fault_hook("exit", self.id)
        self.maybe_run_recv_hook()
        self.step.mark_exited(self.id)  # ... and forgets to pass the turn on

    monkeypatch.setattr(UBatchContext, "exit", exit_)


def _abort_without_wakeup(monkeypatch):
    from dbo.testing import StepState

    def abort(self, ubatch_id, exc):
        with self._abort_lock:
            if self.failure is None:
                self.failure = (ubatch_id, exc)
            self.aborted = True
        self.barrier.abort()  # ... and forgets to release the turn locks

    monkeypatch.setattr(StepState, "abort", abort)


@pytest.mark.parametrize(
    "mutate, fault, expect",
    [
        (_double_turn, None, "could all run user code"),
        (_exit_without_handoff, None, "deadlock"),
        (_abort_without_wakeup, "seg0.1", "deadlock"),
    ],
    ids=["double-turn", "exit-without-handoff", "abort-without-wakeup"],
)
def test_exploration_catches_a_broken_protocol(mutate, fault, expect, monkeypatch):
    mutate(monkeypatch)
    started = time.monotonic()
    with pytest.raises(AssertionError, match=expect):
        _explore_protocol(3, 1, bound=1, fault=fault, points="hooks")
    assert time.monotonic() - started < slack(30.0)  # found at once, not after a handoff timeout
