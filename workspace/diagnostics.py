"""Text helpers shared by the workspace modules: MiB figures, the calling frame, the debug switch."""

from __future__ import annotations

import logging
import os

from dbo._sites import first_frame_outside

__all__ = ["DEBUG_ENV", "caller", "debug_enabled", "logger", "mib"]

DEBUG_ENV = "DBO_DEBUG_WORKSPACE"
"""Set to 1 (read when a manager is constructed) to log every resize, lock and unlock at INFO."""

logger = logging.getLogger("workspace.manager")
"""The one logger of the package (resizes, locks, warnings); named after the manager module."""

_MIB = 1024 * 1024
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def mib(nbytes: int) -> str:
    """``nbytes`` in MiB (2^20 bytes) with two decimals, e.g. ``"3.00 MiB"``."""
    return f"{nbytes / _MIB:.2f} MiB"


def caller() -> str:
    """``file:line:function`` of the first stack frame outside the workspace package."""
    frame = first_frame_outside((_PACKAGE_DIR,), depth=1)
    if frame is None:
        return "<unknown caller>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}:{frame.f_code.co_name}"


def debug_enabled() -> bool:
    """Whether ``DBO_DEBUG_WORKSPACE`` asks for debug logging and view checks."""
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")
