"""WorkspaceManager on one thread: layout, growth, lock, errors, hot path, debug logging, singleton."""

from __future__ import annotations

import inspect
import logging
import os
import threading
import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dbo
import workspace
from dbo.registry import use_ubatch
from tests.support.timing import slack
from tests.support.views import start_of
from workspace import WorkspaceLockedError, WorkspaceManager
from workspace import manager as manager_mod
from workspace.layout import align_up, canonical_request, canonical_shape, plan

MIB = 1024 * 1024
F32 = torch.float32


def byte_range(t: torch.Tensor) -> tuple[int, int]:
    start = start_of(t)
    return start, start + t.numel() * t.element_size()


class OpRecorder(TorchDispatchMode):
    """Records every torch op dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def ws() -> WorkspaceManager:
    return WorkspaceManager("cpu")


# ---------------------------------------------------------------------- layout


def test_align_up() -> None:
    assert [align_up(n) for n in (0, 1, 255, 256, 257, 512)] == [0, 256, 256, 256, 512, 512]
    assert align_up(5, 4) == 8
    with pytest.raises(ValueError):
        align_up(-1)


def test_plan_offsets_are_running_sum_of_rounded_sizes() -> None:
    u8 = torch.uint8
    layout = plan(canonical_request([((10,), u8), ((300,), u8), ((0,), u8), ((1,), u8), ((64,), F32)]))
    assert layout.nbytes == (10, 300, 0, 1, 256)
    assert layout.offsets == (0, 256, 768, 768, 1024)
    assert layout.total == 1280
    assert layout.exact_total == 567


def test_canonical_shape_forms() -> None:
    assert canonical_shape((2, 3)) == (2, 3)
    assert canonical_shape([2, 3]) == (2, 3)
    assert canonical_shape(torch.Size([2, 3])) == (2, 3)
    assert canonical_shape(7) == (7,)
    assert canonical_shape(np.int64(7)) == (7,)
    assert canonical_shape(()) == ()
    assert all(type(d) is int for d in canonical_shape((np.int32(2), 3)))


# ---------------------------------------------------------------------- construction


def test_defaults_to_two_slots_and_accepts_device_forms() -> None:
    assert WorkspaceManager("cpu").num_slots == 2
    assert WorkspaceManager(torch.device("cpu"), 3).num_slots == 3
    assert WorkspaceManager("cpu", 1).slot_sizes() == [0]
    assert WorkspaceManager("cpu").device == torch.device("cpu")


@pytest.mark.parametrize(
    "n, exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("2", TypeError), (True, TypeError)]
)
def test_bad_num_ubatches(n, exc) -> None:
    with pytest.raises(exc, match="num_ubatches"):
        WorkspaceManager("cpu", n)


@pytest.mark.parametrize("device, exc", [(3, TypeError), (None, TypeError), ("no-such-device", ValueError)])
def test_bad_device(device, exc) -> None:
    with pytest.raises(exc):
        WorkspaceManager(device)


# ---------------------------------------------------------------------- get_simultaneous


def test_views_in_order_aligned_exact_and_disjoint(ws: WorkspaceManager) -> None:
    specs = [
        ((3, 5), F32),
        ((7,), torch.int8),
        ((2, 2, 2), torch.float64),
        ((0, 4), torch.float16),
        ((1,), torch.bfloat16),
    ]
    with use_ubatch(0):
        views = ws.get_simultaneous(*specs)
    base, cap = ws.slot_ranges()[0]
    assert len(views) == len(specs)
    expected = plan(canonical_request(specs))
    assert cap == expected.total == ws.slot_sizes()[0]
    for v, (shape, dtype), off, size in zip(views, specs, expected.offsets, expected.nbytes):
        assert tuple(v.shape) == shape and v.dtype == dtype and v.is_contiguous()
        assert start_of(v) - base == off
        assert (start_of(v) - base) % 256 == 0
        if base % 256 == 0:
            assert start_of(v) % 256 == 0
        assert v.numel() * v.element_size() == size
    nonempty = [byte_range(v) for v in views if v.numel()]
    starts = [s for s, _ in nonempty]
    assert starts == sorted(starts), "views must be laid out in request order"
    for (s1, e1), (s2, _) in zip(nonempty, nonempty[1:]):
        assert e1 <= s2, "views of one call overlap"


def test_absolute_alignment_when_slot_base_is_aligned() -> None:
    class AlignedBase(WorkspaceManager):
        def _allocate(self, nbytes: int) -> torch.Tensor:
            raw = torch.empty(nbytes + 256, dtype=torch.uint8)
            skip = (-raw.data_ptr()) % 256
            return raw[skip : skip + nbytes]

    m = AlignedBase("cpu")
    with use_ubatch(1):
        views = m.get_simultaneous(((3,), torch.int8), ((17,), F32), ((1,), torch.complex128))
    assert m.slot_ranges()[1][0] % 256 == 0
    assert [v.data_ptr() % 256 for v in views] == [0, 0, 0]


def test_shape_forms_and_empty_request(ws: WorkspaceManager) -> None:
    a, b, c, d = ws.get_simultaneous(((2, 3), F32), ([4, 5], F32), (torch.Size([6]), F32), (7, F32))
    assert [tuple(t.shape) for t in (a, b, c, d)] == [(2, 3), (4, 5), (6,), (7,)]
    assert ws.get_simultaneous() == []
    (z,) = ws.get_simultaneous(((0,), F32))
    assert z.numel() == 0


def test_zero_byte_request_on_fresh_manager_allocates_nothing(ws: WorkspaceManager) -> None:
    (z,) = ws.get_simultaneous(((0, 3), F32))
    assert tuple(z.shape) == (0, 3)
    assert ws.slot_sizes() == [0, 0]
    assert ws.stats()["allocations"] == 0


def test_views_are_writable_scratch(ws: WorkspaceManager) -> None:
    a, b = ws.get_simultaneous(((4,), F32), ((4,), torch.int64))
    a.copy_(torch.arange(4.0))
    b.fill_(-1)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert b.tolist() == [-1] * 4


# ---------------------------------------------------------------------- growth


def test_growth_is_exact_lazy_lockstep_and_never_shrinks() -> None:
    m = WorkspaceManager("cpu", 3, growth="lockstep")
    assert m.slot_sizes() == [0, 0, 0]
    with use_ubatch(2):
        m.get_simultaneous(((1000,), torch.uint8))
    assert m.slot_sizes() == [1024, 1024, 1024]
    with use_ubatch(0):
        m.get_simultaneous(((10,), torch.uint8), ((5000,), torch.uint8))
    assert m.slot_sizes() == [256 + 5120] * 3
    with use_ubatch(1):
        m.get_simultaneous(((8,), torch.uint8))
    assert m.slot_sizes() == [5376] * 3
    s = m.stats()
    assert s["grows"] == 2 and s["allocations"] == 6 and s["bytes_reserved"] == 3 * 5376


def test_slots_never_share_storage_and_views_stay_in_own_slot() -> None:
    m = WorkspaceManager("cpu", 3)
    spec = [((100,), F32), ((33,), torch.int16)]
    views = {}
    for u in (0, 1, 2):
        with use_ubatch(u):
            views[u] = m.get_simultaneous(*spec)
    ranges = m.slot_ranges()
    storages = {u: {v.untyped_storage().data_ptr() for v in views[u]} for u in views}
    assert all(len(s) == 1 for s in storages.values())
    assert len({next(iter(s)) for s in storages.values()}) == 3, "slots share storage"
    for u, vs in views.items():
        base, size = ranges[u]
        for v in vs:
            s, e = byte_range(v)
            assert base <= s and e <= base + size, f"ubatch {u} view outside its slot"
    # ranges of different slots are disjoint
    spans = sorted((b, b + n) for b, n in ranges)
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))


def test_growth_invalidates_cached_views() -> None:
    m = WorkspaceManager("cpu", 2)
    small = ((16,), F32)
    with use_ubatch(0):
        (old,) = m.get_simultaneous(small)
        del old  # not held: growth may free it
        m.get_simultaneous(((1 << 16,), torch.uint8))  # grows every slot
        (new,) = m.get_simultaneous(small)
    base, size = m.slot_ranges()[0]
    assert base <= new.data_ptr() < base + size
    assert new.data_ptr() == base
    assert m.stats()["grows"] == 2


def test_held_views_survive_growth_but_leave_the_slot() -> None:
    # The documented cost of growth: a holder keeps the old storage alive; its views stay valid memory.
    m = WorkspaceManager("cpu", 2)
    (held,) = m.get_simultaneous(((8,), torch.int32))
    held.copy_(torch.arange(8, dtype=torch.int32))
    m.get_simultaneous(((4096,), torch.int32))
    assert held.tolist() == list(range(8))
    base, size = m.slot_ranges()[0]
    assert not (base <= held.data_ptr() < base + size)


def test_allocation_failure_leaves_all_slots_empty_and_retries() -> None:
    class Flaky(WorkspaceManager):
        calls = 0

        def _allocate(self, nbytes: int) -> torch.Tensor:
            Flaky.calls += 1
            if Flaky.calls == 3:  # the second slot of the second growth
                raise MemoryError("simulated out of memory")
            return super()._allocate(nbytes)

    m = Flaky("cpu", 2, growth="lockstep")
    m.get_simultaneous(((10,), torch.uint8))
    with pytest.raises(MemoryError):
        m.get_simultaneous(((1000,), torch.uint8))
    assert m.slot_sizes() == [0, 0]
    (v,) = m.get_simultaneous(((1000,), torch.uint8))
    assert m.slot_sizes() == [1024, 1024] and v.numel() == 1000


def test_bad_allocate_override_is_rejected() -> None:
    class Wrong(WorkspaceManager):
        def _allocate(self, nbytes: int) -> torch.Tensor:
            return torch.empty(nbytes, dtype=torch.float32)

    with pytest.raises(RuntimeError, match="1-D uint8"):
        Wrong("cpu").get_simultaneous(((4,), F32))


# ---------------------------------------------------------------------- lock


def _grow_while_locked(m: WorkspaceManager) -> None:
    m.get_simultaneous(((3 * MIB // 4,), F32))  # 3 MiB


def test_lock_reuses_memory_and_refuses_growth_with_actionable_message(ws: WorkspaceManager) -> None:
    (first,) = ws.get_simultaneous(((MIB // 4,), F32))  # 1 MiB
    ptr = first.data_ptr()
    ws.lock()
    assert ws.is_locked()
    (same,) = ws.get_simultaneous(((MIB // 4,), F32))
    (smaller,) = ws.get_simultaneous(((1000,), torch.float16))
    a, b = ws.get_simultaneous(((100,), F32), ((200,), torch.int64))
    assert same.data_ptr() == ptr and smaller.data_ptr() == ptr and a.data_ptr() == ptr
    sizes, stats = ws.slot_sizes(), ws.stats()

    with pytest.raises(WorkspaceLockedError) as info:
        line = inspect.currentframe().f_lineno + 1
        ws.get_simultaneous(((3 * MIB // 4,), F32))
    err = info.value
    msg = str(err)
    assert isinstance(err, AssertionError)
    assert msg.startswith("Workspace is locked")
    assert (
        f"{os.path.basename(__file__)}:{line}:test_lock_reuses_memory_and_refuses_growth_with_actionable_message" in msg
    )
    assert "3.00 MiB" in msg and "1.00 MiB" in msg
    assert "not allowed after locking" in msg
    assert (err.required_bytes, err.current_bytes, err.ubatch_id) == (3 * MIB, MIB, 0)

    with pytest.raises(WorkspaceLockedError) as info:
        _grow_while_locked(ws)
    assert ":_grow_while_locked" in str(info.value)

    assert ws.slot_sizes() == sizes and ws.stats() == stats
    assert ws.stats()["allocations_after_lock"] == 0

    ws.unlock()
    assert not ws.is_locked()
    (big,) = ws.get_simultaneous(((3 * MIB // 4,), F32))
    assert ws.slot_sizes() == [3 * MIB, 3 * MIB]
    ws.lock()
    (again,) = ws.get_simultaneous(((3 * MIB // 4,), F32))
    assert again.data_ptr() == big.data_ptr()


def test_lock_before_any_use_refuses_first_growth(ws: WorkspaceManager) -> None:
    ws.lock()
    with pytest.raises(WorkspaceLockedError, match=r"^Workspace is locked.*0\.00 MiB"):
        ws.get_simultaneous(((1,), torch.uint8))
    assert ws.get_simultaneous(((0,), torch.uint8))[0].numel() == 0  # zero bytes always fit


# ---------------------------------------------------------------------- hot path


def test_hot_path_issues_no_torch_ops_and_no_allocations(ws: WorkspaceManager) -> None:
    specs = (((64, 128), F32), ((64,), torch.int32), ((16, 8, 4), torch.bfloat16))
    list_specs = (([64, 128], F32), ([64], torch.int32))
    with use_ubatch(1):
        with OpRecorder() as cold:
            warm = ws.get_simultaneous(*specs)
        assert cold.ops, "the recorder must see the cold path's ops (positive control)"
        ws.get_simultaneous(*list_specs)
        ws.get_simultaneous((64, torch.int32))
        ws.lock()
        before = ws.stats()
        with OpRecorder() as hot:
            for _ in range(100):
                got = ws.get_simultaneous(*specs)
                ws.get_simultaneous(*list_specs)
                ws.get_simultaneous((64, torch.int32))
        assert hot.ops == []
        assert all(g is w for g, w in zip(got, warm)), "hot path must hand out the cached views"
        assert got is not ws.get_simultaneous(*specs), "each call returns a fresh list"
    after = ws.stats()
    assert after["allocations"] == before["allocations"]
    assert after["allocations_after_lock"] == 0
    assert after["cache_misses"] == before["cache_misses"]


def test_cache_is_bounded(ws: WorkspaceManager, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_mod, "CACHE_LIMIT", 8)
    for n in range(1, 30):
        ws.get_simultaneous(((n,), torch.uint8))
    s = ws.stats()
    assert s["cache_entries"] <= 8
    assert s["cache_clears"] >= 3


# ---------------------------------------------------------------------- bad input


BAD_REQUESTS = [
    pytest.param((((-1, 2), F32),), ValueError, id="negative-dim"),
    pytest.param((((2.5, 2), F32),), TypeError, id="float-dim"),
    pytest.param((((2.0, 2), F32),), TypeError, id="integral-float-dim"),
    pytest.param((((True, 2), F32),), TypeError, id="bool-dim"),
    pytest.param(((True, F32),), TypeError, id="bool-shape"),
    pytest.param(((-3, F32),), ValueError, id="negative-int-shape"),
    pytest.param((("4", F32),), TypeError, id="str-shape"),
    pytest.param(((None, F32),), TypeError, id="none-shape"),
    pytest.param((((2,), "float32"),), TypeError, id="str-dtype"),
    pytest.param((((2,), np.float32),), TypeError, id="numpy-dtype"),
    pytest.param((((2,), None),), TypeError, id="none-dtype"),
    pytest.param((((2,), F32, 0),), TypeError, id="triple"),
    pytest.param(((2, 3),), TypeError, id="pair-of-ints"),
    pytest.param((F32,), TypeError, id="bare-dtype"),
    pytest.param((None,), TypeError, id="none-spec"),
    pytest.param((((4,), F32), ((2, -2), F32)), ValueError, id="second-spec-bad"),
]


@pytest.mark.parametrize("request_, exc", BAD_REQUESTS)
def test_bad_input_raises_and_changes_nothing(ws: WorkspaceManager, request_, exc) -> None:
    # Warm the cache with value-equal good requests, so a bad one cannot sneak through a cache hit.
    ws.get_simultaneous(((1, 2), F32))
    ws.get_simultaneous(((2, 2), F32))
    ws.get_simultaneous((1, F32))
    ws.get_simultaneous(((4,), F32))
    sizes, stats, ranges = ws.slot_sizes(), ws.stats(), ws.slot_ranges()
    with pytest.raises(exc):
        ws.get_simultaneous(*request_)
    assert ws.slot_sizes() == sizes
    assert ws.stats() == stats
    assert ws.slot_ranges() == ranges


def test_ubatch_beyond_slots() -> None:
    m = WorkspaceManager("cpu", 2)
    with use_ubatch(2):
        with pytest.raises(ValueError, match=r"ubatch id 2.*2 slot.*num_ubatches >= 3"):
            m.get_simultaneous(((4,), F32))
    assert m.slot_sizes() == [0, 0] and m.stats()["grows"] == 0


def test_non_ubatch_thread_during_step_is_refused(ws: WorkspaceManager) -> None:
    inside, release = threading.Event(), threading.Event()

    def ubatch0() -> None:
        with use_ubatch(0):
            inside.set()
            release.wait(slack(5))

    t = threading.Thread(target=ubatch0, name="ubatch-0", daemon=True)
    t.start()
    try:
        assert inside.wait(slack(5))
        with pytest.raises(dbo.UnregisteredThreadError):
            ws.get_simultaneous(((4,), F32))
    finally:
        release.set()
        t.join(slack(5))
    assert not t.is_alive()
    assert ws.slot_sizes() == [0, 0]


# ---------------------------------------------------------------------- debug mode


def test_debug_logging_of_resize_lock_unlock(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(workspace.DEBUG_ENV, "1")
    m = WorkspaceManager("cpu", 2)
    caplog.set_level(logging.INFO, logger="workspace.manager")
    with use_ubatch(1):
        m.get_simultaneous(((MIB // 4,), F32))
        m.get_simultaneous(((MIB // 2,), F32))
        m.get_simultaneous(((10,), F32))  # fits: no log
    m.lock()
    m.unlock()
    msgs = [r.getMessage() for r in caplog.records if r.name == "workspace.manager"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "workspace.manager")
    resizes = [m_ for m_ in msgs if "resize" in m_]
    assert len(resizes) == 2
    assert os.path.basename(__file__) in resizes[0] and "test_debug_logging_of_resize_lock_unlock" in resizes[0]
    assert "0.00 MiB -> 1.00 MiB" in resizes[0] and "1.00 MiB -> 2.00 MiB" in resizes[1]
    assert "2 slots" in resizes[1] and "4.00 MiB total" in resizes[1] and "ubatch 1" in resizes[1]
    locks = [m_ for m_ in msgs if m_.startswith("workspace locked")]
    unlocks = [m_ for m_ in msgs if m_.startswith("workspace unlocked")]
    assert len(locks) == 1 and len(unlocks) == 1
    assert "2.00 MiB, 2.00 MiB" in locks[0] and "4.00 MiB total" in unlocks[0]


def test_no_logging_without_debug_env(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(workspace.DEBUG_ENV, raising=False)
    m = WorkspaceManager("cpu")
    caplog.set_level(logging.DEBUG, logger="workspace")
    m.get_simultaneous(((1000,), F32))
    m.lock()
    m.unlock()
    assert [r for r in caplog.records if r.name.startswith("workspace")] == []


def test_debug_mode_catches_metadata_changes_on_shared_views(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(workspace.DEBUG_ENV, "1")
    m = WorkspaceManager("cpu")
    (v,) = m.get_simultaneous(((4, 4), F32))
    v.unsqueeze_(0)  # forbidden: changes the shared handle
    with pytest.raises(RuntimeError, match="changed in place"):
        m.get_simultaneous(((4, 4), F32))


# ---------------------------------------------------------------------- singleton


@pytest.fixture
def no_global_manager():
    workspace.reset_workspace_manager()
    yield
    workspace.reset_workspace_manager()


def test_singleton_lifecycle(no_global_manager) -> None:
    assert not workspace.is_workspace_manager_initialized()
    with pytest.raises(RuntimeError, match="not initialized"):
        workspace.current_workspace_manager()
    with pytest.raises(RuntimeError):
        workspace.lock_workspace()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = workspace.init_workspace_manager("cpu")
    assert workspace.is_workspace_manager_initialized()
    assert workspace.current_workspace_manager() is first and first.num_slots == 2
    workspace.lock_workspace()
    assert first.is_locked()
    workspace.unlock_workspace()
    assert not first.is_locked()
    with pytest.warns(UserWarning, match="replacing"):
        second = workspace.init_workspace_manager(torch.device("cpu"), 4)
    assert workspace.current_workspace_manager() is second and second.num_slots == 4
    with pytest.raises(ValueError):
        workspace.init_workspace_manager("cpu", 0)
    assert workspace.current_workspace_manager() is second, "a failed init must keep the old manager"
    workspace.reset_workspace_manager()
    assert not workspace.is_workspace_manager_initialized()


def test_public_api_is_reexported() -> None:
    for name in (
        "WorkspaceManager",
        "WorkspaceLockedError",
        "init_workspace_manager",
        "current_workspace_manager",
        "is_workspace_manager_initialized",
        "lock_workspace",
        "unlock_workspace",
        "reset_workspace_manager",
    ):
        assert hasattr(workspace, name) and name in workspace.__all__
    assert issubclass(WorkspaceLockedError, AssertionError)
