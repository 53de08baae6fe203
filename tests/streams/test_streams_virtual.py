"""Stream layer: the virtual backend (a modelled clock: timelines by hand, events, determinism)."""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import demos.toy  # noqa: F401  (registers the toy's fitted "h200" profile, used below)
from dbo import StreamError
from dbo.costs import DeviceProfile, LinkProfile, Transfer, Work
from dbo.registry import use_ubatch
from dbo.streams import VirtualBackend, get_backend
from dbo.trace import Tracer
from tests.support.timing import slack

# --- virtual ----------------------------------------------------------------------------------------

PROFILE = DeviceProfile("t", peak_flops=1e12, mem_bandwidth=1e11, launch_overhead=1e-6)
LINK = LinkProfile("l", latency=2e-6, bandwidth=1e10)


@pytest.fixture
def vb():
    tr = Tracer()
    with VirtualBackend(profile=PROFILE, link=LINK, tracer=tr) as b:
        yield b


def test_virtual_timeline_by_hand(vb):
    c1, c2, m = vb.new_stream("c1"), vb.new_stream("c2"), vb.new_stream("m")
    # Work: 1e-6 + max(2e9/1e12, 1e8/1e11) = 2.001 ms
    c1.launch(None, name="gemm", cost=Work(flops=2e9, bytes=1e8))
    # Transfer: 2e-6 + 1e7/1e10 = 1.002 ms, on the link: starts at 0
    m.launch(None, name="dispatch", kind="comm", cost=Transfer(1e7))
    # compute engine busy until 2.001 ms: c2 queues behind c1's kernel although c2 is idle
    c2.launch(None, name="other", cost=1e-3)
    ev = vb.new_event()
    ev.record(m)
    assert ev.time == pytest.approx(1.002e-3)
    m.wait_stream(c2)  # m ready = max(1.002, 3.001) ms
    m.launch(None, name="combine", kind="comm", cost=0.5e-3)
    ev2 = vb.new_event()
    ev2.record(m)
    c1.wait_event(ev2)
    x = torch.zeros(1000)  # None cost: 1e-6 + 4000 / 1e11
    c1.launch(torch.Tensor.add_, x, 1.0, name="derived")
    m.launch(None, x, name="derived-comm", kind="comm")

    got = {k.name: (k.start, k.end) for k in vb.tracer.records}
    exp = {
        "gemm": (0.0, 2.001e-3),
        "dispatch": (0.0, 1.002e-3),
        "other": (2.001e-3, 3.001e-3),
        "combine": (3.001e-3, 3.501e-3),
        "derived": (3.501e-3, 3.501e-3 + 1e-6 + 4e-8),
        "derived-comm": (3.501e-3, 3.501e-3 + 2e-6 + 4e-7),
    }
    assert set(got) == set(exp)
    for name, (s, e) in exp.items():
        assert got[name] == (pytest.approx(s), pytest.approx(e)), name
    assert x[0].item() == 1.0  # math ran at launch, before any synchronize

    assert vb.now() == 0.0 and not c1.query() and not ev.query()
    ev.synchronize()
    assert vb.now() == pytest.approx(1.002e-3) and ev.query() and not ev2.query()
    c2.synchronize()
    assert vb.now() == pytest.approx(3.001e-3) and c2.query()
    vb.synchronize()
    assert vb.now() == pytest.approx(3.501e-3 + 2.4e-6)
    assert all(s.query() for s in vb.streams)
    assert vb.engine_free("compute") == pytest.approx(3.501e-3 + 1.04e-6)


def test_virtual_host_clock_bounds_starts(vb):
    s = vb.new_stream("s")
    assert vb.advance(0.01) == pytest.approx(0.01)
    s.launch(None, cost=0.001)
    assert vb.tracer.records[-1].start == pytest.approx(0.01)
    s.synchronize()
    assert vb.now() == pytest.approx(0.011)
    with pytest.raises(ValueError):
        vb.advance(-1)


def test_virtual_meta_tensors_skip_the_math(vb):
    s = vb.new_stream("s")
    calls = []

    def kernel(t):
        calls.append(t.device.type)

    big = torch.empty(1_000_000, device="meta")  # 4 MB: 1e-6 + 4e6 / 1e11 = 41 us
    s.launch(kernel, big)
    s.launch(kernel, torch.zeros(1))
    s.launch(kernel, [big])  # nested meta tensors count too
    assert calls == ["cpu"]
    k = vb.tracer.records[0]
    assert k.end - k.start == pytest.approx(41e-6)


def test_virtual_events_and_waits(vb):
    a, c = vb.new_stream("a"), vb.new_stream("c")
    ev = vb.new_event()
    assert ev.time is None and ev.query()
    c.wait_event(ev)  # never recorded: no effect
    a.launch(None, kind="comm", cost=1.0)
    ev.record(a)
    a.launch(None, kind="comm", cost=1.0)  # after the record: not covered
    c.wait_event(ev)
    ev.record(a)  # re-record later: does not move c's earlier wait
    c.launch(None, cost=1.0)
    assert c.ready_time == pytest.approx(2.0)
    assert ev.time == pytest.approx(2.0)


def test_virtual_reset_clock(vb):
    s = vb.new_stream("s")
    s.launch(None, cost=1.0)
    ev = vb.new_event()
    ev.record(s)
    with pytest.raises(StreamError, match="synchronize"):
        vb.reset_clock()
    vb.synchronize()
    vb.reset_clock()
    assert vb.now() == 0.0 and s.ready_time == 0.0 and vb.engine_free("compute") == 0.0
    assert ev.time == 0.0 and ev.query()
    s.wait_event(ev)  # an event from before the reset does not hold the stream back
    s.launch(None, cost=0.5)
    assert vb.tracer.records[-1].start == 0.0 and vb.tracer.records[-1].end == 0.5


def test_virtual_kernel_error_is_sticky(vb):
    a, c = vb.new_stream("a"), vb.new_stream("c")
    a.launch(lambda: {}["missing"], name="bad")
    ev = vb.new_event()
    ev.record(a)
    c.wait_event(ev)
    with pytest.raises(StreamError, match="bad") as info:
        a.launch(None)
    assert isinstance(info.value.__cause__, KeyError)
    for call in (a.synchronize, ev.synchronize, c.synchronize, vb.synchronize):
        with pytest.raises(StreamError) as info:
            call()
        assert isinstance(info.value.__cause__, KeyError)


def test_virtual_needs_no_sleep():
    with VirtualBackend(timeout=0.001) as b:  # a tiny timeout never matters: nothing blocks
        s = b.new_stream()
        s.launch(None, cost=3600.0)
        t0 = time.perf_counter()
        s.synchronize()
        assert time.perf_counter() - t0 < slack(60)  # an hour of virtual time, no wall-clock hour
        assert b.now() == 3600.0


def _program(b: VirtualBackend) -> None:
    comp, comm = b.new_stream("compute"), b.new_stream("comm")
    x = torch.zeros(256)
    meta = torch.empty(4096, 4096, device="meta", dtype=torch.bfloat16)
    for layer in range(3):
        for u in (0, 1):
            with use_ubatch(u):
                comp.launch(torch.Tensor.add_, x, 1.0, name=f"attn{layer}")
                comp.launch(None, meta, name=f"gemm{layer}", cost=Work(flops=2 * 4096**3, bytes=meta.nbytes))
                cd = b.new_event()
                cd.record(comp)
                comm.wait_event(cd)
                comm.launch(None, meta, name=f"dispatch{layer}", kind="comm")
                md = b.new_event()
                md.record(comm)
                comp.wait_event(md)
                comp.launch(None, name=f"experts{layer}", cost=1e-4)
    b.synchronize()


def test_virtual_timeline_is_deterministic():
    runs = []
    for _ in range(2):
        tr = Tracer()
        with get_backend("virtual", profile="h200", link="ib400", tracer=tr) as b:
            _program(b)
            runs.append((list(tr.records), b.now()))
    assert runs[0] == runs[1]
    assert len(runs[0][0]) == 24 and {k.ubatch for k in runs[0][0]} == {0, 1}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["launch", "launch", "launch", "record", "wait", "sync", "advance"]),
            st.integers(0, 2),
            st.integers(0, 2),
            st.sampled_from(["compute", "comm"]),
            st.floats(0, 1e-3, allow_nan=False),
        ),
        max_size=40,
    )
)
def test_virtual_invariants(ops):
    """Random programs: per stream kernels run in order without overlap, kernels of one engine
    never overlap, every kernel lasts its cost, and rerunning gives the same timeline."""

    def run():
        tr = Tracer()
        with VirtualBackend(tracer=tr) as b:
            ss = [b.new_stream(f"s{i}") for i in range(3)]
            evs = [b.new_event() for _ in range(3)]
            for op, i, j, kind, cost in ops:
                if op == "launch":
                    ss[i].launch(None, name=f"k{len(tr.records)}", kind=kind, cost=cost)
                elif op == "record":
                    evs[j].record(ss[i])
                elif op == "wait":
                    ss[i].wait_event(evs[j])
                elif op == "sync":
                    ss[i].synchronize()
                else:
                    b.advance(cost)
            return list(tr.records), b.now()

    recs, now = run()
    assert run() == (recs, now)
    costs = [cost for op, _, _, _, cost in ops if op == "launch"]
    for k, cost in zip(recs, costs):
        assert k.end - k.start == pytest.approx(cost, abs=1e-12)
    for i in range(3):
        mine = [k for k in recs if k.stream == f"s{i}"]
        for p, q in zip(mine, mine[1:]):
            assert q.start >= p.end
    for kind in ("compute", "comm"):
        mine = [k for k in recs if k.kind == kind]
        for p, q in zip(mine, mine[1:]):
            assert q.start >= p.end  # one engine per kind, launch order
