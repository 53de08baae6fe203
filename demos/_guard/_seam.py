"""The guard's test seam (``demos._guard``, "Test seam"): with ``DEMOS_GUARD_READY_FD`` naming an inherited
pipe, ``1`` once the handlers are in place (``ready``) and ``0`` when the process has decided its status and
leaves (``leaving``). The variable is removed, so that no child sees it.
"""

from __future__ import annotations

import os

import demos._guard._state as state

READY_ENV = "DEMOS_GUARD_READY_FD"
"""The test seam: an inherited pipe's fd, written one byte once the handlers are installed."""


def ready() -> None:
    """The test seam (module docstring): ``1`` to the pipe ``DEMOS_GUARD_READY_FD`` names."""
    value = os.environ.pop(READY_ENV, None)
    if not value:
        return
    try:
        fd = int(value)
        import stat

        if stat.S_ISFIFO(os.fstat(fd).st_mode):  # never a byte into a file that happens to have that number
            os.set_inheritable(fd, False)
            os.write(fd, b"1")
            state.seam = fd
    except (ValueError, OSError):
        pass


def leaving() -> None:
    """The test seam: ``0``, the status is decided and the process leaves now."""
    if state.seam >= 0:
        try:
            os.write(state.seam, b"0")
        except OSError:  # nobody reads it any more
            pass
