"""vLLM's own workspace unit test, ported as a user moving to this package would port it.

Each test below restates one behaviour that vLLM's workspace test checks, in this package's API,
with the exception type and the message phrase that test matches. Our messages say more (the
caller, the slot, the sizes, the fix), but each one contains vLLM's phrase, so a ported
``pytest.raises(..., match=...)`` still passes.

How the names map:

* vLLM replaces ``dbo_current_ubatch_id`` with a stub to pick a ubatch; here the calling thread is
  registered as that ubatch with ``dbo.registry.use_ubatch(i)`` (outside any step it is ubatch 0).
* vLLM reads the private ``_current_workspaces`` list (a buffer or None per slot); here the public
  ``slot_ranges()`` gives each slot's buffer as ``(data_ptr, nbytes)``, ``(0, 0)`` for none, and
  ``slot_sizes()`` each slot's capacity.
* vLLM's ``num_ubatches`` defaults to 1, ours to 2: the ports pass it where vLLM relies on it.

Not ported: vLLM's lane-count rule (``_num_workspace_lanes``: two lanes only for the v2 model
runner with a DSpark draft model). It belongs to vLLM's GPU worker, not to the workspace, and this
project has no worker or speculative-decoding config that picks a lane count: callers pass
``num_lanes`` themselves. No test here pretends otherwise.
"""

from __future__ import annotations

from unittest.mock import Mock

import pytest
import torch

import workspace
from dbo.registry import use_ubatch
from workspace import WorkspaceManager, current_workspace_lane, use_workspace_lane
from workspace.errors import (
    InvalidArgumentError,
    LaneNotConfiguredError,
    PersistentKeyError,
    WorkspaceLockedError,
    WorkspaceNotInitializedError,
)

U8 = torch.uint8
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def no_global_manager():
    """vLLM's test builds its managers directly; so do these (``use_workspace_lane`` also checks a
    process-global manager, so none may be left over from another test)."""
    workspace.reset_workspace_manager()
    yield
    workspace.reset_workspace_manager()


def buffer_bytes(manager: WorkspaceManager) -> list[int]:
    """Bytes of the buffer each slot holds now (0: none), vLLM's ``_current_workspaces`` numels."""
    return [nbytes for _, nbytes in manager.slot_ranges()]


# ---------------------------------------------------------------------- lanes


def test_two_lanes_get_separate_buffers_and_the_lane_is_restored_after_the_block() -> None:
    # growth="requester" is vLLM's policy: only the requesting slot grows.
    manager = WorkspaceManager(CPU, num_ubatches=2, num_lanes=2, growth="requester")
    assert buffer_bytes(manager) == [0, 0, 0, 0] and manager.slot_sizes() == [0, 0, 0, 0]

    (target,) = manager.get_simultaneous(((512,), U8))
    with use_workspace_lane(1):
        (draft,) = manager.get_simultaneous(((256,), U8))
        (draft_again,) = manager.get_simultaneous(((8,), U8))
    assert current_workspace_lane() == 0
    (target_again,) = manager.get_simultaneous(((8,), U8))

    assert buffer_bytes(manager) == [512, 256, 0, 0]  # ubatch 0's two lanes; ubatch 1 untouched
    assert manager.slot_sizes() == [512, 256, 0, 0]
    assert target.data_ptr() != draft.data_ptr()
    assert draft_again.data_ptr() == draft.data_ptr()
    assert target_again.data_ptr() == target.data_ptr()


def test_with_the_default_policy_the_buffers_are_the_same_but_siblings_reserve_capacity() -> None:
    # A documented difference (docs/workspace.md, "Differences from the reference"): under
    # deferred-lockstep, ubatch 1's slots are promised the same bytes but allocate nothing yet.
    manager = WorkspaceManager(CPU, num_ubatches=2, num_lanes=2)
    (target,) = manager.get_simultaneous(((512,), U8))
    with use_workspace_lane(1):
        (draft,) = manager.get_simultaneous(((256,), U8))
    assert target.data_ptr() != draft.data_ptr()
    assert buffer_bytes(manager) == [512, 256, 0, 0]
    assert manager.slot_sizes() == [512, 256, 512, 256]


def test_lanes_and_ubatches_compose_into_four_distinct_slots() -> None:
    manager = WorkspaceManager(CPU, num_ubatches=2, num_lanes=2)
    pointers = set()
    for ubatch in range(2):
        with use_ubatch(ubatch):
            for lane in range(2):
                with use_workspace_lane(lane):
                    (buffer,) = manager.get_simultaneous(((16,), U8))
                    pointers.add(buffer.data_ptr())
    assert len(pointers) == 4


def test_lane_validation_uses_vllms_types_and_phrases() -> None:
    manager = WorkspaceManager(CPU, num_ubatches=1, num_lanes=1)

    with pytest.raises(ValueError, match="non-negative") as info, use_workspace_lane(-1):
        pass
    assert isinstance(info.value, InvalidArgumentError) and "got -1" in str(info.value)

    # Entering lane 1 is fine with no process-global manager; this manager refuses it on use.
    with use_workspace_lane(1), pytest.raises(RuntimeError, match="is not configured") as info:
        manager.get_simultaneous(((1,), U8))
    assert isinstance(info.value, LaneNotConfiguredError)
    assert "1 lane(s)" in str(info.value) and "num_lanes >= 2" in str(info.value)

    with pytest.raises(ValueError, match="at least one") as info:
        WorkspaceManager(CPU, num_lanes=0)
    assert isinstance(info.value, InvalidArgumentError) and "num_lanes" in str(info.value)
    assert "got 0" in str(info.value)


# ---------------------------------------------------------------------- lock / unlock


def test_lock_refuses_growth_with_an_assertion_error_and_unlock_allows_it_again() -> None:
    manager = WorkspaceManager(CPU, num_ubatches=1, num_lanes=1)
    (buf,) = manager.get_simultaneous(((256,), U8))
    manager.lock()
    assert manager.is_locked()

    (same,) = manager.get_simultaneous(((256,), U8))  # fits: the same bytes
    (smaller,) = manager.get_simultaneous(((8,), U8))
    assert same.data_ptr() == buf.data_ptr() and smaller.data_ptr() == buf.data_ptr()

    with pytest.raises(AssertionError, match="Workspace is locked") as info:
        manager.get_simultaneous(((512,), U8))
    err = info.value
    assert isinstance(err, WorkspaceLockedError)
    assert (err.required_bytes, err.current_bytes) == (512, 256)  # our detail, kept
    assert "512 bytes" in str(err) and "test_vllm_port.py" in err.caller

    manager.unlock()
    assert not manager.is_locked()
    (grown,) = manager.get_simultaneous(((512,), U8))
    assert grown.numel() == 512


# ---------------------------------------------------------------------- persistent resources


def test_persistent_resources_are_built_lazily_once_per_ubatch_and_lane() -> None:
    manager = WorkspaceManager(CPU, num_ubatches=2, num_lanes=2)
    factory = Mock(side_effect=lambda: {"buffer": torch.zeros(8)})
    resources = []
    for ubatch in range(2):
        with use_ubatch(ubatch):
            for lane in range(2):
                with use_workspace_lane(lane):
                    resource = manager.get_persistent_resource("scratch", factory)
                    resources.append(resource)
                    resource["buffer"].fill_(len(resources))
                    assert manager.get_persistent_resource("scratch", factory) is resource
                    assert factory.call_count == len(resources)  # only this slot's first call built

    assert len({r["buffer"].data_ptr() for r in resources}) == 4
    for i, resource in enumerate(resources, 1):
        assert torch.all(resource["buffer"] == i)  # no slot's resource was another's


def test_lock_refuses_a_persistent_key_that_the_calling_slot_does_not_hold() -> None:
    manager = WorkspaceManager(CPU, num_ubatches=1, num_lanes=2)
    factory = Mock(side_effect=object)
    first = manager.get_persistent_resource("scratch", factory)
    manager.lock()
    assert manager.get_persistent_resource("scratch", factory) is first

    with pytest.raises(AssertionError, match="was not allocated during warmup") as info:
        manager.get_persistent_resource("new", factory)
    assert isinstance(info.value, WorkspaceLockedError) and info.value.key == "new"

    with use_workspace_lane(1):
        # "scratch" exists in lane 0 only: lane 1 did not warm it up
        with pytest.raises(AssertionError, match="was not allocated during warmup") as info:
            manager.get_persistent_resource("scratch", factory)
        assert (info.value.ubatch_id, info.value.lane) == (0, 1) and "lane 1" in str(info.value)
        assert factory.call_count == 1
        manager.unlock()
        assert manager.get_persistent_resource("scratch", factory) is not first
    assert manager.get_persistent_resource("scratch", factory) is first


def test_persistent_tensor_keeps_its_contents_and_refuses_another_shape_or_dtype() -> None:
    manager = WorkspaceManager(CPU)
    first = manager.get_persistent("locks", (8,), torch.int32, zero_init=True)
    assert torch.count_nonzero(first) == 0
    first.fill_(1)
    (scratch,) = manager.get_simultaneous(((1024,), U8))
    scratch.zero_()  # the scratch is not where the persistent tensor lives
    assert manager.get_persistent("locks", (8,), torch.int32, zero_init=True) is first
    assert torch.all(first == 1)  # zero_init applies at creation only

    with pytest.raises(ValueError, match="requested shape") as info:
        manager.get_persistent("locks", (16,), torch.int32)
    assert isinstance(info.value, PersistentKeyError)
    assert "(8,) torch.int32" in str(info.value) and "(16,) torch.int32" in str(info.value)
    with pytest.raises(ValueError, match="requested shape") as info:
        manager.get_persistent("locks", (8,), torch.int64)
    assert "(8,) torch.int64" in str(info.value)

    manager.lock()
    assert manager.get_persistent("locks", (8,), torch.int32) is first
    with pytest.raises(AssertionError, match="was not allocated during warmup") as info:
        manager.get_persistent("new", (8,), torch.int32)
    assert isinstance(info.value, WorkspaceLockedError) and info.value.key == "new"


# ---------------------------------------------------------------------- the process-global manager


def test_current_manager_before_init_fails_as_vllms_assert_does() -> None:
    # Not in vLLM's test file: its current_workspace_manager() asserts, "... not initialized ...".
    # Ours is a RuntimeError that is also an AssertionError, so either `except` catches it.
    assert not workspace.is_workspace_manager_initialized()
    with pytest.raises(AssertionError, match="not initialized") as info:
        workspace.current_workspace_manager()
    assert isinstance(info.value, RuntimeError) and isinstance(info.value, WorkspaceNotInitializedError)
    assert "init_workspace_manager" in str(info.value)  # our detail: what to call
    with pytest.raises(AssertionError, match="not initialized"):
        workspace.lock_workspace()


def test_our_other_count_and_dim_checks_use_the_same_words() -> None:
    # Not in vLLM's test file (vLLM checks neither): same failures, same phrases.
    with pytest.raises(ValueError, match="at least one") as info:
        WorkspaceManager(CPU, num_ubatches=0)
    assert "num_ubatches" in str(info.value)
    with pytest.raises(ValueError, match="non-negative") as info:
        WorkspaceManager(CPU).get_simultaneous(((4, -2), U8))
    assert "dim 1 is negative (-2)" in str(info.value)
