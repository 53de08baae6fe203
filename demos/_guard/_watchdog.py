"""The guard's watchdog (``demos._guard``, "main"): a daemon thread that, once a signal came, sends it again
to the main thread while the interrupt is swallowed (the main thread still inside ``main`` with no
KeyboardInterrupt on its way out), and ends the process past ``FORCE_AFTER_S`` (a cleanup that hangs).
"""

from __future__ import annotations

import _signal
import os
import sys
import time

import demos._guard._state as state
from demos._guard._ending import leave

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not loaded before site on every install: not imported at run time
    from typing import Any

REDELIVER_AFTER_S = 0.15
"""How long the main thread may run inside ``main`` after a signal with no interrupt on its way out
before the watchdog sends the signal again."""

FORCE_AFTER_S = 5.0
"""How long after a signal the process may still run (a cleanup that hangs) before the watchdog ends it."""

_POLL_S = 0.05


def in_code(frame: Any, code: Any) -> bool:
    """Whether ``frame`` or one of its callers runs ``code``."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def wake(what: bytes = b"s") -> None:
    """Tell the watchdog: ``s`` a signal came, ``r`` send it again now, ``q`` stop."""
    if state.wake_w >= 0:
        try:
            os.write(state.wake_w, what)
        except OSError:
            pass


def start_watchdog() -> None:
    import threading

    if state.watchdog is not None and state.watchdog.is_alive():
        return
    state.wake_r, state.wake_w = os.pipe()
    state.watchdog = threading.Thread(target=_watch, args=(state.wake_r,), name="demos-signal-watchdog", daemon=True)
    state.watchdog.start()


def stop_watchdog() -> None:
    state.stop = True
    t, r, w = state.watchdog, state.wake_r, state.wake_w
    state.watchdog, state.wake_r, state.wake_w = None, -1, -1
    if w >= 0:
        try:
            os.write(w, b"q")
        except OSError:
            pass
    if t is not None:
        t.join(5.0)
    for fd in (r, w):
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


def _watch(r: int) -> None:
    """Wait for a signal; then send it again while it is swallowed (module docstring), and end the
    process past ``FORCE_AFTER_S`` (in the command's own process only)."""
    import select
    import threading

    main = threading.main_thread().ident
    quiet_since: float | None = None
    while not state.stop:
        timeout = None if not state.pending else _POLL_S
        now_asked = False
        try:
            ready, _, _ = select.select([r], [], [], timeout)
            if ready:
                got = os.read(r, 64)
                if b"q" in got:
                    return
                now_asked = b"r" in got
        except (OSError, ValueError):
            return
        if state.stop or not state.pending or main is None:
            continue
        now = time.monotonic()
        if state.owned and now - state.pending_at > FORCE_AFTER_S:
            leave(state.pending)
        if state.phase != state.MAIN or not _inside_main(main):
            quiet_since = None
            continue
        if now_asked:  # swallowed where Python ignores exceptions (the unraisable hook)
            _redeliver(main)
            quiet_since = None
            continue
        if _interrupt_on_its_way(main):
            quiet_since = None
            continue
        if quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= REDELIVER_AFTER_S:
            _redeliver(main)
            quiet_since = None


def _inside_main(ident: int) -> bool:
    frame = sys._current_frames().get(ident)
    return in_code(frame, state.main_code)


def _interrupt_on_its_way(ident: int) -> bool:
    """Whether the main thread is handling a KeyboardInterrupt, or an exception with one in its
    cause or context chain (an ``except``, ``finally`` or ``with`` exit on the interrupt's way out)."""
    current = getattr(sys, "_current_exceptions", None)
    if current is None:
        return True  # cannot tell: never send it again
    exc = current().get(ident)
    if isinstance(exc, tuple):  # Python < 3.12: exc_info triples
        exc = exc[1]
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _redeliver(ident: int) -> None:
    try:
        _signal.pthread_kill(ident, state.pending)  # a real signal to the main thread: it wakes a blocked wait
        state.redelivered += 1
    except (OSError, ValueError, AttributeError):
        pass
