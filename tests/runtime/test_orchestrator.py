"""The handoff protocol and the no-hang orchestrator."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import dbo
from dbo import registry
from dbo.api import (
    dbo_current_ubatch_id,
    dbo_enabled,
    dbo_maybe_run_recv_hook,
    dbo_num_ubatches,
    dbo_register_recv_hook,
    dbo_switch_to_comm,
    dbo_switch_to_comm_sync,
    dbo_switch_to_compute,
    dbo_switch_to_compute_sync,
    dbo_yield,
    dbo_yield_and_switch_from_comm_to_compute,
    dbo_yield_and_switch_from_compute_to_comm,
)
from dbo.streams import current_stream
from dbo.testing import with_seams
from tests.support.faults import Injected
from tests.support.orchestrators import BACKENDS
from tests.support.orchestrators import orchestrator as _orch
from tests.support.timing import slack

FAULT_BOUND_S = slack(5.0)  # every injected fault must end the step well within this


class Recorder:
    """Logs (ubatch, segment) and checks that only one ubatch thread runs at a time."""

    def __init__(self):
        self.log = []
        self.running = 0
        self.max_running = 0
        self.lock = threading.Lock()

    def segment(self, uid, k):
        with self.lock:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            self.log.append((uid, k))
        time.sleep(0)  # invite a switch: a second runnable thread would show up here
        with self.lock:
            self.running -= 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_strict_round_robin_alternation(backend, n):
    rec, yields = Recorder(), 4

    def fn(x):
        uid = dbo_current_ubatch_id()
        assert uid == x and dbo_enabled() and dbo_num_ubatches() == n
        for k in range(yields + 1):
            rec.segment(uid, k)
            if k < yields:
                dbo_yield()
        return uid * 10

    with _orch(n, backend) as orch:
        out = orch.run(fn, list(range(n)))
        assert orch.last_step_handoffs == n * yields + (n - 1)
    assert out == [i * 10 for i in range(n)]
    assert rec.max_running == 1
    assert rec.log == [(u, k) for k in range(yields + 1) for u in range(n)]


def test_uneven_yield_counts_finish_in_order():
    """A ubatch that exits early drops out of the ring; the others keep alternating."""
    rec = Recorder()
    counts = [1, 3, 2]

    def fn(uid):
        for k in range(counts[uid] + 1):
            rec.segment(uid, k)
            if k < counts[uid]:
                dbo_yield()
        return uid

    with _orch(3) as orch:
        assert orch.run(fn, [0, 1, 2]) == [0, 1, 2]
    assert rec.log == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (1, 2), (2, 2), (1, 3)]
    assert rec.max_running == 1


@pytest.mark.parametrize("layout", ["per-ubatch", "shared"])
def test_stream_layouts_and_switch_apis(layout):
    seen = {}

    def fn(uid):
        ctx = registry.current_context()
        comp, comm = ctx.compute_stream, ctx.comm_stream
        assert current_stream() is comp  # every ubatch starts on its compute stream
        dbo_switch_to_comm()
        assert current_stream() is comm
        dbo_switch_to_compute()
        assert current_stream() is comp
        dbo_switch_to_comm_sync()
        assert current_stream() is comm
        dbo_switch_to_compute_sync()
        assert current_stream() is comp
        dbo_yield_and_switch_from_compute_to_comm()
        assert current_stream() is comm
        dbo_yield_and_switch_from_comm_to_compute()
        assert current_stream() is comp
        dbo_yield()
        assert current_stream() is comp
        seen[uid] = (comp, comm)
        return uid

    with _orch(2, "virtual", stream_layout=layout) as orch:
        orch.run(fn, [0, 1])
    if layout == "shared":
        assert seen[0][0] is seen[1][0] and seen[0][1] is seen[1][1]
    else:
        assert len({id(s) for pair in seen.values() for s in pair}) == 4


def test_yield_and_switch_from_the_wrong_stream_is_an_error():
    def fn(uid):
        dbo_yield_and_switch_from_comm_to_compute()  # we are on compute, not comm

    with _orch(2, "virtual") as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
    assert isinstance(info.value.__cause__, dbo.DBOError)
    assert "must be on its" in str(info.value.__cause__)


def test_api_is_a_no_op_outside_a_step():
    ran = []
    assert not dbo_enabled()
    assert dbo_current_ubatch_id() == 0
    dbo_yield()
    dbo_yield_and_switch_from_compute_to_comm()
    dbo_yield_and_switch_from_comm_to_compute()
    dbo_switch_to_comm()
    dbo_switch_to_compute()
    dbo_switch_to_comm_sync()
    dbo_switch_to_compute_sync()
    dbo_maybe_run_recv_hook()
    dbo_register_recv_hook(lambda: ran.append(1))  # nothing is lost: it runs at once
    assert ran == [1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_ubatch_runs_without_dbo_and_matches(backend):
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    w = torch.randn(16, 16)

    def fn(inp):
        out = torch.empty(inp.shape[0], 16)
        dbo.launch(lambda a, b, o: torch.matmul(a, b, out=o), inp, w, out, name="mm")
        dbo_yield()
        return out

    with _orch(1, backend) as single:
        [ref] = single.run(fn, [x])
        assert single.last_step_handoffs == 0
    with _orch(2, backend) as orch:
        parts = orch.run(fn, dbo.split.slice_tensor(x, dbo.split.split_tokens(8, 2)))
    assert torch.equal(torch.cat(parts), ref)
    assert torch.equal(ref, x @ w)


def test_recv_hook_runs_in_the_next_ubatch():
    ran = []

    def fn(uid):
        dbo_register_recv_hook(lambda: ran.append(("hook of", uid, "ran in", dbo_current_ubatch_id())))
        dbo_yield()
        dbo_maybe_run_recv_hook()
        return uid

    with _orch(3, "virtual") as orch:
        orch.run(fn, [0, 1, 2])
    assert sorted(ran) == [("hook of", u, "ran in", (u + 1) % 3) for u in range(3)]


def test_hook_parked_on_exited_ubatch_is_flushed_at_exit_or_run_at_once():
    """The last registration targets ubatch 0 after it exited: nothing may be lost."""
    ran = []

    def fn(uid):
        dbo_yield()
        dbo_register_recv_hook(lambda: ran.append(uid))
        return uid

    with _orch(2, "virtual") as orch:
        orch.run(fn, [0, 1])
    assert sorted(ran) == [0, 1]


def test_second_recv_hook_over_a_pending_one_is_an_error():
    def fn(uid):
        if uid == 0:
            dbo_register_recv_hook(lambda: None)
            dbo_register_recv_hook(lambda: None)
        dbo_yield()

    with _orch(2, "virtual") as orch:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
    assert info.value.ubatch_id == 0
    assert isinstance(info.value.__cause__, dbo.errors.RecvHookConflict)


# -- failure handling ------------------------------------------------------------------------------

YIELDS = 3


def _faulty(target_uid, target_k, when):
    def fn(uid):
        for k in range(YIELDS):
            if uid == target_uid and k == target_k and when == "before":
                raise Injected(f"u{uid} before yield {k}")
            dbo_yield()
            if uid == target_uid and k == target_k and when == "after":
                raise Injected(f"u{uid} after yield {k}")
        return uid

    return fn


def _assert_clean_failure(orch, run, expect_uid, started):
    with pytest.raises(dbo.UBatchFailed) as info:
        run()
    elapsed = time.monotonic() - started
    assert elapsed < FAULT_BOUND_S, f"fault took {elapsed:.2f} s"
    assert info.value.ubatch_id == expect_uid
    assert isinstance(info.value.__cause__, Injected)
    assert registry.snapshot() == []
    assert not [t for t in threading.enumerate() if t.name.startswith("dbo-ubatch")]
    # the orchestrator is reusable
    assert orch.run(lambda u: (dbo_yield(), u)[1], list(range(orch.num_ubatches))) == list(range(orch.num_ubatches))
    return info.value


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("k", range(YIELDS))
@pytest.mark.parametrize("uid", [0, 1])
def test_fault_at_every_yield_point_aborts_cleanly(backend, uid, k, when):
    with _orch(2, backend) as orch:
        _assert_clean_failure(orch, lambda: orch.run(_faulty(uid, k, when), [0, 1]), uid, time.monotonic())


@pytest.mark.parametrize("n", [2, 4, 8])
def test_fault_in_last_ubatch_of_n(n):
    with _orch(n) as orch:
        _assert_clean_failure(
            orch, lambda: orch.run(_faulty(n - 1, 1, "after"), list(range(n))), n - 1, time.monotonic()
        )


@pytest.mark.parametrize("point", ["enter", "start", "exit"])
@pytest.mark.parametrize("uid", [0, 1])
def test_fault_in_enter_start_exit(point, uid):
    def hook(p, u):
        if p == point and u == uid:
            raise Injected(f"{p} of ubatch {u}")

    with _orch(2) as orch:
        with_seams(orch, fault_hook=hook)
        started = time.monotonic()
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(lambda u: (dbo_yield(), u)[1], [0, 1])
        assert time.monotonic() - started < FAULT_BOUND_S
        assert info.value.ubatch_id == uid and isinstance(info.value.__cause__, Injected)
        assert registry.snapshot() == []
        with_seams(orch, fault_hook=None)
        assert orch.run(lambda u: (dbo_yield(), u)[1], [0, 1]) == [0, 1]


def test_fault_in_the_orchestrator_after_the_barrier():
    def boom():
        raise Injected("orchestrator after barrier")

    with _orch(2) as orch:
        started = time.monotonic()
        with pytest.raises(dbo.UBatchFailed) as info:
            with_seams(orch, after_barrier=boom).run(lambda u: u, [0, 1])
        assert time.monotonic() - started < FAULT_BOUND_S
        assert info.value.ubatch_id is None and isinstance(info.value.__cause__, Injected)
        assert "orchestrator" in str(info.value)
        with_seams(orch, after_barrier=None)
        assert orch.run(lambda u: u, [0, 1]) == [0, 1]


def test_fault_in_a_recv_hook():
    def fn(uid):
        if uid == 0:
            dbo_register_recv_hook(lambda: (_ for _ in ()).throw(Injected("hook")))
        dbo_yield()
        dbo_maybe_run_recv_hook()
        return uid

    with _orch(2) as orch:
        _assert_clean_failure(orch, lambda: orch.run(fn, [0, 1]), 1, time.monotonic())


def test_handoff_timeout_names_where_each_ubatch_is_parked():
    def fn(uid):
        if uid == 0:
            time.sleep(0.8)  # holds the turn past the handoff timeout without yielding
        dbo_yield()
        return uid

    with _orch(2, handoff_timeout=0.3) as orch:
        started = time.monotonic()
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
        assert time.monotonic() - started < FAULT_BOUND_S
    cause = info.value.__cause__
    assert isinstance(cause, dbo.HandoffTimeout)
    assert info.value.ubatch_id == 1
    assert "fn (test_orchestrator.py:" in cause.parked[0]  # ubatch 0 is inside fn, sleeping
    assert "holds the turn" in cause.parked[0]


def test_step_hung_when_a_thread_cannot_unwind():
    """Ubatch 0 holds the turn in a plain wait; ubatch 1 times out; ubatch 0 cannot notice the abort."""
    release = threading.Event()

    def fn(uid):
        if uid == 0:
            release.wait(1.0)  # outside any DBO wait
        dbo_yield()
        return uid

    with _orch(2, handoff_timeout=0.2, join_grace=0.2) as orch:
        started = time.monotonic()
        with pytest.raises(dbo.StepHung) as info:
            orch.run(fn, [0, 1])
        assert time.monotonic() - started < FAULT_BOUND_S
        assert len(info.value.live_threads) == 1
        assert info.value.live_threads[0].startswith("dbo-ubatch-0 at fn (test_orchestrator.py:")
        assert isinstance(info.value.__cause__, dbo.HandoffTimeout)
        release.set()  # let it go; the leftover-thread guard checks that it ends


@pytest.mark.slow
def test_step_timeout_aborts_a_step_that_never_yields():
    with _orch(2, step_timeout=0.3, join_grace=slack(3.0)) as orch:
        # ubatch 1 has exited; ubatch 0 loops without yielding, so no turn wait can time out
        def fn(uid):
            if uid == 0:
                dbo_yield()
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    time.sleep(0.01)
                dbo_yield()  # the abort is noticed here
            return uid

        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(fn, [0, 1])
    assert isinstance(info.value.__cause__, dbo.HandoffTimeout)
    assert "step_timeout" in str(info.value.__cause__)


def test_bad_arguments():
    with pytest.raises(ValueError):
        dbo.UBatchOrchestrator(0, backend="virtual")
    with pytest.raises(TypeError):
        dbo.UBatchOrchestrator(2.0, backend="virtual")
    with pytest.raises(ValueError):
        dbo.UBatchOrchestrator(2, backend="virtual", stream_layout="weird")
    with pytest.raises(ValueError):
        dbo.UBatchOrchestrator(2, backend="virtual", handoff_timeout=0)
    with pytest.raises(ValueError):
        dbo.UBatchOrchestrator(2, backend="nope")
    with _orch(2, "virtual") as orch:
        with pytest.raises(ValueError):
            orch.run(lambda u: u, [0])
        with pytest.raises(TypeError):
            orch.run(None, [0, 1])


def test_steps_do_not_nest():
    with _orch(2, "virtual") as orch, _orch(2, "virtual") as inner:
        with pytest.raises(dbo.UBatchFailed) as info:
            orch.run(lambda u: inner.run(lambda v: v, [0, 1]), [0, 1])
        assert "do not nest" in str(info.value.__cause__)


@pytest.mark.parametrize("backend", BACKENDS)
def test_trace_records_kernels_spans_and_one_arrow_per_handoff(backend, tmp_path):
    import json

    tracer = dbo.Tracer()

    def fn(uid):
        x = torch.zeros(4)
        for k in range(2):
            dbo.launch(lambda t: t.add_(1), x, name=f"k{k}", cost=1e-4)
            dbo_yield()
        return x

    with _orch(2, backend, tracer=tracer) as orch:
        outs = orch.run(fn, [0, 1])
        handoffs = orch.last_step_handoffs
    assert all(torch.equal(o, torch.full((4,), 2.0)) for o in outs)
    assert len(tracer.handoffs) == handoffs == 5
    assert [(h.src, h.dst) for h in tracer.handoffs] == [(0, 1), (1, 0), (0, 1), (1, 0), (0, 1)]
    kernels = tracer.kernels()
    assert sorted((k.ubatch, k.name) for k in kernels) == [(0, "k0"), (0, "k1"), (1, "k0"), (1, "k1")]
    assert {k.stream for k in kernels if k.ubatch == 0} != {k.stream for k in kernels if k.ubatch == 1}
    spans = {s.track for s in tracer.spans}
    assert spans == {"ubatch 0", "ubatch 1"}
    path = tmp_path / "t.json"
    tracer.to_chrome(str(path))
    doc = json.loads(path.read_text())
    assert sum(1 for e in doc["traceEvents"] if e.get("ph") == "s") == 5


def test_tracing_off_records_nothing():
    tracer = dbo.Tracer(enabled=False)
    with _orch(2, "virtual", tracer=tracer) as orch:
        orch.run(lambda u: (dbo.launch(None, cost=1e-5), dbo_yield(), u)[-1], [0, 1])
    assert tracer.kernels() == [] and tracer.handoffs == [] and tracer.spans == []
