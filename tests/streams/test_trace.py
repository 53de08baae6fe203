"""Tracer: recording, thread safety, Chrome trace export."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from dbo.costs import DeviceProfile, Transfer
from dbo.registry import use_ubatch
from dbo.streams import KernelRecord, get_backend
from dbo.trace import HOST_PID, STREAMS_PID, Tracer, ubatch_track
from tests.support.timing import slack


def _sample() -> Tracer:
    tr = Tracer()
    tr.kernel("compute", "attn", "compute", 0, 0.001, 0.003)
    tr.kernel("comm", "dispatch", "comm", 1, 0.002, 0.004)
    tr.kernel("compute", "experts", "compute", 1, 0.003, 0.005)
    tr.span(ubatch_track(0), "run", 0.0, 0.002, layer=3)
    tr.span(ubatch_track(1), "run", 0.002, 0.004)
    tr.handoff(0, 1, 0.002, 0.002)
    tr.handoff(1, 0, 0.004, 0.0041)
    tr.instant("workspace", "grow", 0.0005, size=1024)
    return tr


def _names(trace: dict, pid: int) -> dict[int, str]:
    return {
        e["tid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == pid
    }


def test_records_and_accessors():
    tr = _sample()
    assert tr.records[0] == KernelRecord("compute", "attn", "compute", 0, 0.001, 0.003)
    assert tr.records[0].duration == pytest.approx(0.002)
    assert [k.name for k in tr.kernels(stream="compute")] == ["attn", "experts"]
    assert [k.name for k in tr.kernels(ubatch=1)] == ["dispatch", "experts"]
    assert [k.name for k in tr.kernels(kind="comm")] == ["dispatch"]
    assert len(tr.spans) == 2 and len(tr.handoffs) == 2 and len(tr.instants) == 1
    copy = tr.kernels()
    copy.clear()
    assert len(tr.records) == 3  # kernels() returns a copy
    tr.clear()
    assert not tr.records and not tr.spans and not tr.handoffs and not tr.instants


def test_disabled_tracer_records_nothing():
    tr = Tracer(enabled=False)
    tr.kernel("s", "k", "compute", None, 0, 1)
    tr.span("t", "s", 0, 1)
    tr.handoff(0, 1, 0, 1)
    tr.instant("t", "i", 0)
    assert not tr.records and not tr.spans and not tr.handoffs and not tr.instants
    assert [e for e in tr.to_chrome()["traceEvents"] if e["ph"] != "M"] == []


def test_span_default_track_is_the_thread_name():
    tr = Tracer()
    tr.span(None, "s", 0, 1)
    tr.instant(None, "i", 0)
    assert tr.spans[0].track == threading.current_thread().name == tr.instants[0].track


def test_chrome_trace_structure():
    tr = _sample()
    trace = tr.to_chrome()
    events = trace["traceEvents"]
    assert json.loads(json.dumps(trace)) == trace  # round-trips

    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert procs == {HOST_PID: "host", STREAMS_PID: "device streams"}

    streams = _names(trace, STREAMS_PID)
    assert sorted(streams.values()) == ["stream comm", "stream compute"]
    assert all("stream" in n for n in streams.values())
    hosts = _names(trace, HOST_PID)
    assert {"ubatch 0", "ubatch 1", "workspace"} <= set(hosts.values())

    kernels = [e for e in events if e["ph"] == "X" and e["pid"] == STREAMS_PID]
    assert len(kernels) == 3
    attn = next(e for e in kernels if e["name"] == "attn")
    # origin = earliest time (0.0, the first span): microseconds
    assert attn["ts"] == pytest.approx(1000) and attn["dur"] == pytest.approx(2000)
    assert streams[attn["tid"]] == "stream compute" and attn["cat"] == "compute"
    assert attn["args"]["ubatch"] == 0

    spans = [e for e in events if e["ph"] == "X" and e["pid"] == HOST_PID and e["cat"] == "host"]
    assert {hosts[e["tid"]] for e in spans} == {"ubatch 0", "ubatch 1"}
    assert spans[0]["args"] == {"layer": 3}

    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert set(starts) == set(ends) and len(starts) == 2
    for fid, s in starts.items():
        f = ends[fid]
        assert f["bp"] == "e" and s["name"] == f["name"] and s["cat"] == f["cat"]
    first = starts[min(starts)]
    assert hosts[first["tid"]] == "ubatch 0" and hosts[ends[min(starts)]["tid"]] == "ubatch 1"
    # each flow end point lies inside a marker slice on its track (so the arrow can bind)
    markers = [e for e in events if e["ph"] == "X" and e["cat"] == "handoff"]
    for point in list(starts.values()) + list(ends.values()):
        assert any(m["tid"] == point["tid"] and m["ts"] <= point["ts"] <= m["ts"] + m["dur"] for m in markers)

    inst = [e for e in events if e["ph"] == "i"]
    assert len(inst) == 1 and inst[0]["s"] == "t" and inst[0]["args"] == {"size": 1024}
    assert inst[0]["ts"] == pytest.approx(500)


def test_chrome_trace_origin_and_file(tmp_path):
    tr = Tracer()
    tr.kernel("s0", "k", "compute", None, 10.0, 10.5)
    path = tmp_path / "t.trace.json"
    trace = tr.to_chrome(str(path), origin=9.0)
    assert json.loads(path.read_text()) == trace
    (k,) = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert k["ts"] == pytest.approx(1e6) and k["dur"] == pytest.approx(5e5)
    assert _names(trace, STREAMS_PID) == {1: "stream s0"}
    assert tr.to_chrome()["traceEvents"][-1]["ts"] == 0  # default origin: the earliest time


def test_stream_named_stream_keeps_its_name_and_args_are_made_jsonable():
    tr = Tracer()
    tr.kernel("comm stream", "k", "comm", None, 0, 1)
    tr.span("t", "s", 0, 1, obj=object(), inf=float("inf"), nested={"a": (1, 2)})
    trace = tr.to_chrome()
    assert _names(trace, STREAMS_PID) == {1: "comm stream"}
    span = next(e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == HOST_PID)
    assert span["args"]["inf"] == "inf" and span["args"]["nested"] == {"a": [1, 2]}
    assert span["args"]["obj"].startswith("<object")
    json.dumps(trace)


def test_handoff_from_the_main_thread():
    tr = Tracer()
    tr.handoff(None, 0, 1.0, 1.0)
    trace = tr.to_chrome()
    assert set(_names(trace, HOST_PID).values()) == {"main", "ubatch 0"}


def test_concurrent_recording_loses_nothing():
    tr = Tracer()
    n, per = 4, 500
    barrier = threading.Barrier(n, timeout=slack(10))

    def work(i: int) -> None:
        barrier.wait()
        for j in range(per):
            tr.kernel(f"s{i}", f"k{j}", "compute", i, j, j + 1)
            tr.span(f"t{i}", "s", j, j + 1)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(slack(10))
    assert not any(t.is_alive() for t in threads)
    assert len(tr.records) == n * per and len(tr.spans) == n * per
    for i in range(n):
        assert [k.name for k in tr.kernels(stream=f"s{i}")] == [f"k{j}" for j in range(per)]


def test_backend_records_kernels_with_ubatch_ids():
    tr = Tracer()
    p = DeviceProfile("t", 1e12, 1e11, 0.0)
    with get_backend("virtual", tracer=tr, profile=p) as b:
        s = b.new_stream("compute")
        c = b.new_stream("comm")
        s.launch(None, cost=1.0, name="pre")
        with use_ubatch(1):
            c.launch(None, kind="comm", cost=Transfer(0), name="xfer")
        b.tracer = None  # recording off
        s.launch(None, cost=1.0, name="unseen")
        b.tracer = tr
        tr.enabled = False
        s.launch(None, cost=1.0, name="unseen2")
    assert [(k.name, k.ubatch, k.stream) for k in tr.records] == [("pre", None, "compute"), ("xfer", 1, "comm")]
    assert tr.records[1].end == pytest.approx(3e-6)  # nvlink latency


def test_threads_backend_records_on_its_clock():
    tr = Tracer()
    with get_backend("threads", tracer=tr, timeout=slack(10)) as b:
        s = b.new_stream("compute")
        t0 = b.now()
        x = torch.zeros(4)
        with use_ubatch(0):
            s.launch(torch.Tensor.add_, x, 1, name="add")
        s.synchronize()
        t1 = b.now()
    (k,) = tr.records
    assert k.name == "add" and k.ubatch == 0 and k.stream == "compute"
    assert t0 <= k.start <= k.end <= t1
