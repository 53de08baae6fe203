"""A progress line for long commands (output paths and exits: ``demos._cli``)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressLine"]


class ProgressLine:
    """``progress(msg)``: one line on ``stream`` (stderr), rewritten in place, each message
    prefixed with the seconds since start; only on a terminal (a person waits for it: pipes and
    log files get nothing, as with ``demos._cli.progress``). ``done()`` ends it."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._open = False

    def __call__(self, msg: str) -> None:
        if not (self.enabled and self.tty):
            return
        try:
            self.stream.write(f"\r\033[K[{time.perf_counter() - self.t0:6.1f} s] {msg}")
            self.stream.flush()
            self._open = True
        except (OSError, ValueError):
            pass

    def done(self) -> None:
        if self._open:
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._open = False
