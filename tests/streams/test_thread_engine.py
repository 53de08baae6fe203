"""The threads backend's engine on its own: it reports every kernel through the one callback its
owner gives it, and nothing else of the owner's or the streams' reaches it.

What we fear: an engine that pokes at its streams (it is driven here with a bare lock and streams
that have nothing but a name, so any such access crashes it), a kernel that is never reported
(its stream would hang), a report made twice on the normal path, and a callback that raises
taking the executor down silently: the kernel it was reporting must be reported again as failed
(on the backend: its stream fails), and no exception may leave the thread (pytest turns an
unhandled thread exception into an error).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest

from dbo.errors import StreamError
from dbo.streams import ThreadsBackend
from dbo.streams.threads._engine import Engine, Kernel
from tests.support.timing import slack, wait_until


class Bare:
    """A stream as the engine may see it: a name, nothing else (no attribute can be set on it)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _kernel(fn, *args, name: str, seq: int) -> Kernel:
    return Kernel(fn, args, name, "compute", None, None, None, seq)


def _engine(on_done, **options) -> tuple[threading.Lock, Engine]:
    lock = threading.Lock()
    return lock, Engine("compute", lock, thread_name="test-engine", owner="test#0", on_done=on_done, **options)


def _close(lock: threading.Lock, engine: Engine) -> None:
    with lock:
        engine.stop()
    if engine.thread is not None:
        engine.thread.join(slack(5))
        assert not engine.thread.is_alive()


def test_every_kernel_is_reported_once_on_the_executor_with_the_lock_held():
    boom = ValueError("the kernel's own error")
    reports = []

    def on_done(s, k, error):
        reports.append((s.name, k.name, error, lock.locked(), threading.current_thread().name))

    def bad():
        raise boom

    lock, engine = _engine(on_done)
    a, b = Bare("a"), Bare("b")
    with lock:
        engine.submit(a, _kernel(None, name="modelled", seq=0))
        engine.submit(b, _kernel(bad, name="bad", seq=1))
        engine.submit(a, _kernel(lambda: None, name="ok", seq=2))
    assert wait_until(lambda: len(reports) == 3, slack(5))
    time.sleep(0.05)  # a second report of any of them would show up here
    _close(lock, engine)
    assert reports == [
        ("a", "modelled", None, True, "test-engine"),
        ("b", "bad", boom, True, "test-engine"),
        ("a", "ok", None, True, "test-engine"),
    ]
    assert engine.crashed is None


def test_a_callback_that_raises_reports_its_kernel_again_as_failed_and_ends_the_executor():
    bug = RuntimeError("a bug in the owner's callback")
    gate = threading.Event()
    calls = []

    def on_done(s, k, error):
        calls.append((s.name, k.name, error))
        if len(calls) == 1:
            raise bug

    lock, engine = _engine(on_done)
    with lock:
        engine.submit(Bare("a"), _kernel(gate.wait, slack(5), name="first", seq=0))
        engine.submit(Bare("b"), _kernel(None, name="queued", seq=1))
    gate.set()
    assert wait_until(lambda: not engine.thread.is_alive(), slack(5))
    # the ready kernel first, then the one whose report raised: each with the crash
    assert calls == [("a", "first", None), ("b", "queued", bug), ("a", "first", bug)]
    assert engine.crashed is bug and engine.running is None and engine.heap == []
    _close(lock, engine)


def test_a_callback_that_keeps_raising_is_logged_and_every_kernel_still_reported(caplog):
    calls = []

    def on_done(s, k, error):
        calls.append((k.name, error))
        raise RuntimeError(f"report of {k.name} failed")

    gate = threading.Event()
    lock, engine = _engine(on_done)
    with lock:
        engine.submit(Bare("a"), _kernel(gate.wait, slack(5), name="first", seq=0))
        engine.submit(Bare("b"), _kernel(None, name="second", seq=1))
        engine.submit(Bare("c"), _kernel(None, name="third", seq=2))
    with caplog.at_level(logging.ERROR, logger="dbo.streams.threads"):
        gate.set()
        assert wait_until(lambda: not engine.thread.is_alive(), slack(5))
    crash = engine.crashed
    assert str(crash) == "report of first failed"
    assert calls == [("first", None), ("second", crash), ("third", crash), ("first", crash)]
    assert sum("could not report" in r.getMessage() for r in caplog.records) == 3
    _close(lock, engine)


def test_stop_drops_the_kernels_not_started_without_reporting_them():
    gate = threading.Event()
    calls = []
    lock, engine = _engine(lambda s, k, error: calls.append(k.name))
    a, b = Bare("a"), Bare("b")
    with lock:
        engine.submit(a, _kernel(gate.wait, slack(5), name="running", seq=0))
        engine.submit(b, _kernel(None, name="waiting", seq=1))
    assert wait_until(lambda: engine.running is not None, slack(5))
    with lock:
        dropped = engine.stop()
    gate.set()
    engine.thread.join(slack(5))
    assert [(s.name, k.name) for s, k in dropped] == [("b", "waiting")]
    assert calls == ["running"]  # the running kernel finishes and is reported; the dropped one is not


def test_take_late_takes_only_what_waited_behind_one_stuck_kernel():
    gate = threading.Event()
    lock, engine = _engine(lambda s, k, error: None)
    with lock:
        engine.submit(Bare("a"), _kernel(gate.wait, slack(5), name="stuck", seq=0))
        engine.submit(Bare("b"), _kernel(None, name="behind", seq=1))
    assert wait_until(lambda: engine.running is not None, slack(5))
    try:
        with lock:
            assert engine.take_late(engine.busy_since - 1.0) == []  # the engine moved since then
            late = engine.take_late(time.monotonic())
            assert [(s.name, k.name) for s, k in late] == [("b", "behind")] and engine.heap == []
    finally:
        gate.set()
        _close(lock, engine)


def test_ready_order_takes_kernels_as_submitted_and_launch_order_by_seq():
    for order, expected in (("launch", ["s0", "s1", "s2"]), ("ready", ["s2", "s0", "s1"])):
        gate = threading.Event()
        ran = []
        lock, engine = _engine(lambda s, k, error: ran.append(k.name), order=order)
        with lock:
            engine.submit(Bare("g"), _kernel(gate.wait, slack(5), name="gate", seq=-1))
            for seq in (2, 0, 1):
                engine.submit(Bare("x"), _kernel(None, name=f"s{seq}", seq=seq))
        gate.set()
        assert wait_until(lambda: len(ran) == 4, slack(5))
        _close(lock, engine)
        assert ran[1:] == expected, order


# --- on the backend: its callback raising fails the stream, not the process --------------------


def test_a_backend_callback_that_raises_fails_the_stream_not_the_process(monkeypatch):
    bug = RuntimeError("a bug in the backend's report")
    real = ThreadsBackend._kernel_done
    raised = []

    def flaky(self, s, k, error):
        if not raised:
            raised.append(k.name)
            raise bug
        return real(self, s, k, error)

    monkeypatch.setattr(ThreadsBackend, "_kernel_done", flaky)
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("s")
        s.launch(None, name="victim")
        with pytest.raises(StreamError, match="crashed") as info:
            s.synchronize()
        assert info.value.__cause__ is bug and raised == ["victim"]
        t = b.new_stream("t")
        t.launch(None)  # the compute engine is gone: t fails at once
        with pytest.raises(StreamError, match="crashed"):
            t.synchronize()
        c = b.new_stream("c", role="comm")
        c.launch(None)  # the comm engine still works
        c.synchronize()
