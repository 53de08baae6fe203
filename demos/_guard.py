"""SIGINT and SIGTERM from a command's first import to its exit: every signal honoured.

A ``python -m demos.<command>`` process (one of ``demos._cli.commands``) goes through three phases,
and this module owns both signals in all of them:

* **imports**, from ``demos/__init__.py`` (``install()``, the first code of the project that runs)
  until ``demos._cli.run_main`` starts: the handler writes ``python -m demos.<command>: interrupted``
  (``terminated`` for SIGTERM) and ends the process at once with 130 (143). Nothing exists yet to
  clean up, and a KeyboardInterrupt inside ``importlib`` would print 17 to 27 lines.
* **main**, inside ``run_main``: the handler records the signal (the first one that came decides the
  status) and, when the main thread is inside the command's ``main``, raises ``KeyboardInterrupt``
  (``Terminated`` for SIGTERM), so that every ``finally`` runs (ubatch threads stopped, ranks reaped,
  temporary folders removed). Outside ``main`` (``run_main``'s own code before and after it) it only
  records. ``run_main`` exits 130/143 whenever a signal was recorded, whatever became of the
  exception: swallowed by an ``except BaseException``, printed as "Exception ignored" from a
  ``__del__``, a weakref or GC callback or an atexit function, or replaced by another exception.
  And a watchdog thread sends the signal again to the main thread (``pthread_kill``) when, 0.15 s
  after it came, the main thread is still inside ``main`` and no KeyboardInterrupt is on its way out
  (none in the exception the main thread is handling, nor in its cause or context chain): the
  interrupt was swallowed and the run went on. It repeats until the interrupt sticks. Past
  ``FORCE_AFTER_S`` it writes the line and ends the process (a cleanup that hangs).
* **exit**, from ``run_main``'s status to the end: ``finish`` writes the one line (for a signal
  status), runs what the interpreter would run (non-daemon threads joined on a normal status,
  atexit functions), flushes, and ends the process with ``os._exit``: without the interpreter's
  teardown, which takes 0.5-0.8 s with torch loaded on a 2-core machine (more than the signal's
  second) and during which a signal is lost (an exception in an atexit function is printed and
  ignored, and later no Python code runs to see it). A signal that comes during the exit ends the
  process at once with its status and line.

Python's own start, before ``demos/__init__.py`` runs (the interpreter, ``site``, locating the
module: about 40-80 ms), cannot be guarded: a signal then gets Python's default (a KeyboardInterrupt
traceback, or death by SIGTERM with no line).

Only the standard library is imported at module level, and only what the interpreter has already
loaded (``_signal``, not ``signal``, which imports ``enum``): this runs before anything else.

Test seam: with ``DEMOS_GUARD_READY_FD`` naming an inherited pipe (and nothing else: another kind of
file is left alone), ``install()`` writes ``1`` to it once the handlers are in place, and ``finish``
writes ``0`` when the process has decided its status and calls ``os._exit``: a signal sent after that
lands in the kernel's teardown of the process (a few milliseconds with torch's memory mapped) and
cannot change the status, in any program. The variable is removed, so that no child sees it.
"""

from __future__ import annotations

import _signal
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not loaded before site on every install: not imported at run time
    from typing import Any, Callable, NoReturn

READY_ENV = "DEMOS_GUARD_READY_FD"
"""The test seam: an inherited pipe's fd, written one byte once the handlers are installed."""

REDELIVER_AFTER_S = 0.15
"""How long the main thread may run inside ``main`` after a signal with no interrupt on its way out
before the watchdog sends the signal again."""

FORCE_AFTER_S = 5.0
"""How long after a signal the process may still run (a cleanup that hangs) before the watchdog ends it."""

_POLL_S = 0.05
SIGINT = _signal.SIGINT
SIGTERM = _signal.SIGTERM
_WORDS = {SIGINT: "interrupted", SIGTERM: "terminated"}
IMPORTS, MAIN, EXIT = "imports", "main", "exit"


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (a KeyboardInterrupt, so code that cleans up on Ctrl-C
    cleans up on SIGTERM too)."""


_prog: str | None = None  # "python -m demos.X" while the handlers are ours
_pid = 0  # the process they were installed in (a forked child gets the default behaviour back)
_phase: str | None = None
_owned = False  # this process is the command (install() took it): finish() ends it
_old: dict[int, Any] = {}  # handlers to give back (run_main called in a process that is not the command)
_pending = 0  # the first signal that came (0: none)
_pending_at = 0.0
_said = False  # the one line is written
_status: int | None = None  # the exit status finish() decided
_redelivered = 0
_main_code: Any = None  # code object of the frame that calls the command's main (demos._cli._call_main)
_exit_codes: frozenset = frozenset()  # run_main's and finish's: a signal in their own frames is recorded
_wake_r = _wake_w = -1
_watchdog: Any = None
_stop = False
_hook_before: Any = None  # sys.unraisablehook before enter_main's
_seam = -1  # the test seam's pipe (READY_ENV)


def line(signum: int, prog: str | None = None) -> str:
    """The one line a signal ends a command with."""
    return f"{prog or _prog}: {_WORDS.get(signum, 'interrupted')}\n"


def status_of(signum: int) -> int:
    """128 + the signal number: 130 for SIGINT, 143 for SIGTERM (as a shell reports them)."""
    return 128 + signum


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


def _on_signal(signum: int, frame: Any) -> None:
    global _pending, _pending_at
    if os.getpid() != _pid:  # a forked child that kept the handler: Python's defaults
        _default(signum)
        return
    if _phase == IMPORTS:
        _leave(signum)
    if not _pending:
        _pending, _pending_at = signum, time.monotonic()
        _wake()
    if _phase == MAIN and _in_code(frame, _main_code):
        if _in_code(frame, _unraisable.__code__):  # an exception there would be printed: once more, later
            _wake(b"r")
            return
        raise Terminated() if signum == SIGTERM else KeyboardInterrupt()
    if _phase == EXIT and _owned and (frame is None or frame.f_code not in _exit_codes):
        _leave(signum)  # in an atexit function, a thread join, a flush: the status is decided, end now
    # run_main's or finish's own code: recorded, they look at it last


def _in_code(frame: Any, code: Any) -> bool:
    """Whether ``frame`` or one of its callers runs ``code``."""
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def _default(signum: int) -> None:
    if signum == SIGINT:
        raise KeyboardInterrupt()
    _signal.signal(signum, _signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _say(signum: int, prog: str | None = None) -> None:
    """Write the one line once (os.write: no lock of sys.stderr's is taken, from any thread)."""
    global _said
    if _said:
        return
    _said = True
    try:
        os.write(2, line(signum, prog).encode())
    except OSError:
        pass


def _is_signal_status(status: int | None) -> bool:
    return status in (status_of(SIGINT), status_of(SIGTERM))


def _leave(signum: int) -> NoReturn:
    """Out at once, with the line unless it is written: with the status already decided if it is a
    signal's, else with the signal's."""
    if _is_signal_status(_status):
        signum = _status - 128
    _say(signum)
    os._exit(status_of(signum))


# --- install at import -----------------------------------------------------------------------------------


def install() -> None:
    """Take SIGINT and SIGTERM for the imports when this process is one of the commands started with
    ``python -m`` and its module is still being located (``sys.argv[0] == "-m"``); a no-op anywhere
    else (tests, ranks, ``import demos``). A signal its starter ignores (a background job's SIGINT)
    stays ignored."""
    global _owned
    if _prog is not None:
        return
    name = module_after_m(list(getattr(sys, "orig_argv", [])))
    if name is None or not name.startswith("demos.") or sys.argv[:1] != ["-m"]:
        return
    if not _take(f"python -m {name}", IMPORTS):
        return
    from demos._cli.commands import MODULES  # the registry, read with the handlers already in place

    if name not in MODULES:
        _give_back()
        return
    _owned = True
    os.register_at_fork(after_in_child=_forked)
    _ready()


def _take(prog: str, phase: str) -> bool:
    """Install the handler for both signals (not over an ignored one or a handler of someone
    else's); False in a thread other than the main one."""
    global _prog, _pid, _phase, _old
    old: dict[int, Any] = {}
    try:
        for sig, default in ((SIGINT, _signal.default_int_handler), (SIGTERM, _signal.SIG_DFL)):
            current = _signal.getsignal(sig)
            if current is default or current == default or current is _on_signal:
                _signal.signal(sig, _on_signal)
                old[sig] = current
    except (ValueError, OSError):  # not the main thread: nothing to guard
        try:
            for sig, handler in old.items():
                _signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
        return False
    _prog, _pid, _phase, _old = prog, os.getpid(), phase, old
    return True


def _give_back() -> None:
    global _prog, _phase, _old, _hook_before
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook, _hook_before = _hook_before or sys.__unraisablehook__, None
    for sig, handler in _old.items():
        try:
            if _signal.getsignal(sig) is _on_signal:
                _signal.signal(sig, handler)
        except (ValueError, OSError):
            pass
    _prog, _phase, _old = None, None, {}


def _forked() -> None:
    """In a forked child (a process pool's worker): Python's defaults back, nothing of the parent's state."""
    global _prog, _phase, _owned, _pending, _wake_r, _wake_w, _watchdog, _seam
    _seam = -1
    for sig, default in ((SIGINT, _signal.default_int_handler), (SIGTERM, _signal.SIG_DFL)):
        try:
            if _signal.getsignal(sig) is _on_signal:
                _signal.signal(sig, default)
        except (ValueError, OSError):
            pass
    for fd in (_wake_r, _wake_w):
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
    _prog, _phase, _owned, _pending, _wake_r, _wake_w, _watchdog = None, None, False, 0, -1, -1, None


def _ready() -> None:
    """The test seam (module docstring): ``1`` to the pipe ``DEMOS_GUARD_READY_FD`` names."""
    global _seam
    value = os.environ.pop(READY_ENV, None)
    if not value:
        return
    try:
        fd = int(value)
        import stat

        if stat.S_ISFIFO(os.fstat(fd).st_mode):  # never a byte into a file that happens to have that number
            os.set_inheritable(fd, False)
            os.write(fd, b"1")
            _seam = fd
    except (ValueError, OSError):
        pass


def _leaving() -> None:
    """The test seam: ``0``, the status is decided and the process leaves now."""
    if _seam >= 0:
        try:
            os.write(_seam, b"0")
        except OSError:  # nobody reads it any more
            pass


# --- main ---------------------------------------------------------------------------------------------------


def enter_main(prog: str, main_code: Any, run_main_code: Any) -> bool:
    """``run_main`` starts: phase main. In the command's own process the handlers are already ours;
    elsewhere (``run_main`` called in a test, a batch) they are taken now and given back by
    ``finish``. ``main_code``: the code of the frame that calls the command's main (a signal raises
    only below it); ``run_main_code``: run_main's (a signal in its own frame is only recorded).
    Starts the watchdog. False (nothing held) outside the main thread."""
    global _phase, _pending, _pending_at, _said, _status, _redelivered, _main_code, _exit_codes, _stop, _prog
    global _owned, _hook_before
    import threading

    if threading.current_thread() is not threading.main_thread():
        return False
    if not (_owned and _pid == os.getpid() and _prog is not None):
        _owned = False
        if not _take(prog, MAIN):
            return False
    _pending, _pending_at, _said, _status, _redelivered, _stop = 0, 0.0, False, None, 0, False
    _main_code, _exit_codes, _prog = main_code, frozenset((run_main_code, finish.__code__)), prog
    if sys.unraisablehook is not _unraisable:
        _hook_before, sys.unraisablehook = sys.unraisablehook, _unraisable
    _start_watchdog()
    _phase = MAIN
    return True


def _unraisable(info: Any) -> None:
    """An exception Python ignores (raised in a ``__del__``, a weakref or GC callback): when it is our
    interrupt, nothing is printed and the signal is sent again at once, to land in the code that runs
    next; anything else is printed as before."""
    if isinstance(info.exc_value, KeyboardInterrupt) and _pending and os.getpid() == _pid:
        _wake(b"r")  # the watchdog sends it: from here, the signal would land in this hook
        return
    (_hook_before or sys.__unraisablehook__)(info)


def pending() -> int:
    """The first signal that came since ``run_main`` started (0: none)."""
    return _pending


def redelivered() -> int:
    """How many times the watchdog sent the signal again (a swallowed interrupt)."""
    return _redelivered


def finish(status: int, held: bool, failure: BaseException | None = None) -> int:
    """``run_main``'s last step, with the status it decided: a signal recorded at any point makes it
    130/143 with the one line. In the command's own process this ends the process (module
    docstring, "exit"), after printing ``failure``'s traceback as Python would; elsewhere it gives
    the handlers back, stops the watchdog and returns the status (the caller raises ``failure``)."""
    global _phase, _status
    if not held:
        return status
    _phase = EXIT
    if _pending and not _is_signal_status(status):
        status = status_of(_pending)
    _status = status
    signum = status - 128 if _is_signal_status(status) else 0
    if not (_owned and _pid == os.getpid()):
        text = line(signum) if signum else ""
        _stop_watchdog()
        _give_back()
        if text:
            _say_to_stderr(text)
        _phase = None
        return status
    if signum and not _pending:
        _note(signum)  # an interrupt raised by code, not by a signal: the watchdog's deadline holds too
    if failure is not None and not signum:
        try:
            sys.excepthook(type(failure), failure, failure.__traceback__)
        except BaseException:  # noqa: BLE001 - no hook to print with: the status says it
            pass
    _flush()
    if signum:
        _say(signum)
    else:
        _join_threads()
    _run_atexit()
    _flush()
    if _pending and not signum:  # a signal during the exit: it wins over the status
        status = status_of(_pending)
        _say(_pending)
    _leaving()
    os._exit(status)


def _note(signum: int) -> None:
    global _pending, _pending_at
    _pending, _pending_at = signum, time.monotonic()
    _wake()


def _say_to_stderr(text: str) -> None:
    global _said
    if _said:
        return
    _said = True
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def _flush() -> None:
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


def _join_threads() -> None:
    """What the interpreter does first at a normal exit: join the non-daemon threads (and run
    ``threading``'s own exit functions: concurrent.futures' pools)."""
    threading = sys.modules.get("threading")
    shutdown: Callable[[], None] | None = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        try:
            shutdown()
        except BaseException:  # noqa: BLE001 - as the interpreter, go on to the exit
            pass


def _run_atexit() -> None:
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - each function's error is printed by atexit itself
        pass


# --- the watchdog ------------------------------------------------------------------------------------------------


def _wake(what: bytes = b"s") -> None:
    """Tell the watchdog: ``s`` a signal came, ``r`` send it again now, ``q`` stop."""
    if _wake_w >= 0:
        try:
            os.write(_wake_w, what)
        except OSError:
            pass


def _start_watchdog() -> None:
    global _wake_r, _wake_w, _watchdog
    import threading

    if _watchdog is not None and _watchdog.is_alive():
        return
    _wake_r, _wake_w = os.pipe()
    _watchdog = threading.Thread(target=_watch, args=(_wake_r,), name="demos-signal-watchdog", daemon=True)
    _watchdog.start()


def _stop_watchdog() -> None:
    global _stop, _watchdog, _wake_r, _wake_w
    _stop = True
    t, r, w = _watchdog, _wake_r, _wake_w
    _watchdog, _wake_r, _wake_w = None, -1, -1
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
    while not _stop:
        timeout = None if not _pending else _POLL_S
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
        if _stop or not _pending or main is None:
            continue
        now = time.monotonic()
        if _owned and now - _pending_at > FORCE_AFTER_S:
            _leave(_pending)
        if _phase != MAIN or not _inside_main(main):
            quiet_since = None
            continue
        if now_asked:  # swallowed where Python ignores exceptions (_unraisable)
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
    return _in_code(frame, _main_code)


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
    global _redelivered
    try:
        _signal.pthread_kill(ident, _pending)  # a real signal to the main thread: it wakes a blocked wait
        _redelivered += 1
    except (OSError, ValueError, AttributeError):
        pass
