"""dbo.races: the happens-before race detector over streams and events, on every backend."""

from __future__ import annotations

import os

import pytest
import torch

import dbo
from dbo import races
from dbo.streams.observer import stream_observer
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.timing import slack

CPU = ("virtual", "inline", "threads")
HERE = os.path.basename(__file__)


@pytest.fixture
def det():
    races.enable()
    yield races
    races.disable()


@pytest.fixture(params=CPU)
def backend(request):
    b = dbo.get_backend(request.param)
    yield b
    b.close()


def _write(x: torch.Tensor) -> None:
    x.fill_(1.0)


def _read(x: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(x.sum().reshape(1))


def _pair(b):
    return b.new_stream("a"), b.new_stream("c")


def test_off_by_default_installs_nothing():
    assert not races.enabled()
    assert stream_observer() is None
    races.enable()
    assert stream_observer() is not None
    races.disable()
    assert stream_observer() is None


def test_a_missing_wait_between_two_streams_is_a_race(backend, det):
    a, c = _pair(backend)
    x, out = torch.zeros(64), torch.zeros(1)
    a.launch(_write, x, name="producer")
    c.launch(_read, x, out, name="consumer")
    backend.synchronize()
    found = det.findings()
    assert len(found) == 1
    r = found[0]
    assert r.kind == "stream-race" and r.access == "write-read"
    assert r.first[:2] == ("producer", "a") and r.second[:2] == ("consumer", "c")
    # the lines that launched them: this file, not dbo internals
    assert r.first[3].split(":")[0].endswith(HERE) and r.second[3].split(":")[0].endswith(HERE)
    assert r.nbytes == 64 * 4
    assert "producer" in str(r) and "consumer" in str(r) and "stream 'a'" in str(r)


@pytest.mark.parametrize("how", ["wait_event", "wait_stream", "stream_sync", "event_sync", "backend_sync"])
def test_each_kind_of_ordering_removes_the_race(backend, det, how):
    a, c = _pair(backend)
    x, out = torch.zeros(64), torch.zeros(1)
    a.launch(_write, x)
    if how == "wait_event":
        ev = backend.new_event()
        ev.record(a)
        c.wait_event(ev)
    elif how == "wait_stream":
        c.wait_stream(a)
    elif how == "stream_sync":
        a.synchronize()
    elif how == "event_sync":
        ev = backend.new_event()
        ev.record(a)
        ev.synchronize()
    else:
        backend.synchronize()
    c.launch(_read, x, out)
    backend.synchronize()
    assert det.findings() == []


def test_an_event_recorded_before_the_write_does_not_cover_it(backend, det):
    a, c = _pair(backend)
    x, out = torch.zeros(64), torch.zeros(1)
    ev = backend.new_event()
    ev.record(a)  # too early
    a.launch(_write, x)
    c.wait_event(ev)
    c.launch(_read, x, out)
    backend.synchronize()
    assert len(det.findings()) == 1


def test_a_wait_on_an_event_never_recorded_orders_nothing(backend, det):
    a, c = _pair(backend)
    x, out = torch.zeros(64), torch.zeros(1)
    a.launch(_write, x)
    c.wait_event(backend.new_event())
    c.launch(_read, x, out)
    backend.synchronize()
    assert len(det.findings()) == 1


def test_the_latest_record_counts_and_waits_are_transitive(backend, det):
    a, b2, c = backend.new_stream("a"), backend.new_stream("b"), backend.new_stream("c")
    x, out = torch.zeros(64), torch.zeros(1)
    a.launch(_write, x)
    ev = backend.new_event()
    ev.record(a)
    b2.wait_event(ev)  # b has seen a's write
    ev2 = backend.new_event()
    ev2.record(b2)
    c.wait_event(ev2)  # c has seen b, hence a
    c.launch(_read, x, out)
    backend.synchronize()
    assert det.findings() == []


def test_judged_by_byte_range_not_by_start_address(backend, det):
    a, c = _pair(backend)
    buf = torch.zeros(100)
    out = torch.zeros(1)
    a.launch(_write, buf[0:50])
    c.launch(_read, buf[50:100], out)  # disjoint bytes of the same storage: no race
    backend.synchronize()
    assert det.findings() == []
    a.launch(_write, buf[10:20])
    c.launch(_read, buf[15:40], out)  # different start, overlapping bytes: a race
    backend.synchronize()
    (r,) = det.findings()
    assert r.nbytes == 5 * 4
    strided = buf.view(10, 10)
    a.launch(_write, strided[:, 0])  # a column: every 10th float
    c.launch(_read, strided[0, 1:], out)  # row 0 without its first element: inside the column's extent
    backend.synchronize()
    assert len(det.findings()) == 2


def test_reads_never_race_and_in_order_streams_never_race(backend, det):
    a, c = _pair(backend)
    x, o1, o2 = torch.ones(64), torch.zeros(1), torch.zeros(1)
    a.launch(_read, x, o1)
    c.launch(_read, x, o2)
    a.launch(_write, x)  # same stream as the first read: ordered after it; c's read is not
    backend.synchronize()
    (r,) = det.findings()
    assert r.access == "read-write" and r.first[1] == "c" and r.second[1] == "a"


def test_kernel_temporaries_are_not_judged(backend, det):
    a, c = _pair(backend)
    o1, o2 = torch.zeros(1), torch.zeros(1)

    def tmp(out: torch.Tensor) -> None:
        for _ in range(5):
            y = torch.ones(256) * 2  # fresh memory, freed and reused by the other stream's kernel
            out.copy_(y.sum().reshape(1))

    for _ in range(3):
        a.launch(tmp, o1)
        c.launch(tmp, o2)
    backend.synchronize()
    assert det.findings() == []


def test_raise_mode_fails_the_racing_kernel(backend):
    a, c = _pair(backend)
    x, out = torch.zeros(64), torch.full((1,), -1.0)
    with races.use_races("raise") as found:
        a.launch(_write, x)
        if backend.name == "inline":  # inline: the kernel's exception reaches the launcher
            with pytest.raises(races.RaceError):
                c.launch(_read, x, out)
        else:
            c.launch(_read, x, out)
            with pytest.raises(dbo.StreamError) as info:
                c.synchronize()
            assert isinstance(info.value.__cause__, races.RaceError)
        assert float(out[0]) == -1.0  # the op raised before it ran
        assert len(found()) == 1


def test_threads_kernels_are_watched_on_the_executor_threads(det):
    with dbo.get_backend("threads") as b:
        a, c = _pair(b)
        x, out = torch.zeros(64), torch.zeros(1)
        a.launch(_write, x)
        c.launch(_read, x, out, kind="comm")
        b.synchronize()
    (r,) = det.findings()
    assert r.thread.startswith("dbo-stream-")


def test_a_race_that_makes_a_kernel_raise_before_its_writer_ran_is_reported(det):
    """threads: the reader runs first, reads garbage indices and raises; its stream fails and the
    writer never runs in a failed step. The detector reports the unrun writer (taking those bytes
    as an argument) against the reader."""
    with dbo.get_backend("threads", timeout=slack(10)) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        idx = torch.full((4,), 10**6, dtype=torch.int64)  # garbage until the writer runs
        src, out = torch.zeros(8), torch.zeros(4)

        def slow_write(i: torch.Tensor) -> None:
            i.copy_(torch.arange(4))

        def gather(s: torch.Tensor, i: torch.Tensor, o: torch.Tensor) -> None:
            torch.index_select(s, 0, i, out=o)

        a.launch(None, kind="comm", cost=0.2)  # keeps stream a busy: the writer runs late
        a.launch(slow_write, idx, kind="comm")
        c.launch(gather, src, idx, out)  # no wait: runs first, raises
        with pytest.raises(dbo.StreamError):
            c.synchronize()
        b.close()  # as a failed step does: the writer is dropped unrun
    found = det.findings()
    assert len(found) == 1 and found[0].first[0] == "slow_write" and found[0].second[0] == "gather"
    assert "before the first one ran" in found[0].note


def test_an_unrun_writer_whose_fn_was_seen_writing_races_with_what_ran_before_a_failure(det):
    """threads: the reader ran (and did not raise), a later kernel raised, the step failed and the
    writer never ran. Its fn was seen writing that argument before: the pair is reported."""

    def write_idx(i: torch.Tensor) -> None:
        i.copy_(torch.arange(4))

    def read_idx(i: torch.Tensor, o: torch.Tensor) -> None:
        o.copy_(i.to(torch.float32))

    def boom(_: torch.Tensor) -> None:
        raise RuntimeError("something else went wrong")

    with dbo.get_backend("threads", timeout=slack(10)) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        idx, out = torch.zeros(4, dtype=torch.int64), torch.zeros(4)
        a.launch(write_idx, idx)
        a.synchronize()  # seen once: write_idx writes its argument 0
        a.launch(None, kind="comm", cost=0.2)
        a.launch(write_idx, idx, name="writer")  # runs late
        c.launch(read_idx, idx, out, name="reader")  # no wait: runs first, reads stale indices, fine
        c.launch(boom, out, name="boom")
        with pytest.raises(dbo.StreamError):
            c.synchronize()
        b.close()
    found = det.findings()
    assert [(r.first[0], r.second[0], r.access) for r in found] == [("reader", "writer", "read-write")]
    assert "had not run" in found[0].note


def test_graph_replay_updates_the_clocks_as_the_reissued_ops_do(backend):
    """A captured step with its waits is race-free in every replay; work launched after a replay
    on another stream without a sync races with the replay's kernels; with the sync it does not."""
    orch = dbo.UBatchOrchestrator(2, backend=backend, handoff_timeout=HANDOFF_TIMEOUT, step_timeout=slack(30))
    xs = [torch.zeros(32), torch.zeros(32)]
    outs = [torch.zeros(1), torch.zeros(1)]

    def body(i: int) -> None:
        dbo.launch(_write, xs[i], name="w")
        dbo.dbo_switch_to_comm_sync()
        dbo.launch(_read, xs[i], outs[i], name="r")
        dbo.dbo_yield()

    with races.use_races() as found:
        step = orch.capture(body, [0, 1])
        step.replay()
        step.replay()
        assert found() == []
        other = backend.new_stream("after")
        step.replay(sync=False)
        other.launch(_write, xs[0], name="late")
        backend.synchronize()
        assert len(found()) >= 1 and any(r.second[0] == "late" for r in found())
        races.clear()
        step.replay(sync=True)
        other.launch(_write, xs[0], name="late")
        backend.synchronize()
        assert found() == []
        step.close()
    orch.close()


def test_reports_name_the_ubatches_from_the_orchestrator(backend, det):
    shared = torch.zeros(64)
    out = torch.zeros(1)

    def body(i: int) -> None:
        if i == 0:
            dbo.launch(_write, shared, name="w0")
        dbo.dbo_yield()
        if i == 1:
            dbo.launch(_read, shared, out, name="r1")  # ubatch 1's own stream: nothing orders it after w0

    with dbo.UBatchOrchestrator(2, backend=backend, handoff_timeout=HANDOFF_TIMEOUT, step_timeout=slack(30)) as orch:
        orch.run(body, [0, 1])
    (r,) = det.findings()
    assert (r.first[0], r.first[2]) == ("w0", 0) and (r.second[0], r.second[2]) == ("r1", 1)
    assert r.ubatch == 1 and r.caller == r.second[3]


def test_enable_rejects_a_bad_mode():
    with pytest.raises(ValueError, match="collect"):
        races.enable("loud")
    assert not races.enabled()


@pytest.mark.cuda
def test_cuda_missing_wait_is_a_race():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    with races.use_races() as found, dbo.get_backend("cuda") as b:
        a, c = _pair(b)
        x, out = torch.zeros(1 << 20, device="cuda"), torch.zeros(1, device="cuda")
        a.launch(_write, x)
        c.launch(_read, x, out)
        ev = b.new_event()
        ev.record(a)
        c.wait_event(ev)
        c.launch(_read, x, out)  # ordered now: no second finding
        b.synchronize()
        assert len(found()) == 1


@pytest.mark.slow
def test_demo_sanitize_flag_counts_and_lists_findings(monkeypatch, tmp_path):
    """``python -m demos.overlap --sanitize``: 0 findings on the clean demo; a switch that forgets
    its wait is reported (count, first findings in the JSON and a text line)."""
    import json

    from dbo.streams import set_stream
    from dbo.testing import UBatchContext
    from demos import overlap
    from demos.toy.report import format_report

    small = [
        "--backend",
        "virtual",
        "--layers",
        "2",
        "--tokens",
        "48",
        "--hidden",
        "32",
        "--experts",
        "4",
        "--steps",
        "1",
        "--sanitize",
    ]
    out = tmp_path / "r.json"
    assert overlap.main(small + ["--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["sanitizer_findings"] == 0 and rep["sanitizer_first"] == []
    assert "sanitizer  0 findings" in format_report(rep)

    def switch_sync(self, src, dst, done):  # the bug: record, switch, no wait
        done.record(src)
        set_stream(dst)

    monkeypatch.setattr(UBatchContext, "switch_sync", switch_sync)
    assert overlap.main(small + ["--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["sanitizer_findings"] >= 1
    assert all(f.startswith("stream-race") for f in rep["sanitizer_first"])
    assert any("experts" in f for f in rep["sanitizer_first"])
    assert f"sanitizer  {rep['sanitizer_findings']} finding" in format_report(rep)
    assert not races.enabled() and stream_observer() is None  # the run turned everything off


@pytest.mark.parametrize("backend", ["inline", "virtual", "threads"])
def test_a_watched_kernel_is_traced_under_its_own_name(backend):
    # the detector wraps the kernel it watches; the trace must still name the user's function
    from dbo.streams import get_backend
    from dbo.trace import Tracer

    def scale_rows(t):
        t.mul_(2)

    with get_backend(backend, tracer=Tracer()) as b, races.use_races():
        s = b.new_stream("s")
        s.launch(scale_rows, torch.ones(4))
        s.synchronize()
        assert [k.name for k in b.tracer.kernels()] == ["scale_rows"]
