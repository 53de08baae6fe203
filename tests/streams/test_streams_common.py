"""Stream layer: the interface every backend must honour (threads, virtual and inline alike),
get_backend, and the current stream."""

from __future__ import annotations

import threading

import pytest
import torch

import dbo
import demos.toy  # noqa: F401  (registers the toy's fitted "h200" profile, used below)
from dbo import StreamError, StreamTimeout
from dbo.costs import DeviceProfile
from dbo.streams import (
    Backend,
    Event,
    InlineBackend,
    Stream,
    ThreadsBackend,
    VirtualBackend,
    current_stream,
    default_stream,
    get_backend,
    launch,
    set_stream,
    use_stream,
)
from dbo.trace import Tracer
from tests.support.timing import slack

# --- interface, all backends -----------------------------------------------------------------


@pytest.fixture(params=["threads", "virtual", "inline"])
def backend(request):
    with get_backend(request.param, timeout=slack(10)) as b:
        yield b


def test_backend_is_a_backend(backend):
    assert isinstance(backend, Backend) and backend.name in ("threads", "virtual", "inline")
    s = backend.new_stream("a")
    assert isinstance(s, Stream) and s.name == "a" and s.backend is backend
    assert isinstance(backend.new_event(), Event)
    assert backend.profile.name == "cpu" and backend.link.name == "nvlink" and backend.tracer is None
    assert backend.stream("a") is s and backend.stream("b") in backend.streams
    assert backend.new_stream().name not in ("a", "b")
    with pytest.raises(ValueError, match="already has a stream named 'a'"):
        backend.new_stream("a")


def test_fifo_order(backend):
    s = backend.new_stream("s")
    seen: list[int] = []
    for i in range(30):
        s.launch(seen.append, i, name=f"k{i}", kind="comm" if i % 3 == 0 else "compute")
    s.synchronize()
    assert seen == list(range(30))
    assert s.query()


def test_fifo_order_with_results_in_tensors(backend):
    s = backend.new_stream()
    x = torch.zeros(3)
    s.launch(torch.Tensor.fill_, x, 2.0)
    s.launch(torch.Tensor.mul_, x, 5.0)
    s.launch(torch.Tensor.sub_, x, 1.0)
    s.synchronize()
    assert x.tolist() == [9.0, 9.0, 9.0]


def test_never_recorded_event_is_complete(backend):
    s = backend.new_stream()
    ev = backend.new_event()
    assert ev.query()
    ev.synchronize()
    s.wait_event(ev)
    seen = []
    s.launch(seen.append, 1)
    s.synchronize()
    assert seen == [1]


def test_bad_kind_and_cost(backend):
    s = backend.new_stream()
    with pytest.raises(ValueError, match="compute, comm"):
        s.launch(None, kind="io")
    with pytest.raises(ValueError):
        s.launch(None, cost=-1.0)
    with pytest.raises(TypeError):
        s.launch(None, cost="fast")


def test_closed_backend_refuses_work(backend):
    s = backend.new_stream()
    backend.close()
    backend.close()  # idempotent
    assert backend.closed
    with pytest.raises(StreamError, match="closed"):
        s.launch(None)
    with pytest.raises(StreamError, match="closed"):
        backend.new_stream()


def test_objects_of_another_backend_are_refused(backend):
    with get_backend("virtual") as other:
        s = backend.new_stream()
        o = other.new_stream()
        ev = other.new_event()
        with pytest.raises(StreamError, match="cannot wait on an event"):
            s.wait_event(ev)
        with pytest.raises(StreamError, match="cannot record"):
            ev.record(s)
        with pytest.raises(StreamError):
            s.wait_stream(o)
        with pytest.raises(TypeError):
            s.wait_event("not an event")
        # record with no stream given: the current one, here the process-wide default stream
        with pytest.raises(StreamError, match="use_stream"):
            backend.new_event().record()


def test_record_defaults_to_the_current_stream(backend):
    s = backend.new_stream()
    ev = backend.new_event()
    with use_stream(s):
        launch(None, cost=0.001)
        ev.record()
    ev.synchronize()
    assert ev.query()


def test_a_stream_knows_its_role_and_launch_defaults_kind_to_it(backend):
    tr = Tracer()
    backend.tracer = tr
    compute = backend.new_stream("c")
    comm = backend.new_stream("m", role="comm")
    assert compute.role == "compute" and comm.role == "comm"
    assert backend.stream("c").role == "compute" and backend.stream("m").role == "comm"
    side = backend.stream("s", role="side")  # get or create, of a role
    assert side.role == "side" and backend.stream("s", role="side") is side and backend.stream("s") is side
    with pytest.raises(ValueError, match="has a stream 'm' of role 'comm', not 'side'"):
        backend.stream("m", role="side")
    with pytest.raises(ValueError, match="stream role must be one of compute, comm, side; got 'dma'"):
        backend.new_stream("x", role="dma")
    assert "x" not in [st.name for st in backend.streams]
    comm.launch(None, name="k_comm_default", cost=0.001)
    comm.launch(None, name="k_comm_as_compute", kind="compute", cost=0.001)
    compute.launch(None, name="k_compute_default", cost=0.001)
    compute.launch(None, name="k_compute_as_comm", kind="comm", cost=0.001)
    with use_stream(comm):
        launch(None, name="k_current_comm", cost=0.001)  # dbo.launch on the current stream
    with use_stream(compute):
        launch(None, name="k_current_compute", cost=0.001)
    side.launch(None, name="k_side_default", cost=0.001)  # a side stream's kernels are compute kernels
    with pytest.raises(ValueError, match="kernel kind"):
        comm.launch(None, kind="dma")
    backend.synchronize()
    kinds = {k.name: k.kind for k in tr.kernels()}
    assert kinds == {
        "k_comm_default": "comm",
        "k_comm_as_compute": "compute",
        "k_compute_default": "compute",
        "k_compute_as_comm": "comm",
        "k_current_comm": "comm",
        "k_current_compute": "compute",
        "k_side_default": "compute",
    }


def test_orchestrator_streams_have_their_roles():
    for layout in dbo.STREAM_LAYOUTS:
        with dbo.UBatchOrchestrator(2, backend="virtual", stream_layout=layout) as orch:
            for u in range(2):
                compute, comm = orch.streams(u)
                assert (compute.role, comm.role) == ("compute", "comm")


def test_kernel_names():
    tr = Tracer()
    with get_backend("virtual", tracer=tr) as b:
        s = b.new_stream()

        def my_kernel():
            pass

        s.launch(my_kernel)
        s.launch(None, kind="comm")
        s.launch(None, name="explicit")
        s.launch(torch.Tensor.zero_, torch.zeros(1))
    assert [k.name for k in tr.records] == ["my_kernel", "comm", "explicit", "zero_"]


# --- get_backend -------------------------------------------------------------------------------


def test_get_backend_names_and_errors():
    with pytest.raises(ValueError, match="auto, cuda, inline, threads, virtual"):
        get_backend("tpu")
    with pytest.raises(TypeError):
        get_backend(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        get_backend("virtual", timeout=0)
    with pytest.raises(ValueError, match="unknown device profile"):
        get_backend("virtual", profile="tpu")
    with pytest.raises(ValueError, match="unknown link profile"):
        get_backend("virtual", link="carrier-pigeon")
    with pytest.raises(TypeError):
        get_backend("virtual", colour="blue")
    with get_backend("VIRTUAL", profile="h200", link="ib400") as b:
        assert isinstance(b, VirtualBackend) and b.profile.name == "h200" and b.link.name == "ib400"
    p = DeviceProfile("custom", 1e9, 1e9, 0.0)
    with get_backend("inline", profile=p) as b:
        assert isinstance(b, InlineBackend) and b.profile is p


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_cuda_without_cuda():
    with pytest.raises(StreamError, match="needs a CUDA device"):
        get_backend("cuda")
    with get_backend("auto") as b:
        assert isinstance(b, ThreadsBackend)
    with get_backend() as b:
        assert b.name == "threads"


# --- current stream ----------------------------------------------------------------------------


def test_default_stream_is_inline_and_runs_at_once():
    s = current_stream()
    assert s is default_stream() and s.backend.name == "inline"
    x = torch.zeros(2)
    launch(torch.Tensor.fill_, x, 7.0)  # no stream set: runs now, on this thread
    assert x.tolist() == [7.0, 7.0]


def test_use_stream_sets_and_restores_per_thread():
    with get_backend("virtual") as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        seen = {}

        def other():
            seen["other"] = current_stream()
            with use_stream(c):
                seen["other_inner"] = current_stream()
            seen["other_after"] = current_stream()

        with use_stream(a) as got:
            assert got is a and current_stream() is a
            t = threading.Thread(target=other)
            t.start()
            t.join(slack(5))
            with use_stream(c):
                assert current_stream() is c
            assert current_stream() is a
        assert current_stream() is default_stream()
        assert seen == {"other": default_stream(), "other_inner": c, "other_after": default_stream()}


def test_use_stream_restores_on_error():
    with get_backend("inline") as b:
        s = b.new_stream()
        with pytest.raises(KeyError):
            with use_stream(s):
                raise KeyError("x")
        assert current_stream() is default_stream()


def test_set_stream_only_acts_on_a_change(monkeypatch):
    with get_backend("inline") as b:
        s = b.new_stream()
        calls = []
        monkeypatch.setattr(s, "_activate", lambda: calls.append(1))
        try:
            assert set_stream(s) is default_stream()
            assert set_stream(s) is s
            assert set_stream(s) is s
            assert calls == [1]
        finally:
            set_stream(None)
        assert current_stream() is default_stream()
        with pytest.raises(TypeError):
            set_stream("compute")  # type: ignore[arg-type]


def test_launch_goes_to_the_current_stream():
    tr = Tracer()
    with get_backend("virtual", tracer=tr) as b:
        s = b.new_stream("mine")
        with use_stream(s):
            launch(None, name="k", kind="comm", cost=1.0)
        assert tr.records[0].stream == "mine" and tr.records[0].kind == "comm"


# --- exports -------------------------------------------------------------------------------------


def test_dbo_exports_stream_errors():
    assert dbo.StreamError is StreamError and dbo.StreamTimeout is StreamTimeout
