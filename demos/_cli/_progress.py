"""A progress line for long commands (output paths and exits: ``demos._cli``)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """``progress(msg)``: one line on ``stream`` (stderr), rewritten in place, each message
    prefixed with the seconds since start; on a terminal only (a person waits for it: pipes and
    log files get nothing, as with ``demos._cli.progress``), unless ``every`` is set: then a pipe or
    a log file gets one whole line at most every ``every`` seconds, so that a long run shows it is
    alive there too. ``done()`` ends it."""

    def __init__(self, stream: TextIO | None = None, enabled: bool = True, every: float | None = None):
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._open = False
        self.every = every
        self._last = self.t0

    def __call__(self, msg: str) -> None:
        if not self.enabled:
            return
        if not self.tty:
            now = time.perf_counter()
            if self.every is None or now - self._last < self.every:
                return
            self._last = now
            try:
                self.stream.write(f"[{now - self.t0:6.1f} s] {msg}\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
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
