"""Stream layer: the threads backend's ordering, engines and invariants.

Every threads-backend test is bounded: kernels block on gates with a timeout (never forever),
backends are closed by their ``with`` block, and the conftest fixture checks that no thread
(executor, watchdog) survives.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dbo import StreamError
from dbo.costs import LinkProfile, Transfer, Work
from dbo.streams import ThreadsBackend, get_backend
from dbo.trace import Tracer
from tests.support.timing import GATE, slack


def _overlap(a, b) -> bool:
    return a.start < b.end and b.start < a.end


# --- threads: events and ordering ----------------------------------------------------------------


def test_threads_event_record_query_synchronize():
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("s")
        gate = threading.Event()
        s.launch(gate.wait, GATE)
        ev = b.new_event()
        ev.record(s)
        assert not ev.query() and not s.query()
        gate.set()
        ev.synchronize()
        assert ev.query() and ev.time is None
        s.synchronize()
        assert s.query()


def test_threads_wait_event_orders_streams():
    with ThreadsBackend(timeout=slack(10)) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        gate = threading.Event()
        x = torch.zeros(1)
        out = torch.full((1,), -1.0)

        def produce(t):
            gate.wait(GATE)
            t.fill_(1.0)

        a.launch(produce, x, kind="comm")  # comm: leaves the compute engine free for c
        ev = b.new_event()
        ev.record(a)
        c.wait_event(ev)
        c.launch(torch.Tensor.copy_, out, x)
        time.sleep(0.02)
        assert not c.query() and out.item() == -1.0  # c is held by the wait
        gate.set()
        c.synchronize()
        assert out.item() == 1.0


def test_threads_wait_stream_orders_streams():
    with ThreadsBackend(timeout=slack(10)) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        gate = threading.Event()
        order = []
        a.launch(lambda: (gate.wait(GATE), order.append("a")), kind="comm")
        c.wait_stream(a)
        c.wait_stream(c)  # waiting on itself is a no-op
        c.launch(order.append, "c")
        gate.set()
        c.synchronize()
        assert order == ["a", "c"]


def test_threads_wait_uses_the_record_current_at_wait_time():
    with ThreadsBackend(timeout=slack(10)) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        ev = b.new_event()
        a.launch(None)
        ev.record(a)
        c.wait_event(ev)  # waits for the first record only
        gate = threading.Event()
        a.launch(gate.wait, GATE, kind="comm")
        ev.record(a)  # re-record behind a blocked kernel: does not affect c's earlier wait
        done = []
        c.launch(done.append, 1)
        c.synchronize()  # would time out if c waited on the second record
        assert done == [1] and not ev.query()
        gate.set()
        ev.synchronize()
        assert ev.query()


@pytest.mark.parametrize("kind", ["compute", "comm"])
def test_threads_missing_wait_is_a_race_and_wait_event_fixes_it(kind):
    """Producer on A sleeps then writes; consumer on B copies. Without a wait the consumer
    reads the old value; with record + wait_event it never does."""
    tries = 50
    with ThreadsBackend(timeout=slack(10)) as b:
        a, c = b.new_stream("producer"), b.new_stream("consumer")

        def produce(t, v):
            time.sleep(0.002)
            t.fill_(v)

        stale = 0
        for i in range(1, tries + 1):
            x = torch.zeros(1)
            out = torch.full((1,), -1.0)
            a.launch(produce, x, float(i), kind="comm")
            c.launch(torch.Tensor.copy_, out, x, kind="compute")
            b.synchronize()
            stale += out.item() != i
            if stale:
                break
        assert stale >= 1, "the consumer never overtook the producer: no race observed"

        for i in range(1, tries + 1):
            x = torch.zeros(1)
            out = torch.full((1,), -1.0)
            a.launch(produce, x, float(i), kind="comm")
            ev = b.new_event()
            ev.record(a)
            c.wait_event(ev)
            c.launch(torch.Tensor.copy_, out, x, kind=kind)
            b.synchronize()
            assert out.item() == i


def test_threads_comm_data_lands_at_the_end_of_the_transfer():
    """A comm kernel with a modelled duration writes at its end: an unsynchronized reader on
    another stream sees the old value, a synchronized one the new value."""
    link = LinkProfile("slow", latency=0.2, bandwidth=1e12)
    with ThreadsBackend(link=link, timeout=slack(10)) as b:
        comm, comp = b.new_stream("comm"), b.new_stream("compute")
        x = torch.zeros(1)
        early = torch.full((1,), -1.0)
        late = torch.full((1,), -1.0)
        comm.launch(torch.Tensor.fill_, x, 1.0, kind="comm", cost=Transfer(0))
        comp.launch(torch.Tensor.copy_, early, x)
        ev = b.new_event()
        ev.record(comm)
        comp.wait_event(ev)
        comp.launch(torch.Tensor.copy_, late, x)
        b.synchronize()
        assert early.item() == 0.0 and late.item() == 1.0


def test_threads_compute_engine_is_exclusive_and_comm_overlaps_compute():
    tr = Tracer()
    with ThreadsBackend(tracer=tr, timeout=slack(10)) as b:
        s1, s2, s3 = b.new_stream("c1"), b.new_stream("c2"), b.new_stream("m")
        for i in range(4):
            s1.launch(time.sleep, 0.002, name=f"a{i}")
            s2.launch(time.sleep, 0.002, name=f"b{i}")
        b.synchronize()
        ks = tr.kernels(kind="compute")
        assert len(ks) == 8
        for x in ks:
            for y in ks:
                if x is not y:
                    assert not _overlap(x, y), (x, y)

        # A compute kernel and a comm kernel meet at a barrier: only possible if they overlap.
        meet = threading.Barrier(2, timeout=GATE)
        s1.launch(meet.wait, name="compute-meets")
        s3.launch(meet.wait, name="comm-meets", kind="comm")
        b.synchronize()
        k1, k3 = tr.kernels(stream="c1")[-1], tr.kernels(stream="m")[-1]
        assert _overlap(k1, k3)


def test_threads_two_compute_kernels_cannot_meet():
    with ThreadsBackend(timeout=slack(10)) as b:
        s1, s2 = b.new_stream("c1"), b.new_stream("c2")
        meet = threading.Barrier(2, timeout=0.1)
        s1.launch(meet.wait)
        s2.launch(meet.wait)
        for s in (s1, s2):
            with pytest.raises(StreamError) as info:
                s.synchronize()
            assert isinstance(info.value.__cause__, threading.BrokenBarrierError)


def test_threads_comm_kernels_share_the_link():
    with ThreadsBackend(timeout=slack(10)) as b:
        s1, s2 = b.new_stream("m1"), b.new_stream("m2")
        meet = threading.Barrier(2, timeout=0.1)
        s1.launch(meet.wait, kind="comm")
        s2.launch(meet.wait, kind="comm")
        with pytest.raises(StreamError):
            b.synchronize()


def test_threads_modelled_durations():
    tr = Tracer()
    link = LinkProfile("slow", latency=0.02, bandwidth=1e12)
    with ThreadsBackend(tracer=tr, link=link, timeout=slack(10)) as b:
        s = b.new_stream("s")
        s.launch(None, name="float", cost=0.02)
        s.launch(None, name="xfer", kind="comm", cost=Transfer(1000))
        s.launch(lambda: None, name="work-ignored", cost=Work(flops=1e15))
        s.launch(None, name="work-modelled", cost=Work(flops=2e9))  # cpu: 20 ms
        s.synchronize()
        d = {k.name: k.duration for k in tr.records}
        assert d["float"] >= 0.02 and d["xfer"] >= 0.02 and d["work-modelled"] >= 0.02
        assert d["work-ignored"] < slack(1.0)  # Work on a real kernel is not waited
        assert b.kernel_seconds("compute", Work(flops=1e15), ()) is None
        assert b.kernel_seconds("compute", None, (torch.zeros(10),)) is None
        assert b.kernel_seconds("comm", Transfer(1e9), ()) == pytest.approx(0.02 + 1e-3)
        assert b.kernel_seconds("compute", 0.5, ()) == 0.5


def test_threads_workers_are_lazy_named_daemons():
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("compute")
        prefix = f"dbo-stream-{b.id}-"
        assert not [t for t in threading.enumerate() if t.name.startswith(prefix)]
        s.synchronize()  # nothing launched: no executor needed
        assert s.query()
        s.launch(None)
        s.synchronize()
        (w,) = [t for t in threading.enumerate() if t.name.startswith(prefix)]
        assert w.name == f"{prefix}compute" and w.daemon
    assert not w.is_alive()


def test_threads_many_host_threads_launch_on_shared_streams():
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("shared")
        seen: list[tuple[int, int]] = []
        start = threading.Barrier(3, timeout=GATE)

        def host(i):
            start.wait()
            for j in range(50):
                s.launch(seen.append, (i, j))

        ts = [threading.Thread(target=host, args=(i,)) for i in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(slack(10))
        s.synchronize()
        assert len(seen) == 150
        for i in range(3):
            assert [j for (h, j) in seen if h == i] == list(range(50))  # each thread's launches in order


# --- threads: engines (one executor thread per engine) -------------------------------------------


def test_threads_one_executor_per_engine_runs_every_stream():
    """Streams have no threads of their own: every compute kernel of every stream runs on the
    compute engine's executor, every comm kernel on the link's, so streams that share an engine
    never hand it between threads."""
    with ThreadsBackend(timeout=slack(10)) as b:
        streams = [b.new_stream(f"compute{i}") for i in range(3)] + [b.new_stream(f"comm{i}") for i in range(2)]
        where: dict[str, set[str]] = {}
        for j in range(5):
            for s in streams:
                kind = "comm" if s.name.startswith("comm") else "compute"
                s.launch(lambda n=s.name: where.setdefault(n, set()).add(threading.current_thread().name), kind=kind)
        b.synchronize()
        compute, comm = f"dbo-stream-{b.id}-compute", f"dbo-stream-{b.id}-comm"
        assert where == {s.name: {comm if s.name.startswith("comm") else compute} for s in streams}
        assert {t.name for t in threading.enumerate() if t.name.startswith(f"dbo-stream-{b.id}-")} == {compute, comm}
        assert streams[0]._worker is streams[2]._worker and streams[0]._worker is not streams[3]._worker
        watchdog = [t for t in threading.enumerate() if t.name == f"dbo-watchdog-{b.id}"]
        assert len(watchdog) == 1 and watchdog[0].daemon
    assert not streams[0]._worker.is_alive() and not streams[3]._worker.is_alive()
    assert not watchdog[0].is_alive()


@pytest.mark.parametrize(
    "order, expected",
    [("launch", ["a1", "a2", "b1", "b2"]), ("ready", ["b1", "a1", "b2", "a2"])],
)
def test_threads_engine_order(order, expected):
    """A busy engine takes its ready kernels in launch order (default), or in the order they
    became ready (round-robin between streams with a backlog)."""
    with ThreadsBackend(timeout=slack(10), engine_order=order) as b:
        assert b.engine_order == order
        s1, s2 = b.new_stream("s1"), b.new_stream("s2")
        gate = threading.Event()
        seen: list[str] = []
        s1.launch(gate.wait, GATE, name="gate")
        s1.launch(seen.append, "a1")
        s1.launch(seen.append, "a2")
        s2.launch(seen.append, "b1")  # ready at once, while the gate kernel holds the engine
        s2.launch(seen.append, "b2")
        gate.set()
        b.synchronize()
        assert seen == expected


def test_threads_engine_order_is_checked():
    with pytest.raises(ValueError, match="engine_order must be one of launch, ready"):
        ThreadsBackend(engine_order="random")
    with get_backend("threads", engine_order="ready") as b:
        assert b.engine_order == "ready"


def test_threads_missing_wait_between_two_compute_streams_is_a_race():
    """Two compute kernels never overlap, but a consumer whose stream is ready first still
    overtakes a producer launched before it: when the producer's stream is held by a wait, and,
    with engine_order="ready", whenever the producer's stream has a backlog."""
    x, out = torch.zeros(1), torch.full((1,), -1.0)
    with ThreadsBackend(timeout=slack(10)) as b:
        a, c, m = b.new_stream("producer"), b.new_stream("consumer"), b.new_stream("m")
        gate = threading.Event()
        m.launch(gate.wait, GATE, kind="comm")
        ev = b.new_event()
        ev.record(m)
        a.wait_event(ev)  # the producer waits for a transfer
        a.launch(torch.Tensor.fill_, x, 1.0)
        c.launch(torch.Tensor.copy_, out, x)  # no wait: launched later, ready first
        c.synchronize()
        gate.set()
        b.synchronize()
        assert out.item() == 0.0 and x.item() == 1.0

    x, out = torch.zeros(1), torch.full((1,), -1.0)
    with ThreadsBackend(timeout=slack(10), engine_order="ready") as b:
        a, c = b.new_stream("producer"), b.new_stream("consumer")
        gate = threading.Event()
        a.launch(gate.wait, GATE)  # the producer's stream is busy
        a.launch(torch.Tensor.fill_, x, 1.0)
        c.launch(torch.Tensor.copy_, out, x)
        gate.set()
        b.synchronize()
        assert out.item() == 0.0 and x.item() == 1.0


def test_threads_executors_follow_torch_num_threads(monkeypatch):
    """A new thread does not inherit torch.set_num_threads (OpenMP keeps it per thread), so each
    executor applies the process's value before its first kernel, and again when it changes."""
    calls: list[tuple[str, int]] = []
    real = torch.set_num_threads

    def spy(n):
        calls.append((threading.current_thread().name, n))
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", spy)
    n = torch.get_num_threads()
    with ThreadsBackend(timeout=slack(10)) as b:
        s = b.new_stream("s")
        s.launch(None)
        s.launch(None, kind="comm")
        s.synchronize()
        assert sorted(calls) == [(f"dbo-stream-{b.id}-comm", n), (f"dbo-stream-{b.id}-compute", n)]
        calls.clear()
        for _ in range(3):
            s.launch(None)
        s.synchronize()
        assert calls == []  # applied once, not per kernel


# --- threads: invariants ---------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["launch", "launch", "launch", "record", "wait", "sync"]),
            st.integers(0, 3),
            st.integers(0, 2),
            st.sampled_from(["compute", "comm"]),
            st.sampled_from([0.0, 0.0, 0.0005, 0.002]),
        ),
        max_size=30,
    )
)
def test_threads_invariants(ops):
    """Random programs on four streams: each stream runs its kernels once and in order, kernels of
    one engine never overlap, and a kernel launched after ``wait_event`` starts after every kernel
    the waited record covers has ended."""
    tr = Tracer()
    with ThreadsBackend(tracer=tr, timeout=slack(10)) as b:
        ss = [b.new_stream(f"s{i}") for i in range(4)]
        evs = [b.new_event() for _ in range(3)]
        launched: list[list[str]] = [[] for _ in ss]
        covers: list[list[str]] = [[] for _ in evs]  # kernels the most recent record covers
        after: dict[str, list[str]] = {}  # kernel -> kernels it must start after
        pending: list[list[str]] = [[] for _ in ss]  # what each stream waits for, so far
        for n, (op, i, j, kind, sleep) in enumerate(ops):
            if op == "launch":
                name = f"k{n}"
                ss[i].launch(time.sleep, sleep, name=name, kind=kind)
                after[name] = list(pending[i])
                launched[i].append(name)
            elif op == "record":
                evs[j].record(ss[i])
                covers[j] = list(launched[i])
            elif op == "wait":
                ss[i].wait_event(evs[j])
                pending[i] += covers[j]
            else:
                ss[i].synchronize()
        b.synchronize()
    recs = {k.name: k for k in tr.records}
    assert len(recs) == len(tr.records) == sum(len(x) for x in launched)
    for i, names in enumerate(launched):
        assert [k.name for k in tr.records if k.stream == f"s{i}"] == names
        for p, q in zip(names, names[1:]):
            assert recs[q].start >= recs[p].end
    for kind in ("compute", "comm"):
        mine = sorted(tr.kernels(kind=kind), key=lambda k: k.start)
        for p, q in zip(mine, mine[1:]):
            assert q.start >= p.end
    for name, deps in after.items():
        for d in deps:
            assert recs[name].start >= recs[d].end, (name, d)
