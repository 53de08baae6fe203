"""Capture and replay (dbo.capture): replay equals eager DBO bitwise; host syncs are refused."""

from __future__ import annotations

import threading

import pytest
import torch

import dbo
import workspace
from dbo import CaptureError, UBatchFailed, UBatchOrchestrator
from dbo.capture import CapturedStep
from dbo.trace import Tracer
from tests.support import workspace_fixtures

manager = workspace_fixtures.manager  # the process-wide workspace manager, reset after each test

CPU_BACKENDS = ["threads", "virtual", "inline"]
LAYERS = 3


# --- a small step using every part of the dbo_* api ---------------------------------------------


def _mm(a, w, h):
    torch.matmul(a, w, out=h)
    h.tanh_()


def _send(h, wire):
    wire.copy_(h)


def _recv(wire, buf):
    torch.mul(wire, 0.5, out=buf)


def _add(h, buf, a):
    torch.add(h, buf, out=a)


def make_inputs(n, rows=8, hidden=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(hidden, hidden, generator=gen) / hidden**0.5
    return [
        {
            "x": torch.randn(rows, hidden, generator=gen),
            "w": w,
            **{k: torch.zeros(rows, hidden) for k in ("a", "h", "wire", "buf", "out")},
        }
        for _ in range(n)
    ]


def step(u):
    """compute -> yield to comm -> send, park the receive as a recv hook on the sibling -> yield ->
    run the sibling's hook -> compute waits for comm -> add; then copy out."""
    a = u["x"]
    for _ in range(LAYERS):
        dbo.launch(_mm, a, u["w"], u["h"])
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        dbo.dbo_maybe_run_recv_hook()
        dbo.launch(_send, u["h"], u["wire"], kind="comm", cost=1e-5)
        comm = dbo.current_stream()
        dbo.dbo_register_recv_hook(lambda comm=comm: comm.launch(_recv, u["wire"], u["buf"], kind="comm"))
        dbo.dbo_yield()
        dbo.dbo_maybe_run_recv_hook()
        dbo.dbo_switch_to_compute_sync()
        dbo.launch(_add, u["h"], u["buf"], u["a"])
        a = u["a"]
    dbo.launch(torch.Tensor.copy_, u["out"], u["a"], name="copy_out")
    return u["out"]


def _previous_event():
    ev = dbo.current_stream().backend.new_event()
    ev.record()
    return ev


def link_step(u):
    """A transport's pattern: a shared link queue fetched by name, events made inside the step."""
    b = dbo.current_stream().backend
    dbo.launch(_mm, u["x"], u["w"], u["h"])
    prev = dbo.dbo_get_previous_event(_previous_event)
    dbo.dbo_yield_and_switch_from_compute_to_comm()
    link = b.stream("link-queue")
    link.wait_event(prev)
    link.launch(_send, u["h"], u["wire"], kind="comm", cost=2e-5)
    arrived = b.new_event()
    arrived.record(link)
    dbo.dbo_yield()
    dbo.current_stream().wait_event(arrived)
    dbo.launch(_recv, u["wire"], u["buf"], kind="comm")
    dbo.dbo_yield_and_switch_from_comm_to_compute()
    dbo.launch(_add, u["h"], u["buf"], u["out"])
    return u["out"]


def clear(inputs):
    for u in inputs:
        for k in ("a", "h", "wire", "buf", "out"):
            u[k].zero_()


def snapshot(outs):
    return [o.clone() for o in outs]


def assert_bitwise(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert torch.equal(g, w), (g - w).abs().max()


@pytest.fixture(params=CPU_BACKENDS)
def backend(request):
    return request.param


# --- replay equals eager -----------------------------------------------------------------------


@pytest.mark.parametrize("n,layout", [(2, "per-ubatch"), (2, "shared"), (3, "per-ubatch"), (1, "per-ubatch")])
def test_replay_is_bitwise_equal_to_eager(backend, n, layout):
    inputs = make_inputs(n)
    with UBatchOrchestrator(n, backend, stream_layout=layout) as orch:
        eager = snapshot(orch.run(step, inputs))
        clear(inputs)
        cs = orch.capture(step, inputs)
        assert isinstance(cs, CapturedStep)
        assert_bitwise(cs.outputs, eager)  # the capture ran the step once
        assert cs.num_kernels == n * (4 * LAYERS + 1)
        assert cs.num_ops > cs.num_kernels if n > 1 else cs.num_ops >= cs.num_kernels
        for _ in range(2):
            clear(inputs)
            out = cs.replay()
            assert all(o is c for o, c in zip(out, cs.outputs))
            assert_bitwise(out, eager)
        cs.close()


@pytest.mark.parametrize("eager_first", [True, False])
def test_a_link_queue_fetched_by_name_and_events_made_in_the_step_are_replayed(backend, eager_first):
    inputs = make_inputs(2)
    with UBatchOrchestrator(2, backend) as orch:
        if eager_first:  # else the link queue is created during the capture
            eager = snapshot(orch.run(link_step, inputs))
            clear(inputs)
        cs = orch.capture(link_step, inputs)
        if not eager_first:
            eager = snapshot(cs.outputs)
            clear(inputs)
            assert_bitwise(orch.run(link_step, inputs), eager)
        assert cs.num_kernels == 2 * 4
        clear(inputs)
        assert_bitwise(cs.replay(), eager)


def test_replay_sees_a_changed_static_input(backend):
    inputs = make_inputs(2)
    with UBatchOrchestrator(2, backend) as orch:
        cs = orch.capture(step, inputs)
        first = snapshot(cs.outputs)
        inputs[0]["x"].mul_(2.0)
        out = snapshot(cs.replay())
        assert not torch.equal(out[0], first[0]) and torch.equal(out[1], first[1])
        clear(inputs)
        assert_bitwise(out, orch.run(step, inputs))  # the eager step on the changed input


def test_replay_runs_no_ubatch_thread_no_handoff_and_no_model_python(backend):
    inputs = make_inputs(2)
    calls = []

    def counted(u):
        calls.append(threading.current_thread().name)
        return step(u)

    with UBatchOrchestrator(2, backend) as orch:
        cs = orch.capture(counted, inputs)
        assert len(calls) == 2
        before = set(threading.enumerate())
        orch.last_step_handoffs = -1
        cs.replay()
        assert len(calls) == 2  # fn was not called again
        assert orch.last_step_handoffs == -1  # no step ran
        assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("dbo-")]


def test_replay_traces_a_host_span_and_kernels():
    tr = Tracer()
    inputs = make_inputs(2)
    with UBatchOrchestrator(2, "virtual", tracer=tr) as orch:
        cs = orch.capture(step, inputs)
        tr.clear()
        cs.replay()
        spans = [s for s in tr.spans if s.name == "replay"]
        assert len(spans) == 1 and spans[0].end >= spans[0].start and spans[0].args["kernels"] == cs.num_kernels
        assert len(tr.kernels()) == cs.num_kernels


@pytest.mark.parametrize("fn", [step, link_step], ids=["step", "link_step"])
@pytest.mark.parametrize("layout", ["per-ubatch", "shared"])
def test_virtual_replay_has_the_eager_steps_timeline(layout, fn):
    """Same kernels, same streams, same virtual start and end times: the replay keeps every wait."""
    tr = Tracer()
    inputs = make_inputs(2)

    def timeline():
        return [(k.stream, k.name, k.kind, k.start, k.end) for k in tr.kernels()]

    with UBatchOrchestrator(2, "virtual", stream_layout=layout, tracer=tr) as orch:
        orch.backend.reset_clock()
        orch.run(fn, inputs)
        eager = timeline()
        cs = orch.capture(fn, inputs)
        orch.backend.reset_clock()
        tr.clear()
        cs.replay()
        assert timeline() == eager and len(eager) == cs.num_kernels


def test_replay_calls_the_backends_graph_replay_hook_once():
    inputs = make_inputs(2)
    with UBatchOrchestrator(2, "virtual") as orch:
        seen = []

        class Hold:
            def __enter__(self):
                seen.append("enter")

            def __exit__(self, *exc):
                seen.append("exit")

        orch.backend.on_graph_replay = lambda: seen.append("hook") or Hold()
        cs = orch.capture(step, inputs)
        assert seen == []
        cs.replay()
        assert seen == ["hook", "enter", "exit"]


def test_close_is_idempotent_and_replay_after_close_is_refused(backend):
    with UBatchOrchestrator(2, backend) as orch:
        cs = orch.capture(step, make_inputs(2))
        cs.close()
        cs.close()
        with pytest.raises(dbo.DBOError, match="closed CapturedStep"):
            cs.replay()


def test_replay_after_the_orchestrator_closed_is_refused():
    orch = UBatchOrchestrator(2, "threads")
    cs = orch.capture(step, make_inputs(2))
    orch.close()
    with pytest.raises(dbo.DBOError, match="orchestrator was closed"):
        cs.replay()


def test_capture_rejects_bad_input():
    with UBatchOrchestrator(2, "inline") as orch:
        with pytest.raises(ValueError, match="expected 2 ubatch inputs"):
            orch.capture(step, make_inputs(1))
        with pytest.raises(TypeError, match="callable"):
            orch.capture(42, make_inputs(2))


# --- host syncs are refused ----------------------------------------------------------------------

# Each entry: (name the message must contain, the sync as a one-line lambda of the ubatch input).
SYNCS = {
    "item": ("Tensor.item()", lambda u: u["x"].sum().item()),
    "tolist": ("Tensor.tolist()", lambda u: u["x"][0].tolist()),
    "bool": ("bool(tensor)", lambda u: bool(u["x"][0, 0] > 0)),
    "torch.nonzero": ("nonzero", lambda u: torch.nonzero(u["x"] > 0)),
    "Tensor.nonzero": ("nonzero", lambda u: (u["x"] > 0).nonzero()),
    "unique": ("unique", lambda u: torch.unique(u["x"])),
    "masked_select": ("masked_select", lambda u: torch.masked_select(u["x"], u["x"] > 0)),
    "repeat_interleave": (
        "repeat_interleave",
        lambda u: torch.repeat_interleave(u["x"][0], torch.ones(16, dtype=torch.long)),
    ),
    "stream.synchronize": ("Stream.synchronize()", lambda u: dbo.current_stream().synchronize()),
    "stream.query": ("Stream.query()", lambda u: dbo.current_stream().query()),
    "backend.synchronize": ("Backend.synchronize()", lambda u: dbo.current_stream().backend.synchronize()),
    "event.synchronize": ("Event.synchronize()", lambda u: _recorded_event().synchronize()),
    "event.query": ("Event.query()", lambda u: _recorded_event().query()),
}


def _recorded_event():
    s = dbo.current_stream()
    ev = s.backend.new_event()
    ev.record(s)
    return ev


def _syncing_step(sync, where):
    def fn(u):
        dbo.launch(_mm, u["x"], u["w"], u["h"])
        dbo.dbo_yield_and_switch_from_compute_to_comm()
        if where == "thread":
            sync(u)
        else:
            dbo.launch(lambda: sync(u), name="syncing_kernel")
        if where == "last-kernel":  # no later launch sees the failed stream: the final synchronize must
            return u["out"]
        dbo.dbo_yield_and_switch_from_comm_to_compute()
        dbo.launch(_mm, u["h"], u["w"], u["out"])
        return u["out"]

    return fn


def _line_of(fn):
    return f"test_capture.py:{fn.__code__.co_firstlineno}"


@pytest.mark.parametrize("kind", sorted(SYNCS))
@pytest.mark.parametrize("n", [2, 1])
def test_host_sync_in_the_step_is_refused(backend, kind, n):
    what, sync = SYNCS[kind]
    inputs = make_inputs(n)
    with UBatchOrchestrator(n, backend) as orch:
        with pytest.raises(CaptureError) as info:
            orch.capture(_syncing_step(sync, "thread"), inputs)
        msg = str(info.value)
        assert what in msg and _line_of(sync) in msg, msg
        _assert_usable(orch, inputs)


TORCH_SYNCS = [k for k in sorted(SYNCS) if "." not in k or k.startswith(("torch.", "Tensor."))]


@pytest.mark.parametrize("where", ["kernel", "last-kernel"])
@pytest.mark.parametrize("kind", TORCH_SYNCS)
def test_host_sync_inside_a_kernel_is_refused(backend, kind, where):
    what, sync = SYNCS[kind]
    inputs = make_inputs(2)
    with UBatchOrchestrator(2, backend) as orch:
        with pytest.raises(CaptureError) as info:
            orch.capture(_syncing_step(sync, where), inputs)
        msg = str(info.value)
        assert what in msg and _line_of(sync) in msg, msg
        _assert_usable(orch, inputs)


def _assert_usable(orch, inputs):
    """A refused capture leaves the orchestrator usable: a run and a capture work at once."""
    n = orch.num_ubatches
    clear(inputs)
    eager = snapshot(orch.run(step, inputs))
    clear(inputs)
    assert_bitwise(orch.capture(step, inputs).replay(), eager)
    assert not [t for t in threading.enumerate() if t.name.startswith("dbo-capture")]
    assert n == len(eager)


def test_a_step_without_syncs_is_not_refused_by_static_shape_ops(backend):
    def fn(u):
        dbo.launch(lambda: torch.repeat_interleave(u["x"], 2, dim=0, output_size=2 * u["x"].shape[0]))
        dbo.launch(lambda: torch.repeat_interleave(u["x"][0], torch.ones(16, dtype=torch.long), output_size=16))
        dbo.launch(lambda: u["h"].copy_(torch.where(u["x"] > 0, u["x"], 0.0)))
        return u["h"]

    with UBatchOrchestrator(2, backend) as orch:
        assert orch.capture(fn, make_inputs(2)).num_kernels == 6


HOST_WRITES = {
    "in-place": ("'add_'", lambda u: u["a"].add_(1.0)),
    "out=": ("'add'", lambda u: torch.add(u["x"], 1.0, out=u["a"])),
    "setitem": ("'__setitem__'", lambda u: u["a"].__setitem__(0, 1.0)),
}


@pytest.mark.parametrize("kind", sorted(HOST_WRITES))
@pytest.mark.parametrize("n", [2, 1])
def test_a_host_side_write_outside_a_kernel_is_refused_on_cpu_backends(backend, kind, n):
    """The replay repeats only kernels: a write done by the step's Python would silently be lost."""
    what, write = HOST_WRITES[kind]

    def fn(u):
        dbo.launch(_mm, u["x"], u["w"], u["h"])
        dbo.dbo_yield()
        write(u)
        return u["a"]

    with UBatchOrchestrator(n, backend) as orch:
        with pytest.raises(CaptureError, match="outside a kernel") as info:
            orch.capture(fn, make_inputs(n))
        assert what in str(info.value) and _line_of(write) in str(info.value)
        _assert_usable(orch, make_inputs(n))


def test_direct_use_of_a_real_stream_is_refused():
    with UBatchOrchestrator(2, "threads") as orch:
        real = orch.streams(0)[0]

        def fn(u):
            real.launch(_mm, u["x"], u["w"], u["h"])
            return u["h"]

        with pytest.raises(CaptureError, match="used directly during capture"):
            orch.capture(fn, make_inputs(2))
        _assert_usable(orch, make_inputs(2))


@pytest.mark.parametrize("backend_name", ["threads", "virtual"])
def test_event_made_before_the_capture_and_recorded_in_it_is_refused(backend_name):
    with UBatchOrchestrator(2, backend_name) as orch:
        old = orch.backend.new_event()

        def fn(u):
            old.record()
            return u["h"]

        with pytest.raises(CaptureError, match="event created before the capture"):
            orch.capture(fn, make_inputs(2))


def test_failure_that_is_not_a_sync_is_a_ubatch_failure(backend):
    def fn(u):
        dbo.dbo_yield()
        raise ValueError("boom")

    with UBatchOrchestrator(2, backend) as orch:
        with pytest.raises(UBatchFailed) as info:
            orch.capture(fn, make_inputs(2))
        assert not isinstance(info.value, CaptureError) and isinstance(info.value.__cause__, ValueError)
        _assert_usable(orch, make_inputs(2))


# --- the workspace -------------------------------------------------------------------------------


def _ws_step(rows):
    def fn(u):
        (buf,) = workspace.current_workspace_manager().get_simultaneous(((rows, 16), torch.float32))
        rows_in = u["x"].shape[0]
        dbo.launch(_mm, u["x"], u["w"], buf[:rows_in])
        dbo.dbo_yield()
        dbo.launch(torch.Tensor.copy_, u["out"], buf[:rows_in])
        return u["out"]

    return fn


@pytest.mark.parametrize("was_locked", [False, True])
def test_workspace_allocation_during_capture_is_refused(backend, manager, was_locked):
    inputs = make_inputs(2)
    with UBatchOrchestrator(2, backend) as orch:
        orch.run(_ws_step(8), inputs)  # warm: slots fit 8 rows
        if was_locked:
            manager.lock()
        eager = snapshot(orch.run(_ws_step(8), inputs))
        cs = orch.capture(_ws_step(8), inputs)  # fits: no allocation, captured
        assert manager.is_locked() == was_locked
        clear(inputs)
        assert_bitwise(cs.replay(), eager)
        with pytest.raises(CaptureError) as info:
            orch.capture(_ws_step(64), inputs)  # needs a bigger slot: an allocation
        assert "workspace allocation" in str(info.value) and "test_capture.py:" in str(info.value)
        assert manager.is_locked() == was_locked  # restored to its prior state
        if not was_locked:
            orch.run(_ws_step(64), inputs)  # and growth works again


def test_the_demo_models_host_known_counts_are_refused(manager):
    """The ht schedule keeps host-known expert counts (``offsets.tolist()`` in the experts kernel):
    capturing it must be refused, naming the op and the kernel's line."""
    from demos.toy.comm import ModelledLinkTransport
    from demos.toy.model import ModelConfig, ToyMoE

    cfg = ModelConfig(layers=1, tokens=16, hidden=32, experts=4, topk=2, shared_chunk=6)
    model = ToyMoE(cfg, ModelledLinkTransport(), num_ubatches=2, schedule="ht")
    with UBatchOrchestrator(2, "virtual") as orch:
        ranges = dbo.split_tokens(cfg.tokens, 2)
        orch.run(model.forward, ranges)  # warm the workspace
        with pytest.raises(CaptureError) as info:
            orch.capture(model.forward, ranges)
        assert "Tensor.tolist()" in str(info.value) and "kernels.py:" in str(info.value), str(info.value)
        orch.run(model.forward, ranges)  # the orchestrator stays usable


# --- cuda (not run without a GPU) ----------------------------------------------------------------


def _to_cuda(inputs):
    return [{k: v.cuda() for k, v in u.items()} for u in inputs]


@pytest.mark.parametrize("n", [2, 1])
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_capture_replays_bitwise_and_sees_static_inputs(n):
    inputs = _to_cuda(make_inputs(n))
    with UBatchOrchestrator(n, "cuda") as orch:
        for _ in range(2):  # warm-up (cuBLAS, allocator) before capturing
            eager = snapshot(orch.run(step, inputs))
        cs = orch.capture(step, inputs)
        assert cs.num_kernels == n * (4 * LAYERS + 1)
        assert_bitwise(cs.outputs, eager)
        clear(inputs)
        assert_bitwise(cs.replay(), eager)
        inputs[0]["x"].mul_(2.0)
        out = snapshot(cs.replay())
        assert not torch.equal(out[0], eager[0])
        clear(inputs)
        assert_bitwise(out, orch.run(step, inputs))
        cs.close()


@pytest.mark.parametrize("kind", ["item", "tolist", "bool", "torch.nonzero", "stream.synchronize", "event.query"])
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_host_sync_is_refused(kind):
    what, sync = SYNCS[kind]
    inputs = _to_cuda(make_inputs(2))
    with UBatchOrchestrator(2, "cuda") as orch:
        orch.run(step, inputs)
        with pytest.raises(CaptureError) as info:
            orch.capture(_syncing_step(sync, "thread"), inputs)
        assert what in str(info.value) and _line_of(sync) in str(info.value)
        eager = snapshot(orch.run(step, inputs))
        assert_bitwise(orch.capture(step, inputs).replay(), eager)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_host_copies_must_be_pinned_and_non_blocking():
    inputs = _to_cuda(make_inputs(2))
    pinned = [torch.zeros(8, 16).pin_memory() for _ in range(2)]
    pageable = [torch.zeros(8, 16) for _ in range(2)]

    def fn(dst):
        def body(u):
            out = step(u)
            dst[dbo.dbo_current_ubatch_id()].copy_(out, non_blocking=True)
            return out

        return body

    with UBatchOrchestrator(2, "cuda") as orch:
        eager = snapshot(orch.run(step, inputs))
        with pytest.raises(CaptureError, match="not pinned"):
            orch.capture(fn(pageable), inputs)
        cs = orch.capture(fn(pinned), inputs)
        for p in pinned:
            p.zero_()
        cs.replay()
        assert_bitwise([p.cuda() for p in pinned], eager)


def test_a_refusal_reached_only_through_an_exceptions_context_is_still_a_capture_error():
    from dbo.capture._step import _raise_translated

    refusal = CaptureError("host sync during capture: Tensor.item() at x.py:1")
    try:
        try:
            raise refusal
        except CaptureError:
            wrapper = dbo.StreamError("it waited on an event of a stream that was closed first")
            wrapper.__cause__ = RuntimeError("unrelated")  # the cause link leads elsewhere
            raise wrapper
    except dbo.StreamError as e:
        failed = UBatchFailed("ubatch 1 of 2 failed", 1)
        failed.__cause__ = e
    with pytest.raises(CaptureError, match="Tensor.item"):
        _raise_translated(failed)


def _item_in_a_link_kernel(u):
    link = dbo.current_stream().backend.stream("link")  # a transport's queue, fetched by name
    link.launch(lambda t: t.sum().item(), u["x"], kind="comm")
    dbo.dbo_yield()
    return u["x"]


def test_a_refusal_on_a_shared_backend_leaves_its_named_streams_usable(backend):
    # the demo shares one backend between its orchestrators, so recovery cannot replace it: the
    # stream the refused kernel ran on must not stay failed for the next eager step
    from dbo.streams import get_backend

    b = get_backend(backend)
    try:
        with UBatchOrchestrator(2, b) as orch:
            inputs = make_inputs(2)
            with pytest.raises(CaptureError, match="Tensor.item"):
                orch.capture(_item_in_a_link_kernel, inputs)
            link = b.stream("link")
            assert link.error is None

            def send_on_the_link(u):
                dbo.current_stream().backend.stream("link").launch(_send, u["x"], u["wire"], kind="comm")
                return u["wire"]

            out = orch.run(send_on_the_link, inputs)
            link.synchronize()
            assert all(torch.equal(o, u["x"]) for o, u in zip(out, inputs))
    finally:
        b.close()


def test_a_stream_made_inside_a_capture_keeps_its_role():
    # a model may fork a side stream (or a comm queue) on first use, inside the captured step: the capture's
    # backend patch must pass the role through, as the real backend's new_stream and stream do
    from dbo.streams import get_backend

    b = get_backend("virtual")

    def fork(u):
        backend = dbo.current_stream().backend
        side = backend.stream("aux", role="side")
        backend.new_stream(f"q{dbo.dbo_current_ubatch_id()}", role="comm")
        side.launch(_add, u["x"], u["x"], u["out"])
        return u["out"]

    try:
        with UBatchOrchestrator(1, b) as orch:
            orch.capture(fork, make_inputs(1))
        assert b.stream("aux").role == "side" and b.stream("q0").role == "comm"
    finally:
        b.close()
