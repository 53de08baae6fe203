"""What every ``python -m demos.*`` command shares: output paths checked before the run, files
written after the report, and how a command ends on Ctrl-C, SIGTERM or a closed stdout.

* ``check_output_path(path, flag)``: raises ``OutputPathError`` (one line naming the flag) when
  ``path`` cannot be written: a missing folder, a folder in place of a file, no permission. A
  command checks all its paths before any work and exits 2 on the first bad one.
* ``write_output(path, flag, write)``: calls ``write(tmp)`` on a temporary file in the same folder,
  then renames it to ``path`` (``write_whole``): a file is complete or not there (an existing one is
  left as it was), whenever a signal lands. A failure (the disk filled up, the folder vanished
  during the run) becomes one line on stderr and False, never a traceback. The command prints its
  report first and writes its files after, so a failed write loses nothing that was printed; it
  then exits 1.
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
  Both signals become an exception in the main thread (KeyboardInterrupt, ``Terminated`` for
  SIGTERM), so every ``finally`` runs: temporary folders are removed and child processes stopped.
  ``demos._guard`` owns the handlers from the first import to the exit: a signal that came is
  honoured even where its exception was swallowed or replaced, and it is sent again while the run
  goes on (docs/overlap.md, "Exit status and signals"). The runtime wraps an interrupt that lands
  inside a step (``UBatchFailed`` from a ``KeyboardInterrupt``); the cause chain is searched, so
  that is an interrupt too. Run as the command itself (``python -m demos.X``), ``run_main`` ends
  the process (``demos._guard.finish``); called from Python it returns the status.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import stat
import sys
from typing import Callable, Sequence

import demos._guard as _guard
from demos._cli._progress import ProgressLine
from demos._guard import Terminated

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
    "check_plot_path",
    "write_output",
    "write_whole",
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
    finally:  # a new file is removed again, also when a signal lands between the two
        if not existed:
            try:
                os.remove(path)
            except OSError:
                pass


def check_plot_path(path: str | None) -> None:
    """Refuse a ``--plot`` path when matplotlib is not installed, before anything runs (``OutputPathError``)."""
    import importlib.util

    if path is not None and importlib.util.find_spec("matplotlib") is None:
        raise OutputPathError(
            "--plot needs matplotlib (pip install -e '.[plot]'), which is not installed: nothing was run"
        )


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


def _partial_path(path: str) -> tuple[str, str, int | None] | None:
    """``(temporary, target, mode)``: a free name beside ``path``'s target (the file a link points
    to) that keeps its name as a suffix (matplotlib picks the format from it), the target, and the
    target's permission bits if it exists; None where a rename cannot stand for the write (a device
    or a pipe: /dev/null, a FIFO) or the folder takes no new files."""
    target = os.path.realpath(path)
    try:
        mode: int | None = os.stat(target).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        return None
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".partial-{os.getpid()}-{name}")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    except OSError:  # a writable file in a folder that takes no new files: written in place
        return None
    finally:
        try:
            os.remove(tmp)
        except OSError:
            pass
    return tmp, target, None if mode is None else stat.S_IMODE(mode)


def write_whole(path: str, write: Callable[[str], object]) -> None:
    """``write(tmp)`` on a temporary file in ``path``'s folder, then rename it to ``path``: the file
    at ``path`` is the old one (or none) until the new one is complete, whatever stops the write (a
    signal, an error, a full disk). ``write`` gets the temporary path: a writer that records where
    it wrote records the path its caller asked for, not its argument; one that writes nothing
    leaves ``path`` as it was. Where no temporary file can stand for ``path`` (a device, a FIFO, a
    folder that takes no new files) it writes in place. An existing file keeps its permissions."""
    where = _partial_path(path)
    if where is None:
        write(path)
        return
    tmp, target, mode = where
    try:
        write(tmp)
        if os.path.exists(tmp):
            if mode is not None:
                os.chmod(tmp, mode)
            os.replace(tmp, target)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def write_output(path: str, flag: str, write: Callable[[str], object], prog: str) -> bool:
    """``write_whole(path, write)``: ``write`` gets a temporary path in the same folder and the file
    is renamed to ``path`` once complete; True on success, confirmed by one line on stderr
    (``PROG: wrote PATH (--flag)``). An OSError becomes one line on stderr and False."""
    try:
        write_whole(path, write)
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


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _call_main(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    """The command's main: a signal raises KeyboardInterrupt only below this frame (``demos._guard``);
    in ``run_main``'s own code before and after it, it is recorded and decides the status."""
    return main(argv)


def run_main(main: Callable[[Sequence[str] | None], int], prog: str, argv: Sequence[str] | None = None) -> int:
    """``main(argv)`` with the signal and closed-stdout handling above; returns the exit status
    (run as the command itself, ``python -m demos.X``, it ends the process with it instead).

    ``demos._guard`` holds SIGINT and SIGTERM in the main thread (elsewhere nothing is installed):
    a signal raises in ``main``, every ``finally`` of the run runs, and the status is 130/143 with
    one line whenever a signal came, also one whose exception was swallowed on the way."""
    global _closed
    held = _guard.enter_main(prog, _call_main.__code__, run_main.__code__)
    code: object = 0
    outcome: BaseException | None = None
    try:
        code = _call_main(main, argv)
    except BaseException as e:  # noqa: BLE001 - sorted below: an interrupt may be wrapped in any exception
        outcome = e
    try:
        sys.stdout.flush()
    except (BrokenPipeError, OSError, ValueError):
        _closed = True
        _quiet_stdout()
    signum = _guard.pending()
    if outcome is not None and not signum:
        intr = interrupt_of(outcome)
        if intr is not None:  # raised by code, not by a signal (KeyboardInterrupt from a test, interrupt_main)
            signum = signal.SIGTERM if isinstance(intr, Terminated) else signal.SIGINT
        elif isinstance(outcome, SystemExit):  # parser.exit(), sys.exit() in main: its status
            code = outcome.code
            outcome = None
        elif _in_chain(outcome, BrokenPipeError) is not None:  # stdout closed, also from a ubatch thread's print
            _quiet_stdout()
            code, outcome = EXIT_BROKEN_PIPE, None
        else:  # a failure of the command's own: the traceback, as Python prints it, and status 1
            _guard.finish(EXIT_FAILED, held, failure=outcome)
            raise outcome
    if signum:
        status = _guard.status_of(int(signum))
    elif isinstance(code, int):
        status = EXIT_BROKEN_PIPE if _closed and code == 0 else code
    elif code is None:
        status = 0
    else:  # sys.exit("message"): the message on stderr, status 1
        _say_line(str(code))
        status = EXIT_FAILED
    return _guard.finish(status, held)


def _say_line(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
