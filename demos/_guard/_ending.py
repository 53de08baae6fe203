"""How a guarded command's process ends (``demos._guard``, "exit"): the one line a signal ends it with,
its status (128 + the signal), the way out at once (``leave``), and what the interpreter would run at a
normal exit, done by hand before ``os._exit`` (stdio flushed, non-daemon threads joined, atexit functions).
"""

from __future__ import annotations

import os
import sys

import demos._guard._state as state

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not loaded before site on every install: not imported at run time
    from typing import Callable, NoReturn

_WORDS = {state.SIGINT: "interrupted", state.SIGTERM: "terminated"}


def line(signum: int, prog: str | None = None) -> str:
    """The one line a signal ends a command with."""
    return f"{prog or state.prog}: {_WORDS.get(signum, 'interrupted')}\n"


def status_of(signum: int) -> int:
    """128 + the signal number: 130 for SIGINT, 143 for SIGTERM (as a shell reports them)."""
    return 128 + signum


def say(signum: int, prog: str | None = None) -> None:
    """Write the one line once (os.write: no lock of sys.stderr's is taken, from any thread)."""
    if state.said:
        return
    state.said = True
    try:
        os.write(2, line(signum, prog).encode())
    except OSError:
        pass


def is_signal_status(status: int | None) -> bool:
    return status in (status_of(state.SIGINT), status_of(state.SIGTERM))


def leave(signum: int) -> NoReturn:
    """Out at once, with the line unless it is written: with the status already decided if it is a
    signal's, else with the signal's."""
    if is_signal_status(state.status):
        signum = state.status - 128
    say(signum)
    os._exit(status_of(signum))


def say_to_stderr(text: str) -> None:
    if state.said:
        return
    state.said = True
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a closed pipe or stream; nothing more to say on it
            pass
    try:  # what C code printed through stdio (the interpreter's exit() would flush it)
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except BaseException:  # noqa: BLE001 - no libc here: nothing to flush
        pass


def join_threads() -> None:
    """What the interpreter does first at a normal exit: join the non-daemon threads (and run
    ``threading``'s own exit functions: concurrent.futures' pools)."""
    threading = sys.modules.get("threading")
    shutdown: Callable[[], None] | None = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except BaseException:  # noqa: BLE001 - as the interpreter, go on to the exit
            pass


def run_atexit() -> None:
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - each function's error is printed by atexit itself
        pass
