"""``HostCosts.idle_hold``: an idle device sleeps while the host runs code, until the host blocks
(a sync, a handoff, a thread join, a look at the device) or the hold runs out. On the threads
backend this is the GIL: an executor woken for the first kernel of a step waits until the issuing
thread blocks or the interpreter's switch interval ends."""

from __future__ import annotations

import dataclasses

import pytest

from dbo.costs import DeviceProfile, HostCosts
from dbo.streams import VirtualBackend
from dbo.trace import Tracer
from tests.support.profiles import MS, US, host_profile
from tests.support.profiles import kernels_by_name as kernels


def prof(hold: float, **host) -> DeviceProfile:
    return host_profile(launch=10 * US, idle_hold=hold, **host)


def _burst(b: VirtualBackend, s, n: int = 5, python: float = 200 * US) -> None:
    for i in range(n):
        s.launch(None, name=f"k{i}", cost=100 * US)
    b.advance(python)  # more host code after the launches


@pytest.mark.parametrize("hold", [0.0, 1 * MS])
def test_an_idle_device_starts_when_the_host_blocks(hold):
    tr = Tracer()
    with VirtualBackend(profile=prof(hold), tracer=tr) as b:
        s = b.new_stream("s")
        _burst(b, s)
        blocked_at = b.now()
        assert blocked_at == pytest.approx(250 * US)
        s.synchronize()
        r = kernels(tr)
        if hold:
            assert r["k0"].start == pytest.approx(blocked_at)  # asleep until the sync
        else:
            assert r["k0"].start == pytest.approx(10 * US)  # at its launch
        for i in range(1, 5):
            assert r[f"k{i}"].start == pytest.approx(r[f"k{i - 1}"].end)
        assert b.now() == pytest.approx(r["k4"].end)


def test_the_hold_runs_out_by_itself():
    tr = Tracer()
    with VirtualBackend(profile=prof(1 * MS), tracer=tr) as b:
        s = b.new_stream("s")
        _burst(b, s, python=5 * MS)  # the host keeps running past the hold
        s.synchronize()
        assert kernels(tr)["k0"].start == pytest.approx(10 * US + 1 * MS)


def test_a_launch_after_the_hold_ran_out_places_the_sleepers_first():
    tr = Tracer()
    with VirtualBackend(profile=prof(1 * MS), tracer=tr) as b:
        s = b.new_stream("s")
        s.launch(None, name="a", cost=3 * MS)
        b.advance(2 * MS)
        s.launch(None, name="b", cost=100 * US)  # the device woke at 1.01 ms and is busy: no new sleep
        s.synchronize()
        r = kernels(tr)
        assert r["a"].start == pytest.approx(1.01 * MS)
        assert r["b"].start == pytest.approx(r["a"].end)


@pytest.mark.parametrize("what", ["yield", "thread_join"])
def test_a_handoff_or_a_join_wakes_the_device(what):
    tr = Tracer()
    with VirtualBackend(profile=prof(1 * MS), tracer=tr) as b:
        s = b.new_stream("s")
        _burst(b, s)
        t = b.now()
        if what == "thread_join":
            b.host_event("thread_start")
        b.host_event(what)
        b.advance(300 * US)  # the next host code: the device is awake now
        s.synchronize()
        assert kernels(tr)["k0"].start == pytest.approx(t)


def test_a_thread_start_does_not_wake_the_device():
    tr = Tracer()
    p = dataclasses.replace(prof(1 * MS), host=dataclasses.replace(prof(1 * MS).host, thread_start=50 * US))
    with VirtualBackend(profile=p, tracer=tr) as b:
        s = b.new_stream("s")
        _burst(b, s)
        b.host_event("thread_start")
        t = b.now()
        s.synchronize()
        assert kernels(tr)["k0"].start == pytest.approx(t)


def test_a_busy_device_does_not_sleep():
    tr = Tracer()
    with VirtualBackend(profile=prof(1 * MS), tracer=tr) as b:
        s = b.new_stream("s")
        s.launch(None, name="long", cost=2 * MS)
        s.synchronize()  # woke at 10 us... and ran to 2.01 ms
        t = b.now()
        other = b.new_stream("o")
        other.launch(None, name="x", kind="comm", cost=3 * MS)
        b.host_event("yield")
        s.launch(None, name="y", cost=1 * MS)  # "o" is busy: the device is awake
        b.advance(500 * US)
        s.synchronize()
        r = kernels(tr)
        assert r["long"].start == pytest.approx(10 * US)  # the sync right after the launch woke it
        assert r["x"].start == pytest.approx(t + 10 * US)  # woken by the yield right after
        assert r["y"].start == pytest.approx(t + 20 * US)  # launched onto a device already awake


def test_events_recorded_and_waited_while_asleep_keep_their_order_and_times():
    p = dataclasses.replace(prof(1 * MS), event_latency=7 * US)
    tr = Tracer()
    with VirtualBackend(profile=p, tracer=tr) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        ev = b.new_event()
        a.launch(None, name="first", cost=100 * US)
        ev.record(a)
        c.wait_event(ev)
        c.launch(None, name="second", kind="comm", cost=100 * US)
        a.launch(None, name="third", cost=300 * US)
        ev.record(a)  # re-recorded: the second wait sees the later time
        c.wait_event(ev)
        c.launch(None, name="fourth", kind="comm", cost=100 * US)
        b.advance(400 * US)
        wake = b.now()
        assert ev.time == pytest.approx(wake + 400 * US)  # looking at the event wakes the device
        b.synchronize()
        r = kernels(tr)
        assert r["first"].start == pytest.approx(wake)
        assert r["second"].start == pytest.approx(r["first"].end + 7 * US)
        assert r["third"].start == pytest.approx(r["first"].end)
        assert r["fourth"].start == pytest.approx(r["third"].end + 7 * US)


@pytest.mark.parametrize("look", ["query", "ready_time", "engine_free", "event_query", "event_sync"])
def test_looking_at_the_device_wakes_it(look):
    tr = Tracer()
    with VirtualBackend(profile=prof(1 * MS), tracer=tr) as b:
        s = b.new_stream("s")
        ev = b.new_event()
        _burst(b, s)
        ev.record(s)
        t = b.now()
        if look == "query":
            assert s.query() is False
        elif look == "ready_time":
            assert s.ready_time == pytest.approx(t + 500 * US)
        elif look == "engine_free":
            assert b.engine_free("compute") == pytest.approx(t + 500 * US)
        elif look == "event_query":
            assert ev.query() is False
        else:
            ev.synchronize()
            assert b.now() == pytest.approx(t + 500 * US)
        assert kernels(tr)["k0"].start == pytest.approx(t)
        b.synchronize()


def test_a_failed_kernel_does_not_taint_an_event_recorded_before_it():
    def boom():
        raise RuntimeError("planted")

    with VirtualBackend(profile=prof(1 * MS)) as b:
        s, o = b.new_stream("s"), b.new_stream("o")
        s.launch(None, name="ok", cost=100 * US)
        ev = b.new_event()
        ev.record(s)
        s.launch(boom, name="bad", cost=100 * US)
        o.wait_event(ev)
        o.launch(None, name="after", cost=100 * US)
        o.synchronize()  # recorded before the failure: fine
        with pytest.raises(Exception, match="planted"):
            s.synchronize()


def test_reset_clock_after_a_sync_still_works():
    with VirtualBackend(profile=prof(1 * MS)) as b:
        s = b.new_stream("s")
        _burst(b, s)
        s.synchronize()
        b.reset_clock()
        assert b.now() == 0.0
        _burst(b, s)
        s.synchronize()
        assert b.now() == pytest.approx(250 * US + 500 * US)


def test_the_hold_round_trips_through_json_and_rejects_bad_values():
    p = prof(5 * MS)
    assert DeviceProfile.from_json(p.to_json()).host.idle_hold == pytest.approx(5 * MS)
    with pytest.raises(ValueError, match="idle_hold"):
        HostCosts(idle_hold=-1.0)
