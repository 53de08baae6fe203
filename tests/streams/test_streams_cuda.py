"""CUDA backend on a real GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from dbo import StreamError, StreamTimeout
from dbo.registry import use_ubatch
from dbo.streams import CudaBackend, get_backend, use_stream
from dbo.trace import Tracer
from tests.support.timing import slack

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

needs_sleep = pytest.mark.skipif(not hasattr(torch.cuda, "_sleep"), reason="needs torch.cuda._sleep")


@pytest.fixture
def cb():
    with get_backend("cuda", timeout=slack(60)) as b:
        yield b


def test_auto_picks_cuda():
    with get_backend("auto") as b:
        assert isinstance(b, CudaBackend) and b.name == "cuda" and b.device.type == "cuda"


def test_fifo_order(cb):
    s = cb.new_stream("s")
    x = torch.ones(1, device=cb.device)
    torch.cuda.synchronize(cb.device)  # x is made on torch's default stream, which s does not wait for
    expected = 1.0
    for i in range(40):
        if i % 2:
            s.launch(torch.Tensor.mul_, x, 2.0)
            expected *= 2.0
        else:
            s.launch(torch.Tensor.add_, x, 1.0)
            expected += 1.0
    s.synchronize()
    assert s.query() and x.item() == expected


def test_never_recorded_event_is_complete(cb):
    ev = cb.new_event()
    assert ev.query()
    ev.synchronize()
    s = cb.new_stream()
    s.wait_event(ev)
    s.synchronize()


@needs_sleep
def test_event_orders_streams_and_missing_wait_races(cb):
    a, c = cb.new_stream("a"), cb.new_stream("c")
    # with record + wait_event: always the new value
    for i in range(1, 6):
        x = torch.zeros(1, device=cb.device)
        out = torch.full((1,), -1.0, device=cb.device)
        torch.cuda.synchronize(cb.device)
        a.launch(torch.Tensor.fill_, x, float(i), kind="comm", cost=0.02)  # lands after a 20 ms spin
        ev = cb.new_event()
        ev.record(a)
        assert not ev.query()
        c.wait_event(ev)
        c.launch(torch.Tensor.copy_, out, x)
        cb.synchronize()
        assert ev.query() and out.item() == i
    # without the wait: the copy runs while the transfer is in flight
    stale = 0
    for i in range(1, 11):
        x = torch.zeros(1, device=cb.device)
        out = torch.full((1,), -1.0, device=cb.device)
        torch.cuda.synchronize(cb.device)
        a.launch(torch.Tensor.fill_, x, float(i), kind="comm", cost=0.02)
        c.launch(torch.Tensor.copy_, out, x)
        cb.synchronize()
        stale += out.item() != i
        if stale:
            break
    assert stale >= 1


@needs_sleep
def test_wait_stream(cb):
    a, c = cb.new_stream("a"), cb.new_stream("c")
    x = torch.zeros(1, device=cb.device)
    out = torch.zeros(1, device=cb.device)
    torch.cuda.synchronize(cb.device)
    a.launch(torch.Tensor.fill_, x, 3.0, kind="comm", cost=0.02)
    c.wait_stream(a)
    c.launch(torch.Tensor.copy_, out, x)
    c.synchronize()
    assert out.item() == 3.0


def test_kernel_error_is_sticky(cb):
    s = cb.new_stream("s")
    s.launch(lambda: (_ for _ in ()).throw(ValueError("boom")), name="bad")
    with pytest.raises(StreamError, match="boom") as info:
        s.synchronize()
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(StreamError) as info:
        s.launch(None)
    assert isinstance(info.value.__cause__, ValueError)
    ev = cb.new_event()
    ev.record(s)
    with pytest.raises(StreamError):
        ev.synchronize()


@needs_sleep
def test_timeout():
    with get_backend("cuda", timeout=0.05) as b:
        s = b.new_stream("s")
        s.launch(None, kind="comm", cost=1.0)
        with pytest.raises(StreamTimeout):
            s.synchronize()
        s.torch_stream.synchronize()


@needs_sleep
def test_tracing_records_kernels_on_the_perf_counter_clock(cb):
    tr = Tracer()
    cb.tracer = tr
    s = cb.new_stream("compute")
    a = torch.randn(256, 256, device=cb.device)
    out = torch.empty_like(a)
    torch.cuda.synchronize(cb.device)
    t0 = cb.now()
    with use_ubatch(1):
        s.launch(lambda x, o: torch.matmul(x, x, out=o), a, out, name="mm")
        s.launch(None, name="xfer", kind="comm", cost=0.01)
    s.synchronize()
    t1 = cb.now()
    recs = {k.name: k for k in tr.records}
    assert set(recs) == {"mm", "xfer"}
    assert recs["mm"].ubatch == 1 and recs["mm"].stream == "compute"
    assert recs["xfer"].duration >= 0.005  # the modelled 10 ms spin (calibration within 2x)
    for k in recs.values():
        assert t0 - 0.05 <= k.start <= k.end <= t1 + 0.05


def test_use_stream_sets_torch_current_stream(cb):
    s = cb.new_stream("s")
    default = torch.cuda.current_stream(cb.device)
    with use_stream(s):
        assert torch.cuda.current_stream(cb.device) == s.torch_stream
        x = torch.ones(4, device=cb.device) * 2  # plain torch ops follow the current stream
    assert torch.cuda.current_stream(cb.device) == default
    s.synchronize()
    assert x.sum().item() == 8.0


def test_switch_paid_once_per_stream_change_not_per_launch(cb, monkeypatch):
    """With s current, launches on s run on torch's current stream without a stream context; a launch
    on another stream switches for that launch only, and its kernel runs there."""
    real = torch.cuda.stream
    enters = []

    def counting(s):
        enters.append(s)
        return real(s)

    monkeypatch.setattr(torch.cuda, "stream", counting)
    s, other = cb.new_stream("s"), cb.new_stream("other")
    seen = []
    x = torch.zeros(8, device=cb.device)
    torch.cuda.synchronize(cb.device)
    with use_stream(s):
        for _ in range(10):
            s.launch(lambda t: (seen.append(torch.cuda.current_stream(cb.device)), t.add_(1.0)), x)
        assert enters == []
        other.wait_stream(s)
        other.launch(lambda t: (seen.append(torch.cuda.current_stream(cb.device)), t.mul_(2.0)), x)
        assert len(enters) == 1 and torch.cuda.current_stream(cb.device) == s.torch_stream
    cb.synchronize()
    assert seen[:10] == [s.torch_stream] * 10 and seen[10] == other.torch_stream
    assert x.sum().item() == 8 * 20.0
