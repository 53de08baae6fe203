"""Exception types of the workspace package.

Every failure the package raises on purpose is a ``WorkspaceError``. Where callers have long
caught a builtin type (``AssertionError`` for a locked workspace, ``ValueError`` / ``TypeError``
for bad arguments, ``RuntimeError`` for state errors), the subclass keeps that type as a second
base, so ``except ValueError`` and friends still work.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadAllocationError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "LaneNotConfiguredError",
    "NoSlotError",
    "PersistentKeyError",
    "ViewMetadataChangedError",
    "WorkspaceError",
    "WorkspaceLockedError",
    "WorkspaceNotInitializedError",
]


class WorkspaceError(Exception):
    """Base class of every failure the workspace package raises on purpose."""


class WorkspaceLockedError(WorkspaceError, AssertionError):
    """Something needed to be created after ``lock()``: a bigger slot, or a new persistent resource.

    Also an ``AssertionError``, as in vLLM, so existing ``except AssertionError`` still catches it.
    ``caller`` is ``file:line:function`` of the first frame outside this package; ``ubatch_id``
    and ``lane`` name the slot. For growth, ``required_bytes`` and ``current_bytes`` are the
    slot's needed and present capacities; for a persistent resource, ``key`` is its key (and the
    byte fields are None).
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


class InvalidArgumentError(WorkspaceError, ValueError):
    """An argument has the right type but a bad value (negative dim, unknown policy, count < 1...)."""


class InvalidArgumentTypeError(WorkspaceError, TypeError):
    """An argument has the wrong type (a float dim, a non-dtype, a non-callable factory...)."""


class LaneNotConfiguredError(WorkspaceError, RuntimeError):
    """The calling thread's workspace lane is beyond the lanes the manager was created with."""


class NoSlotError(WorkspaceError, ValueError):
    """The calling ubatch id (or the one asked about) has no slot in this manager."""


class PersistentKeyError(WorkspaceError, ValueError):
    """A persistent key is asked for as another kind (tensor vs resource), shape or dtype."""


class BadAllocationError(WorkspaceError, RuntimeError):
    """An overridden ``_allocate`` returned something other than a 1-D uint8 tensor of the size asked."""


class ViewMetadataChangedError(WorkspaceError, RuntimeError):
    """Debug mode: a cached view handed out earlier was changed in place (shape, dtype, offset...)."""


class WorkspaceNotInitializedError(WorkspaceError, RuntimeError, AssertionError):
    """``current_workspace_manager()`` was called before ``init_workspace_manager``.

    A ``RuntimeError`` (a state error), and also an ``AssertionError``: vLLM asserts there, so code
    ported from it that catches ``AssertionError`` still catches this.
    """
