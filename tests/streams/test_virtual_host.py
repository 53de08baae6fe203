"""The virtual backend's host clock: launches, stream switches, events, handoffs, thread start and
join, host syncs and graph replays advance it; kernels never start before they are launched."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import dbo
import demos.toy  # noqa: F401  (registers the toy's fitted "h200" profile, used below)
from dbo.costs import DeviceProfile, OpCost, Work, get_profile, kernel_time, syncs_host
from dbo.streams import VirtualBackend, set_stream
from dbo.trace import Tracer
from tests.support.orchestrators import HANDOFF_TIMEOUT
from tests.support.profiles import US
from tests.support.profiles import host_profile as prof
from tests.support.timing import slack


def test_launch_bound_step_takes_launches_times_the_launch_cost():
    with VirtualBackend(profile=prof(launch=10 * US)) as b:
        s = b.new_stream("s")
        for _ in range(100):
            s.launch(None, cost=1e-9)  # tiny kernels: the host is the bottleneck
        s.synchronize()
        assert b.now() == pytest.approx(100 * 10 * US, rel=1e-6, abs=2e-9)


def test_op_kernel_counts_and_extras_cost_host_and_device_time():
    p = dataclasses.replace(
        prof(launch=2 * US, kernel=3 * US, ops={"big": OpCost(kernels=4, host=5 * US)}), min_kernel=1 * US
    )
    with VirtualBackend(profile=p) as b:
        s = b.new_stream("s")
        s.launch(None, name="big L0 u0", cost=Work(), op="big")
        assert b.now() == pytest.approx((2 + 4 * 3 + 5) * US)
        t0 = b.now()
        s.launch(None, name="other", cost=Work())
        assert b.now() - t0 == pytest.approx((2 + 3) * US)
        assert b.kernel_seconds("compute", Work(), (), op="big") == pytest.approx(4 * US)  # 4 x min_kernel


def test_a_kernel_never_starts_before_its_launch_on_the_host_clock():
    tr = Tracer()
    with VirtualBackend(profile=prof(launch=7 * US, kernel=1 * US), tracer=tr) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        issued = []
        for i in range(20):
            issued.append(b.now())
            (a if i % 2 else c).launch(None, name=f"k{i}", cost=(i % 3) * 1e-6)
        recs = {r.name: r for r in tr.kernels()}
        for i, t in enumerate(issued):
            r = recs[f"k{i}"]
            assert r.start >= t + 8 * US - 1e-12, f"k{i} started at {r.start} before its launch at {t}"
            assert r.end >= t + 8 * US - 1e-12  # nor ends before it is fully issued


def test_host_sync_waits_for_the_device():
    with VirtualBackend(profile=prof(launch=1 * US, sync=5 * US)) as b:
        s = b.new_stream("s")
        s.launch(None, cost=1e-3)
        assert b.now() == pytest.approx(1 * US)
        ev = b.new_event()
        ev.record(s)
        ev.synchronize()
        assert b.now() == pytest.approx(1 * US + 1e-3 + 5 * US)
        s.launch(None, cost=1e-3)
        s.synchronize()
        assert b.now() == pytest.approx(2 * US + 2e-3 + 10 * US)
        t = b.now()
        b.synchronize()  # idle: costs the sync alone
        assert b.now() == pytest.approx(t + 5 * US)


def test_a_kernel_marked_syncing_waits_for_its_streams_earlier_work():
    seen = []

    @syncs_host
    def reads_offsets(x):
        seen.append(x.sum().item())

    with VirtualBackend(profile=prof(launch=1 * US)) as b:
        s = b.new_stream("s")
        s.launch(None, cost=1e-3)
        s.launch(reads_offsets, torch.ones(3))
        assert seen == [3.0]
        assert b.now() == pytest.approx(1 * US + 1e-3 + 1 * US)  # waited, then issued itself
        s.launch(lambda x: None, torch.ones(3), cost=1e-3)  # unmarked: no wait
        assert b.now() == pytest.approx(3 * US + 1e-3)


def test_a_graph_replay_costs_one_launch():
    with VirtualBackend(profile=prof(launch=4 * US, kernel=3 * US, event=1 * US)) as b:
        replay = getattr(b, "on_graph_replay", None)
        assert callable(replay)
        s = b.new_stream("s")
        ev = b.new_event()
        t = b.now()
        with replay():  # what CapturedStep.replay does: re-issue every op inside the context
            for _ in range(10):
                s.launch(None, cost=0.0)
                ev.record(s)
                s.wait_event(ev)
        assert b.now() - t == pytest.approx(7 * US)  # one launch for the whole replay
        t = b.now()
        s.launch(None, cost=0.0)
        assert b.now() - t == pytest.approx(7 * US)  # outside the replay: a plain launch again


def test_a_replay_that_re_issues_each_op_costs_replay_op_an_op():
    """On threads a replay re-issues every recorded op from Python (``HostCosts.replay_op``): 10
    launches, 10 records and 10 waits cost one launch plus 30 x replay_op; without it (a CUDA
    graph) one launch."""
    for replay_op, want in ((0.0, 7 * US), (2 * US, 7 * US + 30 * 2 * US)):
        with VirtualBackend(profile=prof(launch=4 * US, kernel=3 * US, event=1 * US, replay_op=replay_op)) as b:
            s, ev = b.new_stream("s"), b.new_event()
            t = b.now()
            with b.on_graph_replay():
                for _ in range(10):
                    s.launch(None, cost=0.0)
                    ev.record(s)
                    s.wait_event(ev)
            assert b.now() - t == pytest.approx(want)


def test_a_captured_step_replays_for_one_launch_of_host_time():
    from dbo import UBatchOrchestrator, dbo_yield, launch

    host = prof(launch=5 * US, kernel=5 * US, handoff=2 * US)

    def fn(x):
        for _ in range(4):
            launch(lambda t: t.add_(1), x, cost=1e-6)
            dbo_yield()
        return x

    with UBatchOrchestrator(2, backend="virtual", profile=host) as orch:
        inputs = [torch.zeros(4), torch.zeros(4)]
        t0 = orch.backend.now()
        orch.run(fn, inputs)
        eager = orch.backend.now() - t0
        step = orch.capture(fn, inputs)
        t0 = orch.backend.now()
        step.replay()
        replayed = orch.backend.now() - t0
        step.close()
    assert eager > 8 * 10 * US  # 8 launches, handoffs, thread start/join
    # one launch of host time, then the host waits for the device (8 kernels of 1 us)
    assert replayed == pytest.approx(10 * US + 8 * 1e-6, rel=0.05)


def test_stream_switches_and_events_cost_host_time():
    with VirtualBackend(profile=prof(stream_switch=3 * US, event=1 * US)) as b:
        s1, s2 = b.new_stream("s1"), b.new_stream("s2")
        t = b.now()
        prev = set_stream(s1)
        set_stream(s2)
        set_stream(s2)  # already current: no switch
        assert b.now() - t == pytest.approx(6 * US)
        set_stream(None)
        t = b.now()
        ev = b.new_event()
        ev.record(s1)
        s2.wait_event(ev)
        assert b.now() - t == pytest.approx(2 * US)
        set_stream(prev if prev is not s1 else None)


def test_host_events_and_unknown_events():
    with VirtualBackend(profile=prof(handoff=2 * US, thread_start=50 * US, thread_join=5 * US)) as b:
        t = b.now()
        b.host_event("thread_start")
        b.host_event("yield")
        b.host_event("thread_join")
        assert b.now() - t == pytest.approx(57 * US)
        with pytest.raises(ValueError, match="unknown event 'nap'"):
            b.host_event("nap")


def _step_time(p: DeviceProfile, yields: int) -> tuple[float, int]:
    with VirtualBackend(profile=p) as b:
        with dbo.UBatchOrchestrator(2, backend=b, handoff_timeout=HANDOFF_TIMEOUT) as orch:

            def body(_):
                for _ in range(yields):
                    dbo.launch(None, cost=0.0)
                    dbo.dbo_yield()

            t0 = b.now()
            orch.run(body, [0, 1])
            return b.now() - t0, orch.last_step_handoffs


@pytest.mark.timeout(slack(60))
def test_a_dbo_step_pays_handoffs_and_thread_start_and_join():
    base, n0 = _step_time(prof(), 5)
    costly, n1 = _step_time(prof(handoff=100 * US, thread_start=1e-3, thread_join=1e-4), 5)
    assert n0 == n1 and n1 >= 10
    assert costly - base == pytest.approx(n1 * 100 * US + 2 * 1e-3 + 2 * 1e-4, rel=1e-6)


@pytest.mark.timeout(slack(60))
def test_threaded_factor_applies_only_while_ubatch_threads_are_live():
    with VirtualBackend(profile=prof(launch=10 * US, threaded=2.0)) as b:
        s = b.new_stream("s")
        t = b.now()
        s.launch(None, cost=0.0)
        assert b.now() - t == pytest.approx(10 * US)
        b.host_event("thread_start")
        b.host_event("thread_start")
        t = b.now()
        s.launch(None, cost=0.0)
        assert b.now() - t == pytest.approx(20 * US)
        b.host_event("thread_join")
        t = b.now()
        s.launch(None, cost=0.0)
        assert b.now() - t == pytest.approx(10 * US)


def test_compute_under_comm_runs_slower_by_the_comm_sm_share():
    p = dataclasses.replace(prof(), comm_sm_share=0.5)
    with VirtualBackend(profile=p) as b:
        link, comp = b.new_stream("link"), b.new_stream("comp")
        link.launch(None, kind="comm", cost=1e-3)
        comp.launch(None, cost=1e-3)
        # half speed for the 1 ms under the comm kernel (0.5 ms of work), then 0.5 ms alone
        assert comp.ready_time == pytest.approx(1.5e-3)
        comp.launch(None, cost=1e-3)  # no comm left: full speed
        assert comp.ready_time == pytest.approx(2.5e-3)
    with VirtualBackend(profile=prof()) as b:  # share 0: free overlap
        link, comp = b.new_stream("link"), b.new_stream("comp")
        link.launch(None, kind="comm", cost=1e-3)
        comp.launch(None, cost=1e-3)
        assert comp.ready_time == pytest.approx(1e-3)


def test_a_side_stream_runs_beside_the_compute_engine_and_takes_its_bytes_share():
    with VirtualBackend(profile=prof()) as b:  # 1 TB/s
        side, comp = b.new_stream("aux", role="side"), b.new_stream("comp")
        side.launch(None, cost=Work(seconds=1e-3))  # no bytes: it holds no share, the two overlap whole
        comp.launch(None, cost=1e-3)
        assert comp.ready_time == pytest.approx(1e-3) and side.ready_time == pytest.approx(1e-3)
    with VirtualBackend(profile=prof()) as b:
        side, comp = b.new_stream("aux", role="side"), b.new_stream("comp")
        side.launch(None, cost=Work(seconds=1e-3, bytes=4e8))  # its bytes take 0.4 ms of the 1 ms: share 0.4
        assert b.bandwidth_share(Work(seconds=1e-3, bytes=4e8), (), 1e-3) == pytest.approx(0.4)
        comp.launch(None, cost=1e-3)
        # 0.6 of its rate for the 1 ms beside the side kernel (0.6 ms of work), then 0.4 ms alone: its bytes' time
        assert comp.ready_time == pytest.approx(1.4e-3)
        assert side.ready_time == pytest.approx(1e-3)  # the side kernel is not slowed
        side.launch(None, cost=Work(seconds=1e-3))
        side.launch(None, cost=Work(seconds=1e-3))
        assert side.ready_time == pytest.approx(3e-3)  # side kernels share one engine: in launch order


def test_side_and_comm_shares_add_up_while_both_run():
    p = dataclasses.replace(prof(), comm_sm_share=0.25)
    with VirtualBackend(profile=p) as b:
        link, side, comp = b.new_stream("link"), b.new_stream("aux", role="side"), b.new_stream("comp")
        link.launch(None, kind="comm", cost=1e-3)
        side.launch(None, cost=Work(seconds=1e-3, bytes=5e8))  # share 0.5
        comp.launch(None, cost=1e-3)
        # 0.25 of its rate for 1 ms (0.25 ms of work), then the 0.75 ms left alone
        assert comp.ready_time == pytest.approx(1.75e-3)
    with VirtualBackend(profile=prof()) as b:  # a side kernel whose bytes take all its time stalls the rest
        side, comp = b.new_stream("aux", role="side"), b.new_stream("comp")
        side.launch(None, cost=Work(seconds=1e-4, bytes=1e9))  # 1 ms of bytes: share 1
        comp.launch(None, cost=1e-3)
        assert comp.ready_time == pytest.approx(2e-3)


def test_per_dtype_rates_follow_the_kernels_tensors():
    p = DeviceProfile("d", 1e12, 1e15, 0.0, dtype_flops={"float32": 1e12, "bfloat16": 8e12})
    with VirtualBackend(profile=p) as b:
        w = Work(flops=1e9)
        f32 = b.kernel_seconds("compute", w, (torch.empty(2, dtype=torch.float32),))
        bf16 = b.kernel_seconds("compute", w, (torch.empty(2, dtype=torch.bfloat16),))
        assert f32 == pytest.approx(1e-3) and bf16 == pytest.approx(1e-3 / 8)
        ints = b.kernel_seconds("compute", w, (torch.empty(2, dtype=torch.int64),))
        assert ints == pytest.approx(1e-3)  # no floating tensor: the default rate
        assert kernel_time(Work(flops=1e9, dtype=torch.bfloat16), p) == pytest.approx(1e-3 / 8)


def test_host_spans_and_handoffs_line_up_with_the_host_clock():
    tr = Tracer()
    p = prof(launch=5 * US, handoff=2 * US, sync=1 * US)
    with VirtualBackend(profile=p, tracer=tr) as b:
        with dbo.UBatchOrchestrator(2, backend=b, handoff_timeout=HANDOFF_TIMEOUT) as orch:

            def body(_):
                dbo.launch(None, cost=1e-4)
                dbo.dbo_yield()
                dbo.launch(None, cost=1e-4)

            orch.run(body, [0, 1])
    assert tr.handoffs and tr.spans
    assert {s.track for s in tr.spans} >= {"ubatch 0", "ubatch 1"}
    for s in tr.spans:
        assert s.end >= s.start
    # each ubatch's first kernel starts no earlier than the host time its ubatch began running
    runs = sorted((s for s in tr.spans if s.name == "run"), key=lambda s: s.start)
    assert runs[0].end <= runs[1].start + 1e-12  # host spans of different ubatches never overlap
    assert any(s.name == "sync" for s in tr.spans)


def test_the_h200_profile_has_host_costs_and_the_cpu_profile_none():
    h = get_profile("h200").host
    assert h.launch > 0 and h.kernel > 0 and h.handoff > 0 and h.sync > 0 and h.ops
    assert get_profile("cpu").host.zero


def test_an_ops_device_correction_applies_to_its_kernels_only():
    p = prof(ops={"router": OpCost(device=40 * US, scale=3.0)})
    tr = Tracer()
    with VirtualBackend(profile=p, tracer=tr) as b:
        s = b.new_stream("s")
        s.launch(None, name="router L0 u0", cost=1e-3, op="router", layer=0)
        s.launch(None, name="shared L0 u0", cost=1e-3, op="shared", layer=0)
        s.synchronize()
        d = {r.op: r.duration for r in tr.kernels()}
        assert d["router"] == pytest.approx(40 * US + 3e-3)
        assert d["shared"] == pytest.approx(1e-3)
        assert b.kernel_seconds("compute", 1e-3, (), op="router") == pytest.approx(40 * US + 3e-3)


def test_a_marked_kernel_does_not_sync_a_host_whose_kernels_run_elsewhere():
    @syncs_host
    def reads_offsets(x):
        x.sum().item()

    with VirtualBackend(profile=prof(launch=1 * US, kernel_sync=False)) as b:
        s = b.new_stream("s")
        s.launch(None, cost=1e-3)
        s.launch(reads_offsets, torch.ones(3))
        assert b.now() == pytest.approx(2 * US)  # no wait for the first kernel


def test_a_wait_on_another_streams_event_adds_the_wake_up_latency():
    p = dataclasses.replace(prof(), event_latency=10 * US, event_latency_threaded=100 * US)
    tr = Tracer()
    with VirtualBackend(profile=p, tracer=tr) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        a.launch(None, name="first", cost=1e-3)
        ev = b.new_event()
        ev.record(a)
        c.wait_event(ev)
        c.launch(None, name="second", cost=1e-3)
        b.host_event("thread_start")
        b.host_event("thread_start")  # two ubatch threads live: the threaded latency adds
        a.launch(None, name="a2", cost=3e-3)
        ev.record(a)
        c.wait_event(ev)
        c.launch(None, name="third", cost=1e-3)
        b.host_event("thread_join")
        b.host_event("thread_join")
        b.synchronize()
        r = {k.name: k for k in tr.kernels()}
        assert r["second"].start == pytest.approx(1e-3 + 10 * US)
        assert r["third"].start == pytest.approx(r["a2"].end + 110 * US)
        ev2 = b.new_event()
        ev2.record(c)
        c.wait_event(ev2)  # its own stream's event: no latency
        c.launch(None, name="fourth", cost=1e-3)
        b.synchronize()
        assert {k.name: k for k in tr.kernels()}["fourth"].start == pytest.approx(r["third"].end)


def test_a_stream_moving_to_the_other_engine_pays_the_wake_up_latency():
    p = dataclasses.replace(prof(), event_latency=10 * US)
    tr = Tracer()
    with VirtualBackend(profile=p, tracer=tr) as b:
        s = b.new_stream("s")
        s.launch(None, name="c1", cost=1e-3)
        s.launch(None, name="c2", cost=1e-3)  # same engine: back to back
        s.launch(None, name="m1", kind="comm", cost=1e-3)  # the other engine: woken
        s.synchronize()
        r = {k.name: k for k in tr.kernels()}
        assert r["c2"].start == pytest.approx(r["c1"].end)
        assert r["m1"].start == pytest.approx(r["c2"].end + 10 * US)


def test_two_implementations_of_one_op_declare_two_ops_with_their_own_corrections():
    def impl_a():
        pass

    def impl_b():
        pass

    p = prof(ops={"experts": OpCost(scale=2.0), "experts_b": OpCost(scale=5.0)})
    tr = Tracer()
    with VirtualBackend(profile=p, tracer=tr) as b:
        s = b.new_stream("s")
        s.launch(impl_a, name="experts L0 u0", cost=1e-3, op="experts")
        s.launch(impl_b, name="experts L1 u0", cost=1e-3, op="experts_b")
        s.launch(None, name="experts L2 u0", cost=1e-3, op="experts")
        s.synchronize()
        d = {r.name: r.duration for r in tr.kernels()}
        assert d["experts L0 u0"] == pytest.approx(2e-3)
        assert d["experts L1 u0"] == pytest.approx(5e-3)
        assert d["experts L2 u0"] == pytest.approx(2e-3)


def test_the_ops_fixed_part_runs_slower_while_ubatch_threads_are_live():
    p = dataclasses.replace(prof(ops={"router": OpCost(device=40 * US, scale=2.0)}), fixed_threaded=3.0)
    with VirtualBackend(profile=p) as b:
        assert b.kernel_seconds("compute", 1e-3, (), op="router") == pytest.approx(40 * US + 2e-3)
        b.host_event("thread_start")
        b.host_event("thread_start")
        assert b.kernel_seconds("compute", 1e-3, (), op="router") == pytest.approx(120 * US + 2e-3)
        b.host_event("thread_join")
        b.host_event("thread_join")
    with pytest.raises(ValueError, match="fixed_threaded must be >= 1"):
        dataclasses.replace(prof(), fixed_threaded=0.5)


def test_a_kernel_waiting_for_its_engine_starts_the_engine_gap_after_the_last_one():
    p = dataclasses.replace(prof(), engine_gap=5 * US, engine_gap_threaded=20 * US)
    tr = Tracer()
    with VirtualBackend(profile=p, tracer=tr) as b:
        a, c = b.new_stream("a"), b.new_stream("c")
        a.launch(None, name="k1", cost=1e-3)
        a.launch(None, name="k2", cost=1e-3)  # same stream, waiting: the gap
        c.launch(None, name="k3", cost=1e-3)  # another stream, same engine, waiting: the gap too
        a.launch(None, name="m1", kind="comm", cost=1e-4)  # the comm engine is idle: no gap
        b.synchronize()
        late_at = b.now() + 10e-3
        b.host_event("thread_start")
        b.host_event("thread_start")  # two ubatch threads live: the threaded gap adds
        a.launch(None, name="k4", cost=1e-3)
        a.launch(None, name="k5", cost=1e-3)
        b.host_event("thread_join")
        b.host_event("thread_join")
        b.advance(late_at - b.now())  # a kernel launched long after the engine went idle: no gap
        c.launch(None, name="k6", cost=1e-3)
        b.synchronize()
        r = {k.name: k for k in tr.kernels()}
        assert r["k2"].start == pytest.approx(r["k1"].end + 5 * US)
        assert r["k3"].start == pytest.approx(r["k2"].end + 5 * US)
        assert r["m1"].start == pytest.approx(r["k2"].end)  # after k2 on its stream; its engine was free
        assert r["k5"].start == pytest.approx(r["k4"].end + 25 * US)
        assert r["k6"].start == pytest.approx(late_at)
    with pytest.raises(ValueError, match="engine_gap"):
        dataclasses.replace(prof(), engine_gap=-1e-6)


def test_engine_gaps_survive_the_profile_json():
    p = dataclasses.replace(prof(), engine_gap=5 * US, engine_gap_threaded=20 * US)
    q = DeviceProfile.from_json(p.to_json())
    assert (q.engine_gap, q.engine_gap_threaded) == (5 * US, 20 * US)
