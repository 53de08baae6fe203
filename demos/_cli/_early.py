"""Ctrl-C before a command's main runs: one line and exit 130, never an import traceback.

``python -m demos.<command>`` spends its first second importing torch. A SIGINT then would print
Python's KeyboardInterrupt traceback (17 to 27 lines). ``guard_imports()`` runs first of all, from
``demos/__init__.py`` (the package is imported before any command module or ``demos.bench``'s
package), and only when this process was started as one of the commands (``demos._cli.commands``): it installs a SIGINT
handler that writes ``python -m demos.<command>: interrupted`` and leaves at once with 130
(nothing to clean up yet: no file, thread or child exists). ``demos._cli.run_main`` puts Python's
own handler back when main starts, so that a run's ``finally`` blocks run on Ctrl-C as before.

Only the standard library is imported here (it must stay cheap).
"""

from __future__ import annotations

import os
import signal
import sys

from demos._cli.commands import MODULES

_prog: str | None = None


def command_of(argv: list[str]) -> str | None:
    """The entry point in a full command line (``sys.orig_argv``): the module after ``-m`` (or
    ``-mNAME``) when it is one of the commands (``MODULES``), else None."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            name = argv[i + 1] if i + 1 < len(argv) else ""
        elif arg.startswith("-m"):
            name = arg[2:]
        else:
            continue
        return name if name in MODULES else None
    return None


def _on_sigint(signum: int, frame: object) -> None:
    try:
        os.write(2, f"{_prog}: interrupted\n".encode())
    except OSError:
        pass
    os._exit(128 + signal.SIGINT)


def guard_imports() -> None:
    """Install the import-time SIGINT handler when this process is one of the commands started
    with ``python -m`` and its module is still being located (``sys.argv[0] == "-m"``); a no-op
    anywhere else (tests, ranks, ``import demos``)."""
    global _prog
    name = command_of(list(getattr(sys, "orig_argv", [])))
    if name is None or sys.argv[:1] != ["-m"]:
        return
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return  # SIGINT ignored or handled by whoever started us: leave it so
        _prog = f"python -m {name}"
        signal.signal(signal.SIGINT, _on_sigint)
    except (ValueError, OSError):  # not the main thread: nothing to guard
        _prog = None


def release_imports() -> None:
    """Give SIGINT back to Python (KeyboardInterrupt) if the import guard holds it."""
    try:
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    except (ValueError, OSError):
        pass
