"""Where user code called in: the ``file:line`` that error messages and reports name.

Frames inside torch, dbo and workspace, and in the standard library's threading, contextlib and
functools modules, are skipped, so a refusal during capture or a race report names the line of the
model or test that launched the work, not the runtime's own plumbing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading

import torch

__all__ = ["user_site"]

_DBO_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_SKIP_DIRS = (
    _DBO_DIR,
    os.path.join(os.path.dirname(_DBO_DIR.rstrip(os.sep)), "workspace") + os.sep,
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
)
_SKIP_FILES = {os.path.abspath(m.__file__) for m in (threading, contextlib, functools)}


def user_site() -> str:
    """``file:line`` of the innermost frame outside torch, dbo, workspace and those stdlib helpers
    (relative to the working directory when it is below it), or ``"<unknown>"``."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_SKIP_DIRS) and path not in _SKIP_FILES:
            try:
                rel = os.path.relpath(path)
            except ValueError:  # another drive (Windows)
                rel = path
            return f"{path if rel.startswith('..') else rel}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"
