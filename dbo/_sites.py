"""Where user code called in: the one stack-frame walker, and the ``file:line`` that error messages name.

``first_frame_outside`` is the walker every "who called" helper uses (``user_site`` and ``where_is`` here,
``workspace.diagnostics.caller`` and the sanitizer's finding site); each passes the directories and files
it treats as plumbing and formats the frame it gets back. ``where_is`` names where another thread is now
(a ubatch thread parked past its timeout, in the runtime's messages).

``user_site`` skips the plumbing (``PLUMBING_DIRS``: torch, dbo and workspace; ``PLUMBING_FILES``:
the standard library's threading, contextlib and functools modules), so a refusal during capture or
a race report names the line of the model or test that launched the work, not the runtime's own
plumbing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from types import FrameType
from typing import Iterable

import torch

DBO_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""The dbo package's directory, with a trailing separator (so it prefixes only paths inside it)."""
PLUMBING_DIRS = (
    DBO_DIR,
    os.path.join(os.path.dirname(DBO_DIR.rstrip(os.sep)), "workspace") + os.sep,
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
)
"""The runtime's plumbing directories: dbo, workspace (dbo's sibling) and torch, each with a trailing separator."""
PLUMBING_FILES = frozenset(os.path.abspath(m.__file__) for m in (threading, contextlib, functools))
"""The standard library's plumbing files: threading, contextlib and functools."""


def first_frame_outside(
    skip_dirs: Iterable[str],
    skip_files: Iterable[str] = (),
    depth: int = 1,
    start: FrameType | None = None,
) -> FrameType | None:
    """The innermost frame whose file is neither below one of ``skip_dirs`` nor one of ``skip_files``.

    A frame's file is its code's ``co_filename`` made absolute; it is below a directory when it
    starts with that string (give directories with a trailing separator), and it is one of
    ``skip_files`` when it equals one (absolute paths). The walk starts at ``start`` when given
    (for example another thread's frame from ``sys._current_frames()``), else ``depth`` frames above
    the caller of this function (0: the caller itself, 1: its caller), and goes outward. None when
    every frame is skipped.
    """
    dirs = tuple(skip_dirs)
    files = frozenset(skip_files)
    frame = start if start is not None else sys._getframe(depth + 1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(dirs) and path not in files:
            return frame
        frame = frame.f_back
    return None


def user_site() -> str:
    """``file:line`` of the innermost frame outside torch, dbo, workspace and those stdlib helpers
    (relative to the working directory when it is below it), or ``"<unknown>"``."""
    frame = first_frame_outside(PLUMBING_DIRS, PLUMBING_FILES, depth=1)
    if frame is None:
        return "<unknown>"
    path = os.path.abspath(frame.f_code.co_filename)
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        rel = path
    return f"{path if rel.startswith('..') else rel}:{frame.f_lineno}"


_THREADING_FILE = os.path.abspath(threading.__file__)


def where_is(thread: threading.Thread | None) -> str:
    """Where ``thread`` is now: the innermost frame outside dbo/ and threading, as ``func (file:line)``."""
    if thread is None or thread.ident is None:
        return "not started"
    if not thread.is_alive():
        return "finished"
    frame = sys._current_frames().get(thread.ident)
    inner = first_frame_outside((), (_THREADING_FILE,), start=frame) if frame is not None else None
    if inner is None:
        return "unknown"
    user = first_frame_outside((DBO_DIR,), (_THREADING_FILE,), start=inner)
    inner_dbo = None if user is inner else inner.f_code.co_name  # not user code, so dbo's innermost frame
    if user is None:
        return f"inside dbo ({inner_dbo})"
    where = f"{user.f_code.co_name} ({os.path.basename(os.path.abspath(user.f_code.co_filename))}:{user.f_lineno})"
    return f"{where} in {inner_dbo}" if inner_dbo else where
