"""Workspace lanes: which lane of its ubatch's slots the calling thread (or context) uses.

A manager created with ``num_lanes=k`` gives each ubatch k slots; code picks one with
``use_workspace_lane(lane)`` (in ``workspace.singleton``, which also checks the lane against the
process-global manager). The lane is a context variable, so it follows the thread and its context.
"""

from __future__ import annotations

import contextvars

from workspace.errors import InvalidArgumentError, InvalidArgumentTypeError, LaneNotConfiguredError

__all__ = ["check_lane", "current_workspace_lane", "lane_not_configured"]

lane_var: contextvars.ContextVar[int] = contextvars.ContextVar("workspace_lane", default=0)


def check_lane(lane: object) -> int:
    """``lane`` if it is an int >= 0; a clear error otherwise."""
    if isinstance(lane, bool) or not isinstance(lane, int):
        raise InvalidArgumentTypeError(f"workspace lane must be an int, got {type(lane).__name__}: {lane!r}")
    if lane < 0:
        raise InvalidArgumentError(f"workspace lane must be >= 0 (non-negative), got {lane}")
    return lane


def lane_not_configured(lane: int, num_lanes: int) -> LaneNotConfiguredError:
    """The one error for a lane beyond a manager's lanes (raised on cache hits and misses alike)."""
    return LaneNotConfiguredError(
        f"workspace lane {lane} is not configured: the workspace manager has {num_lanes} lane(s) "
        f"(0..{num_lanes - 1}); create it with num_lanes >= {lane + 1} to use use_workspace_lane({lane})"
    )


def current_workspace_lane() -> int:
    """The calling thread's workspace lane (0 unless inside ``use_workspace_lane``)."""
    return lane_var.get()
