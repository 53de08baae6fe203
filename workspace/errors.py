"""Exception types of the workspace package."""

from __future__ import annotations

from typing import Any

__all__ = ["WorkspaceLockedError"]


class WorkspaceLockedError(AssertionError):
    """Something needed to be created after ``lock()``: a bigger slot, or a new persistent resource.

    Subclasses ``AssertionError`` like the reference, so existing ``except AssertionError`` still
    catches it. ``caller`` is ``file:line:function`` of the first frame outside this package;
    ``ubatch_id`` and ``lane`` name the slot. For growth, ``required_bytes`` and ``current_bytes``
    are the slot's needed and present capacities; for a persistent resource, ``key`` is its key
    (and the byte fields are None).
    """

    def __init__(
        self,
        message: str,
        *,
        caller: str,
        ubatch_id: int,
        required_bytes: int | None = None,
        current_bytes: int | None = None,
        lane: int = 0,
        key: Any = None,
    ):
        super().__init__(message)
        self.caller = caller
        self.ubatch_id = ubatch_id
        self.lane = lane
        self.required_bytes = required_bytes
        self.current_bytes = current_bytes
        self.key = key
