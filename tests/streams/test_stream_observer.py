"""The stream observer seam (``dbo.streams.observer``): every backend calls the registered
observers through one typed interface, and ``dbo.races`` registers through it like anyone else.

What we fear: an observer removed that the hot path still calls (or a slot left pointing at a
fan-out of one), a client that uninstalls another's observer when it turns itself off (races
once owned the slot outright), observers called out of order or a launch wrapper dropped when
two are installed, and a backend that skips the seam for one of its calls.
"""

from __future__ import annotations

import pytest
import torch

import dbo
from dbo import races
from dbo.streams.observer import add_stream_observer, remove_stream_observer, stream_observer, stream_observers

CPU = ("inline", "virtual", "threads")


class Recorder:
    """An observer that logs every call as (tag, what) and wraps every kernel it sees."""

    def __init__(self, tag: str, log: list):
        self.tag, self.log = tag, log

    def launch(self, stream, fn, args, name):
        self.log.append((self.tag, "launch", stream.name, name))
        if fn is None:
            return None
        tag, log = self.tag, self.log

        def body(*a):
            log.append((tag, "body", name))
            return fn(*a)

        return body

    def record(self, event, stream):
        self.log.append((self.tag, "record", stream.name))

    def wait(self, stream, event):
        self.log.append((self.tag, "wait", stream.name))

    def sync(self, what):
        self.log.append((self.tag, "sync", getattr(what, "name", type(what).__name__)))

    def wrap_ubatch(self, fn):
        tag, log = self.tag, self.log

        def ubatch(x):
            log.append((tag, "ubatch", x))
            return fn(x)

        return ubatch


@pytest.fixture
def clean():
    assert stream_observers() == () and stream_observer() is None
    yield
    for o in stream_observers():
        remove_stream_observer(o)


def test_an_observer_added_and_removed_leaves_the_hot_path_with_none(clean):
    log: list = []
    obs = Recorder("a", log)
    add_stream_observer(obs)
    add_stream_observer(obs)  # twice: still one
    assert stream_observers() == (obs,) and stream_observer() is obs
    remove_stream_observer(obs)
    remove_stream_observer(obs)  # not installed: nothing
    assert stream_observers() == () and stream_observer() is None
    with dbo.get_backend("inline") as b:
        s = b.new_stream("s")
        s.launch(lambda: None, name="k")
        s.synchronize()
    assert log == []


def test_two_observers_are_called_in_order_and_removing_one_leaves_the_other_alone(clean):
    log: list = []
    first, second = Recorder("1", log), Recorder("2", log)
    add_stream_observer(first)
    add_stream_observer(second)
    assert stream_observers() == (first, second)
    with dbo.get_backend("inline") as b:
        s = b.new_stream("s")
        s.launch(lambda: None, name="k")
        assert log == [("1", "launch", "s", "k"), ("2", "launch", "s", "k"), ("2", "body", "k"), ("1", "body", "k")]
        remove_stream_observer(first)
        assert stream_observer() is second  # the one left, not a fan-out of one
        log.clear()
        s.synchronize()
    assert log == [("2", "sync", "s")]


def test_an_object_that_is_not_an_observer_is_refused(clean):
    class Half:
        def launch(self, stream, fn, args, name):
            return fn

    with pytest.raises(TypeError, match="lacks record, wait, sync, wrap_ubatch"):
        add_stream_observer(Half())
    assert stream_observers() == ()


@pytest.mark.parametrize("name", CPU)
def test_every_backend_calls_the_seam_for_every_op(clean, name):
    log: list = []
    add_stream_observer(Recorder("o", log))
    x = torch.zeros(4)
    with dbo.get_backend(name) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        a.launch(x.add_, 1, name="k")
        ev = b.new_event()
        ev.record(a)
        c.wait_event(ev)
        ev.synchronize()
        c.synchronize()
        b.synchronize()
    calls = [e[1:] for e in log if e[1] != "body"]
    assert calls[:5] == [
        ("launch", "a", "k"),
        ("record", "a"),
        ("wait", "c"),
        ("sync", type(ev).__name__),
        ("sync", "c"),
    ]
    assert ("body", "k") in [e[1:] for e in log] and x.tolist() == [1.0] * 4
    assert calls[5:] and all(tag == "sync" for tag, *_ in calls[5:])  # the backend's own synchronize


def test_races_registers_through_the_seam_and_leaves_other_observers_installed(clean):
    log: list = []
    mine = Recorder("mine", log)
    add_stream_observer(mine)
    races.enable()
    try:
        assert len(stream_observers()) == 2 and stream_observers()[0] is mine
    finally:
        races.disable()
    assert stream_observers() == (mine,) and stream_observer() is mine


def test_the_orchestrator_wraps_the_ubatch_function_through_the_seam(clean):
    log: list = []
    add_stream_observer(Recorder("o", log))
    with dbo.UBatchOrchestrator(2, backend="virtual", handoff_timeout=10.0) as orch:
        assert orch.run(lambda x: x * 10, [1, 2]) == [10, 20]
    assert sorted(e for e in log if e[1] == "ubatch") == [("o", "ubatch", 1), ("o", "ubatch", 2)]


def test_a_launch_hook_sees_every_stamp_and_its_removal_uninstalls_the_detector(clean):
    stamps = []

    def hook(stamp):
        stamps.append(stamp)

    races.add_launch_hook(hook)
    try:
        assert races.hook_counts() == {"kernel": 0, "ubatch": 0, "launch": 1}
        assert stream_observer() is not None  # the hook alone installs the detector
        with dbo.get_backend("inline") as b:
            s = b.new_stream("s")
            s.launch(None, name="modelled")  # no fn: stamped all the same
            s.launch(lambda: None, name="real")
    finally:
        races.remove_launch_hook(hook)
    assert [(k.name, k.stream, k.seq) for k in stamps] == [("modelled", "s", 1), ("real", "s", 2)]
    assert stamps[1].clock[stamps[1].sid] == 2
    assert races.hook_counts() == {"kernel": 0, "ubatch": 0, "launch": 0} and stream_observer() is None
