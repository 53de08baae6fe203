"""Stream layer: the threads backend's failures: sticky kernel errors, timeouts, close, a stuck
engine and executors that cannot start or crash.

Every threads-backend test is bounded: kernels block on gates with a timeout (never forever),
backends are closed by their ``with`` block, and the conftest fixture checks that no thread
(executor, watchdog) survives.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from dbo import StreamError, StreamTimeout
from dbo.streams import ThreadsBackend
from tests.support.timing import GATE, slack, wait_until

# --- threads: errors, timeouts, close --------------------------------------------------------------


def test_threads_kernel_error_is_sticky():
    with ThreadsBackend(timeout=slack(10)) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        ran = []
        # The gate holds the failure back until every launch below is made: otherwise whether
        # c.launch raises at once (c already failed) or later depends on who wins the race.
        gate = threading.Event()
        a.launch(lambda: (gate.wait(GATE), (_ for _ in ()).throw(ValueError("boom"))), name="bad")
        a.launch(ran.append, "after")  # skipped
        ev = b.new_event()
        ev.record(a)
        c.wait_event(ev)
        c.launch(ran.append, "waiter")  # skipped: c inherits the failure through the event
        gate.set()
        with pytest.raises(StreamError, match="boom") as info:
            a.synchronize()
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(StreamError) as info:
            a.synchronize()  # still failed
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(StreamError, match="launch") as info:
            a.launch(ran.append, "refused")
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(StreamError) as info:
            ev.synchronize()
        assert isinstance(info.value.__cause__, ValueError)
        with pytest.raises(StreamError, match="failed stream 'a'") as info:
            c.synchronize()
        assert isinstance(info.value.__cause__, ValueError)
        assert ran == []
        assert a.error is not None and isinstance(a.error, ValueError)
        with pytest.raises(StreamError):
            b.synchronize()


def test_threads_host_wait_times_out():
    with ThreadsBackend(timeout=0.05) as b:
        s = b.new_stream("s")
        gate = threading.Event()
        s.launch(gate.wait, GATE, kind="comm")
        ev = b.new_event()
        ev.record(s)
        try:
            with pytest.raises(StreamTimeout, match="0.05"):
                s.synchronize()
            with pytest.raises(StreamTimeout):
                ev.synchronize()
            assert issubclass(StreamTimeout, StreamError) and issubclass(StreamTimeout, TimeoutError)
        finally:
            gate.set()


def test_threads_worker_waits_time_out():
    with ThreadsBackend(timeout=0.1) as b:
        a, c, d = b.new_stream("a"), b.new_stream("c"), b.new_stream("d")
        gate = threading.Event()
        try:
            a.launch(gate.wait, GATE)  # holds the compute engine
            ev = b.new_event()
            ev.record(a)
            c.wait_event(ev)  # c, parked on the event, fails after the timeout (watchdog)
            d.launch(None)  # d's ready kernel fails after the engine ran a's kernel for the timeout
            assert wait_until(lambda: c.error is not None and d.error is not None)
        finally:
            gate.set()
        a.synchronize()
        for s in (c, d):
            with pytest.raises(StreamError) as info:
                s.synchronize()
            assert isinstance(info.value.__cause__, StreamTimeout)


def test_threads_close_drops_pending_work_and_wakes_waiters():
    b = ThreadsBackend(timeout=slack(10))
    s = b.new_stream("s")
    gate = threading.Event()
    ran = []
    s.launch(gate.wait, 0.3, kind="comm")  # running when close() comes
    s.launch(ran.append, 1)  # dropped
    ev = b.new_event()
    ev.record(s)
    errors = []

    def waiter():
        try:
            ev.synchronize()
        except StreamError as e:
            errors.append(e)

    t = threading.Thread(target=waiter)
    t.start()
    assert wait_until(s._worker.is_alive)
    b.close()
    t.join(slack(5))
    assert not t.is_alive() and len(errors) == 1 and "was closed before" in str(errors[0])
    assert ran == [] and ev.query() and not s._worker.is_alive()
    s.synchronize()  # nothing runs any more: returns


def test_threads_close_cuts_a_modelled_wait_short():
    b = ThreadsBackend(timeout=slack(60))
    s = b.new_stream("s")
    s.launch(None, kind="comm", cost=30.0)
    assert wait_until(lambda: not s.query() and s._worker.is_alive())
    b.close()
    assert not s._worker.is_alive()


# --- threads: a stuck engine, executors that fail ------------------------------------------------


def test_threads_a_stuck_engine_times_out_the_kernels_behind_it():
    with ThreadsBackend(timeout=0.1) as b:
        a, d = b.new_stream("a"), b.new_stream("d")
        gate = threading.Event()
        try:
            a.launch(gate.wait, GATE, name="stuck")
            d.launch(None, name="behind")
            assert wait_until(lambda: d.error is not None)
        finally:
            gate.set()
        a.synchronize()
        err = d.error
        assert isinstance(err, StreamTimeout)
        assert "'behind'" in str(err) and "compute engine" in str(err) and "'stuck' of stream 'a'" in str(err)
        d2 = b.new_stream("d2")
        d2.launch(None)  # the engine works again
        d2.synchronize()


def test_threads_a_moving_backlog_never_times_out():
    """A ready kernel may wait longer than the timeout behind kernels launched before it, as long
    as the engine keeps finishing them (a shared stream would queue them the same way)."""
    with ThreadsBackend(timeout=0.15) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        for _ in range(10):
            a.launch(time.sleep, 0.04)  # 0.4 s of work, launched first
        c.launch(None, name="late")  # waits ~0.4 s for the engine
        assert wait_until(lambda: a.query() and c.query())  # host waits would time out at 0.15 s
        assert a.error is None and c.error is None


def test_threads_an_executor_that_cannot_start_fails_the_stream(monkeypatch):
    real = threading.Thread.start

    def start(self):
        if self.name.startswith("dbo-stream-"):
            raise RuntimeError("can't start new thread")
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("s")
        s.launch(None)  # the failure is the stream's, as for a kernel that raises
        with pytest.raises(StreamError, match="could not start") as info:
            s.synchronize()
        assert isinstance(info.value.__cause__, RuntimeError) and s.query()


def test_threads_an_executor_crash_fails_its_streams_instead_of_hanging(monkeypatch):
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("s")
        s.launch(None)
        s.synchronize()
        boom = RuntimeError("a bug in the executor")

        def broken():
            raise boom

        monkeypatch.setattr(torch, "get_num_threads", broken)  # the executor calls it outside any kernel
        s.launch(None, name="victim")
        with pytest.raises(StreamError) as info:
            s.synchronize()
        assert info.value.__cause__ is boom
        t = b.new_stream("t")
        t.launch(None)  # the compute engine is gone: t fails at once
        with pytest.raises(StreamError, match="crashed"):
            t.synchronize()
