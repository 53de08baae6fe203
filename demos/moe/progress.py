"""A progress line for long commands, and the check of an output path before any work."""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["ProgressLine", "output_path_error"]


class ProgressLine:
    """``progress(msg)``: one line on ``stream`` (stderr), rewritten in place on a terminal, one
    line per message otherwise; each prefixed with the seconds since start. ``done()`` ends it."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._open = False

    def __call__(self, msg: str) -> None:
        if not self.enabled:
            return
        line = f"[{time.perf_counter() - self.t0:6.1f} s] {msg}"
        if self.tty:
            self.stream.write("\r\033[K" + line)
            self._open = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


def output_path_error(path: str, flag: str, suffix: str | None = None) -> str | None:
    """Why ``path`` cannot be written as an output file (None: it can), checked before any work."""
    if not path:
        return f"{flag} needs a file path"
    if suffix is not None and not path.endswith(suffix):
        return f"{flag} {path!r} must end in {suffix}"
    if os.path.isdir(path):
        return f"{flag} {path!r} is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"{flag} {path!r}: directory {parent!r} does not exist"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return f"{flag} {path!r} is not writable"
    if not os.path.exists(path) and not os.access(parent, os.W_OK):
        return f"{flag} {path!r}: directory {parent!r} is not writable"
    return None
