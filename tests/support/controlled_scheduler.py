"""A controlled scheduler for the DBO handoff primitives, and a preemption-bounded explorer.

The orchestrator builds its turn locks and start barrier through a ``SyncPrimitives`` factory
(installed with ``dbo.testing.with_seams(orch, primitives=...)``). ``ControlledPrimitives``
returns instrumented stand-ins whose every operation (lock acquire / release, barrier arrival,
barrier departure, barrier abort, plus explicit ``Scheduler.point`` calls) is a *scheduling
point*:

* The thread that reaches a scheduling point parks inside the scheduler, with the operation it is
  about to perform as its *pending* operation.
* A decision is taken only when every participant is parked (or finished, or detached, see
  below): the scheduler picks one whose pending operation is *enabled* (an acquire of a free lock,
  a barrier departure after the barrier tripped or broke, and anything that never blocks) and lets
  it perform that operation atomically. The picked thread then runs alone until its next
  scheduling point. So exactly one participant runs between two scheduling points, and the order
  is chosen by the test (a schedule prefix, then "never preempt"), not by the OS. The decision is
  taken by the thread whose parking completed the quiescence (so continuing the same thread costs
  no switch), or by the controller (the thread in ``run_controlled``), which notices threads that
  ended.
* Blocked operations are modelled, not executed: a thread in ``acquire(timeout=...)`` of a held
  lock is simply not enabled until someone releases the lock. Timeouts never fire while exploring;
  when every parked participant is blocked, the scheduler records a ``Deadlock`` at once (no
  waiting for a timeout) and then, to let the step unwind, makes every blocked operation time
  out (an acquire returns False, a barrier wait breaks the barrier), as the real primitives would
  after their timeout.
* A global watchdog bounds every execution: if a participant runs for ``watchdog_s`` without
  reaching a scheduling point (blocked on something the scheduler does not control), or anything
  else goes wrong in the scheduler, it is *abandoned*: every parked thread is released, the
  primitives fall back to real semantics with real timeouts, and ``SchedulerError`` is raised.

Participants are identified by thread name ("dbo-driver" for the orchestrator's thread M,
"dbo-ubatch-i" for ubatch i), so schedules replay across executions.

What the scheduler does *not* control (documented, by design):

* Thread start-up: a ubatch thread runs ``registry.register`` before its first scheduling point,
  concurrently with M's thread-start loop. The first decision is taken only when all ``expected``
  participants have arrived, so everything after it is serialized.
* A lock's very first acquire by the thread that created it (``StepState.__init__`` acquires every
  turn lock right after creating it, before any other thread can see it) runs unscheduled.
* M after the start of the step: ``ScheduledOrchestrator`` detaches M when it enters its bounded
  join loop (``_wait_for_threads``), which only reads ``step.all_done`` and ``step.aborted``. A
  detached participant's operations run at once with real semantics.
* Thread teardown after a participant's last operation is serialized too: the controller waits
  for the thread to end before it picks the next participant.

``explore`` enumerates schedules depth-first with a preemption bound, as CHESS and loom do: a
*preemption* is a decision that switches away from the thread that ran last while that thread
could continue; switches forced by blocking or exiting are free. The default continuation never
preempts, so every schedule uses at most ``preemption_bound`` preemptions.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from dbo.orchestrator import UBatchOrchestrator
from dbo.testing import SyncPrimitives, with_seams
from tests.support.timing import slack

__all__ = [
    "DRIVER",
    "ControlledBarrier",
    "ControlledLock",
    "ControlledPrimitives",
    "Deadlock",
    "Decision",
    "Execution",
    "ExplorationReport",
    "Nondeterminism",
    "ScheduledOrchestrator",
    "Scheduler",
    "SchedulerError",
    "WATCHDOG_S",
    "explore",
    "run_controlled",
]

DRIVER = "dbo-driver"
"""Name of the thread that runs ``UBatchOrchestrator.run`` under ``run_controlled`` (M)."""

_FREE_RUN_CAP_S = slack(30.0)  # an untimed blocking wait in free-run mode gives up after this long
WATCHDOG_S = slack(10.0)  # the default wall-clock bound on one execution
_DRIVER_JOIN_S = slack(5.0)  # how long thread M may take to finish once the scheduler stopped


class SchedulerError(AssertionError):
    """The scheduler could not keep control (watchdog, a bug, an uncontrolled blocking wait)."""


class Nondeterminism(SchedulerError):
    """A replayed schedule prefix met a different set of enabled participants than before."""


def natural_key(name: str) -> list[Any]:
    """Sort key that puts "dbo-ubatch-10" after "dbo-ubatch-9"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


# ---------------------------------------------------------------------------------------------
# operations


class _Op:
    """A pending operation of a parked participant."""

    blocking = False

    def __init__(self, obj: Any, timeout: float | None = None):
        self.obj = obj
        self.timed_out = False  # set by deadlock resolution or a real timeout in free-run mode
        self.deadline = None if timeout is None else time.monotonic() + timeout

    def enabled(self) -> bool:
        return True

    def perform(self, who: str) -> Any:
        return None

    def describe(self) -> str:
        return type(self).__name__.lstrip("_").lower()


class _Point(_Op):
    def __init__(self, label: str):
        super().__init__(None)
        self.label = label

    def describe(self) -> str:
        return f"point {self.label}"


class _Acquire(_Op):
    def __init__(self, lock: "ControlledLock", blocking: bool, timeout: float | None):
        super().__init__(lock, timeout if blocking else None)
        self.blocking = blocking

    def enabled(self) -> bool:
        return not self.blocking or not self.obj.held or self.timed_out

    def perform(self, who: str) -> bool:
        lock = self.obj
        if lock.held:  # a non-blocking try, or a timeout that fired
            return False
        lock.held = True
        lock.owner = who
        return True

    def describe(self) -> str:
        state = f"held by {self.obj.owner}" if self.obj.held else "free"
        return f"acquire {self.obj.name} ({state})"


class _Release(_Op):
    def perform(self, who: str) -> None:
        lock = self.obj
        if not lock.held:
            raise RuntimeError("release unlocked lock")  # threading.Lock's error
        lock.held = False
        lock.owner = None

    def describe(self) -> str:
        return f"release {self.obj.name}"


class _Arrive(_Op):
    def perform(self, who: str) -> tuple[bool, int, int]:
        b = self.obj
        if b.broken:
            raise threading.BrokenBarrierError
        index = b._count
        b._count += 1
        if b._count == b.parties:  # the last party trips the barrier and goes on at once
            b._generation += 1
            b._count = 0
            return True, b._generation, index
        return False, b._generation, index

    def describe(self) -> str:
        return f"arrive at {self.obj.name} ({self.obj._count}/{self.obj.parties} there)"


class _Depart(_Op):
    """Leaving a barrier wait: enabled once the barrier tripped or broke."""

    blocking = True

    def __init__(self, barrier: "ControlledBarrier", generation: int, timeout: float | None):
        super().__init__(barrier, timeout)
        self.generation = generation

    def enabled(self) -> bool:
        b = self.obj
        return b.broken or b._generation != self.generation or self.timed_out

    def perform(self, who: str) -> None:
        b = self.obj
        # As threading.Barrier: a broken barrier raises even in a waiter the trip already released.
        if b.broken:
            raise threading.BrokenBarrierError
        if b._generation != self.generation:
            return None
        b.broken = True  # a timed-out wait breaks the barrier for everyone
        b._count = 0
        raise threading.BrokenBarrierError

    def describe(self) -> str:
        return f"wait at {self.obj.name} ({self.obj._count}/{self.obj.parties} there)"


class _BarrierAbort(_Op):
    def perform(self, who: str) -> None:
        self.obj.broken = True
        self.obj._count = 0

    def describe(self) -> str:
        return f"abort {self.obj.name}"


# ---------------------------------------------------------------------------------------------
# the primitives


class ControlledLock:
    """A ``threading.Lock`` stand-in whose acquire and release are scheduling points.

    ``scheduler``: a ``Scheduler``, or a ``ControlledPrimitives`` whose current scheduler is used
    at each operation (for locks a test creates before ``run_controlled`` starts).
    """

    def __init__(
        self, scheduler: "Scheduler | ControlledPrimitives", name: str, *, creator_first_acquire_free: bool = False
    ):
        self._source = scheduler
        self.name = name
        self.held = False
        self.owner: str | None = None
        self._creator = threading.get_ident()
        self._fresh = creator_first_acquire_free

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._fresh:
            self._fresh = False
            if threading.get_ident() == self._creator and not self.held:
                # The creator's first acquire, before the lock was shared: nothing can interleave.
                self.held = True
                self.owner = threading.current_thread().name
                return True
        wait = None if (timeout is None or timeout < 0) else float(timeout)
        return self._scheduler()._sync(_Acquire(self, blocking, wait))

    def release(self) -> None:
        self._fresh = False
        self._scheduler()._sync(_Release(self))

    def _scheduler(self) -> "Scheduler":
        src = self._source
        sched = src if isinstance(src, Scheduler) else src._current()
        return sched

    def locked(self) -> bool:
        return self.held

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"<ControlledLock {self.name} {'held by ' + str(self.owner) if self.held else 'free'}>"


class ControlledBarrier:
    """A ``threading.Barrier`` stand-in: arriving and leaving are separate scheduling points."""

    def __init__(self, scheduler: "Scheduler", parties: int, timeout: float | None, name: str):
        self._scheduler = scheduler
        self.parties = parties
        self.timeout = timeout
        self.name = name
        self.broken = False
        self._count = 0
        self._generation = 0

    def wait(self, timeout: float | None = None) -> int:
        limit = self.timeout if timeout is None else timeout
        tripped, generation, index = self._scheduler._sync(_Arrive(self))
        if not tripped:
            self._scheduler._sync(_Depart(self, generation, limit))
        return index

    def abort(self) -> None:
        self._scheduler._sync(_BarrierAbort(self))

    def reset(self) -> None:
        raise NotImplementedError("ControlledBarrier.reset: a broken barrier is replaced, never reused")

    @property
    def n_waiting(self) -> int:
        return 0 if self.broken else self._count

    def __repr__(self) -> str:
        return f"<ControlledBarrier {self.name} {self._count}/{self.parties}{' broken' if self.broken else ''}>"


class ControlledPrimitives(SyncPrimitives):
    """The ``SyncPrimitives`` seam: locks and barriers of the scheduler set in ``.scheduler``."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None

    def _current(self) -> "Scheduler":
        if self.scheduler is None:
            raise SchedulerError("ControlledPrimitives used outside run_controlled (no scheduler set)")
        return self.scheduler

    def lock(self) -> ControlledLock:
        sched = self._current()
        name = f"turn{sched._lock_count}"
        sched._lock_count += 1
        # StepState acquires each turn lock right after creating it, before sharing it.
        return ControlledLock(sched, name, creator_first_acquire_free=True)

    def barrier(self, parties: int, timeout: float) -> ControlledBarrier:
        sched = self._current()
        name = f"barrier{sched._barrier_count}"
        sched._barrier_count += 1
        return ControlledBarrier(sched, parties, timeout, name)


class ScheduledOrchestrator(UBatchOrchestrator):
    """A ``UBatchOrchestrator`` whose thread M leaves the schedule when it starts its bounded join.

    From there M only polls ``step.all_done``; if it stayed a participant, the controller would
    wait forever for it to reach a scheduling point.
    """

    def __init__(self, *args: Any, primitives: ControlledPrimitives, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.primitives = primitives
        with_seams(self, primitives=primitives)

    def _wait_for_threads(self, step: Any, started: float) -> None:  # noqa: D401 - see class doc
        sched = self.primitives.scheduler
        if sched is not None:
            sched.detach()
        super()._wait_for_threads(step, started)


assert hasattr(UBatchOrchestrator, "_wait_for_threads"), "ScheduledOrchestrator hooks _wait_for_threads"


# ---------------------------------------------------------------------------------------------
# the scheduler


@dataclass(frozen=True)
class Decision:
    """One scheduling decision: who could go, who went, and whether that was a preemption."""

    index: int
    enabled: tuple[str, ...]
    chosen: str
    last: str | None
    preemption: bool
    operation: str  # what the chosen participant was about to do


@dataclass(frozen=True)
class Deadlock:
    """Every parked participant was blocked: ``blocked`` maps each to its pending operation."""

    at_decision: int
    blocked: dict[str, str]

    def __str__(self) -> str:
        who = "; ".join(f"{k}: {v}" for k, v in sorted(self.blocked.items(), key=lambda kv: natural_key(kv[0])))
        return f"deadlock at decision {self.at_decision}: all participants blocked ({who})"


@dataclass(eq=False)
class _Participant:
    name: str
    thread: threading.Thread
    cv: threading.Condition
    pending: _Op | None = None
    detached: bool = False


class Scheduler:
    """Serializes the participants of one execution; decisions follow ``prefix``, then never preempt.

    ``expected``: how many participants must have arrived before the first decision (N ubatch
    threads + M). ``replay``: the enabled sets a previous execution met along ``prefix``, to detect
    nondeterminism. ``watchdog_s``: wall-clock bound on the whole execution.

    Decisions are taken by whichever thread makes the system quiescent: the participant that parks
    last (so the default, non-preemptive choice of itself costs no thread switch), or the
    controller, which polls for participants that ended.
    """

    def __init__(
        self,
        *,
        prefix: Sequence[str] = (),
        expected: int | None = None,
        replay: Sequence[tuple[str, ...]] | None = None,
        watchdog_s: float = WATCHDOG_S,
    ):
        self._lock = threading.Lock()
        self._ctl = threading.Condition(self._lock)  # the controller waits here
        self._participants: dict[str, _Participant] = {}
        self._granted: _Participant | None = None
        self._running: _Participant | None = None
        self._last: str | None = None
        self._prefix = list(prefix)
        self._replay = list(replay) if replay is not None else None
        self._driver: threading.Thread | None = None
        self._error: BaseException | None = None
        self.expected = expected
        self.watchdog_s = watchdog_s
        self._deadline = time.monotonic() + watchdog_s
        self._started = False
        self._lock_count = 0
        self._barrier_count = 0
        self.trace: list[Decision] = []
        self.deadlocks: list[Deadlock] = []
        self.violations: list[str] = []
        self.abandoned: str | None = None
        self.on_decision: Callable[["Scheduler"], None] | None = None  # invariant hook, runs under the lock

    # -- participant side ------------------------------------------------------------------------
    def point(self, label: str) -> None:
        """An explicit scheduling point (no shared state changes): lets the scheduler switch here."""
        self._sync(_Point(label))

    def detach(self) -> None:
        """The calling participant leaves the schedule (its later operations run unscheduled)."""
        me = threading.current_thread()
        with self._lock:
            p = self._participants.get(me.name)
            if p is not None and p.thread is me:
                p.detached = True
                self._decide()

    def _sync(self, op: _Op) -> Any:
        me = threading.current_thread()
        with self._lock:
            p = self._participants.get(me.name)
            first = p is None or p.thread is not me
            if first:
                if p is not None and p.thread.is_alive():
                    self.violations.append(f"two live threads are named {me.name!r}")
                p = _Participant(me.name, me, threading.Condition(self._lock))
                self._participants[me.name] = p
                if self._started and self.abandoned is None:
                    self.violations.append(
                        f"{me.name} reached its first scheduling point ({op.describe()}) after scheduling began: "
                        "it ran outside the scheduler's control"
                    )
            if p.detached or self.abandoned is not None:
                return self._free_run(p, op)
            if not first and self._running is not p:
                self.violations.append(
                    f"{p.name} reached {op.describe()} although the scheduler had let "
                    f"{self._running.name if self._running else 'nobody'} run"
                )
            p.pending = op
            self._decide()
            while self._granted is not p:
                if self.abandoned is not None:
                    return self._free_run(p, op)
                if time.monotonic() > self._deadline:
                    self._abandon(f"watchdog: {p.name} still parked at {op.describe()} after {self.watchdog_s:g} s")
                    continue
                p.cv.wait(0.05)
            self._granted = None
            p.pending = None
            self._running = p
            try:
                return op.perform(p.name)
            finally:
                if self.abandoned is not None:
                    self._wake_all()

    def _free_run(self, p: _Participant, op: _Op) -> Any:
        """Real semantics, real timeouts: used by detached participants and after abandonment."""
        p.pending = op
        try:
            cap = time.monotonic() + _FREE_RUN_CAP_S
            while not op.enabled():
                now = time.monotonic()
                if op.deadline is not None and now >= op.deadline:
                    op.timed_out = True
                    break
                if now >= cap:
                    raise SchedulerError(
                        f"{p.name}: {op.describe()} blocked for {_FREE_RUN_CAP_S:g} s in free-run mode"
                    )
                p.cv.wait(0.01)
            return op.perform(p.name)
        finally:
            p.pending = None
            self._wake_all()

    # -- deciding ----------------------------------------------------------------------------------
    def _wake_all(self) -> None:
        for q in self._participants.values():
            q.cv.notify()
        self._ctl.notify()

    def _abandon(self, reason: str) -> None:
        if self.abandoned is None:
            self.abandoned = reason
        self._granted = None
        self._wake_all()

    def abandon(self, reason: str) -> None:
        with self._lock:
            self._abandon(reason)

    def _still_running(self) -> list[str]:
        return [
            p.name for p in self._participants.values() if not p.detached and p.pending is None and p.thread.is_alive()
        ]

    def _decide(self) -> None:
        """If every participant is parked (or gone), pick the next one. Holds the lock."""
        if self._granted is not None or self.abandoned is not None or self._driver is None:
            return
        try:
            enough = self.expected is None or len(self._participants) >= self.expected or not self._driver.is_alive()
            if not enough or self._still_running():
                return
            parked = [p for p in self._participants.values() if p.pending is not None and not p.detached]
            if not parked:
                self._ctl.notify()  # nothing left to schedule: the controller waits for M to return
                return
            if self.on_decision is not None:
                self.on_decision(self)
            enabled = [p for p in parked if p.pending.enabled()]
            if not enabled:
                self.deadlocks.append(Deadlock(len(self.trace), {p.name: p.pending.describe() for p in parked}))
                for p in parked:  # let the step unwind: the blocked waits "time out"
                    p.pending.timed_out = True
                enabled = [p for p in parked if p.pending.enabled()]
            chosen = self._choose(enabled)
        except BaseException as exc:  # reported by the controller
            if self._error is None:
                self._error = exc
            self._abandon(f"decision failed: {type(exc).__name__}: {exc}")
            return
        self._started = True
        self._granted = chosen
        if chosen.thread is not threading.current_thread():
            chosen.cv.notify()

    def _choose(self, enabled: list[_Participant]) -> _Participant:
        by_name = {p.name: p for p in enabled}
        names = tuple(sorted(by_name, key=natural_key))
        i = len(self.trace)
        if i < len(self._prefix):
            if self._replay is not None and i < len(self._replay) and tuple(self._replay[i]) != names:
                raise Nondeterminism(
                    f"decision {i}: enabled {names}, but the replayed execution had {tuple(self._replay[i])}"
                )
            want = self._prefix[i]
            if want not in by_name:
                raise Nondeterminism(f"decision {i}: the schedule wants {want!r}, but only {names} are enabled")
            chosen = want
        else:
            chosen = self._last if self._last in by_name else names[0]
        preempt = self._last is not None and self._last in by_name and chosen != self._last
        self.trace.append(Decision(i, names, chosen, self._last, preempt, by_name[chosen].pending.describe()))
        self._last = chosen
        return by_name[chosen]

    def control(self, driver: threading.Thread) -> None:
        """Take decisions the participants cannot take (after one ended) until ``driver`` (M) is done."""
        with self._lock:
            self._driver = driver
            try:
                while True:
                    if self._error is not None:
                        raise self._error
                    if self.abandoned is not None:
                        raise SchedulerError(f"scheduler abandoned: {self.abandoned}")
                    self._decide()
                    if not driver.is_alive() and not any(
                        p.pending is not None and not p.detached for p in self._participants.values()
                    ):
                        return
                    if time.monotonic() > self._deadline:
                        raise SchedulerError(
                            f"watchdog: after {self.watchdog_s:g} s still waiting for "
                            f"{self._still_running() or 'participants to arrive'} to reach a scheduling point "
                            f"({len(self._participants)} of {self.expected} arrived); "
                            f"last decisions: {[d.chosen + ': ' + d.operation for d in self.trace[-5:]]}"
                        )
                    self._ctl.wait(0.0003)
            except BaseException as exc:
                self._abandon(f"controller stopped: {type(exc).__name__}: {exc}")
                raise

    # -- introspection for invariant hooks ---------------------------------------------------------
    def pending(self) -> dict[str, str]:
        """Each parked participant's pending operation (call from ``on_decision``)."""
        return {p.name: p.pending.describe() for p in self._participants.values() if p.pending is not None}


# ---------------------------------------------------------------------------------------------
# running and exploring


@dataclass
class Execution:
    """The outcome of one controlled execution."""

    trace: list[Decision]
    result: Any
    error: BaseException | None
    deadlocks: list[Deadlock]
    violations: list[str]
    elapsed: float

    @property
    def schedule(self) -> list[str]:
        return [d.chosen for d in self.trace]

    @property
    def preemptions(self) -> int:
        return sum(d.preemption for d in self.trace)

    def describe(self, last: int | None = None) -> str:
        rows = self.trace if last is None else self.trace[-last:]
        lines = [
            f"  {d.index:3d} {'P' if d.preemption else ' '} {d.chosen:<14} {d.operation}   "
            f"(enabled: {', '.join(d.enabled)})"
            for d in rows
        ]
        return f"{len(self.trace)} decisions, {self.preemptions} preemption(s):\n" + "\n".join(lines)


def run_controlled(
    target: Callable[[], Any],
    primitives: ControlledPrimitives,
    *,
    expected: int | None,
    prefix: Sequence[str] = (),
    replay: Sequence[tuple[str, ...]] | None = None,
    watchdog_s: float = WATCHDOG_S,
    on_decision: Callable[[Scheduler], None] | None = None,
) -> Execution:
    """Run ``target()`` in thread M (named ``DRIVER``) under a new scheduler; return the Execution.

    ``target`` typically calls ``orchestrator.run``; its result or exception lands in the Execution.
    Raises ``SchedulerError`` if the scheduler lost control (after unblocking everything).
    """
    sched = Scheduler(prefix=prefix, expected=expected, replay=replay, watchdog_s=watchdog_s)
    sched.on_decision = on_decision
    primitives.scheduler = sched
    box: dict[str, Any] = {}

    def main() -> None:
        try:
            box["result"] = target()
        except BaseException as exc:  # reported in the Execution
            box["error"] = exc

    driver = threading.Thread(target=main, name=DRIVER, daemon=True)
    started = time.monotonic()
    driver.start()
    failure: BaseException | None = None
    try:
        sched.control(driver)
    except BaseException as exc:
        failure = exc
    driver.join(watchdog_s + _DRIVER_JOIN_S)
    primitives.scheduler = None
    if driver.is_alive():
        raise SchedulerError(
            f"thread M did not finish within {watchdog_s + _DRIVER_JOIN_S:g} s after the scheduler stopped"
        )
    if failure is not None:
        raise failure
    return Execution(
        sched.trace, box.get("result"), box.get("error"), sched.deadlocks, sched.violations, time.monotonic() - started
    )


@dataclass
class ExplorationReport:
    schedules: int = 0
    max_decisions: int = 0
    max_preemptions: int = 0
    by_preemptions: dict[int, int] = field(default_factory=dict)
    elapsed: float = 0.0
    complete: bool = True  # False: stopped at max_schedules before exhausting the bound

    def __str__(self) -> str:
        hist = ", ".join(f"{k} preemption(s): {v}" for k, v in sorted(self.by_preemptions.items()))
        state = "" if self.complete else " (stopped at the schedule limit)"
        return (
            f"{self.schedules} schedules{state} in {self.elapsed:.1f} s, up to {self.max_decisions} decisions each "
            f"[{hist}]"
        )


@dataclass
class _Node:
    enabled: tuple[str, ...]
    last: str | None
    preempts_before: int
    chosen: str
    tried: set[str]

    def cost(self, name: str) -> int:
        return 1 if (self.last is not None and self.last in self.enabled and name != self.last) else 0


def explore(
    execute: Callable[[list[str], list[tuple[str, ...]]], Execution],
    check: Callable[[Execution], None],
    *,
    preemption_bound: int = 2,
    max_schedules: int = 50_000,
    time_limit_s: float | None = None,
) -> ExplorationReport:
    """Depth-first enumeration of every schedule with at most ``preemption_bound`` preemptions.

    ``execute(prefix, replay)`` runs one execution that follows ``prefix`` and then never preempts;
    ``check(execution)`` raises if that schedule broke an invariant (the message should include
    ``execution.describe()``). Stops with ``SchedulerError`` past ``time_limit_s``.
    """
    report = ExplorationReport()
    started = time.monotonic()
    stack: list[_Node] = []
    prefix: list[str] = []
    while True:
        ex = execute(prefix, [n.enabled for n in stack])
        report.schedules += 1
        report.max_decisions = max(report.max_decisions, len(ex.trace))
        report.max_preemptions = max(report.max_preemptions, ex.preemptions)
        report.by_preemptions[ex.preemptions] = report.by_preemptions.get(ex.preemptions, 0) + 1
        if ex.preemptions > preemption_bound:
            raise SchedulerError(f"an execution used {ex.preemptions} preemptions (bound {preemption_bound})")
        check(ex)
        for d in ex.trace[len(stack) :]:
            before = stack[-1].preempts_before + stack[-1].cost(stack[-1].chosen) if stack else 0
            stack.append(_Node(d.enabled, d.last, before, d.chosen, {d.chosen}))
        while stack:
            node = stack[-1]
            alternatives = [
                e
                for e in node.enabled
                if e not in node.tried and node.preempts_before + node.cost(e) <= preemption_bound
            ]
            if alternatives:
                node.chosen = alternatives[0]
                node.tried.add(node.chosen)
                break
            stack.pop()
        report.elapsed = time.monotonic() - started
        if not stack:
            return report
        if report.schedules >= max_schedules:
            report.complete = False
            return report
        if time_limit_s is not None and report.elapsed > time_limit_s:
            raise SchedulerError(f"exploration exceeded {time_limit_s:g} s after {report.schedules} schedules")
        prefix = [n.chosen for n in stack]
