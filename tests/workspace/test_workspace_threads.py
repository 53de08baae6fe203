"""WorkspaceManager with real ubatch threads: isolation, lockstep growth, and the cache-vs-growth race.

Every thread is a daemon, every wait is bounded, every join is checked.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest
import torch

import dbo
from dbo.registry import use_ubatch
from tests.support.threads import run_ubatches
from tests.support.timing import slack
from tests.support.views import start_of
from workspace import WorkspaceManager, use_workspace_lane

JOIN_S = slack(10.0)


def test_each_ubatch_thread_gets_its_own_slot() -> None:
    m = WorkspaceManager("cpu", 2)
    m.get_simultaneous(((4096,), torch.uint8))  # warm-up on the main thread (no step active: slot 0)
    m.lock()

    def body(i: int, barrier: threading.Barrier) -> tuple[int, int, bool]:
        a, b = m.get_simultaneous(((256,), torch.float32), ((512,), torch.int16))
        barrier.wait()
        for step in range(50):
            a.fill_(i * 1000 + step)
            b.fill_(i * 10 + 1)
            time.sleep(0)  # let the other ubatch write its own slot meanwhile
            ok = bool((a == i * 1000 + step).all()) and bool((b == i * 10 + 1).all())
            if not ok:
                return start_of(a), start_of(b), False
        return start_of(a), start_of(b), True

    results = run_ubatches(2, body)
    ranges = m.slot_ranges()
    for i, (a_ptr, b_ptr, ok) in enumerate(results):
        assert ok, f"ubatch {i} saw another ubatch's writes"
        base, size = ranges[i]
        assert base <= a_ptr < b_ptr < base + size
    assert results[0][0] != results[1][0]
    assert m.stats()["allocations_after_lock"] == 0


def test_growth_from_any_ubatch_thread_keeps_slots_in_lockstep() -> None:
    m = WorkspaceManager("cpu", 3)
    sizes_seen = []

    def body(i: int, barrier: threading.Barrier) -> None:
        for turn in range(3):
            barrier.wait()
            if turn == i:  # one grower per turn: ubatch 0, then 1, then 2
                m.get_simultaneous(((1000 * (turn + 1),), torch.uint8))
                sizes_seen.append(m.slot_sizes())
            barrier.wait()

    run_ubatches(3, body)
    assert sizes_seen == [[1024] * 3, [2048] * 3, [3072] * 3]


def test_concurrent_growth_ends_in_lockstep_at_the_largest_request() -> None:
    m = WorkspaceManager("cpu", 2)
    wanted = {0: 10_000, 1: 70_000}

    def body(i: int, barrier: threading.Barrier) -> int:
        barrier.wait()
        for _ in range(20):
            (v,) = m.get_simultaneous(((wanted[i],), torch.uint8))
        return v.untyped_storage().data_ptr()

    storages = run_ubatches(2, body)
    assert m.slot_sizes() == [70_144, 70_144]
    assert storages[0] != storages[1]
    # Once growth has settled, each slot's cached views lie in that slot's current buffer.
    for i in (0, 1):
        with use_ubatch(i):
            (v,) = m.get_simultaneous(((wanted[i],), torch.uint8))
        base, size = m.slot_ranges()[i]
        assert base <= start_of(v) and start_of(v) + wanted[i] <= base + size


def test_lock_free_hits_racing_with_growth_stay_memory_safe() -> None:
    """Ubatch 0 hammers a cached request while ubatch 1 keeps growing every slot.

    A hit may hand ubatch 0 views of a buffer that growth just replaced; they must still be valid,
    private memory (the views keep the old storage alive), never memory that someone else writes.
    """
    m = WorkspaceManager("cpu", 2)
    with use_ubatch(0):
        m.get_simultaneous(((64,), torch.int64))
    stop = threading.Event()

    def body(i: int, barrier: threading.Barrier) -> tuple[int, int]:
        barrier.wait()
        if i == 1:
            try:
                for k in range(1, 60):
                    (mine,) = m.get_simultaneous(((1024 * k,), torch.uint8))
                    mine.fill_(0xAB)
                    time.sleep(0)
            finally:
                stop.set()
            return 0, 0
        bad = calls = 0
        while not stop.is_set() and calls < 20_000:
            (v,) = m.get_simultaneous(((64,), torch.int64))
            v.fill_(calls)
            time.sleep(0)
            if not bool((v == calls).all()):
                bad += 1
            calls += 1
        return bad, calls

    (bad, calls), _ = run_ubatches(2, body)
    assert calls > 0
    assert bad == 0, f"ubatch 0 saw foreign writes in {bad} of {calls} calls"
    assert m.slot_sizes() == [59 * 1024, 59 * 1024]
    assert m.stats()["grows"] == 1 + 59  # the warm-up, then every k
    with use_ubatch(0):
        (v,) = m.get_simultaneous(((64,), torch.int64))
    base, size = m.slot_ranges()[0]
    assert base <= start_of(v) < base + size, "after growth the cache must be rebuilt from the new buffer"


def _during_a_step(ubatch_body: Callable[[], Any], check: Callable[[], Any]) -> None:
    """Run ``check`` on this (unregistered) thread while a ubatch-0 thread, after ``ubatch_body``, is parked."""
    inside, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def ubatch0() -> None:
        try:
            with use_ubatch(0):
                ubatch_body()
                inside.set()
                release.wait(JOIN_S)
        except BaseException as exc:  # reported below
            errors.append(exc)
            inside.set()

    t = threading.Thread(target=ubatch0, name="ubatch-0", daemon=True)
    t.start()
    try:
        assert inside.wait(JOIN_S) and not errors, errors
        check()
    finally:
        release.set()
        t.join(JOIN_S)
    assert not t.is_alive() and not errors, errors


def test_a_helper_thread_during_a_step_gets_no_slot_even_on_a_cache_hit() -> None:
    """The request is already cached in slot 0: a helper must still be refused, not handed slot 0's views."""
    m = WorkspaceManager("cpu", 2)
    spec = ((64,), torch.float32)
    held: list[torch.Tensor] = []

    def check() -> None:
        before = m.stats()
        with pytest.raises(dbo.UnregisteredThreadError):
            m.get_simultaneous(spec)
        assert m.stats() == before

    _during_a_step(lambda: held.extend(m.get_simultaneous(spec)), check)
    assert m.slot_sizes() == [256, 256]


def test_a_helper_thread_in_another_lane_during_a_step_is_refused_and_grows_nothing() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2, growth="lockstep")

    def check() -> None:
        with use_workspace_lane(1):
            with pytest.raises(dbo.UnregisteredThreadError):
                m.get_simultaneous(((1000,), torch.uint8))
        assert m.slot_sizes() == [256, 0, 256, 0], "lane 1 of ubatch 0 must not have grown"
        assert m.stats()["allocations"] == 2

    _during_a_step(lambda: m.get_simultaneous(((10,), torch.uint8)), check)
