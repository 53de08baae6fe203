"""One step-preparation path (``UBatchOrchestrator.prepare_step`` / ``hold``, ``StepPlan``) for
``run``, ``capture`` and a replay.

What we fear: capture and run drifting apart in what they refuse (capture once had its own copy
of run's checks, and applied the ubatch hooks before them, so with a sanitizer on it took a
function that is not callable and failed later, inside the ubatch threads); a refusal that leaves
the orchestrator held; and capture or replay reaching into the orchestrator's private state
(they are driven here through a proxy that has none).
"""

from __future__ import annotations

import threading

import pytest
import torch

import dbo
from dbo import races
from dbo.capture import capture_step
from dbo.errors import DBOError, UBatchFailed
from dbo.orchestrator import StepPlan
from dbo.registry import use_ubatch

N = 2


def _copy(x, out):
    out.copy_(x + 1)


def _body(u):
    dbo.launch(_copy, u["x"], u["out"], name="copy")
    dbo.dbo_yield()
    return u["out"]


def _inputs(n=N):
    return [{"x": torch.full((4,), float(i)), "out": torch.zeros(4)} for i in range(n)]


def _refusal(case: str, orch: dbo.UBatchOrchestrator, call) -> BaseException:
    """What ``call(fn, inputs)`` raises in the bad situation ``case``."""
    fn, inputs = _body, _inputs()
    if case == "closed":
        orch.close()
    elif case == "not callable":
        fn = 42
    elif case == "too few inputs":
        inputs = inputs[:1]
    elif case == "too many inputs":
        inputs = _inputs(N + 1)
    with pytest.raises(Exception) as info:
        if case == "nested":
            with use_ubatch(0):
                call(fn, inputs)
        elif case == "held":
            with orch.hold("another step"):
                call(fn, inputs)
        else:
            call(fn, inputs)
    return info.value


CASES = ["closed", "not callable", "too few inputs", "too many inputs", "nested", "held"]


def _identity(fn):
    return lambda u: fn(u)  # a ubatch hook as a sanitizer's: it wraps whatever it is given


@pytest.mark.parametrize("backend", ["virtual", "threads"])
@pytest.mark.parametrize("hooked", [False, True], ids=["no-hook", "ubatch-hook"])
@pytest.mark.parametrize("case", CASES)
def test_capture_refuses_exactly_what_run_refuses(case, hooked, backend):
    if hooked:
        races.add_ubatch_hook(_identity)
    try:
        seen = {}
        for action in ("run", "capture"):
            with dbo.UBatchOrchestrator(N, backend=backend, handoff_timeout=10.0) as orch:
                err = _refusal(case, orch, getattr(orch, action))
                seen[action] = (type(err), str(err).replace(f"UBatchOrchestrator.{action} ", "UBatchOrchestrator.X "))
                if case != "closed":  # the refusal left nothing held: a good step runs
                    assert [t.tolist() for t in orch.run(_body, _inputs())] == [[1.0] * 4, [2.0] * 4]
        assert seen["run"] == seen["capture"]
        assert seen["run"][0] is not UBatchFailed  # refused up front, never inside the ubatch threads
    finally:
        races.remove_ubatch_hook(_identity)


class PublicOnly:
    """An orchestrator as capture and replay may use it: any private attribute raises."""

    __slots__ = ("real_orchestrator",)

    def __init__(self, orch):
        object.__setattr__(self, "real_orchestrator", orch)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(f"capture reached the orchestrator's private {name!r}")
        return getattr(object.__getattribute__(self, "real_orchestrator"), name)


@pytest.mark.parametrize("backend", ["virtual", "threads", "inline"])
def test_capture_and_replay_use_no_private_of_the_orchestrator(backend):
    with dbo.UBatchOrchestrator(N, backend=backend, handoff_timeout=10.0) as orch:
        proxy = PublicOnly(orch)
        inputs = _inputs()
        cs = capture_step(proxy, _body, inputs)
        for u in inputs:
            u["x"].add_(10)
        assert [t.tolist() for t in cs.replay()] == [[11.0] * 4, [12.0] * 4]
        with use_ubatch(0), pytest.raises(DBOError, match="CapturedStep.replay called from inside a ubatch thread"):
            cs.replay()
        with orch.hold("a step"), pytest.raises(DBOError, match="already running a step in another thread"):
            cs.replay()
        cs.close()


def test_a_failed_capture_and_a_failed_replay_recover_through_the_plan():
    calls = []

    def flaky(x, out):
        calls.append(threading.current_thread().name)
        if len(calls) > N:  # the capture's run is fine; the replay's first kernel raises
            raise RuntimeError("replay kernel failed")
        out.copy_(x)

    def body(u):
        dbo.launch(flaky, u["x"], u["out"])
        return u["out"]

    with dbo.UBatchOrchestrator(N, backend="threads", handoff_timeout=10.0) as orch:
        proxy = PublicOnly(orch)
        with pytest.raises(UBatchFailed):
            capture_step(proxy, lambda u: 1 / 0, _inputs())
        cs = capture_step(proxy, body, _inputs())
        before = orch.backend
        with pytest.raises(UBatchFailed, match="replay of a captured step failed"):
            cs.replay()
        assert orch.backend is not before and before.closed  # the plan recovered: a fresh backend
        assert [t.tolist() for t in orch.run(_body, _inputs())] == [[1.0] * 4, [2.0] * 4]


def test_a_plan_builds_run_and_capture_state_the_same_way():
    with dbo.UBatchOrchestrator(N, backend="virtual", handoff_timeout=10.0) as orch:
        with orch.prepare_step(_body, _inputs()) as plan:
            assert isinstance(plan, StepPlan) and plan.backend is orch.backend
            assert plan.streams == [orch.streams(i) for i in range(N)]
            step = plan.new_state()
            assert [(c.id, c.compute_stream, c.comm_stream) for c in step.contexts] == [
                (i, *orch.streams(i)) for i in range(N)
            ]
            assert step.host_event == orch.backend.host_event
            bare = plan.new_state(plan.streams, host_costs=False)
            assert bare.host_event("yield") is None and bare.host_event != orch.backend.host_event
            with pytest.raises(DBOError, match="already running"):
                orch.run(_body, _inputs())
        assert [t.tolist() for t in orch.run(_body, _inputs())] == [[1.0] * 4, [2.0] * 4]
