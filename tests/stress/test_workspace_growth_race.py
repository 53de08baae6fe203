"""Concurrent growth: several ubatch threads outgrow their slots at the same moment.

The manager serialises growth with one lock. These tests make growth slow (the allocation sleeps)
and thread switches frequent, so that without the lock two growths interleave. They then check
what the lock guarantees: every view a thread is handed lies inside a buffer that was allocated
for that thread's own slot, and under the lockstep policies every slot of the lane ends up with
the same capacity (and, after ``lock()``, a buffer of that capacity).

Every thread is a daemon, every wait is bounded, every join is checked.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

import pytest
import torch

from dbo.registry import use_ubatch
from tests.support.timing import slack
from workspace import WorkspaceManager, WorkspaceObserver
from workspace.policy import POLICIES

JOIN_S = slack(20.0)
ROUNDS = 6
U8 = torch.uint8
F32 = torch.float32


class _AllocationMap(WorkspaceObserver):
    """Which slot each buffer was allocated for (buffers kept alive, so addresses are never reused)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner: dict[int, tuple[int, int, torch.Tensor]] = {}  # data_ptr -> (slot, nbytes, buffer)

    def buffer_allocated(self, manager: Any, slot: int, buffer: torch.Tensor) -> None:
        with self.lock:
            self.owner[buffer.untyped_storage().data_ptr()] = (slot, buffer.numel(), buffer)


def _slow_manager(
    policy: str, num_ubatches: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[WorkspaceManager, _AllocationMap]:
    m = WorkspaceManager("cpu", num_ubatches, growth=policy)
    real = WorkspaceManager._allocate

    def slow_allocate(self: WorkspaceManager, nbytes: int) -> torch.Tensor:
        time.sleep(0.002)  # a slow allocator: another thread runs in the middle of a growth
        buffer = real(self, nbytes)
        time.sleep(0.001)
        return buffer

    monkeypatch.setattr(WorkspaceManager, "_allocate", slow_allocate)
    amap = _AllocationMap()
    m.add_observer(amap)
    return m, amap


@pytest.fixture
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _grow_together(m: WorkspaceManager, amap: _AllocationMap, n: int) -> list[str]:
    """n ubatch threads; each round they all request a bigger (and different) size at once.

    Returns the problems seen (a view outside the caller's own slot buffer, or an exception).
    """
    barrier = threading.Barrier(n, timeout=JOIN_S)
    problems: list[str] = []
    plock = threading.Lock()

    def report(msg: str) -> None:
        with plock:
            problems.append(msg)

    def body(i: int) -> None:
        try:
            with use_ubatch(i):
                for r in range(ROUNDS):
                    barrier.wait()
                    elems = 4096 * (r + 1) * (n + 1) + 1024 * i  # every ubatch needs a different size
                    views = m.get_simultaneous(((elems,), F32), ((333,), U8))
                    slot = m.slot_of(i)
                    for k, v in enumerate(views):
                        ptr = v.untyped_storage().data_ptr()
                        with amap.lock:
                            owner = amap.owner.get(ptr)
                        if owner is None:
                            report(f"round {r}: ubatch {i} view {k} is in a buffer the manager never allocated")
                            continue
                        oslot, nbytes, _ = owner
                        start = v.storage_offset() * v.element_size()
                        end = start + v.numel() * v.element_size()
                        if oslot != slot:
                            report(f"round {r}: ubatch {i} (slot {slot}) got view {k} in slot {oslot}'s buffer")
                        elif not (0 <= start and end <= nbytes):
                            report(
                                f"round {r}: ubatch {i} view {k} bytes [{start}, {end}) "
                                f"outside its {nbytes}-byte buffer"
                            )
                    views[0].fill_(float(i))  # writes into its own slot only
                    del views
        except threading.BrokenBarrierError:
            report(f"ubatch {i}: barrier broken")
        except BaseException as exc:  # reported to the test thread
            report(f"ubatch {i}: {type(exc).__name__}: {exc}")
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,), name=f"grow-{i}", daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "a growing ubatch thread did not finish"
    return problems


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("n", [2, 3])
def test_concurrent_growth_hands_out_views_inside_the_callers_own_slot(
    policy: str, n: int, monkeypatch: pytest.MonkeyPatch, fast_switching: None
) -> None:
    m, amap = _slow_manager(policy, n, monkeypatch)
    problems = _grow_together(m, amap, n)
    assert not problems, "\n".join(problems[:10])
    sizes = m.slot_sizes()
    largest = max(sizes)
    if POLICIES[policy].sizes_siblings:
        assert sizes == [largest] * n, f"{policy}: slots lost lockstep: {sizes}"
    else:  # requester: each slot holds what its own largest request needed
        assert all(s > 0 for s in sizes), sizes
    m.lock()
    ranges = m.slot_ranges()
    for slot, (ptr, nbytes) in enumerate(ranges):
        assert nbytes == sizes[slot], f"{policy}: slot {slot} buffer {nbytes} != capacity {sizes[slot]}"
        assert amap.owner[ptr][0] == slot, f"{policy}: slot {slot} holds a buffer allocated for another slot"
    assert m.stats()["allocations_after_lock"] == 0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_concurrent_growth_keeps_every_slots_bytes_private(
    policy: str, monkeypatch: pytest.MonkeyPatch, fast_switching: None
) -> None:
    """After concurrent growth, the slot buffers do not overlap and each ubatch reads back its own writes."""
    n = 2
    m, _ = _slow_manager(policy, n, monkeypatch)
    barrier = threading.Barrier(n, timeout=JOIN_S)
    seen: list[Any] = [None] * n
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            with use_ubatch(i):
                barrier.wait()
                (a,) = m.get_simultaneous(((65536 + 64 * i,), F32))
                barrier.wait()
                (a,) = m.get_simultaneous(((65536 + 64 * i,), F32))  # safe point under deferred growth
                a.fill_(float(i + 1))
                barrier.wait()  # both wrote
                seen[i] = (float(a.min()), float(a.max()))
        except BaseException as exc:  # reported below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert seen == [(1.0, 1.0), (2.0, 2.0)]
    spans = sorted((p, p + b) for p, b in m.slot_ranges() if b)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans
