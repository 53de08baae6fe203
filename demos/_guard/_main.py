"""``run_main``'s side of the guard (``demos._guard``, "main" and "exit"): the phase main begins
(``enter_main``), the signal that came (``pending``), how often the watchdog sent it again
(``redelivered``), and the last step with the status decided (``finish``), which in the command's own
process ends it.
"""

from __future__ import annotations

import os
import sys
import time

import demos._guard._state as state
from demos._guard._ending import (
    flush,
    is_signal_status,
    join_threads,
    line,
    run_atexit,
    say,
    say_to_stderr,
    status_of,
)
from demos._guard._handler import give_back, take, unraisable
from demos._guard._seam import leaving
from demos._guard._watchdog import start_watchdog, stop_watchdog, wake

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not loaded before site on every install: not imported at run time
    from typing import Any


def enter_main(prog: str, main_code: Any, run_main_code: Any) -> bool:
    """``run_main`` starts: phase main. In the command's own process the handlers are already ours;
    elsewhere (``run_main`` called in a test, a batch) they are taken now and given back by
    ``finish``. ``main_code``: the code of the frame that calls the command's main (a signal raises
    only below it); ``run_main_code``: run_main's (a signal in its own frame is only recorded).
    Starts the watchdog. False (nothing held) outside the main thread."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False
    if not (state.owned and state.pid == os.getpid() and state.prog is not None):
        state.owned = False
        if not take(prog, state.MAIN):
            return False
    state.pending, state.pending_at, state.said, state.status, state.redelivered, state.stop = (
        0,
        0.0,
        False,
        None,
        0,
        False,
    )
    state.main_code, state.exit_codes, state.prog = main_code, frozenset((run_main_code, finish.__code__)), prog
    if sys.unraisablehook is not unraisable:
        state.hook_before, sys.unraisablehook = sys.unraisablehook, unraisable
    start_watchdog()
    state.phase = state.MAIN
    return True


def pending() -> int:
    """The first signal that came since ``run_main`` started (0: none)."""
    return state.pending


def redelivered() -> int:
    """How many times the watchdog sent the signal again (a swallowed interrupt)."""
    return state.redelivered


def finish(status: int, held: bool, failure: BaseException | None = None) -> int:
    """``run_main``'s last step, with the status it decided: a signal recorded at any point makes it
    130/143 with the one line. In the command's own process this ends the process (module
    docstring, "exit"), after printing ``failure``'s traceback as Python would; elsewhere it gives
    the handlers back, stops the watchdog and returns the status (the caller raises ``failure``)."""
    if not held:
        return status
    state.phase = state.EXIT
    if state.pending and not is_signal_status(status):
        status = status_of(state.pending)
    state.status = status
    signum = status - 128 if is_signal_status(status) else 0
    if not (state.owned and state.pid == os.getpid()):
        text = line(signum) if signum else ""
        stop_watchdog()
        give_back()
        if text:
            say_to_stderr(text)
        state.phase = None
        return status
    if signum and not state.pending:
        _note(signum)  # an interrupt raised by code, not by a signal: the watchdog's deadline holds too
    if failure is not None and not signum:
        try:
            sys.excepthook(type(failure), failure, failure.__traceback__)
        except BaseException:  # noqa: BLE001 - no hook to print with: the status says it
            pass
    flush()
    if signum:
        say(signum)
    else:
        join_threads()
    run_atexit()
    flush()
    if state.pending and not signum:  # a signal during the exit: it wins over the status
        status = status_of(state.pending)
        say(state.pending)
    leaving()
    os._exit(status)


def _note(signum: int) -> None:
    state.pending, state.pending_at = signum, time.monotonic()
    wake()
