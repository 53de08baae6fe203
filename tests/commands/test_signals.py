"""Every signal honoured (docs/overlap.md, "Exit status and signals"): ``run_main`` and ``demos._guard``
in this process, with real signals sent to it, and whole-file writes.

A signal whose KeyboardInterrupt is swallowed (an ``except BaseException`` that goes on, a ``__del__`` or
weakref callback where Python prints "Exception ignored") must still end the command with 130/143 and one
line: the watchdog sends it again until it sticks. Without the guard each of these mains runs to its end
and returns 0. The run of the real commands under random signals is tests/stress/test_signal_storm.py.
"""

from __future__ import annotations

import gc
import os
import signal
import stat
import time

import pytest

import demos._guard as guard
from demos._cli import run_main, write_output, write_whole
from tests.support.timing import slack

PROG = "python -m demos.test"
RUN_FOR = 10.0  # a swallowed interrupt would let these mains run this long, then return 0
CLEANUP_S = 0.6
assert CLEANUP_S > 3 * guard.REDELIVER_AFTER_S


def _until(cond, seconds: float) -> None:
    deadline = time.monotonic() + slack(seconds)
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.005)


def _line(capsys) -> list[str]:
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("sig, code, word", [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")])
def test_a_signal_in_main_is_the_status_and_one_line(capsys, sig, code, word):
    done = []

    def main(argv):
        os.kill(os.getpid(), sig)
        _until(lambda: False, 2.0)
        done.append(True)
        return 0

    assert run_main(main, PROG, []) == code
    assert done == []
    assert _line(capsys) == [f"{PROG}: {word}"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_an_interrupt_swallowed_by_an_except_is_sent_again(capsys):
    swallowed, done = [], []

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            _until(lambda: False, 2.0)
        except BaseException as e:  # noqa: BLE001 - the bug this test plants
            swallowed.append(type(e).__name__)
        _until(lambda: False, RUN_FOR)  # the run goes on...
        done.append(True)
        return 0

    assert run_main(main, PROG, []) == 143
    assert swallowed == ["Terminated"] and done == [], (swallowed, done)
    assert guard.redelivered() >= 1
    assert _line(capsys) == [f"{PROG}: terminated"]


class _SignalsWhenCollected:
    def __init__(self, sig: int, landed: list):
        self.sig, self.landed = sig, landed

    def __del__(self):
        os.kill(os.getpid(), self.sig)  # the handler raises here, in a __del__: Python ignores it
        self.landed.append(True)


def test_an_interrupt_raised_in_a_del_is_not_lost_nor_printed(capsys):
    landed, done = [], []

    def main(argv):
        obj = _SignalsWhenCollected(signal.SIGINT, landed)
        del obj  # __del__ runs now, and the KeyboardInterrupt raised in it is "ignored" by Python
        _until(lambda: False, RUN_FOR)
        done.append(True)
        return 0

    assert run_main(main, PROG, []) == 130
    assert done == []
    assert _line(capsys) == [f"{PROG}: interrupted"]  # no "Exception ignored in: ..." either


def _terminated_in_a_gc_finalizer(capsys) -> None:
    """A main whose cyclic garbage sends SIGTERM from its finalizer, then runs on: it must end with 143 and the
    one line, its end never reached."""
    done = []

    def main(argv):
        a = _SignalsWhenCollected(signal.SIGTERM, [])
        a.cycle = a
        del a
        gc.collect()
        _until(lambda: False, RUN_FOR)
        done.append(True)
        return 0

    assert run_main(main, PROG, []) == 143
    assert done == []
    assert _line(capsys) == [f"{PROG}: terminated"]


def test_an_interrupt_raised_in_a_gc_finalizer_is_not_lost(capsys):
    """The loss of issue 47: the signal lands in a weakref callback (a WeakSet's ``_remove``, run when the
    workspace manager of a swept point dies) or a finalizer the cyclic GC runs."""
    _terminated_in_a_gc_finalizer(capsys)


def test_a_signal_while_the_interrupt_unwinds_is_not_sent_again(capsys):
    """A cleanup that takes a while on the interrupt's way out (a ``finally`` joining threads) is left
    to finish: the watchdog sends nothing while a KeyboardInterrupt is being handled."""
    cleaned = []

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            _until(lambda: False, 2.0)
        finally:
            time.sleep(CLEANUP_S)  # longer than the watchdog waits before it sends a signal again
            cleaned.append(True)
        return 0

    assert run_main(main, PROG, []) == 130
    assert cleaned == [True] and guard.redelivered() == 0
    assert _line(capsys) == [f"{PROG}: interrupted"]


def test_other_endings_are_unchanged(capsys):
    def boom(argv):
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        run_main(boom, PROG, [])
    assert run_main(lambda argv: (_ for _ in ()).throw(SystemExit(2)), PROG, []) == 2
    assert run_main(lambda argv: 0, PROG, []) == 0
    assert run_main(lambda argv: (_ for _ in ()).throw(KeyboardInterrupt()), PROG, []) == 130
    assert _line(capsys) == [f"{PROG}: interrupted"]


# --- whole files ------------------------------------------------------------------------------------------


def _partials(folder) -> list[str]:
    return [n for n in os.listdir(folder) if n.startswith(".partial-")]


@pytest.mark.parametrize("existed", [False, True])
def test_a_write_stopped_halfway_leaves_the_old_file_or_none(tmp_path, existed):
    path = tmp_path / "out.json"
    if existed:
        path.write_text("old\n")

    def write(p):
        with open(p, "w") as f:
            f.write("half")
            f.flush()
            raise KeyboardInterrupt  # a signal lands in the middle of the write

    with pytest.raises(KeyboardInterrupt):
        write_whole(str(path), write)
    assert (path.read_text() == "old\n") if existed else not path.exists()
    assert _partials(tmp_path) == []


def test_a_whole_write_keeps_the_name_the_mode_and_the_link(tmp_path, capsys):
    target = tmp_path / "real.png"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.png"
    link.symlink_to(target)
    seen = []

    def write(p):
        seen.append(os.path.basename(p))
        with open(p, "w") as f:
            f.write("new")

    assert write_output(str(link), "--plot", write, PROG)
    assert seen[0].endswith("real.png") and seen[0] != "real.png"  # a temporary name, the format's suffix kept
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert _partials(tmp_path) == []
    assert capsys.readouterr().err == f"{PROG}: wrote {link} (--plot)\n"


def test_a_writer_that_writes_nothing_leaves_the_path_alone(tmp_path):
    path = tmp_path / "plot.png"
    write_whole(str(path), lambda p: None)  # the toy's --plot without matplotlib: a note, no file
    assert not path.exists() and _partials(tmp_path) == []


def test_a_device_is_written_in_place():
    seen = []
    write_whole(os.devnull, lambda p: seen.append(p))
    assert seen == [os.devnull]


def test_a_signal_sent_again_into_the_unraisable_hook_does_not_ask_again(capsys, monkeypatch):
    """The recursion seen once in CI: the hook asks the watchdog to send the interrupt again; under load
    the signal came back while the main thread was still inside the hook, the handler asked once more
    from there, and so on, one frame deeper each time (RecursionError, printed). Here every resend asked
    for lands at once, inside the hook: the handler must not ask again from there."""
    import demos._guard._handler as handler

    real_wake, asked = handler.wake, []

    def wake_at_once(what: bytes = b"s") -> None:
        real_wake(what)
        if what == b"r" and len(asked) < 20:
            asked.append(what)
            os.kill(os.getpid(), signal.SIGTERM)  # lands before this frame returns, still in the hook
            for _ in range(100):  # a few bytecodes: the handler runs here
                pass

    monkeypatch.setattr(handler, "wake", wake_at_once)
    _terminated_in_a_gc_finalizer(capsys)
    assert len(asked) == 1, asked  # the hook's own ask only
