"""Isolation under concurrency: canaries, byte ranges, lockstep growth and orphaned sibling views.

Every ubatch fills every view it gets from ``get_simultaneous`` with a byte pattern unique to
(ubatch, step, call, view), yields at random points (so the other ubatches run, request, grow and
write), and checks its pattern afterwards. Every view handed to ubatch k must lie inside slot k's
current buffer, slots never share storage, the views of one call never overlap, and no live view
of one ubatch overlaps a live view of another. All randomness is drawn in the main thread from a
seed; the ubatch threads get immutable plans.
"""

from __future__ import annotations

import random
import time
import weakref
from dataclasses import dataclass

import pytest
import torch

import dbo
from dbo import registry
from dbo.api import (
    dbo_yield,
    dbo_yield_and_switch_from_comm_to_compute,
    dbo_yield_and_switch_from_compute_to_comm,
)
from dbo.streams import current_stream
from tests.support.isolation import Isolation
from tests.support.orchestrators import BACKENDS, LAYOUTS, orchestrator
from tests.support.timing import slack
from tests.support.views import DTYPES, as_bytes, extent, pattern
from workspace import WorkspaceLockedError, WorkspaceManager
from workspace.layout import canonical_request, plan
from workspace.tracking import LiveBytesTracker

MiB = 1 << 20


def _orch(n, backend="virtual", layout="per-ubatch", **kw):
    kw.setdefault("step_timeout", slack(60.0))
    return orchestrator(n, backend, layout, **kw)


# ---------------------------------------------------------------------------------------------
# plans (drawn in the main thread)

YIELD_APIS = {
    "yield": dbo_yield,
    "c2m": dbo_yield_and_switch_from_compute_to_comm,
    "m2c": dbo_yield_and_switch_from_comm_to_compute,
}


@dataclass(frozen=True)
class Call:
    specs: tuple  # ((shape, dtype), ...)
    key: int
    before: tuple[str, ...]  # yields before the request
    between: tuple[str, ...]  # yields between the fill and the check (at least one)
    sleep0: bool


@dataclass(frozen=True)
class StepPlan:
    calls: tuple[tuple[Call, ...], ...]  # per ubatch
    locked: bool


def _draw_specs(rng: random.Random, max_total: int | None) -> tuple:
    while True:
        specs = []
        for _ in range(rng.randint(1, 4)):
            ndim = rng.randint(0, 3)
            shape = tuple(
                rng.choice((0, 1, 2, 3, 5, 7, 16, 33)) if rng.random() < 0.3 else rng.randint(1, 24)
                for _ in range(ndim)
            )
            specs.append((shape, rng.choice(DTYPES)))
        specs = tuple(specs)
        if max_total is None or plan(canonical_request(specs)).total <= max_total:
            return specs


def _draw_yields(rng: random.Random, on_comm: list[bool], lo: int, hi: int) -> tuple[str, ...]:
    out = []
    for _ in range(rng.randint(lo, hi)):
        api = rng.choice(("yield", "m2c" if on_comm[0] else "c2m"))
        if api != "yield":
            on_comm[0] = not on_comm[0]
        out.append(api)
    return tuple(out)


def draw_plans(seed: int, n: int, warm_steps: int, locked_steps: int, calls: tuple[int, int]) -> list[StepPlan]:
    """Warmup steps with random requests (growth from random ubatches), then locked steps that fit."""
    rng = random.Random(seed)
    steps = []
    capacity = 0
    key = seed * 1_000_003
    for s in range(warm_steps + locked_steps):
        locked = s >= warm_steps
        per_ubatch = []
        for u in range(n):
            on_comm = [False]  # every ubatch starts a step on its compute stream
            cs = []
            for _ in range(rng.randint(*calls)):
                specs = _draw_specs(rng, capacity if locked else None)
                if not locked:
                    capacity = max(capacity, plan(canonical_request(specs)).total)
                key += 1
                cs.append(
                    Call(
                        specs,
                        key,
                        _draw_yields(rng, on_comm, 0, 2),
                        _draw_yields(rng, on_comm, 1, 3),
                        rng.random() < 0.3,
                    )
                )
            per_ubatch.append(tuple(cs))
        steps.append(StepPlan(tuple(per_ubatch), locked))
    return steps


def run_plan(orch, ws: WorkspaceManager, steps: list[StepPlan], iso: Isolation) -> None:
    """Run the steps; lock the workspace before the first locked step."""

    def fn(uid: int):
        ctx = registry.current_context()
        views = None
        for call in steps_box[0].calls[uid]:
            for api in call.before:
                YIELD_APIS[api]()
            iso.drop(uid)
            views = None  # drop the previous call's views before a call that may grow
            views = ws.get_simultaneous(*call.specs)
            iso.handed_out(uid, views, call.specs)
            expected = []
            for i, v in enumerate(views):
                pat = pattern(call.key * 16 + i, v.numel() * v.element_size())
                expected.append(pat)
                kind = "comm" if current_stream() is ctx.comm_stream else "compute"
                dbo.launch(lambda d, p: d.copy_(p), as_bytes(v), pat, name="canary", kind=kind)
            for api in call.between:
                YIELD_APIS[api]()
                if call.sleep0:
                    time.sleep(0)
            ctx.compute_stream.synchronize()
            ctx.comm_stream.synchronize()
            for i, (v, pat) in enumerate(zip(views, expected)):
                if not torch.equal(as_bytes(v), pat):
                    iso.problem(f"ubatch {uid} call key {call.key}: canary of view {i} overwritten")
        iso.drop(uid)  # our views die with this function: their memory may be reused
        return uid

    steps_box = [None]
    n = orch.num_ubatches
    for s, step in enumerate(steps):
        if step.locked and not ws.is_locked():
            ws.lock()
            allocations = ws.stats()["allocations"]
        steps_box[0] = step
        iso.live.clear()
        assert orch.run(fn, list(range(n))) == list(range(n))
        assert not iso.problems, f"step {s}: {iso.problems[:5]}"
        sizes = ws.slot_sizes()
        if ws.policy.sizes_siblings:
            assert len(set(sizes)) == 1, f"slots not in lockstep after step {s}: {sizes}"
    if ws.is_locked():
        st = ws.stats()
        assert st["allocations"] == allocations, "locked steps allocated"
        assert st["allocations_after_lock"] == 0
        ws.unlock()


# ---------------------------------------------------------------------------------------------
# 1 + 2: canaries and byte ranges


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", range(2, 9))
def test_canaries_and_byte_ranges(n, backend, layout):
    ws = WorkspaceManager("cpu", n)
    iso = Isolation(ws)
    steps = draw_plans(
        seed=1000 + n * 10 + BACKENDS.index(backend) * 2 + LAYOUTS.index(layout),
        n=n,
        warm_steps=3,
        locked_steps=2,
        calls=(1, 3),
    )
    with _orch(n, backend, layout) as orch:
        run_plan(orch, ws, steps, iso)
    assert iso.calls == sum(len(c) for st in steps for c in st.calls)
    assert ws.stats()["grows"] >= 1


@pytest.mark.parametrize("growth", ["lockstep", "deferred-lockstep", "requester"])
@pytest.mark.parametrize("n", [2, 4])
def test_canaries_and_byte_ranges_under_each_growth_policy(n, growth):
    ws = WorkspaceManager("cpu", n, growth=growth)
    iso = Isolation(ws)
    # requester: a locked slot only fits what that slot itself saw during warmup; keep warmup-only.
    locked = 0 if growth == "requester" else 2
    steps = draw_plans(seed=77 + n, n=n, warm_steps=4, locked_steps=locked, calls=(1, 3))
    with _orch(n, "virtual", "shared") as orch:
        run_plan(orch, ws, steps, iso)
    assert not iso.problems


@pytest.mark.stress
@pytest.mark.parametrize("backend", BACKENDS)
def test_canaries_long_run(backend, stress_count):
    """More steps, more calls, more seeds; scale with --stress-count."""
    for rep in range(2 * stress_count):
        n = 2 + rep % 7
        ws = WorkspaceManager("cpu", n, growth=("lockstep", "deferred-lockstep")[rep % 2])
        iso = Isolation(ws)
        steps = draw_plans(seed=5000 + rep, n=n, warm_steps=6, locked_steps=4, calls=(2, 5))
        with _orch(n, backend, LAYOUTS[rep % 2]) as orch:
            run_plan(orch, ws, steps, iso)


def test_isolation_checker_catches_a_cross_slot_view():
    """Positive control: a view of ubatch 0's slot handed to ubatch 1 is reported."""
    ws = WorkspaceManager("cpu", 2)
    iso = Isolation(ws)
    with dbo.use_ubatch(0):
        (mine,) = ws.get_simultaneous(((64,), torch.uint8))
        iso.handed_out(0, [mine], (((64,), torch.uint8),))
    with dbo.use_ubatch(1):
        ws.get_simultaneous(((64,), torch.uint8))
        iso.handed_out(1, [mine[8:16]], (((8,), torch.uint8),))  # a foreign view
    assert any("not carved from slot 1" in p for p in iso.problems)
    assert any("overlaps a live view of ubatch 0" in p for p in iso.problems)


def test_extent_is_the_strided_byte_range():
    buf = torch.empty(1024, dtype=torch.uint8)
    base = buf.data_ptr()
    v = buf[256:].view(torch.float32)[:60].reshape(6, 10)[:, ::3]  # strided: columns 0, 3, 6, 9
    lo, hi = extent(v)
    assert lo == base + 256
    assert hi == base + 256 + (5 * 10 + 9 + 1) * 4
    assert extent(buf[10:10]) == (base + 10, base + 10)


# ---------------------------------------------------------------------------------------------
# 3: lockstep growth under concurrency


@pytest.mark.parametrize("growth", ["lockstep", "deferred-lockstep", "requester"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, grower, at", [(n, g, y) for n in (2, 3, 4) for g in range(n) for y in range(3)])
def test_growth_from_any_ubatch_at_any_yield_point(n, grower, at, backend, growth):
    """Ubatch ``grower`` outgrows the slots when it resumes from yield ``at``; the others hold views.

    lockstep / deferred-lockstep: every slot's capacity is the same at every point, and every
    sibling's views keep their canaries. requester: only the grower's slot grows (the contrast).
    """
    small, big = 4096, 3 * 4096
    ws = WorkspaceManager("cpu", n, growth=growth)
    iso = Isolation(ws)
    seen: list[tuple[int, int, list[int]]] = []

    def fn(uid):
        (v,) = ws.get_simultaneous(((small // 4,), torch.int32))
        iso.handed_out(uid, [v], (((small // 4,), torch.int32),))
        v.fill_(uid + 1)
        for k in range(3):
            dbo_yield()
            if not bool((v == uid + 1).all()):
                iso.problem(f"ubatch {uid}: canary lost after yield {k}")
            if uid == grower and k == at:
                iso.drop(uid)
                del v
                (g,) = ws.get_simultaneous(((big,), torch.uint8))
                iso.handed_out(uid, [g], (((big,), torch.uint8),))
                g.fill_(0xEE)
                del g
                iso.drop(uid)
                (v,) = ws.get_simultaneous(((small // 4,), torch.int32))
                iso.handed_out(uid, [v], (((small // 4,), torch.int32),))
                v.fill_(uid + 1)
            seen.append((uid, k, ws.slot_sizes()))
        iso.drop(uid)
        return uid

    with _orch(n, backend) as orch:
        assert orch.run(fn, list(range(n))) == list(range(n))
    assert not iso.problems, iso.problems
    for uid, k, sizes in seen:
        grown = k > at or (k == at and (uid >= grower))  # ring order: the grower ran before uid
        if growth == "requester":
            assert sizes[grower] == (big if grown else small)
            assert all(sizes[s] == small for s in range(n) if s != grower)
        else:
            assert sizes == [big if grown else small] * n, (uid, k, sizes)
    assert registry.snapshot() == []


@pytest.mark.parametrize("growth", ["lockstep", "deferred-lockstep"])
@pytest.mark.parametrize("n", [2, 4])
def test_sibling_views_across_growth_orphaned_or_deferred(n, growth):
    """Every ubatch holds a 1 MiB view; ubatch 0 grows to 2 MiB; the siblings resume and look.

    lockstep: each sibling's view still works (same storage, canary intact) but is no longer its
    slot's buffer: the old 1 MiB storage is orphaned, kept alive by the view alone, and freed
    exactly when the sibling drops the view. Cost: (N - 1) x old slot size while the views live.
    deferred-lockstep: the sibling's view *is* still its slot's buffer; the slot is reallocated at
    the sibling's next call, after it dropped the view. Nothing is orphaned.
    """
    old, new = 1 * MiB, 2 * MiB
    ws = WorkspaceManager("cpu", n, growth=growth)
    tracker = LiveBytesTracker().attach(ws)  # live and peak bytes of the slot buffers, exactly
    freed: set[int] = set()
    facts: dict[int, dict] = {}
    figures = {}

    def fn(uid):
        (v,) = ws.get_simultaneous(((old,), torch.uint8))
        v.fill_(uid + 1)
        storage_ptr = v.untyped_storage().data_ptr()
        weakref.finalize(v.untyped_storage(), freed.add, uid)
        dbo_yield()
        if uid == 0:
            del v
            (g,) = ws.get_simultaneous(((new,), torch.uint8))  # the growth
            del g
            figures["live_after_growth"] = tracker.live
            figures["orphaned_after_growth"] = ws.orphaned_bytes()
            dbo_yield()
            return uid
        # a sibling resumes holding its old view
        facts[uid] = {
            "same_storage": v.untyped_storage().data_ptr() == storage_ptr,
            "is_slot_buffer": v.untyped_storage().data_ptr() == ws.slot_ranges()[uid][0],
            "canary": bool((v == uid + 1).all()),
            "freed_while_held": uid in freed,
            "pending": ws.slot_of(uid) in ws.pending_slots(),
        }
        live_held = tracker.live
        del v
        facts[uid]["freed_when_dropped"] = uid in freed
        facts[uid]["released"] = live_held - tracker.live
        dbo_yield()
        (w,) = ws.get_simultaneous(((new,), torch.uint8))  # the sibling's own next call
        facts[uid]["next_call_in_slot"] = w.untyped_storage().data_ptr() == ws.slot_ranges()[uid][0]
        return uid

    with _orch(n, "virtual") as orch:
        assert orch.run(fn, list(range(n))) == list(range(n))
    siblings = range(1, n)
    assert all(facts[u]["same_storage"] and facts[u]["canary"] for u in siblings), facts
    assert all(facts[u]["next_call_in_slot"] for u in siblings), facts
    assert ws.slot_sizes() == [new] * n
    if growth == "lockstep":
        assert not any(facts[u]["is_slot_buffer"] for u in siblings), "the sibling's view left its slot"
        assert not any(facts[u]["freed_while_held"] for u in siblings), "the old storage must outlive the view"
        assert all(facts[u]["freed_when_dropped"] for u in siblings), "dropping the view must free it"
        assert all(facts[u]["released"] == old for u in siblings), facts
        assert figures["orphaned_after_growth"] == (n - 1) * old
        assert figures["live_after_growth"] == n * new + (n - 1) * old
        assert tracker.peak == n * new + (n - 1) * old
    else:
        assert all(facts[u]["is_slot_buffer"] and facts[u]["pending"] for u in siblings), facts
        assert figures["orphaned_after_growth"] == 0
        assert figures["live_after_growth"] == new + (n - 1) * old  # siblings still hold 1 MiB each
        assert tracker.peak == n * new
    assert ws.orphaned_bytes() == 0
    print(
        f"\n{growth}, N={n}, {old // MiB} MiB -> {new // MiB} MiB: peak {tracker.peak / MiB:.2f} MiB, "
        f"orphaned while the siblings hold views {figures['orphaned_after_growth'] / MiB:.2f} MiB"
    )


@pytest.mark.parametrize("n", [2, 3])
def test_locked_growth_in_a_ubatch_changes_nothing(n):
    """After lock(), a ubatch whose request does not fit fails the step; nothing is reallocated."""
    ws = WorkspaceManager("cpu", n)
    with dbo.use_ubatch(0):
        ws.get_simultaneous(((4096,), torch.uint8))
    ws.lock()
    before = (ws.slot_sizes(), ws.stats()["allocations"])

    def fn(uid):
        (v,) = ws.get_simultaneous(((1024,), torch.uint8))
        v.fill_(uid)
        dbo_yield()
        if uid == n - 1:
            ws.get_simultaneous(((8192,), torch.uint8))
        assert bool((v == uid).all())
        return uid

    with _orch(n, "virtual") as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, list(range(n)))
    assert info.value.ubatch_id == n - 1
    assert isinstance(info.value.__cause__, WorkspaceLockedError)
    assert (ws.slot_sizes(), ws.stats()["allocations"]) == before
    assert ws.stats()["allocations_after_lock"] == 0


class _EverySlotIsSlotZero(WorkspaceManager):
    """A broken manager for the positive control: every ubatch is routed to slot 0."""

    def get_simultaneous(self, *shapes_and_dtypes):
        return self._get_at(0, shapes_and_dtypes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_canary_checks_catch_a_manager_that_shares_a_slot(backend):
    """Positive control for the whole harness: sharing one slot must be reported."""
    ws = _EverySlotIsSlotZero("cpu", 3)
    iso = Isolation(ws)
    steps = draw_plans(seed=1, n=3, warm_steps=3, locked_steps=0, calls=(1, 3))
    with _orch(3, backend, "shared") as orch:
        with pytest.raises(AssertionError):
            run_plan(orch, ws, steps, iso)
    assert any("canary" in p for p in iso.problems)
    assert any("overlaps a live view" in p for p in iso.problems)
