"""Pinned engines on the threads backend: each executor keeps to CPUs of its own.

What we fear: an executor that is not where the backend says it is (pinned_cpus() lying), the link
executor inheriting the compute executor's single CPU (it is started from that thread), a pinning
that cannot be applied taking the backend down, and the demo pinning ranks that share CPUs.
Whether pinning makes the OS start a woken executor sooner is a timing question: docs/streams.md
gives the measurement and the command, not a test.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

import workspace
from dbo.streams import ThreadsBackend
from dbo.streams.threads import (
    _backend as threads_mod,  # patched where it looks up allowed_cpus: no public name
)
from dbo.streams.threads._engine import allowed_cpus, engine_cpus
from demos.overlap import OverlapConfig, format_report, run_overlap
from tests.support.timing import slack

CPUS = allowed_cpus()
needs_two_cpus = pytest.mark.skipif(
    CPUS is None or len(CPUS) < 2 or not hasattr(os, "sched_setaffinity"),
    reason="needs thread affinity and at least two CPUs",
)


def _on_each_engine(b: ThreadsBackend, probe) -> dict[str, object]:
    """``probe()`` run inside a kernel on each engine, by engine (one key per kernel that ran)."""
    seen: dict[str, object] = {}
    s = b.new_stream("probe")
    for kind in ("compute", "comm"):
        s.launch(lambda kind=kind: seen.update({kind: probe()}), name=f"probe-{kind}", kind=kind)
    s.synchronize()
    return seen


def _affinity_seen_by_kernels(b: ThreadsBackend) -> dict[str, set[int]]:
    """The CPU set each engine's executor runs with, read from inside a kernel on each."""
    return _on_each_engine(b, lambda: os.sched_getaffinity(0))


@pytest.mark.parametrize(
    "allowed, compute, comm",
    [
        ({0, 1}, {0}, {1}),
        ({3, 5, 7}, {3, 5}, {7}),
        (range(16), set(range(15)), {15}),
    ],
)
def test_link_gets_the_last_cpu_and_compute_the_rest(allowed, compute, comm):
    assert engine_cpus("compute", allowed) == compute
    assert engine_cpus("comm", allowed) == comm
    assert not engine_cpus("compute", allowed) & engine_cpus("comm", allowed)


@pytest.mark.parametrize("allowed", [set(), {4}])
def test_nothing_to_separate_on_one_cpu(allowed):
    assert engine_cpus("compute", allowed) is None and engine_cpus("comm", allowed) is None


@needs_two_cpus
def test_pinned_executors_run_where_the_backend_says():
    with ThreadsBackend(timeout=slack(10), pin_engines=True) as b:
        seen = _affinity_seen_by_kernels(b)
        pinned = b.pinned_cpus()
    assert seen == {"compute": engine_cpus("compute", CPUS), "comm": engine_cpus("comm", CPUS)}
    # the link executor is started from the (already pinned) compute executor's thread: it must
    # still get its own CPU, not inherit compute's
    assert seen["comm"] != seen["compute"]
    assert pinned == {k: sorted(v) for k, v in seen.items()}


@needs_two_cpus
def test_unpinned_by_default():
    with ThreadsBackend(timeout=slack(10)) as b:
        seen = _affinity_seen_by_kernels(b)
        assert b.pinned_cpus() == {}
    assert seen == {"compute": CPUS, "comm": CPUS}


def _runs_unpinned() -> None:
    """A pinned backend whose pinning cannot apply still runs a kernel on each engine, unpinned."""
    with ThreadsBackend(timeout=slack(10), pin_engines=True) as b:
        ran = _on_each_engine(b, lambda: True)
        assert b.pinned_cpus() == {}
    assert list(ran) == ["compute", "comm"] and all(ran.values())  # both ran, in stream order


def test_one_allowed_cpu_runs_unpinned(monkeypatch):
    monkeypatch.setattr(threads_mod, "allowed_cpus", lambda: {0})
    _runs_unpinned()


def test_a_refused_pinning_still_runs_the_kernels(monkeypatch):
    def refuse(pid, cpus):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sched_setaffinity", refuse, raising=False)  # the module the engine calls
    monkeypatch.setattr(threads_mod, "allowed_cpus", lambda: {0, 1})
    _runs_unpinned()


def test_pin_engines_must_be_a_bool():
    with pytest.raises(TypeError, match="pin_engines must be True or False"):
        ThreadsBackend(pin_engines="yes")


# --- the demo ------------------------------------------------------------------------------------

SMALL = dict(backend="threads", layers=1, tokens=16, hidden=64, experts=4, steps=1)


@needs_two_cpus
def test_demo_pins_a_single_process_threads_run_and_says_so():
    rep = run_overlap(OverlapConfig(**SMALL))
    cpus = rep["config"]["engine_cpus"]
    assert cpus == {"compute": sorted(engine_cpus("compute", CPUS)), "comm": sorted(engine_cpus("comm", CPUS))}
    assert "engines pinned: compute CPU" in format_report(rep) and ", comm CPU" in format_report(rep)


def test_demo_no_pin_engines_leaves_them_unpinned():
    rep = run_overlap(OverlapConfig(**SMALL, pin_engines=False))
    assert rep["config"]["engine_cpus"] == {}
    assert "engines pinned" not in format_report(rep)


@pytest.mark.filterwarnings("ignore:init_workspace_manager")
def test_demo_never_pins_ranks_that_share_the_cpus(monkeypatch):
    seen = []
    real = ThreadsBackend.__init__

    def spy(self, *a, **kw):
        seen.append(kw.get("pin_engines", False))
        real(self, *a, **kw)

    monkeypatch.setattr(ThreadsBackend, "__init__", spy)
    from demos.toy.config import resolve
    from demos.toy.runner import Runner

    cfg = OverlapConfig(**SMALL)
    res = resolve(cfg)
    try:
        for r_res, want in ((res, True), (replace(res, world_size=2, dist_backend="gloo"), False)):
            Runner(cfg, r_res).close()
            assert seen[-1] is want
    finally:
        workspace.reset_workspace_manager()  # as run() does: leave no process-global manager behind
