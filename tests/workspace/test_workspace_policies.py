"""Growth policies: lockstep, requester, deferred-lockstep. Sizes, buffers, memory, lock, failures.

Memory figures come from the deterministic LiveBytesTracker (finalizers on storages), so they are
exact. Steps with a parked sibling run on the real orchestrator (virtual backend, bounded waits).
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
import torch

import dbo
import workspace
from dbo.registry import use_ubatch
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.threads import run_ubatches
from tests.support.timing import slack
from tests.support.views import start_of
from workspace import WorkspaceLockedError, WorkspaceManager
from workspace.policy import DEFAULT_GROWTH, POLICIES, GrowthPolicy, get_policy, policy_names
from workspace.tracking import LiveBytesTracker

U8 = torch.uint8
KiB = 1024
BOUNDS = dict(handoff_timeout=HANDOFF_TIMEOUT, step_timeout=slack(30.0), join_grace=slack(5.0))


def inside(t: torch.Tensor, rng: tuple[int, int]) -> bool:
    base, n = rng
    return base <= start_of(t) and start_of(t) + t.numel() * t.element_size() <= base + n


# ---------------------------------------------------------------------- choosing a policy


def test_policy_names_and_default() -> None:
    assert policy_names() == ("lockstep", "requester", "deferred-lockstep")
    assert DEFAULT_GROWTH == "deferred-lockstep" == workspace.DEFAULT_GROWTH
    assert WorkspaceManager("cpu").policy.name == DEFAULT_GROWTH
    assert WorkspaceManager("cpu").stats()["policy"] == DEFAULT_GROWTH
    for name in policy_names():
        m = WorkspaceManager("cpu", 2, growth=name)
        assert m.policy is POLICIES[name] and name in repr(m)
    assert get_policy(" Lockstep ") is POLICIES["lockstep"]
    custom = GrowthPolicy("mine", "now", "like lockstep")
    assert WorkspaceManager("cpu", growth=custom).policy is custom


@pytest.mark.parametrize(("growth", "exc"), [("eager", ValueError), (3, TypeError), (True, TypeError)])
def test_bad_policy(growth, exc) -> None:
    with pytest.raises(exc):
        WorkspaceManager("cpu", growth=growth)
    with pytest.raises(ValueError):
        GrowthPolicy("x", "sometimes", "")


def test_init_workspace_manager_takes_the_policy() -> None:
    workspace.reset_workspace_manager()
    try:
        m = workspace.init_workspace_manager("cpu", 2, growth="requester")
        assert m.policy.name == "requester"
    finally:
        workspace.reset_workspace_manager()


# ---------------------------------------------------------------------- what grows, and when


def test_lockstep_reallocates_every_slot_at_once() -> None:
    m = WorkspaceManager("cpu", 3, growth="lockstep")
    with use_ubatch(2):
        m.get_simultaneous(((1000,), U8))
    assert m.slot_sizes() == [1024] * 3 and all(n == 1024 for _, n in m.slot_ranges())
    assert m.pending_slots() == [] and m.stats()["allocations"] == 3


def test_requester_grows_only_the_calling_slot() -> None:
    m = WorkspaceManager("cpu", 3, growth="requester")
    with use_ubatch(1):
        m.get_simultaneous(((1000,), U8))
    assert m.slot_sizes() == [0, 1024, 0]
    assert m.slot_ranges()[0] == (0, 0) and m.slot_ranges()[2] == (0, 0)
    assert m.undersized_slots() == [0, 2] and m.stats()["undersized_slots"] == 2
    assert m.pending_slots() == []


def test_deferred_raises_every_capacity_but_reallocates_only_the_requester() -> None:
    m = WorkspaceManager("cpu", 3, growth="deferred-lockstep")
    with use_ubatch(1):
        m.get_simultaneous(((100,), U8))
    with use_ubatch(0):
        m.get_simultaneous(((100,), U8))
    before = m.slot_ranges()
    with use_ubatch(1):
        m.get_simultaneous(((5000,), U8))
    after = m.slot_ranges()
    assert m.slot_sizes() == [5120] * 3, "every slot is guaranteed the new capacity"
    assert after[0] == before[0], "a sibling's buffer stays until its own next call"
    assert after[1][1] == 5120 and after[2] == (0, 0)
    assert m.pending_slots() == [0, 2] and m.undersized_slots() == []
    with use_ubatch(0):
        (v,) = m.get_simultaneous(((100,), U8))  # its safe point: reallocated to the capacity
    assert m.slot_ranges()[0][1] == 5120 and inside(v, m.slot_ranges()[0])
    assert m.pending_slots() == [2]
    s = m.stats()
    assert s["grows"] == 2 and s["deferred_reallocations"] == 2 and s["allocations"] == 4


def test_deferred_sibling_cache_is_invalidated_so_its_next_call_reaches_the_safe_point() -> None:
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    spec = ((64,), torch.float32)
    with use_ubatch(1):
        (old,) = m.get_simultaneous(spec)
    del old
    with use_ubatch(0):
        m.get_simultaneous(((8 * KiB,), U8))
    with use_ubatch(1):
        (new,) = m.get_simultaneous(spec)  # was a cache hit before the growth
    assert m.pending_slots() == [] and inside(new, m.slot_ranges()[1])


def test_lock_reallocates_pending_slots_first_so_nothing_is_undersized_or_allocated_while_locked() -> None:
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    m.get_simultaneous(((3000,), U8))  # warmup on the main thread: slot 0
    assert m.pending_slots() == [1] and m.slot_ranges()[1] == (0, 0)
    m.lock()
    assert m.pending_slots() == [] and m.slot_ranges()[1][1] == 3072
    with use_ubatch(1):
        (v,) = m.get_simultaneous(((3000,), U8))
    assert inside(v, m.slot_ranges()[1])
    assert m.stats()["allocations_after_lock"] == 0


@pytest.mark.parametrize("growth", ["lockstep", "deferred-lockstep"])
def test_warmup_on_the_main_thread_sizes_every_slot_for_lockstep_policies(growth) -> None:
    m = WorkspaceManager("cpu", 2, growth=growth)
    m.get_simultaneous(((4 * KiB,), U8))
    m.lock()
    assert m.slot_sizes() == [4 * KiB] * 2 and m.undersized_slots() == []
    with dbo.UBatchOrchestrator(2, backend="virtual", **BOUNDS) as orch:
        out = orch.run(lambda _: m.get_simultaneous(((2 * KiB,), U8))[0].fill_(1).numel(), [None, None])
    assert out == [2 * KiB] * 2


def test_requester_locks_a_sibling_undersized_and_the_step_fails_loudly() -> None:
    m = WorkspaceManager("cpu", 2, growth="requester")
    m.get_simultaneous(((4 * KiB,), U8))
    m.lock()
    assert m.slot_sizes() == [4 * KiB, 0] and m.undersized_slots() == [1]
    with dbo.UBatchOrchestrator(2, backend="virtual", **BOUNDS) as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(lambda _: m.get_simultaneous(((2 * KiB,), U8)), [None, None])
    err = info.value
    assert err.ubatch_id == 1 and isinstance(err.__cause__, WorkspaceLockedError)
    assert "0.00 MiB" in str(err.__cause__) and err.__cause__.current_bytes == 0


# ---------------------------------------------------------------------- memory


def _parked_sibling_step(m: WorkspaceManager, size: int) -> list[bool]:
    """Ubatch 0 grows (size -> 4 size) while ubatch 1 is parked holding a view of `size` bytes."""

    def body(_):
        u = dbo.dbo_current_ubatch_id()
        (a,) = m.get_simultaneous(((size,), U8))
        a.fill_(u + 1)
        dbo.dbo_yield()
        if u == 0:
            del a
            (b,) = m.get_simultaneous(((4 * size,), U8))
            del b
            dbo.dbo_yield()
            return True
        intact = bool((a == u + 1).all())
        del a
        (b,) = m.get_simultaneous(((4 * size,), U8))
        del b
        return intact

    with dbo.UBatchOrchestrator(2, backend="virtual", **BOUNDS) as orch:
        return orch.run(body, [None, None])


@pytest.mark.parametrize(
    ("growth", "peak", "orphaned"),
    [("lockstep", 9, 1), ("requester", 8, 0), ("deferred-lockstep", 8, 0)],
)
def test_peak_and_orphaned_bytes_with_a_parked_sibling(growth, peak, orphaned) -> None:
    size = 64 * KiB
    m = WorkspaceManager("cpu", 2, growth=growth)
    tracker = LiveBytesTracker().attach(m)
    intact = _parked_sibling_step(m, size)
    assert intact == [True, True], "a live view's data must survive every policy"
    assert tracker.peak == peak * size
    assert tracker.orphaned_peak == tracker.orphaned_total == orphaned * size
    assert tracker.orphaned == 0 and m.orphaned_bytes() == 0, "orphans die with their last view"
    assert tracker.live == 8 * size == m.stats()["bytes_reserved"]


def test_lockstep_orphans_a_held_sibling_view_and_the_manager_counts_it() -> None:
    m = WorkspaceManager("cpu", 2, growth="lockstep")
    with use_ubatch(1):
        (held,) = m.get_simultaneous(((1000,), U8))
    with use_ubatch(0):
        m.get_simultaneous(((4000,), U8))
    assert m.orphaned_bytes() == 1024 and m.stats()["orphaned_bytes"] == 1024
    assert not inside(held, m.slot_ranges()[1])
    del held
    assert m.orphaned_bytes() == 0


def test_deferred_sibling_is_freed_before_its_new_buffer_is_allocated() -> None:
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    tracker = LiveBytesTracker().attach(m)
    with use_ubatch(1):
        (v,) = m.get_simultaneous(((1024,), U8))
    del v
    with use_ubatch(0):
        m.get_simultaneous(((2048,), U8))
    with use_ubatch(1):
        m.get_simultaneous(((10,), U8))
    assert tracker.events == [
        ("alloc", 1, 1024),
        ("alloc", 0, 2048),  # slot 0 had no buffer: nothing to free
        ("free", 1, 1024),  # slot 1's old buffer goes first (nothing holds it: not an orphan) ...
        ("retire", 1, 1024),
        ("alloc", 1, 2048),  # ... then its new one
    ]
    assert tracker.peak == 2 * 2048, "never old + new: 1024 + 2 * 2048"
    assert tracker.orphaned_total == 0


def test_a_view_kept_past_its_own_safe_point_is_the_holders_choice_not_an_orphan_of_growth() -> None:
    # Under deferred-lockstep only the owner's own call replaces its buffer; its old views are
    # dead by contract then. Holding one anyway keeps the storage alive (counted as orphaned).
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    with use_ubatch(1):
        (kept,) = m.get_simultaneous(((1024,), U8))
    with use_ubatch(0):
        m.get_simultaneous(((4096,), U8))
    assert m.orphaned_bytes() == 0, "a sibling's growth orphans nothing"
    with use_ubatch(1):
        m.get_simultaneous(((8,), U8))  # ubatch 1's own safe point
    assert m.orphaned_bytes() == 1024
    del kept
    assert m.orphaned_bytes() == 0


# ---------------------------------------------------------------------- failures and lock


def test_deferred_growth_failure_leaves_the_requester_empty_keeps_capacities_and_retries() -> None:
    class Flaky(WorkspaceManager):
        fail_next = False

        def _allocate(self, nbytes: int) -> torch.Tensor:
            if self.fail_next:
                self.fail_next = False
                raise MemoryError("simulated out of memory")
            return super()._allocate(nbytes)

    m = Flaky("cpu", 2, growth="deferred-lockstep")
    with use_ubatch(0):
        m.get_simultaneous(((100,), U8))
        m.fail_next = True
        with pytest.raises(MemoryError):
            m.get_simultaneous(((1000,), U8))
        assert m.slot_sizes() == [256, 256] and m.slot_ranges()[0] == (0, 0)
        (v,) = m.get_simultaneous(((1000,), U8))
    assert m.slot_sizes() == [1024, 1024] and v.numel() == 1000
    # a failing reallocation at a sibling's safe point is retried at its next call
    m.fail_next = True
    with use_ubatch(1):
        with pytest.raises(MemoryError):
            m.get_simultaneous(((10,), U8))
        assert m.pending_slots() == [1]
        (w,) = m.get_simultaneous(((10,), U8))
    assert inside(w, m.slot_ranges()[1]) and m.pending_slots() == []


@pytest.mark.parametrize("growth", policy_names())
def test_locked_growth_is_refused_with_the_same_error_under_every_policy(growth) -> None:
    m = WorkspaceManager("cpu", 2, growth=growth)
    m.get_simultaneous(((1000,), U8))
    m.lock()
    with pytest.raises(WorkspaceLockedError, match="Workspace is locked.*not allowed after locking"):
        m.get_simultaneous(((5000,), U8))
    assert m.stats()["allocations_after_lock"] == 0
    m.unlock()
    m.get_simultaneous(((5000,), U8))
    assert m.slot_sizes()[0] == 5120


def test_debug_log_names_the_policy_and_the_deferred_reallocation(monkeypatch, caplog) -> None:
    monkeypatch.setenv(workspace.DEBUG_ENV, "1")
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    caplog.set_level(logging.INFO, logger="workspace.manager")
    m.get_simultaneous(((1024,), U8))
    m.lock()
    msgs = [r.getMessage() for r in caplog.records if r.name == "workspace.manager"]
    assert any("resize" in s and "growth deferred-lockstep" in s for s in msgs)
    assert any("slot 1 (ubatch 1) reallocated at its lock" in s for s in msgs)


# ---------------------------------------------------------------------- threads


def test_deferred_hits_racing_with_a_growing_sibling_never_see_foreign_writes() -> None:
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    with use_ubatch(0):
        m.get_simultaneous(((64,), torch.int64))
    stop = threading.Event()

    def body(i, barrier):
        barrier.wait()
        if i == 1:
            try:
                for k in range(1, 40):
                    (mine,) = m.get_simultaneous(((1024 * k,), U8))
                    mine.fill_(0xAB)
                    time.sleep(0)
            finally:
                stop.set()
            return 0, 1
        bad = calls = 0
        deadline = time.monotonic() + slack(10)
        while not stop.is_set() and time.monotonic() < deadline:
            (v,) = m.get_simultaneous(((64,), torch.int64))
            v.fill_(calls)
            time.sleep(0)
            bad += not bool((v == calls).all())
            calls += 1
        return bad, calls

    (bad, calls), _ = run_ubatches(2, body, join_s=20.0)
    assert bad == 0 and calls > 0
    assert m.slot_sizes() == [39 * 1024] * 2
    with use_ubatch(0):
        (v,) = m.get_simultaneous(((64,), torch.int64))
    assert inside(v, m.slot_ranges()[0])
    del v
    assert m.orphaned_bytes() == 0


def test_lock_orphans_only_a_view_held_across_it_and_warns(caplog) -> None:
    m = WorkspaceManager("cpu", 2, growth="deferred-lockstep")
    with use_ubatch(1):
        (held,) = m.get_simultaneous(((1000,), U8))  # ubatch 1 keeps this past the growth and lock
    with use_ubatch(0):
        m.get_simultaneous(((4000,), U8))
    caplog.set_level(logging.WARNING, logger="workspace.manager")
    m.lock()
    assert m.pending_slots() == [] and m.orphaned_bytes() == 1024
    assert "lock(): the slot of ubatch 1 grew while it held views" in caplog.text
    del held
    assert m.orphaned_bytes() == 0
