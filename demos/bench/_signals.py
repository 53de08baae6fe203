"""Signals at random moments into real command runs: how many are lost, how long each takes to end its
command (docs/overlap.md, "Exit status and signals"). The bench's ``signals`` section runs a few dozen
trials; tests/stress/test_signal_storm.py runs hundreds and asserts none is lost.

A trial runs one command line, sends it SIGINT or SIGTERM at a moment drawn from a seeded generator
(a fraction of that command's clean run, measured first under the same load; a trial whose run ended before
its moment is drawn again, up to twice, on the longest such run's length where the load has fallen since),
and records its exit
status, its stderr, the seconds from the signal to its exit, and whether its ``--json`` file is whole,
absent, or left half-written. Two kinds of trial:

* ``exec``: ``python -m demos.<command> ...``, a process of its own from the interpreter's start: the
  imports (about 3 s of torch on a 2-core machine), the argument checks, the run, the file, the exit;
* ``fork``: the same command line in a child forked from the runner, which has imported the commands
  already; the child runs the module as ``python -m`` does once it has found it (``runpy``), with the
  guard installed as ``import demos`` installs it (``demos._guard.install``): the argument checks, the
  run, the file and the exit, without the imports, so that hundreds of trials fit in a few minutes.

The runner is a process of its own (``serve`` of ``demos.bench._signal_runner``, started by ``run_storm``):
it forks only while it has no thread, and it reaps its children itself, so a signal never goes to the pid
of a child that ended. Its children write their reports to /dev/null, their stderr and ``--json`` files
to a temporary folder it removes.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
from dataclasses import asdict
from typing import Any

from demos.bench._signal_trials import (
    COMMANDS,
    JSON,  # noqa: F401 (re-exported: a command line's --json place)
    Command,
    Trial,
)

LATE_S = 1.0
"""A signal that takes longer than this from its sending to the command's exit is late (the README's
"within about a second"); reported, never asserted (the machine is shared)."""

_CHATTER = (
    re.compile(r"^\[\s*[\d.]+ s\] "),  # demos._cli.ProgressLine on a pipe, every few seconds
    re.compile(r"^\[bench\] "),  # the bench's progress
    re.compile(r"^python -m demos\.\w+: wrote "),  # a file written before the signal came
)


# --- the verdicts ------------------------------------------------------------------------------------------


def problems(t: Trial, module: str) -> list[str]:
    """What is wrong with trial ``t`` of ``module`` (a sent signal): empty when it ended as it must:
    status 128 + the signal, its one line last on stderr and nothing else but the command's usual
    chatter (progress, files written), no traceback, its file whole or absent, no temporary file left."""
    out = []
    word = "terminated" if t.sig == signal.SIGTERM else "interrupted"
    lines = t.stderr.splitlines()
    said = [x for x in lines if re.fullmatch(rf"python -m {re.escape(module)}: (interrupted|terminated)", x)]
    other = [x for x in lines if x not in said and not any(p.match(x) for p in _CHATTER)]
    if t.hung:
        out.append("hung (killed past the limit)")
    if t.status == 0:
        out.append("lost: exit status 0")
    elif t.status != 128 + t.sig:
        out.append(f"exit status {t.status}, not {128 + t.sig}")
    expected = f"python -m {module}: {word}"
    if said != [expected] or not lines or lines[-1] != expected:
        out.append(f"not one line {word!r} at the end: {said}")
    if other or "Traceback" in t.stderr:
        out.append(f"other lines on stderr: {other[:3]}")
    if t.json == "broken":
        out.append("its --json file is half-written")
    if t.partials:
        out.append(f"temporary files left: {t.partials}")
    return out


def lost(t: Trial) -> bool:
    """The signal did not end the command as a signal: exit 0, or no line saying so."""
    word = "terminated" if t.sig == signal.SIGTERM else "interrupted"
    return t.status == 0 or not any(x.endswith(f": {word}") for x in t.stderr.splitlines())


def percentile(xs: list[float], p: float) -> float:
    """The nearest-rank ``p`` percentile of ``xs`` (p99 of 200 values: the third largest)."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def summary(trials: list[Trial]) -> dict[str, Any]:
    """Counts and the latency distribution of the trials whose signal was sent."""
    sent = [t for t in trials if t.sent]
    lat = [t.latency for t in sent if t.latency is not None]
    return {
        "trials": len(sent),
        "ran_out": len(trials) - len(sent),
        "lost": sum(lost(t) for t in sent),
        "late": sum(1 for x in lat if x > LATE_S),
        "median_s": statistics.median(lat) if lat else None,
        "p99_s": percentile(lat, 99) if lat else None,
        "max_s": max(lat) if lat else None,
        "by": {
            f"{k}/{c}": len([t for t in sent if t.kind == k and t.command == c])
            for k in ("exec", "fork")
            for c in sorted({t.command for t in sent})
        },
    }


# --- the caller's side ---------------------------------------------------------------------------------------


def run_storm(
    commands: tuple[Command, ...] = COMMANDS,
    *,
    exec_trials: int,
    fork_trials: int,
    seed: int,
    parallel: int = 4,
    limit_s: float = 120.0,
    total_s: float = 900.0,
    env: dict[str, str] | None = None,
) -> tuple[list[Trial], list[Trial]]:
    """Run ``exec_trials`` and ``fork_trials`` trials of each command (``parallel`` at a time) in a runner
    process: ``(clean runs, trials)``. Each child is killed past ``limit_s``, the runner past ``total_s``."""
    plan = {
        "commands": [asdict(c) for c in commands],
        "exec": exec_trials,
        "fork": fork_trials,
        "seed": seed,
        "parallel": parallel,
        "limit_s": limit_s,
    }
    code = "from demos.bench._signal_runner import serve; serve()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its group: the runner and every child it forked
    )
    try:
        stdout, stderr = proc.communicate(json.dumps(plan), timeout=total_s)
    except BaseException:  # past the limit, or interrupted: nothing of the storm outlives this call
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"the signal runner failed (status {proc.returncode}): {stderr[-2000:]}")
    out = json.loads(stdout)
    return [Trial(**t) for t in out["clean"]], [Trial(**t) for t in out["trials"]]
