"""What every ``python -m demos.*`` command shares: output paths checked before the run, files
written after the report, and how a command ends on Ctrl-C, SIGTERM or a closed stdout.

* ``check_output_path(path, flag)``: raises ``OutputPathError`` (one line naming the flag) when
  ``path`` cannot be written: a missing folder, a folder in place of a file, no permission. A
  command checks all its paths before any work and exits 2 on the first bad one.
* ``write_output(path, flag, write)``: calls ``write(path)``; a failure (the disk filled up, the
  folder vanished during the run) becomes one line on stderr and False, never a traceback. The
  command prints its report first and writes its files after, so a failed write loses nothing
  that was printed; it then exits 1.
* ``run_main(main, prog, argv)``: runs ``main(argv)`` and turns the ways a command can be stopped
  into an exit status and at most one line on stderr:

  ====================================  ===========  ===================================
  what happened                         exit status  stderr
  ====================================  ===========  ===================================
  Ctrl-C (SIGINT)                       130          ``<prog>: interrupted``
  SIGTERM                               143          ``<prog>: terminated``
  stdout closed (``... | head``)         141          nothing
  ====================================  ===========  ===================================

  130 and 143 are the shell's 128 + signal number. A closed stdout exits 141 (128 + SIGPIPE), as
  a C program killed by SIGPIPE does, so ``set -o pipefail`` still sees that the output was cut
  short; stdout is pointed at /dev/null first, so the interpreter's final flush cannot raise again.
  SIGTERM is turned into an exception (``Terminated``, a KeyboardInterrupt) in the main thread,
  so every ``finally`` runs: temporary folders are removed and child processes stopped, as on
  Ctrl-C. The runtime wraps an interrupt that lands inside a step (``UBatchFailed`` from a
  ``KeyboardInterrupt``); the cause chain is searched, so that is an interrupt too.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
from typing import Callable, Sequence

from demos._cli._early import release_imports
from demos._cli._progress import ProgressLine

__all__ = [
    "ProgressLine",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "EXIT_BROKEN_PIPE",
    "OneLineParser",
    "OutputPathError",
    "Terminated",
    "check_output_path",
    "check_output_paths",
    "write_output",
    "say",
    "progress",
    "stdout_closed",
    "run_main",
    "interrupt_of",
    "out_of_memory_of",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: ...``, status 2) and no usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
EXIT_BROKEN_PIPE = 128 + 13  # 141: SIGPIPE (a constant: Windows has no signal.SIGPIPE)


class OutputPathError(ValueError):
    """An output path that cannot be written; the message is one line that names the flag."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (a KeyboardInterrupt, so code that cleans up on Ctrl-C
    cleans up on SIGTERM too)."""


_WHY = {
    errno.EACCES: "no permission",
    errno.EPERM: "no permission",
    errno.EROFS: "a read-only file system",
    errno.ENOENT: "it takes no new files",
    errno.ENOSPC: "no space left",
    errno.ETXTBSY: "the file is in use",
}


def check_output_path(path: str, flag: str) -> None:
    """Raise OutputPathError unless ``path`` can be created or overwritten as a file.

    Checked by doing: an existing file is opened for appending (nothing is changed), a new one is
    created and removed again. So a read-only file system or a folder without write permission is
    caught, not guessed from mode bits."""
    if not path:
        raise OutputPathError(f"{flag}: empty path")
    if os.path.isdir(path):
        raise OutputPathError(f"{flag} {path}: is a folder; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(folder):
        raise OutputPathError(f"{flag} {path}: the folder {os.path.dirname(path) or folder} does not exist")
    if not os.path.isdir(folder):
        raise OutputPathError(f"{flag} {path}: {os.path.dirname(path)} is not a folder")
    existed = os.path.exists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:  # in our words: /proc says "No such file or directory" for a new file
        where = "the file cannot be written" if existed else f"the folder {folder} cannot be written"
        why = _WHY.get(e.errno or 0, "the system refused to open it")
        raise OutputPathError(f"{flag} {path}: {where} ({why})") from None
    if not existed:
        try:
            os.remove(path)
        except OSError:
            pass


def check_output_paths(pairs: Sequence[tuple[str | None, str]]) -> None:
    """``check_output_path`` for each ``(path, flag)`` whose path is set; also refuses two flags
    that name the same file (the second write would replace the first)."""
    seen: dict[str, str] = {}
    for path, flag in pairs:
        if not path:
            continue
        check_output_path(path, flag)
        key = os.path.realpath(path)
        if key in seen:
            raise OutputPathError(f"{flag} {path}: the same file as {seen[key]}; give each output its own file")
        seen[key] = flag


def write_output(path: str, flag: str, write: Callable[[str], object], prog: str) -> bool:
    """``write(path)``; True on success, confirmed by one line on stderr (``PROG: wrote PATH (--flag)``).
    An OSError becomes one line on stderr and False."""
    try:
        write(path)
    except OSError as e:
        sys.stderr.write(f"{prog}: error: {flag} {path}: could not write: {e.strerror or e}\n")
        return False
    sys.stderr.write(f"{prog}: wrote {path} ({flag})\n")
    return True


_closed = False


def say(text: str = "") -> None:
    """Print ``text`` (and a newline) to stdout. Once stdout is closed (``... | head``), later
    calls print nothing, the command goes on (its files are still written) and ``run_main``
    exits 141."""
    global _closed
    if _closed:
        return
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _closed = True
        _quiet_stdout()


def progress(prog: str, text: str) -> None:
    """One line on stderr saying what runs now, only when stderr is a terminal (a person waits
    for it); pipes and log files get nothing."""
    try:
        if sys.stderr.isatty():
            sys.stderr.write(f"{prog}: {text}\n")
            sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def stdout_closed() -> bool:
    """True once ``say`` found stdout closed."""
    return _closed


def interrupt_of(exc: BaseException | None) -> BaseException | None:
    """The KeyboardInterrupt (or Terminated) behind ``exc``: itself, or one in its cause or
    context chain (the runtime wraps an interrupt that lands in a step in UBatchFailed)."""
    return _in_chain(exc, KeyboardInterrupt)


def out_of_memory_of(exc: BaseException | None) -> BaseException | None:
    """The allocation failure behind ``exc``, in its cause or context chain: a MemoryError, torch's
    OutOfMemoryError, or the CPU allocator's RuntimeError ("can't allocate memory")."""

    def oom(e: BaseException) -> bool:
        return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError" or "can't allocate memory" in str(e)

    return _in_chain(exc, oom)


def _in_chain(exc: BaseException | None, kind: type | Callable[[BaseException], bool]) -> BaseException | None:
    """The first exception in ``exc``'s cause (or context) chain, ``exc`` included, of type ``kind``
    (or for which ``kind(exception)`` is true)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind) if isinstance(kind, type) else kind(exc):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def run_main(main: Callable[[Sequence[str] | None], int], prog: str, argv: Sequence[str] | None = None) -> int:
    """``main(argv)`` with the signal and closed-stdout handling above; returns the exit status.

    Installs the SIGTERM handler only in the main thread, and restores the old one afterwards.
    Ctrl-C before this (while the command imports torch) is ``demos._cli._early``'s one line; from
    here on it is a KeyboardInterrupt again, so that every ``finally`` of the run runs."""
    old = None
    import threading

    release_imports()

    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        try:
            code = main(argv)
            sys.stdout.flush()
            return EXIT_BROKEN_PIPE if _closed and code == 0 else code
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
    except BaseException as e:  # noqa: BLE001 - an interrupt may be wrapped in any exception
        intr = interrupt_of(e)
        if intr is None:
            if _in_chain(e, BrokenPipeError) is not None:  # stdout closed, also from a ubatch thread's print
                _quiet_stdout()
                return EXIT_BROKEN_PIPE
            raise
        term = isinstance(intr, Terminated)
        try:
            sys.stdout.flush()
        except (BrokenPipeError, OSError, ValueError):
            _quiet_stdout()
        try:
            sys.stderr.write(f"{prog}: {'terminated' if term else 'interrupted'}\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        return EXIT_TERMINATED if term else EXIT_INTERRUPTED
