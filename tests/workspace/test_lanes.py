"""Lanes (slot = ubatch * lanes + lane), the one get_simultaneous path, and persistent resources."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import workspace
from dbo.registry import use_ubatch
from tests.support.timing import slack
from workspace import WorkspaceLockedError, WorkspaceManager, current_workspace_lane, use_workspace_lane

U8 = torch.uint8
F32 = torch.float32


@pytest.fixture
def global_manager():
    workspace.reset_workspace_manager()
    yield
    workspace.reset_workspace_manager()


def ptr(m: WorkspaceManager, spec) -> int:
    return m.get_simultaneous(spec)[0].data_ptr()


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("lanes", "exc"), [(0, ValueError), (-1, ValueError), (True, TypeError), ("2", TypeError), (None, TypeError)]
)
def test_bad_lane_counts(lanes, exc) -> None:
    with pytest.raises(exc):
        WorkspaceManager("cpu", 2, num_lanes=lanes)


def test_slot_is_ubatch_times_lanes_plus_lane() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2)
    assert m.num_slots == 4 and m.num_ubatches == 2 and m.num_lanes == 2
    assert [m.slot_of(u, lane) for u in (0, 1) for lane in (0, 1)] == [0, 1, 2, 3]
    assert m.owner_of(3) == (1, 1) and m.stats()["num_lanes"] == 2


def test_use_workspace_lane_validates_and_restores(global_manager) -> None:
    workspace.init_workspace_manager("cpu", 2, num_lanes=2)
    assert current_workspace_lane() == 0
    with use_workspace_lane(1) as lane:
        assert lane == 1 and current_workspace_lane() == 1
    assert current_workspace_lane() == 0
    with pytest.raises(ValueError, match="lane must be >= 0"):
        with use_workspace_lane(-1):
            pass
    with pytest.raises(TypeError):
        with use_workspace_lane(True):
            pass
    with pytest.raises(RuntimeError, match="lane 2 is not configured.*2 lane"):
        with use_workspace_lane(2):
            pass


def test_an_unconfigured_lane_is_refused_by_any_manager(global_manager) -> None:
    one = WorkspaceManager("cpu", 2)
    two = WorkspaceManager("cpu", 2, num_lanes=2)
    with use_workspace_lane(1):  # no process-global manager: checked at use
        with pytest.raises(RuntimeError, match="lane 1 is not configured"):
            one.get_simultaneous(((4,), F32))
        two.get_simultaneous(((4,), F32))
    with use_workspace_lane(2):
        with pytest.raises(RuntimeError, match="lane 2 is not configured"):
            two.get_simultaneous(((4,), F32))
        with pytest.raises(RuntimeError, match="lane 2 is not configured"):
            two.get_persistent("k", (1,), F32)


class _Recorder(workspace.WorkspaceObserver):
    def __init__(self) -> None:
        self.handed: list[tuple[int, list[int]]] = []

    def views_handed_out(self, manager, slot, views) -> None:
        self.handed.append((slot, [v.data_ptr() for v in views]))


@pytest.mark.parametrize("observed", [False, True])
@pytest.mark.parametrize("warm", ["hit", "miss"])
def test_a_lane_out_of_range_raises_the_same_error_on_hit_and_miss_with_or_without_observers(
    global_manager, observed: bool, warm: str
) -> None:
    m = WorkspaceManager("cpu", 2)  # one lane
    if observed:
        m.add_observer(_Recorder())
    spec = ((8,), F32)
    if warm == "hit":
        m.get_simultaneous(spec)  # lane 0 has this request cached: a lane-1 call must not reuse it
    with use_workspace_lane(1):
        with pytest.raises(workspace.errors.LaneNotConfiguredError) as info:
            m.get_simultaneous(spec)
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, workspace.WorkspaceError)
    assert str(info.value) == (
        "workspace lane 1 is not configured: the workspace manager has 1 lane(s) (0..0); "
        "create it with num_lanes >= 2 to use use_workspace_lane(1)"
    )
    assert m.get_simultaneous(spec)[0].data_ptr() == m.slot_ranges()[0][0], "lane 0 still works"


@pytest.mark.parametrize("lanes", [1, 3])
def test_observers_see_every_hand_out_and_change_nothing(lanes: int) -> None:
    plain = WorkspaceManager("cpu", 2, num_lanes=lanes)
    watched = WorkspaceManager("cpu", 2, num_lanes=lanes)
    rec = _Recorder()
    watched.add_observer(rec)
    assert "get_simultaneous" not in vars(watched), "observing swaps nothing on the instance"

    def offsets(m: WorkspaceManager) -> list[tuple[int, int]]:
        out = []
        for u in (0, 1):
            with use_ubatch(u):
                for lane in range(lanes):
                    with use_workspace_lane(lane):
                        for _ in range(2):  # a miss, then a hit
                            a, b = m.get_simultaneous(((5,), F32), ((3,), U8))
                            base = m.slot_ranges()[m.slot_of(u, lane)][0]
                            out.append((a.data_ptr() - base, b.data_ptr() - base))
        return out

    assert offsets(plain) == offsets(watched)
    expected_slots = [watched.slot_of(u, lane) for u in (0, 1) for lane in range(lanes) for _ in range(2)]
    assert [slot for slot, _ in rec.handed] == expected_slots
    watched.remove_observer(rec)
    watched.get_simultaneous(((5,), F32), ((3,), U8))
    assert len(rec.handed) == len(expected_slots), "a detached observer hears nothing"


def test_new_threads_start_in_lane_zero() -> None:
    seen = []
    with use_workspace_lane(1):
        t = threading.Thread(target=lambda: seen.append(current_workspace_lane()), daemon=True)
        t.start()
        t.join(slack(5))
    assert seen == [0]


# ---------------------------------------------------------------------- scratch per lane


def test_lanes_do_not_alias_and_untouched_slots_stay_empty() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2, growth="requester")
    assert m.slot_sizes() == [0, 0, 0, 0]
    with use_ubatch(0):
        a = ptr(m, ((512,), U8))
        with use_workspace_lane(1):
            b = ptr(m, ((256,), U8))
            assert ptr(m, ((100,), U8)) == b, "a smaller request reuses the same memory"
    assert a != b and m.slot_sizes() == [512, 256, 0, 0]


def test_two_ubatches_times_two_lanes_give_four_distinct_buffers() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2)
    ptrs = set()
    for u in (0, 1):
        with use_ubatch(u):
            for lane in (0, 1):
                with use_workspace_lane(lane):
                    ptrs.add(ptr(m, ((1024,), U8)))
    assert len(ptrs) == 4
    spans = sorted((b, b + n) for b, n in m.slot_ranges())
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))


@pytest.mark.parametrize("growth", ["lockstep", "deferred-lockstep"])
def test_lockstep_policies_grow_within_a_lane_only(growth) -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2, growth=growth)
    with use_workspace_lane(1):
        m.get_simultaneous(((4096,), U8))  # main thread: ubatch 0, lane 1
    assert m.slot_sizes() == [0, 4096, 0, 4096], "the draft lane must not size the target lane"
    m.lock()
    assert m.undersized_slots() == [] and m.pending_slots() == []


def test_locked_lanes_reuse_memory_and_refuse_growth_naming_the_lane() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2)
    with use_ubatch(1), use_workspace_lane(1):
        p = ptr(m, ((1024,), U8))
        m.lock()
        assert ptr(m, ((1024,), U8)) == p and ptr(m, ((10,), F32)) == p
        with pytest.raises(WorkspaceLockedError, match="Workspace is locked.*ubatch 1, lane 1") as info:
            m.get_simultaneous(((4096,), U8))
        assert (info.value.ubatch_id, info.value.lane) == (1, 1)
        m.unlock()
        m.get_simultaneous(((4096,), U8))
    assert m.slot_sizes()[3] == 4096


def test_lanes_hot_path_issues_no_torch_ops() -> None:
    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    m = WorkspaceManager("cpu", 2, num_lanes=2)
    spec = ((16, 16), F32)
    with use_ubatch(1), use_workspace_lane(1):
        first = m.get_simultaneous(spec)
        with Ops() as rec:
            again = m.get_simultaneous(spec)
    assert rec.ops == [] and again[0] is first[0]


def test_ubatch_beyond_slots_with_lanes() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2)
    with use_ubatch(2), use_workspace_lane(1):
        with pytest.raises(ValueError, match=r"ubatch id 2 \(lane 1\) has no workspace slot.*num_ubatches >= 3"):
            m.get_simultaneous(((4,), F32))


# ---------------------------------------------------------------------- persistent resources


def test_persistent_resource_built_once_per_slot_and_cached() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2)
    calls = []

    def factory():
        calls.append(1)
        return {"buf": torch.full((4,), float(len(calls)))}

    got = {}
    for u in (0, 1):
        with use_ubatch(u):
            for lane in (0, 1):
                with use_workspace_lane(lane):
                    got[u, lane] = m.get_persistent_resource("meta", factory)
                    assert m.get_persistent_resource("meta", factory) is got[u, lane]
    assert len(calls) == 4 and len({id(v) for v in got.values()}) == 4
    assert got[1, 1]["buf"].tolist() == [4.0] * 4, "contents preserved"
    assert m.persistent_keys(1, 1) == ["meta"]


def test_after_lock_no_new_persistent_resource_and_unlock_allows_it() -> None:
    m = WorkspaceManager("cpu", 2, num_lanes=2)
    m.get_persistent_resource("a", object)  # ubatch 0, lane 0
    m.lock()
    assert m.get_persistent_resource("a", object) is not None  # existing: fine
    locked = r"persistent resource 'b'.*ubatch 0, lane 0.*not allowed after locking"
    with pytest.raises(WorkspaceLockedError, match=locked) as info:
        m.get_persistent_resource("b", object)
    assert info.value.key == "b" and isinstance(info.value, AssertionError)
    with use_workspace_lane(1):  # the same key in another lane is another resource: refused too
        with pytest.raises(WorkspaceLockedError, match="lane 1"):
            m.get_persistent_resource("a", object)
        with pytest.raises(WorkspaceLockedError):
            m.get_persistent("t", (2,), F32)
    m.unlock()
    with use_workspace_lane(1):
        m.get_persistent_resource("a", object)


def test_a_factory_may_use_the_workspace() -> None:
    m = WorkspaceManager("cpu", 2)

    def factory():
        (scratch,) = m.get_simultaneous(((8,), F32))
        return scratch.fill_(1).sum().item()

    assert m.get_persistent_resource("k", factory) == 8.0
    with pytest.raises(TypeError):
        m.get_persistent_resource("x", 42)


def test_persistent_tensor_zeroed_once_and_never_clobbered_by_scratch() -> None:
    m = WorkspaceManager("cpu", 2)
    with use_ubatch(1):
        p = m.get_persistent("lse", (4, 2), F32, zero_init=True)
        assert p.tolist() == [[0.0, 0.0]] * 4
        p.fill_(5.0)
        for n in (16, 4096, 1 << 16):  # scratch use and growth
            (s,) = m.get_simultaneous(((n,), F32))
            s.fill_(-1.0)
        again = m.get_persistent("lse", (4, 2), F32, zero_init=True)
        assert again is p and p.tolist() == [[5.0, 5.0]] * 4, "zeroed once; contents survive"
    with use_ubatch(0):
        other = m.get_persistent("lse", (4, 2), F32)
    assert other.data_ptr() != p.data_ptr()
    assert m.stats()["persistent_entries"] == 2 and m.stats()["persistent_allocations"] == 2


def test_persistent_tensor_shape_dtype_and_kind_changes_are_rejected() -> None:
    m = WorkspaceManager("cpu", 2)
    m.get_persistent("x", (4,), F32)
    with pytest.raises(ValueError, match=r"created as \(4,\) torch.float32.*\(8,\) torch.float32"):
        m.get_persistent("x", (8,), F32)
    with pytest.raises(ValueError, match="torch.float16"):
        m.get_persistent("x", [4], torch.float16)
    assert m.get_persistent("x", [4], F32) is m.get_persistent("x", torch.Size([4]), F32)
    m.get_persistent_resource("r", dict)
    with pytest.raises(ValueError, match="holds a resource"):
        m.get_persistent("r", (1,), F32)
    with pytest.raises(ValueError, match="holds a tensor"):
        m.get_persistent_resource("x", dict)
    with pytest.raises(ValueError):
        m.get_persistent("bad", (-1,), F32)
    with pytest.raises(TypeError):
        m.get_persistent("bad", (1,), "float32")


def test_global_manager_with_lanes(global_manager) -> None:
    m = workspace.init_workspace_manager("cpu", 2, num_lanes=2)
    with use_workspace_lane(1):
        (v,) = workspace.current_workspace_manager().get_simultaneous(((64,), U8))
    base, n = m.slot_ranges()[1]
    assert base <= v.data_ptr() < base + n
