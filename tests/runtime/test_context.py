"""StepState and UBatchContext through the test seams of ``dbo.testing``; recv hooks' acting ubatch;
unregistered threads during a step.

Several tests here exist to kill a specific mutant (see docs/testing.md, "Mutation pass"):
the turn arriving exactly as a wait times out, and an unregistered thread being answered 0.
"""

from __future__ import annotations

import threading

import pytest

import dbo
from dbo import registry
from dbo.api import dbo_current_ubatch_id, dbo_maybe_run_recv_hook, dbo_register_recv_hook, dbo_yield
from dbo.errors import HandoffTimeout, UnregisteredThreadError
from dbo.testing import Seams, StepState, SyncPrimitives, seams_of, with_seams
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.timing import slack

JOIN_S = slack(10.0)


class RacyLock:
    """A turn lock whose first timed acquire (once armed) times out just as the turn is handed over:
    the real lock is still held when the wait gives up, and ``give_turn`` runs right after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.step: StepState | None = None
        self.uid: int | None = None  # arm: hand the turn to this ubatch at the first timeout
        self.timed_acquires = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if timeout is None or timeout < 0:
            return self._lock.acquire(blocking)
        self.timed_acquires += 1
        got = self._lock.acquire(True, min(timeout, 0.01))
        if self.timed_acquires == 1 and self.uid is not None:
            assert not got, "the racy wait must time out"
            self.step.give_turn(self.uid)  # the handover lands between the timeout and the check
            return False
        return got

    def release(self) -> None:
        self._lock.release()


class RacyPrimitives(SyncPrimitives):
    def __init__(self) -> None:
        self.locks: list[RacyLock] = []
        self.barriers: list[tuple[int, float]] = []

    def lock(self) -> RacyLock:
        lock = RacyLock()
        self.locks.append(lock)
        return lock

    def barrier(self, parties: int, timeout: float):
        self.barriers.append((parties, timeout))
        return super().barrier(parties, timeout)


def _racy_step(uid: int) -> tuple[StepState, RacyPrimitives]:
    prims = RacyPrimitives()
    step = StepState(2, timeout=0.05, primitives=prims)
    prims.locks[uid].step = step
    prims.locks[uid].uid = uid
    return step, prims


def test_turn_arriving_as_the_wait_times_out_is_taken_not_a_timeout() -> None:
    step, prims = _racy_step(1)
    step.wait_turn(1)  # must not raise HandoffTimeout
    assert step.holder == 1 and not step.aborted and step.failure is None
    assert prims.locks[1].timed_acquires == 2  # the timed-out wait, then the recovery acquire


def test_turn_arriving_as_a_yield_times_out_is_taken_not_a_timeout() -> None:
    step, prims = _racy_step(0)
    step.holder = 0
    step.yield_turn(0)  # gives the turn to 1, whose lock is released; ours comes back at the timeout
    assert step.holder == 0 and not step.aborted and step.failure is None
    assert step.handoffs == 1 and prims.locks[0].timed_acquires == 2


def test_a_wait_that_times_out_without_the_turn_aborts_the_step() -> None:
    prims = RacyPrimitives()
    step = StepState(2, timeout=0.05, primitives=prims)  # nobody armed: a plain timeout
    with pytest.raises(HandoffTimeout, match="ubatch 1 waited 0.05 s for its turn"):
        step.wait_turn(1)
    assert step.aborted and step.failure is not None and step.failure[0] == 1


def test_with_seams_installs_and_clears_what_it_is_given() -> None:
    prims = RacyPrimitives()
    seen: list[tuple[str, int | None]] = []
    after: list[str] = []
    with dbo.UBatchOrchestrator(3, backend="virtual", handoff_timeout=HANDOFF_TIMEOUT) as orch:
        assert seams_of(orch) == Seams() and orch._seams is None
        assert with_seams(orch, primitives=prims, fault_hook=lambda p, u: seen.append((p, u))) is orch
        with_seams(orch, after_barrier=lambda: after.append(threading.current_thread().name))
        assert seams_of(orch).primitives is prims and seams_of(orch).after_barrier is not None
        assert orch.run(lambda u: (dbo_yield(), u)[1], [0, 1, 2]) == [0, 1, 2]
        assert len(prims.locks) == 3 and prims.barriers == [(4, 10.0)]
        assert ("after_barrier", None) in seen and sorted(p for p, u in seen if u == 2) == ["enter", "exit", "start"]
        assert after == [threading.current_thread().name]
        with_seams(orch, fault_hook=None, primitives=None, after_barrier=None)
        assert orch._seams is None
        seen.clear()
        assert orch.run(lambda u: u, [0, 1, 2]) == [0, 1, 2]
        assert seen == [] and len(prims.locks) == 3
        with pytest.raises(TypeError, match="fault_hook must be callable"):
            with_seams(orch, fault_hook=3)
        with pytest.raises(TypeError, match="primitives must have lock"):
            with_seams(orch, primitives=object())
    with pytest.raises(TypeError, match="expected a UBatchOrchestrator"):
        with_seams(object(), fault_hook=None)
    for gone in ("fault_hook", "primitives"):
        with pytest.raises(TypeError, match=gone):
            dbo.UBatchOrchestrator(2, backend="virtual", **{gone: None})
    with dbo.UBatchOrchestrator(2, backend="virtual") as orch, pytest.raises(TypeError, match="after_barrier"):
        orch.run(lambda u: u, [0, 1], after_barrier=None)


# --- acting_ubatch_id ------------------------------------------------------------------------


def test_acting_ubatch_id_outside_hooks_is_the_registered_id() -> None:
    assert registry.acting_ubatch_id() is None
    with registry.use_ubatch(2):
        assert registry.acting_ubatch_id() == 2
        with registry.acting_for(0):
            assert registry.acting_ubatch_id() == 0
            with registry.acting_for(1):
                assert registry.acting_ubatch_id() == 1
            assert registry.acting_ubatch_id() == 0
        assert registry.acting_ubatch_id() == 2
        with pytest.raises(ValueError):
            with registry.acting_for(-1):
                pass
        with pytest.raises(RuntimeError, match="boom"):
            with registry.acting_for(1):
                raise RuntimeError("boom")
        assert registry.acting_ubatch_id() == 2
    assert registry.acting_ubatch_id() is None


def _who() -> tuple[str, int | None, int | None]:
    return threading.current_thread().name, registry.acting_ubatch_id(), registry.registered_ubatch_id()


@pytest.mark.parametrize("n", [2, 3])
def test_a_parked_recv_hook_acts_for_its_registrar(n: int) -> None:
    """The hook runs in the next ubatch's thread, at its hook site or at its exit, acting for the registrar."""
    seen: dict[str, tuple] = {}

    def fn(u: int) -> int:
        dbo_register_recv_hook(lambda: seen.__setitem__(f"site{u}", _who()))
        dbo_yield()
        seen[f"before{u}"] = _who()
        if u != 1:  # ubatch 1 leaves its hook (from ubatch 0) to its exit
            dbo_maybe_run_recv_hook()
        seen[f"after{u}"] = _who()
        return u

    with dbo.UBatchOrchestrator(n, backend="virtual", handoff_timeout=HANDOFF_TIMEOUT) as orch:
        assert orch.run(fn, list(range(n))) == list(range(n))
    for u in range(n):
        nxt = (u + 1) % n
        assert seen[f"site{u}"] == (f"dbo-ubatch-{nxt}", u, nxt), seen
        assert seen[f"before{u}"] == seen[f"after{u}"] == (f"dbo-ubatch-{u}", u, u)


def test_a_recv_hook_run_at_once_acts_for_its_registrar_even_inside_another_hook() -> None:
    """Ubatch 0 exits first; ubatch 1 runs ubatch 0's hook, which registers a hook of ubatch 1's:
    its target (ubatch 0) has exited, so it runs at once, acting for ubatch 1, then 0 again."""
    seen: list[tuple] = []

    def inner() -> None:
        seen.append(("inner",) + _who())

    def outer() -> None:
        seen.append(("outer-before",) + _who())
        dbo_register_recv_hook(inner)
        seen.append(("outer-after",) + _who())

    def fn(u: int) -> int:
        if u == 0:
            dbo_register_recv_hook(outer)
            return u
        dbo_maybe_run_recv_hook()
        seen.append(("body",) + _who())
        return u

    with dbo.UBatchOrchestrator(2, backend="virtual", handoff_timeout=HANDOFF_TIMEOUT) as orch:
        assert orch.run(fn, [0, 1]) == [0, 1]
    t1 = "dbo-ubatch-1"
    assert seen == [
        ("outer-before", t1, 0, 1),
        ("inner", t1, 1, 1),
        ("outer-after", t1, 0, 1),
        ("body", t1, 1, 1),
    ]


# --- unregistered threads during a step -------------------------------------------------------


def test_a_helper_thread_of_a_ubatch_is_refused_an_id_through_the_api() -> None:
    """The reference answers 0 to a thread it does not know; here the helper gets an error."""
    got: dict[str, object] = {}

    def helper() -> None:
        try:
            got["id"] = dbo_current_ubatch_id()
        except BaseException as exc:  # noqa: BLE001 - recorded and checked below
            got["error"] = exc
        got["acting"] = registry.acting_ubatch_id()
        got["enabled"] = dbo.dbo_enabled()

    def fn(u: int) -> int:
        if u == 1:
            t = threading.Thread(target=helper, name="helper-of-1")
            t.start()
            t.join(JOIN_S)
            assert not t.is_alive()
        return dbo_current_ubatch_id()

    with dbo.UBatchOrchestrator(2, backend="virtual", handoff_timeout=HANDOFF_TIMEOUT) as orch:
        assert orch.run(fn, [0, 1]) == [0, 1]
    assert "id" not in got, f"an unregistered helper thread was answered {got.get('id')!r}"
    assert isinstance(got["error"], UnregisteredThreadError)
    assert "helper-of-1" in str(got["error"]) and "not a ubatch thread" in str(got["error"])
    assert got["acting"] is None and got["enabled"] is False


def test_the_orchestrator_thread_is_refused_an_id_while_its_step_runs() -> None:
    got: list[object] = []

    def probe() -> None:  # after the barrier: every ubatch thread is registered and waiting
        for ask in (dbo_current_ubatch_id, registry.current_ubatch_id):
            try:
                got.append(ask())
            except UnregisteredThreadError as exc:
                got.append(exc)

    orch = dbo.UBatchOrchestrator(2, backend="virtual", handoff_timeout=HANDOFF_TIMEOUT)
    with with_seams(orch, after_barrier=probe) as orch:
        assert orch.run(lambda u: u, [0, 1]) == [0, 1]
    assert len(got) == 2 and all(isinstance(g, UnregisteredThreadError) for g in got), got
    assert dbo_current_ubatch_id() == 0  # no step active any more


def test_a_wake_without_the_turn_is_a_broken_invariant_not_a_timeout() -> None:
    prims = RacyPrimitives()
    step = StepState(2, timeout=slack(5.0), primitives=prims)
    step.holder = 0
    prims.locks[1].release()  # a spurious wake: ubatch 1's lock opens while ubatch 0 holds the turn
    with pytest.raises(dbo.DBOError, match="handoff invariant broken: ubatch 1 woke but the turn is with 0") as info:
        step.wait_turn(1)
    assert not isinstance(info.value, HandoffTimeout)


def test_a_failed_single_ubatch_step_restores_the_callers_stream() -> None:
    with dbo.streams.InlineBackend() as b, dbo.UBatchOrchestrator(1, backend="virtual") as orch:
        mine = b.new_stream("mine")

        def fn(_: int) -> None:
            assert dbo.current_stream() is orch.streams(0)[0]
            raise RuntimeError("fails in the only ubatch")

        with dbo.use_stream(mine):
            with pytest.raises(dbo.UBatchFailed, match="ubatch 0 of 1 failed"):
                orch.run(fn, [0])
            assert dbo.current_stream() is mine
            assert orch.run(lambda u: dbo.current_stream(), [0]) == [orch.streams(0)[0]]
            assert dbo.current_stream() is mine


def test_user_code_raising_ubatch_aborted_outside_an_abort_is_a_failure() -> None:
    def fn(u: int) -> int:
        dbo_yield()
        if u == 1:
            raise dbo.errors.UBatchAborted("raised by the model, not by an abort")
        return u

    with dbo.UBatchOrchestrator(2, backend="virtual", handoff_timeout=HANDOFF_TIMEOUT) as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
        assert info.value.ubatch_id == 1
        assert isinstance(info.value.__cause__, dbo.errors.UBatchAborted)
        assert "outside an abort" in str(info.value.__cause__)
        assert orch.run(lambda u: u, [0, 1]) == [0, 1]


def test_switch_sync_makes_the_destination_stream_wait_for_the_source() -> None:
    """On the virtual clock: a comm kernel after dbo_switch_to_comm_sync starts only when the compute
    kernel before it has ended, and the same the other way round."""
    tr = dbo.Tracer()

    def fn(u: int) -> int:
        dbo.launch(None, name=f"gemm{u}", cost=0.010)
        dbo.dbo_switch_to_comm_sync()
        dbo.launch(None, name=f"send{u}", cost=0.001)
        dbo.dbo_switch_to_compute_sync()
        dbo.launch(None, name=f"after{u}", cost=0.001)
        return u

    with dbo.UBatchOrchestrator(2, backend="virtual", tracer=tr, handoff_timeout=HANDOFF_TIMEOUT) as orch:
        assert orch.run(fn, [0, 1]) == [0, 1]
    k = {r.name: r for r in tr.kernels()}
    for u in range(2):
        assert k[f"send{u}"].kind == "comm" and k[f"gemm{u}"].kind == "compute"
        assert k[f"send{u}"].start >= k[f"gemm{u}"].end, (k[f"gemm{u}"], k[f"send{u}"])
        assert k[f"after{u}"].start >= k[f"send{u}"].end, (k[f"send{u}"], k[f"after{u}"])
