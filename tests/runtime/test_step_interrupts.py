"""Ctrl-C in the orchestrator's own thread at every point where a step starts or ends.

A KeyboardInterrupt lands in the main thread only, between any two bytecodes. Wherever it lands in
``run`` (or ``capture``), the step must end with it: ``run`` raises the interrupt (or UBatchFailed
caused by it), never returns normally, never waits out the join grace for a thread that never
started (the 10.7 s SIGTERM of issue 47: a thread interrupted before ``start()`` ran it), and leaves
no thread or registry entry behind; the orchestrator runs the next step.

The points are taken where the orchestrator's main thread calls out: the backend's ``host_event``
(before each thread start, at each thread join) and ``Thread.start`` (interrupted before and after it
hands the thread to the OS).
"""

from __future__ import annotations

import threading

import pytest

import dbo
from dbo import registry
from dbo.api import dbo_yield
from tests.support.orchestrators import orchestrator

JOIN_GRACE = 1.0  # short: a step that waits for a thread that never started fails fast with StepHung


def _body(uid: int) -> int:
    for _ in range(2):
        dbo_yield()
    return uid


def _interrupted(outcome: BaseException | None) -> bool:
    e = outcome
    while e is not None:
        if isinstance(e, KeyboardInterrupt):
            return True
        e = e.__cause__ or e.__context__
    return False


def _run(call) -> BaseException | None:
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - the test sorts it
        return e
    return None


def _assert_step_ended_by_the_interrupt(outcome: BaseException | None) -> None:
    assert outcome is not None, "the step returned normally: the interrupt was lost"
    assert not isinstance(outcome, dbo.StepHung), f"waited out the join grace: {outcome}"
    assert _interrupted(outcome), f"the interrupt is not what ended the step: {outcome!r}"
    leftover = [t.name for t in threading.enumerate() if t.name.startswith(("dbo-ubatch", "dbo-capture"))]
    assert leftover == [], leftover
    assert registry.snapshot() == []


def _main_thread_host_events(orch: dbo.UBatchOrchestrator) -> list[str]:
    """The host events the main thread reports in one clean step (thread starts and joins)."""
    seen: list[str] = []
    real = orch.backend.host_event

    def record(what: str) -> None:
        if threading.current_thread() is threading.main_thread():
            seen.append(what)
        real(what)

    orch.backend.host_event = record
    try:
        assert orch.run(_body, [0, 1]) == [0, 1]
    finally:
        del orch.backend.host_event
    return seen


def test_an_interrupt_at_each_host_event_of_the_main_thread_ends_the_step():
    with orchestrator(2, "virtual", join_grace=JOIN_GRACE) as orch:
        events = _main_thread_host_events(orch)
        assert events.count("thread_start") == 2 and events.count("thread_join") == 2, events
        for k in range(len(events)):
            calls = {"n": 0}
            real = orch.backend.host_event

            def interrupt_at_k(what: str, k=k, calls=calls, real=real) -> None:
                if threading.current_thread() is threading.main_thread():
                    calls["n"] += 1
                    if calls["n"] == k + 1:
                        raise KeyboardInterrupt
                real(what)

            orch.backend.host_event = interrupt_at_k
            try:
                outcome = _run(lambda: orch.run(_body, [0, 1]))
            finally:
                orch.backend.__dict__.pop("host_event", None)
            _assert_step_ended_by_the_interrupt(outcome)
            assert orch.run(_body, [0, 1]) == [0, 1], f"after an interrupt at {events[k]} #{k}"


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("how", ["run", "capture"])
def test_an_interrupt_while_a_ubatch_thread_starts_ends_the_step(monkeypatch, when, which, how):
    """``before``: Ctrl-C lands before ``start()`` hands thread ``which`` to the OS (it never runs);
    ``after``: once it did (it runs and must unwind by itself)."""
    real_start = threading.Thread.start
    prefix = "dbo-ubatch" if how == "run" else "dbo-capture"

    def start(self):
        if self.name == f"{prefix}-{which}" and threading.current_thread() is threading.main_thread():
            if when == "after":
                real_start(self)
            raise KeyboardInterrupt
        real_start(self)

    with orchestrator(2, "virtual", join_grace=JOIN_GRACE) as orch:
        monkeypatch.setattr(threading.Thread, "start", start)
        outcome = _run(lambda: getattr(orch, how)(_body, [0, 1]))
        monkeypatch.undo()
        _assert_step_ended_by_the_interrupt(outcome)
        assert orch.run(_body, [0, 1]) == [0, 1]
