"""Liveness: a fault at any handoff point ends the step quickly and cleanly, and the next step works.

The matrix injects one fault per case at every point a step hands control over: each ubatch's
enter / start / exit (the orchestrator's fault hook), before and after each yield (the yields are
``dbo_yield_and_switch_*``, so the siblings are parked inside them), in a recv hook run at a hook
site, in a recv hook run at exit, and in the orchestrator after the start barrier. For N = 2, 3, 4,
both CPU backends, both stream layouts, with the workspace in use (canaries in every ubatch).

Each case checks: the step ends within ``BOUND_S`` (far below the 10 s handoff timeout, so the
wake-up came from the abort, not from a timeout), ``UBatchFailed`` names the right ubatch, the
injected exception object is its ``__cause__``, no ubatch thread is alive when ``run`` returns, the
registry is empty, the slots are still in lockstep, and the next step on the same orchestrator and
workspace gives the right results. ``tests/runtime/test_orchestrator.py`` covers the basic fault cases for
N = 2 with plain ``dbo_yield``; this file is the dense version plus the special cases.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest
import torch

import dbo
from dbo import registry
from dbo.api import (
    dbo_maybe_run_recv_hook,
    dbo_register_recv_hook,
    dbo_yield,
    dbo_yield_and_switch_from_comm_to_compute,
    dbo_yield_and_switch_from_compute_to_comm,
)
from dbo.streams import current_stream
from dbo.testing import with_seams
from tests.support.faults import Injected
from tests.support.orchestrators import BACKENDS, LAYOUTS, orchestrator
from tests.support.timing import slack
from workspace import WorkspaceManager

YIELDS = 3  # segment 1 parks recv hooks, segment 2 runs them at a hook site, segment 3 parks exit hooks
BOUND_S = slack(3.0)  # stretched like the handoff timeout, so it stays far below it


def _orch(n, backend, layout, **kw):
    kw.setdefault("step_timeout", slack(30.0))
    kw.setdefault("join_grace", slack(5.0))
    return orchestrator(n, backend, layout, **kw)


def _ubatch_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("dbo-ubatch")]


def _kind() -> str:
    ctx = registry.current_context()
    return "comm" if current_stream() is ctx.comm_stream else "compute"


def _fill(view: torch.Tensor, value: int) -> None:
    """Write ``value`` into ``view`` with a kernel on the current stream."""
    dbo.launch(lambda t, v: t.fill_(v), view, value, name="canary", kind=_kind())


class Model:
    """A ubatch body with workspace canaries, kernels, switching yields and recv hooks.

    ``fault`` is one of: "enter:u", "start:u", "exit:u" (fault hook), "before:u.k", "after:u.k"
    (around yield k), "hook:u" (the hook u parks on its successor, run at a hook site),
    "exit_hook:u" (the hook u parks on its successor in its last segment, run at that
    successor's exit, or at once if the successor has exited), "after_barrier" (orchestrator).
    """

    def __init__(self, n: int, ws: WorkspaceManager, fault: str | None = None):
        self.n = n
        self.ws = ws
        self.fault = fault
        self.injected: BaseException | None = None
        self.problems: list[str] = []

    def maybe_fail(self, label: str) -> None:
        if label == self.fault:
            self.injected = Injected(label)
            raise self.injected

    def fault_hook(self, point: str, uid: int | None) -> None:
        self.maybe_fail(point if uid is None else f"{point}:{uid}")

    def expected_owner(self) -> int | None:
        kind, _, where = self.fault.partition(":")
        if kind == "after_barrier":
            return None
        u = int(where.split(".")[0])
        if kind == "hook":
            return (u + 1) % self.n
        if kind == "exit_hook":
            return u if u == self.n - 1 else u + 1
        return u

    def _canary(self, uid: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = self.ws.get_simultaneous(((16 + 8 * uid + 4 * k,), torch.float32), ((3, 1 + k), torch.int64))
        _fill(a, 1000 * uid + k)
        _fill(b, -(1000 * uid + k))
        return a, b

    def _check(self, views, uid: int, k: int) -> None:
        current_stream().synchronize()
        a, b = views
        if not (bool((a == 1000 * uid + k).all()) and bool((b == -(1000 * uid + k)).all())):
            self.problems.append(f"ubatch {uid}: canary of segment {k} overwritten")

    def fn(self, uid: int) -> torch.Tensor:
        views = self._canary(uid, 0)
        for k in range(YIELDS):
            self.maybe_fail(f"before:{uid}.{k}")
            if k % 2 == 0:  # compute -> comm, comm -> compute, compute -> comm
                dbo_yield_and_switch_from_compute_to_comm()
            else:
                dbo_yield_and_switch_from_comm_to_compute()
            self.maybe_fail(f"after:{uid}.{k}")
            self._check(views, uid, k)
            views = self._canary(uid, k + 1)
            if k == 0:
                dbo_register_recv_hook(lambda u=uid: self.maybe_fail(f"hook:{u}"))
            elif k == 1:
                dbo_maybe_run_recv_hook()
        dbo_register_recv_hook(lambda u=uid: self.maybe_fail(f"exit_hook:{u}"))
        self._check(views, uid, YIELDS)
        out = torch.empty(4)
        _fill(out, uid)
        return out


def fault_points(n: int) -> list[str]:
    points = ["after_barrier"]
    for u in range(n):
        points += [f"enter:{u}", f"start:{u}", f"exit:{u}", f"hook:{u}", f"exit_hook:{u}"]
        points += [f"{w}:{u}.{k}" for k in range(YIELDS) for w in ("before", "after")]
    return points


def assert_next_step_works(orch, ws: WorkspaceManager) -> None:
    model = Model(orch.num_ubatches, ws)
    with_seams(orch, fault_hook=None)
    out = orch.run(model.fn, list(range(orch.num_ubatches)))
    assert [o.tolist() for o in out] == [[float(u)] * 4 for u in range(orch.num_ubatches)]
    assert not model.problems, model.problems


def run_failing_step(orch, model: Model, expect_uid, expect_cause=None) -> dbo.UBatchFailed:
    """Run a step that must fail; check the bound, the error, threads, registry and workspace."""
    started = time.monotonic()
    with pytest.raises(dbo.UBatchFailed) as info:
        orch.run(model.fn, list(range(orch.num_ubatches)))
    elapsed = time.monotonic() - started
    assert elapsed < BOUND_S, f"the failing step took {elapsed:.2f} s"
    err = info.value
    assert err.ubatch_id == expect_uid, str(err)
    cause = model.injected if expect_cause is None else expect_cause
    assert err.__cause__ is cause, f"cause {err.__cause__!r}, expected {cause!r}"
    assert _ubatch_threads() == [], "ubatch threads outlived the step"
    assert registry.snapshot() == []
    assert len(set(model.ws.slot_sizes())) == 1, model.ws.slot_sizes()
    assert not model.problems, model.problems
    return err


CASES = [(n, point) for n in (2, 3, 4) for point in fault_points(n)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n, point", CASES, ids=[f"N{n}-{p}" for n, p in CASES])
def test_fault_at_every_handoff_point(n, point, backend, layout):
    ws = WorkspaceManager("cpu", n)
    model = Model(n, ws, point)
    with with_seams(_orch(n, backend, layout), fault_hook=model.fault_hook) as orch:
        run_failing_step(orch, model, model.expected_owner())
        assert_next_step_works(orch, ws)


# -- special cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("api", ["compute_to_comm", "comm_to_compute"])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_fault_while_siblings_are_parked_inside_yield_and_switch(n, api, backend):
    """The last ubatch fails; every sibling is parked inside dbo_yield_and_switch_*: all unwind at once."""
    parked_in: dict[int, list[str]] = {}
    unwound: dict[int, str] = {}
    threads: dict[int, threading.Thread] = {}

    def stack_of(t: threading.Thread) -> list[str]:
        frame = sys._current_frames().get(t.ident)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return names

    def fn(uid):
        threads[uid] = threading.current_thread()
        if api == "comm_to_compute":
            dbo.dbo_switch_to_comm()
        if uid == n - 1:
            for sib in range(n - 1):
                parked_in[sib] = stack_of(threads[sib])
            raise Injected("the last ubatch fails while the others are parked")
        try:
            if api == "compute_to_comm":
                dbo_yield_and_switch_from_compute_to_comm()
            else:
                dbo_yield_and_switch_from_comm_to_compute()
        except dbo.errors.UBatchAborted as exc:
            unwound[uid] = type(exc).__name__
            raise
        return uid

    with _orch(n, backend, "per-ubatch") as orch:
        started = time.monotonic()
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, list(range(n)))
        assert time.monotonic() - started < BOUND_S
        assert info.value.ubatch_id == n - 1 and isinstance(info.value.__cause__, Injected)
        assert _ubatch_threads() == [] and registry.snapshot() == []
        for sib in range(n - 1):  # innermost frames: the turn wait, inside yield_and_switch, inside fn
            assert "yield_and_switch" in parked_in[sib][:3], parked_in[sib]
            assert parked_in[sib].index("fn") > parked_in[sib].index("yield_and_switch")
        assert unwound == {sib: "UBatchAborted" for sib in range(n - 1)}
        assert orch.run(lambda u: (dbo_yield(), u)[1], list(range(n))) == list(range(n))


class KernelBoom(Exception):
    """Raised by a kernel on the threads backend's compute executor thread."""


def _boom(t):
    raise KernelBoom("kernel failed on the stream")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("n", [2, 3])
def test_kernel_fault_on_threads_backend_surfaces_in_the_ubatch(n, layout):
    """A kernel raises on the compute executor; the ubatch's synchronize raises the sticky StreamError."""
    ws = WorkspaceManager("cpu", n)

    def fn(uid):
        if uid == 1:
            (v,) = ws.get_simultaneous(((8,), torch.float32))
            dbo.launch(_boom, v, name="boom")
            dbo_yield()
            current_stream().synchronize()  # raises StreamError (sticky)
        dbo_yield()
        return uid

    with _orch(n, "threads", layout) as orch:
        started = time.monotonic()
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, list(range(n)))
        assert time.monotonic() - started < BOUND_S
        err = info.value
        if layout == "per-ubatch":
            assert err.ubatch_id == 1
        else:  # the stream is shared: the first sibling to synchronize or launch on it may report it
            assert err.ubatch_id in range(n)
        assert isinstance(err.__cause__, dbo.StreamError)
        assert isinstance(err.__cause__.__cause__, KernelBoom)
        assert "kernel 'boom' raised" in str(err.__cause__)
        assert _ubatch_threads() == [] and registry.snapshot() == []
        assert_next_step_works(orch, ws)  # the failed streams were replaced


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kernel_fault_nobody_waits_for_surfaces_at_the_end_of_the_step(layout):
    """No ubatch synchronizes after the failing kernel: the orchestrator's final synchronize reports it."""

    def fn(uid):
        if uid == 0:
            dbo.launch(_boom, None, name="boom")
        dbo_yield()
        return uid

    with _orch(2, "threads", layout) as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
        assert info.value.ubatch_id is None
        assert "a stream of the step failed" in str(info.value)
        assert isinstance(info.value.__cause__, dbo.StreamError)
        assert isinstance(info.value.__cause__.__cause__, KernelBoom)
        assert _ubatch_threads() == [] and registry.snapshot() == []
        assert orch.run(lambda u: (dbo_yield(), u)[1], [0, 1]) == [0, 1]


def test_kernel_fault_on_comm_stream_poisons_compute_through_the_switch_event():
    """Comm kernel fails; yield_and_switch makes compute wait on its done-event: compute fails too."""

    def fn(uid):
        if uid == 0:
            dbo.dbo_switch_to_comm()
            dbo.launch(_boom, None, name="boom", kind="comm")
            dbo_yield_and_switch_from_comm_to_compute()
            current_stream().synchronize()  # compute waited on comm's failed done-event
        else:
            dbo_yield()
        return uid

    with _orch(2, "threads", "per-ubatch") as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
        err = info.value
        assert err.ubatch_id == 0
        assert isinstance(err.__cause__, dbo.StreamError)
        assert "compute0" in str(err.__cause__) and "failed stream 'comm0'" in str(err.__cause__)
        assert isinstance(err.__cause__.__cause__, KernelBoom)
        assert _ubatch_threads() == [] and registry.snapshot() == []


class Interrupt(BaseException):
    """A KeyboardInterrupt-like exception: not an Exception."""


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("exc_type", [Interrupt, KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("where", ["before_yield", "after_yield", "exit"])
def test_base_exception_in_a_ubatch_fails_the_step_cleanly(where, exc_type, backend):
    raised = {}

    def fn(uid):
        if uid == 1 and where == "before_yield":
            raised["e"] = exc_type("stop")
            raise raised["e"]
        dbo_yield()
        if uid == 0 and where == "after_yield":
            raised["e"] = exc_type("stop")
            raise raised["e"]
        return uid

    def hook(point, uid):
        if where == "exit" and point == "exit" and uid == 0:
            raised["e"] = exc_type("stop")
            raise raised["e"]

    with with_seams(_orch(2, backend, "per-ubatch"), fault_hook=hook) as orch:
        started = time.monotonic()
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
        assert time.monotonic() - started < BOUND_S
        assert info.value.__cause__ is raised["e"]
        assert info.value.ubatch_id == (1 if where == "before_yield" else 0)
        assert _ubatch_threads() == [] and registry.snapshot() == []
        with_seams(orch, fault_hook=None)
        assert orch.run(lambda u: (dbo_yield(), u)[1], [0, 1]) == [0, 1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_first_failure_wins_when_unwinding_siblings_fail_too(backend):
    """Siblings whose cleanup raises while unwinding do not replace the original failure."""
    first = Injected("first")

    def fn(uid):
        try:
            if uid == 2:
                raise first
            dbo_yield()
        finally:
            if uid != 2:
                raise ValueError(f"cleanup of ubatch {uid} failed")  # masks UBatchAborted in the sibling
        return uid

    with _orch(3, backend, "shared") as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1, 2])
        # Ubatches 0 and 1 wake with UBatchAborted and raise ValueError from their finally blocks,
        # which _ubatch_main records as failures too; the first one (ubatch 2's) is reported.
        assert info.value.ubatch_id == 2
        assert info.value.__cause__ is first
        assert _ubatch_threads() == [] and registry.snapshot() == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_failure_after_siblings_exited_and_with_siblings_still_parked(backend):
    """Uneven yield counts: ubatch 0 has exited, ubatch 2 is parked, ubatch 1 fails on its last segment."""
    counts = [0, 3, 2]

    def fn(uid):
        for k in range(counts[uid]):
            dbo_yield()
        if uid == 1:
            raise Injected("late failure")
        return uid

    with _orch(3, backend, "per-ubatch") as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1, 2])
        assert info.value.ubatch_id == 1 and isinstance(info.value.__cause__, Injected)
        assert _ubatch_threads() == [] and registry.snapshot() == []


@pytest.mark.stress
@pytest.mark.parametrize("backend", BACKENDS)
def test_repeated_faults_do_not_leak(backend, stress_count):
    """Many failing steps in a row on one orchestrator: no threads, registry entries or slots leak."""
    n = 3
    ws = WorkspaceManager("cpu", n)
    points = fault_points(n)
    with _orch(n, backend, "per-ubatch") as orch:
        for i in range(len(points) * stress_count):
            model = Model(n, ws, points[(i * 7) % len(points)])
            with_seams(orch, fault_hook=model.fault_hook)
            run_failing_step(orch, model, model.expected_owner())
        assert_next_step_works(orch, ws)
    assert ws.stats()["grows"] <= 6  # growth only while warming up to the largest canary request


def test_keyboard_interrupt_in_the_orchestrator_thread_still_ends_the_step():
    """Ctrl-C lands in thread M while it waits for the ubatches (its bounded join loop).

    Contract (docs/protocol.md): no thread outlives its step and the registry is empty after every
    step. So whatever ``run`` raises (KeyboardInterrupt, or UBatchFailed caused by it), the step's
    ubatch threads must be gone and unregistered when it does; otherwise the next ``run`` starts
    while the old step's threads still use the same streams and workspace slots.
    """
    import _thread

    interrupted = threading.Event()
    survivors: dict[str, object] = {}

    def fn(uid):
        if uid == 0:
            ctx = registry.current_context()
            _thread.interrupt_main()  # what Ctrl-C does: KeyboardInterrupt in the main thread
            deadline = time.monotonic() + slack(2.0)
            while not (interrupted.is_set() or ctx.step.aborted) and time.monotonic() < deadline:
                time.sleep(0.001)
        for _ in range(3):
            dbo_yield()
        return uid

    assert threading.current_thread() is threading.main_thread()
    with _orch(2, "virtual", "per-ubatch") as orch:
        try:
            try:
                orch.run(fn, [0, 1])
            except KeyboardInterrupt:
                survivors["how"] = "KeyboardInterrupt"
            except dbo.UBatchFailed as exc:
                survivors["how"] = f"UBatchFailed from {type(exc.__cause__).__name__}"
            survivors["threads"] = _ubatch_threads()
            survivors["registry"] = [e.describe() for e in registry.snapshot()]
        finally:
            interrupted.set()  # release ubatch 0 in any case; the conftest guard waits for the threads
        assert survivors["how"] in ("KeyboardInterrupt", "UBatchFailed from KeyboardInterrupt")
        assert survivors["threads"] == [], f"run() raised {survivors['how']} while {survivors['threads']} still ran"
        assert survivors["registry"] == [], survivors["registry"]
        assert orch.run(lambda u: (dbo_yield(), u)[1], [0, 1]) == [0, 1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_step_does_not_keep_the_failing_ubatchs_tensors_alive(backend):
    """Once the caller drops UBatchFailed, the failing ubatch's frame (its tensors, its workspace
    views) must be freed by reference counting, not only when the cyclic GC happens to run.

    Otherwise a failed step pins that memory (activations on a GPU; under lockstep growth the slot
    buffer its views belong to becomes orphaned) for an unbounded time.
    """
    import gc

    ws = WorkspaceManager("cpu", 2, growth="lockstep")
    freed: list[str] = []

    def fn(uid):
        scratch = torch.empty(1 << 16)
        weakref_finalize(scratch, freed.append, f"tensor of ubatch {uid}")
        (v,) = ws.get_simultaneous(((4096,), torch.uint8))
        if uid == 1:
            raise Injected("ubatch 1 fails holding a tensor and a workspace view")
        dbo_yield()
        return uid

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with _orch(2, backend, "per-ubatch") as orch:
            try:
                orch.run(fn, [0, 1])
            except dbo.UBatchFailed:
                pass
            ws.get_simultaneous(((8192,), torch.uint8))  # lockstep growth replaces every slot
            orphaned = ws.orphaned_bytes()
            leaked = "tensor of ubatch 1" not in freed
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()
    assert "tensor of ubatch 0" in freed
    assert not leaked, "the failing ubatch's tensor is only freed by the cyclic GC (a reference cycle)"
    assert orphaned == 0, f"{orphaned} bytes of slot buffers stay pinned by the failed step"


def weakref_finalize(t: torch.Tensor, fn, arg) -> None:
    import weakref

    weakref.finalize(t.untyped_storage(), fn, arg)
