"""Every signal honoured (issue 47): SIGINT and SIGTERM at random moments (seeded) into many short runs of
``demos.predict``, ``demos.overlap``, ``demos.validate``, ``demos.bench`` and ``demos.serving``, none lost.

``demos.bench._signals`` runs the trials (its docstring says how): per command, ``EXEC`` runs that are
processes of their own from the interpreter's start (the imports, the run, the file, the exit) and
``FORK`` runs forked from a runner that imported the commands already (the run, the file, the exit, at a
fraction of the cost), four at a time, every child killed past a limit; ``--stress-count`` multiplies
both. Each trial must end with status 128 + the signal, its one line last on stderr, no traceback, its
``--json`` file whole or absent and no temporary file left. A trial whose run ended before its moment
came sent no signal and is not counted; at least ``MIN_TRIALS`` must have.

Latency is recorded, not asserted (the machine is shared): the median, p99 and max from the signal to
the exit, and the late ones (over a second), are printed (``-s``) and go in docs/overlap.md
("Exit status and signals") and docs/results/. About 2.5 minutes on two otherwise idle cores.
"""

from __future__ import annotations

import pytest

from demos.bench._signals import COMMANDS, LATE_S, lost, problems, run_storm, summary
from tests.support.paths import python_env
from tests.support.timing import slack

EXEC = 2
FORK = 45
MIN_TRIALS = 200
SEED = 47


@pytest.mark.long(125)
@pytest.mark.stress
@pytest.mark.timeout(slack(900))
def test_no_signal_is_lost_at_any_moment_of_five_commands(stress_count):
    n = stress_count
    clean, trials = run_storm(
        exec_trials=EXEC * n,
        fork_trials=FORK * n,
        seed=SEED,
        parallel=4,
        limit_s=slack(120),
        total_s=slack(900) * n,
        env=python_env(),
    )
    modules = {c.name: c.module for c in COMMANDS}
    for t in clean:  # the control: each command line runs to its end and writes a whole file
        assert t.status == 0 and t.json == "whole" and not t.partials, (t.kind, t.command, t.status, t.stderr[-500:])
    s = summary(trials)
    print(
        f"\nsignals: {s['trials']} trials ({s['ran_out']} ran out before their moment), lost {s['lost']}, "
        f"late (> {LATE_S:g} s) {s['late']}; latency median {s['median_s']:.3f} s, p99 {s['p99_s']:.3f} s, "
        f"max {s['max_s']:.3f} s; by kind/command: {s['by']}"
    )
    sent = [t for t in trials if t.sent]
    assert len(sent) >= MIN_TRIALS * min(n, 1), s
    lost_ones = [(t.kind, t.command, t.sig, round(t.frac, 3), t.status, t.stderr[-300:]) for t in sent if lost(t)]
    assert lost_ones == [], f"{len(lost_ones)} signal(s) lost: {lost_ones[:5]}"
    bad = [(t.kind, t.command, t.sig, round(t.frac, 3), problems(t, modules[t.command])) for t in sent]
    bad = [b for b in bad if b[-1]]
    assert bad == [], f"{len(bad)} trial(s) ended wrong: {bad[:5]}"
