"""The process-global workspace manager, and ``use_workspace_lane``.

The one workspace manager of the process (process-global state: docs/design.md lists all of it).
Every thread sees the same manager.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Iterator

import torch

from workspace.errors import WorkspaceNotInitializedError
from workspace.lanes import check_lane, lane_not_configured, lane_var
from workspace.manager import WorkspaceManager
from workspace.policy import GrowthPolicy

__all__ = [
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "lock_workspace",
    "reset_workspace_manager",
    "unlock_workspace",
    "use_workspace_lane",
]

_manager: WorkspaceManager | None = None
_manager_lock = threading.Lock()


def init_workspace_manager(
    device: str | torch.device,
    num_ubatches: int | None = None,
    *,
    growth: str | GrowthPolicy | None = None,
    num_lanes: int = 1,
) -> WorkspaceManager:
    """Create the process-global manager; warns (``UserWarning``) and replaces an existing one."""
    global _manager
    new = WorkspaceManager(device, num_ubatches, growth=growth, num_lanes=num_lanes)  # bad arguments raise here
    with _manager_lock:
        old, _manager = _manager, new
    if old is not None:
        warnings.warn(
            f"init_workspace_manager: replacing the existing process-global {old!r}; views it handed "
            "out stay valid but its slots are no longer used",
            stacklevel=2,
        )
    return new


def current_workspace_manager() -> WorkspaceManager:
    """The process-global manager; ``WorkspaceNotInitializedError`` (a RuntimeError and an
    AssertionError) before init."""
    manager = _manager
    if manager is None:
        raise WorkspaceNotInitializedError(
            "the workspace manager is not initialized: "
            "call workspace.init_workspace_manager(device, num_ubatches) first"
        )
    return manager


def is_workspace_manager_initialized() -> bool:
    """True iff the process-global manager exists."""
    return _manager is not None


def lock_workspace() -> None:
    """Lock the process-global manager (see ``WorkspaceManager.lock``)."""
    current_workspace_manager().lock()


def unlock_workspace() -> None:
    """Unlock the process-global manager (see ``WorkspaceManager.unlock``)."""
    current_workspace_manager().unlock()


def reset_workspace_manager() -> None:
    """Drop the process-global manager (shutdown and tests). Views handed out stay valid."""
    global _manager
    with _manager_lock:
        _manager = None


@contextlib.contextmanager
def use_workspace_lane(lane: int) -> Iterator[int]:
    """Use workspace lane ``lane`` in this thread (and its context) for the ``with`` block.

    A negative lane raises ``InvalidArgumentError`` (a ValueError); a lane the process-global
    manager (if there is one) was not configured for raises ``LaneNotConfiguredError`` (a
    RuntimeError). Every manager checks the lane again on each call, hit or miss.
    """
    lane = check_lane(lane)
    manager = _manager
    if manager is not None and lane >= manager.num_lanes:
        raise lane_not_configured(lane, manager.num_lanes)
    token = lane_var.set(lane)
    try:
        yield lane
    finally:
        lane_var.reset(token)
