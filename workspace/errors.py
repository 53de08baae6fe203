"""Exception types of the workspace package."""

from __future__ import annotations

__all__ = ["WorkspaceLockedError"]


class WorkspaceLockedError(AssertionError):
    """A request needed a bigger slot after ``lock()``: growth is not allowed while locked.

    Subclasses ``AssertionError`` like the reference, so existing ``except AssertionError`` still
    catches it. ``caller`` is ``file:line:function`` of the first frame outside this package;
    ``required_bytes`` and ``current_bytes`` are the slot's needed and present capacities.
    """

    def __init__(self, message: str, *, caller: str, ubatch_id: int, required_bytes: int, current_bytes: int):
        super().__init__(message)
        self.caller = caller
        self.ubatch_id = ubatch_id
        self.required_bytes = required_bytes
        self.current_bytes = current_bytes
