"""The guard's state in this process (``demos._guard``): the phase a command is in, whose handlers are
installed, the first signal that came, the status decided, the watchdog's pipe and thread. One copy, read
and set by the other parts as ``state.NAME``. Standard library only: ``_signal`` (loaded before ``site``).
"""

from __future__ import annotations

import _signal

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not loaded before site on every install: not imported at run time
    from typing import Any

SIGINT = _signal.SIGINT
SIGTERM = _signal.SIGTERM
IMPORTS, MAIN, EXIT = "imports", "main", "exit"

prog: str | None = None  # "python -m demos.X" while the handlers are ours
pid = 0  # the process they were installed in (a forked child gets the default behaviour back)
phase: str | None = None
owned = False  # this process is the command (install() took it): finish() ends it
old: dict[int, Any] = {}  # handlers to give back (run_main called in a process that is not the command)
pending = 0  # the first signal that came (0: none)
pending_at = 0.0
said = False  # the one line is written
status: int | None = None  # the exit status finish() decided
redelivered = 0
main_code: Any = None  # code object of the frame that calls the command's main (demos._cli._call_main)
exit_codes: frozenset = frozenset()  # run_main's and finish's: a signal in their own frames is recorded
wake_r = wake_w = -1
watchdog: Any = None
stop = False
hook_before: Any = None  # sys.unraisablehook before enter_main's
seam = -1  # the test seam's pipe (READY_ENV)
