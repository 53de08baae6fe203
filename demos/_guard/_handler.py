"""The guard's handlers (``demos._guard``): the SIGINT and SIGTERM handler of every phase, the unraisable
hook that keeps a swallowed interrupt from being printed, installing them for a command's imports
(``install``) and giving them back, and Python's defaults back in a forked child.
"""

from __future__ import annotations

import _signal
import os
import sys
import time

import demos._guard._state as state
from demos._guard._ending import leave
from demos._guard._seam import ready
from demos._guard._watchdog import in_code, wake

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not loaded before site on every install: not imported at run time
    from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (a KeyboardInterrupt, so code that cleans up on Ctrl-C
    cleans up on SIGTERM too)."""


def module_after_m(argv: list[str]) -> str | None:
    """The module after ``-m`` (or ``-mNAME``) in a full command line (``sys.orig_argv``), else None."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m"):
            return arg[2:]
        if not arg.startswith("-") or arg in ("-c", "-"):
            return None  # a script, -c or stdin: not run with -m
    return None


# --- the handler ---------------------------------------------------------------------------------------


def on_signal(signum: int, frame: Any) -> None:
    if os.getpid() != state.pid:  # a forked child that kept the handler: Python's defaults
        _default(signum)
        return
    if state.phase == state.IMPORTS:
        leave(signum)
    if not state.pending:
        state.pending, state.pending_at = signum, time.monotonic()
        wake()
    if state.phase == state.MAIN and in_code(frame, state.main_code):
        if in_code(frame, unraisable.__code__):
            # An exception raised there would be printed, not raised. Nothing is asked here: the hook
            # asks the watchdog to send the signal again when its exception is our interrupt, and the
            # watchdog's quiet-time resend covers the rest. Asking from here recursed: the resend could
            # land in this same hook again, each time one frame deeper (a RecursionError under load).
            return
        raise Terminated() if signum == state.SIGTERM else KeyboardInterrupt()
    if state.phase == state.EXIT and state.owned and (frame is None or frame.f_code not in state.exit_codes):
        leave(signum)  # in an atexit function, a thread join, a flush: the status is decided, end now
    # run_main's or finish's own code: recorded, they look at it last


def _default(signum: int) -> None:
    if signum == state.SIGINT:
        raise KeyboardInterrupt()
    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def unraisable(info: Any) -> None:
    """An exception Python ignores (raised in a ``__del__``, a weakref or GC callback): when it is our
    interrupt, nothing is printed and the signal is sent again at once, to land in the code that runs
    next; anything else is printed as before."""
    if isinstance(info.exc_value, KeyboardInterrupt) and state.pending and os.getpid() == state.pid:
        wake(b"r")  # the watchdog sends it: from here, the signal would land in this hook
        return
    (state.hook_before or sys.__unraisablehook__)(info)


# --- install at import -----------------------------------------------------------------------------------


def install() -> None:
    """Take SIGINT and SIGTERM for the imports when this process is one of the commands started with
    ``python -m`` and its module is still being located (``sys.argv[0] == "-m"``); a no-op anywhere
    else (tests, ranks, ``import demos``). A signal its starter ignores (a background job's SIGINT)
    stays ignored."""
    if state.prog is not None:
        return
    name = module_after_m(list(getattr(sys, "orig_argv", [])))
    if name is None or not name.startswith("demos.") or sys.argv[:1] != ["-m"]:
        return
    if not take(f"python -m {name}", state.IMPORTS):
        return
    from demos._cli.commands import MODULES  # the registry, read with the handlers already in place

    if name not in MODULES:
        give_back()
        return
    state.owned = True
    os.register_at_fork(after_in_child=_forked)
    ready()


def take(prog: str, phase: str) -> bool:
    """Install the handler for both signals (not over an ignored one or a handler of someone
    else's); False in a thread other than the main one."""
    old: dict[int, Any] = {}
    try:
        for sig, default in ((state.SIGINT, _signal.default_int_handler), (state.SIGTERM, _signal.SIG_DFL)):
            current = _signal.getsignal(sig)
            if current is default or current == default or current is on_signal:
                _signal.signal(sig, on_signal)
                old[sig] = current
    except (ValueError, OSError):  # not the main thread: nothing to guard
        try:
            for sig, handler in old.items():
                _signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
        return False
    state.prog, state.pid, state.phase, state.old = prog, os.getpid(), phase, old
    return True


def give_back() -> None:
    if sys.unraisablehook is unraisable:
        sys.unraisablehook, state.hook_before = state.hook_before or sys.__unraisablehook__, None
    for sig, handler in state.old.items():
        try:
            if _signal.getsignal(sig) is on_signal:
                _signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    state.prog, state.phase, state.old = None, None, {}


def _forked() -> None:
    """In a forked child (a process pool's worker): Python's defaults back, nothing of the parent's state."""
    state.seam = -1
    for sig, default in ((state.SIGINT, _signal.default_int_handler), (state.SIGTERM, _signal.SIG_DFL)):
        try:
            if _signal.getsignal(sig) is on_signal:
                _signal.signal(sig, default)
        except (ValueError, OSError):
            pass
    for fd in (state.wake_r, state.wake_w):
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    state.prog, state.phase, state.owned, state.pending = None, None, False, 0
    state.wake_r, state.wake_w, state.watchdog = -1, -1, None
