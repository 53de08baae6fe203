"""The runner of the signal trials (``demos.bench._signals``, "The runner ..."): a process of its own, started by
``run_storm``, that forks only while it has no thread and reaps its children itself, so that a signal never
goes to the pid of a child that ended. ``serve`` is its main: the plan on stdin, the trials as JSON on stdout.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from demos.bench._signal_trials import JSON, Command, Trial


def serve() -> None:
    """The runner's main (``run_storm``): the plan on stdin, the trials as JSON on stdout."""
    import threading

    plan = json.load(sys.stdin)
    commands = [Command(c["name"], c["module"], tuple(c["args"])) for c in plan["commands"]]
    if plan["fork"]:
        import importlib

        import demos  # noqa: F401 - the package (not a command here: no guard)

        for c in commands:  # what the children import, once, here; the command module itself is run afresh
            name = c.module if c.module != "demos.bench" else "demos.bench.__main__"
            importlib.import_module(name)
            del sys.modules[name]  # as python -m finds it: not imported yet (else runpy warns)
    if threading.active_count() != 1:
        raise RuntimeError(f"the runner has threads ({threading.enumerate()}): it cannot fork safely")
    folder = tempfile.mkdtemp(prefix="dbo-signals-")
    try:
        runner = _Runner(commands, folder, plan["parallel"], plan["limit_s"])
        kinds = [k for k in ("exec", "fork") if plan[k]]
        clean = [Trial(i, k, c.name, 0) for i, (k, c) in enumerate((k, c) for k in kinds for c in commands)]
        runner.run(clean)
        for t in clean:
            if t.status != 0 or t.ready is None:
                raise RuntimeError(f"the clean {t.kind} run of {t.command} failed: {t.status} {t.stderr[-1000:]}")
        seconds = {(t.kind, t.command): t.seconds - t.ready for t in clean}  # from the guard to the exit
        rng = random.Random(plan["seed"])
        want = {(k, c.name): plan[k] for k in kinds for c in commands}
        trials: list[Trial] = []
        for _ in range(3):  # a run that ends before its moment sends nothing: draw again for it (twice)
            sent = {key: sum(1 for t in trials if (t.kind, t.command) == key and t.sent) for key in want}
            # a run that ended before its moment was a clean run under the load now: where the load fell since
            # the clean runs (another job ending), the moments follow the runs' lengths now, not then
            seconds.update(_recent_lengths(trials, seconds))
            batch = []
            for (k, name), n in want.items():
                for _ in range(n - sent[(k, name)]):
                    # a quarter at the end of the run (the report, the file, the exit), the rest anywhere
                    frac = rng.uniform(0.8, 1.0) if rng.random() < 0.25 else rng.uniform(0.0, 0.95)
                    sig = rng.choice((signal.SIGINT, signal.SIGTERM))
                    batch.append(Trial(0, k, name, int(sig), frac, frac * seconds[(k, name)]))
            if not batch:
                break
            rng.shuffle(batch)  # interleaved: every kind and command beside every other
            for i, t in enumerate(batch):
                t.id = len(clean) + len(trials) + i
            runner.run(batch)
            trials += batch
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    json.dump({"clean": [asdict(t) for t in clean], "trials": [asdict(t) for t in trials]}, sys.stdout)


def _recent_lengths(trials: list[Trial], seconds: dict) -> dict:
    """``{(kind, command): seconds}`` from the guard to the exit of the runs that ended before their moment,
    each command's longest (the least biased short: only runs shorter than their moment are among them), where
    shorter than the length ``seconds`` holds; none where none ran out."""
    out = {}
    for key, was in seconds.items():
        runs = [
            t.seconds - t.ready
            for t in trials
            if (t.kind, t.command) == key and not t.sent and not t.hung and t.ready is not None
        ]
        if runs and max(runs) < was:
            out[key] = max(runs)
    return out


@dataclass
class _Child:
    trial: Trial
    pid: int
    t0: float
    pidfd: int  # -1 where there is none
    seam: int  # the read end of the guard's test seam (demos._guard.READY_ENV)
    ready: float | None = None  # when the guard said its handlers are in place
    leaving: bool = False  # the guard said the status is decided (os._exit next)
    sent_at: float = 0.0


class _Runner:
    def __init__(self, commands: list[Command], folder: str, parallel: int, limit_s: float):
        self.commands = {c.name: c for c in commands}
        self.folder, self.parallel, self.limit_s = folder, max(1, parallel), limit_s

    def _paths(self, t: Trial) -> tuple[str, str]:
        return os.path.join(self.folder, f"trial-{t.id}.err"), os.path.join(self.folder, f"trial-{t.id}.json")

    def run(self, trials: list[Trial]) -> None:
        """Run ``trials``, ``parallel`` at a time; each signal ``t.at`` seconds after its child's guard
        said it is ready (what comes before is the interpreter's own start, which no guard can hold), and
        only while the guard has not said the status is decided (after that, the kernel is ending the
        process and no program sees a signal)."""
        todo = list(trials)
        running: dict[int, _Child] = {}
        parent = os.getppid()
        while todo or running:
            if os.getppid() != parent:  # the caller is gone: so is the storm
                for c in running.values():
                    os.kill(c.pid, signal.SIGKILL)
                os._exit(1)
            while todo and len(running) < self.parallel:
                c = self._start(todo.pop(0))
                running[c.pid] = c
            for c in list(running.values()):
                self._read_seam(c)
                t, now = c.trial, time.monotonic()
                if t.sig and not t.sent and c.ready is not None and now >= c.ready + t.at and not c.leaving:
                    done, status = os.waitpid(c.pid, os.WNOHANG)
                    if done:  # it ended before its moment
                        self._ended(running.pop(c.pid), now, status)
                        continue
                    os.kill(c.pid, t.sig)  # not reaped: the pid is still this child's
                    t.sent, t.at = True, time.monotonic() - c.ready
                    c.sent_at = time.monotonic()
                if now - c.t0 > self.limit_s and not t.hung:
                    t.hung = True
                    os.kill(c.pid, signal.SIGKILL)
            for c in list(running.values()):
                done, status = os.waitpid(c.pid, os.WNOHANG)
                if done:
                    self._read_seam(c)
                    self._ended(running.pop(c.pid), time.monotonic(), status)
            if running:
                self._wait(list(running.values()))

    def _read_seam(self, c: _Child) -> None:
        while c.seam >= 0 and select.select([c.seam], [], [], 0)[0]:
            got = os.read(c.seam, 64)
            if not got:  # the child closed it (exec'd away, or ended)
                os.close(c.seam)
                c.seam = -1
                return
            if b"1" in got and c.ready is None:
                c.ready = time.monotonic()
            if b"0" in got:
                c.leaving = True

    def _wait(self, children: list[_Child]) -> None:
        """Until a child ends or speaks, or the next signal is due (at most 20 ms)."""
        now = time.monotonic()
        due = [c.ready + c.trial.at - now for c in children if c.trial.sig and not c.trial.sent and c.ready]
        timeout = max(0.0, min([0.02, *due]))
        fds = [c.seam for c in children if c.seam >= 0]
        if all(c.pidfd >= 0 for c in children):
            fds += [c.pidfd for c in children]
        else:
            timeout = min(timeout, 0.002)
        select.select(fds, [], [], timeout)

    def _ended(self, c: _Child, now: float, status: int) -> None:
        t = c.trial
        for fd in (c.pidfd, c.seam):
            if fd >= 0:
                os.close(fd)
        t.status = os.waitstatus_to_exitcode(status)
        t.seconds = now - c.t0
        t.ready = None if c.ready is None else c.ready - c.t0
        if t.sent:
            t.latency = now - c.sent_at
        err, js = self._paths(t)
        try:
            with open(err, errors="replace") as f:
                t.stderr = f.read()
        except OSError:
            t.stderr = ""
        if os.path.exists(js):
            try:
                with open(js) as f:
                    json.load(f)
                t.json = "whole"
            except ValueError:
                t.json = "broken"
        name = os.path.basename(js)
        t.partials = [n for n in os.listdir(self.folder) if n.startswith(".partial-") and n.endswith("-" + name)]

    def _start(self, t: Trial) -> _Child:
        from demos._guard import READY_ENV

        c = self.commands[t.command]
        err, js = self._paths(t)
        args = [js if a == JSON else a for a in c.args]
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            os.close(w)
            return _Child(t, pid, time.monotonic(), _pidfd(pid), r)
        try:  # the child
            os.close(r)
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)  # the report: not looked at
            os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
            os.set_inheritable(w, True)
            os.environ[READY_ENV] = str(w)
            if t.kind == "exec":
                os.execv(sys.executable, [sys.executable, "-m", c.module, *args])
            _as_python_m(c.module, args)
        except BaseException:  # noqa: BLE001 - a child must never return into the runner
            import traceback

            traceback.print_exc()
        os._exit(99)


def _as_python_m(module: str, args: list[str]) -> None:
    """What ``python -m module args`` does once the interpreter has started, in this (forked) process:
    the command line as the guard reads it, the guard (``import demos`` runs it; the package is
    imported already), the module run as ``__main__``. The command's ``run_main`` ends the process."""
    import runpy

    import demos._guard as guard

    sys.orig_argv = [sys.executable, "-m", module, *args]
    sys.argv = ["-m", *args]
    guard.install()
    runpy._run_module_as_main(module)  # type: ignore[attr-defined]


def _pidfd(pid: int) -> int:
    """A pidfd (readable once the child ends: select wakes at its exit), or -1 where there is none."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return -1
    try:
        return opener(pid)
    except OSError:
        return -1
