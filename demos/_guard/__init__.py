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

The parts: ``_state`` (this process's guard state: the phase, whose handlers, the first signal, the
status), ``_handler`` (the signal handler and the unraisable hook; installing and giving them back),
``_main`` (``run_main``'s side: ``enter_main``, ``pending``, ``finish``), ``_ending`` (the one line, the
status, and the interpreter's exit done by hand), ``_watchdog`` (a swallowed signal sent again) and
``_seam`` (the test seam).
"""

from __future__ import annotations

from demos._guard._ending import line, status_of
from demos._guard._handler import Terminated, install, module_after_m
from demos._guard._main import enter_main, finish, pending, redelivered
from demos._guard._seam import READY_ENV
from demos._guard._state import EXIT, IMPORTS, MAIN, SIGINT, SIGTERM
from demos._guard._watchdog import FORCE_AFTER_S, REDELIVER_AFTER_S

__all__ = [
    "EXIT",
    "FORCE_AFTER_S",
    "IMPORTS",
    "MAIN",
    "READY_ENV",
    "REDELIVER_AFTER_S",
    "SIGINT",
    "SIGTERM",
    "Terminated",
    "enter_main",
    "finish",
    "install",
    "line",
    "module_after_m",
    "pending",
    "redelivered",
    "status_of",
]
