"""Host micro-benchmarks for calibration: what the runtime's own operations cost the host thread.

``measure_host(backend, reps)`` returns seconds per: ``kernel`` (one launch of a tiny kernel
through a dbo stream), ``stream_switch`` (a stream becoming current), ``event`` (an event record or
a ``wait_event``), ``sync`` (synchronizing an idle stream), ``handoff`` (one turn handoff between
two ubatch threads), ``thread_start`` / ``thread_join`` (per ubatch thread per step),
``event_latency`` (from a kernel's end to the start of a waiting kernel on another engine's
stream), the factor ``threaded`` (a launch from a two-ubatch step against one from a single thread), and
``idle_hold`` (how long host code that does not block keeps an idle device from starting a kernel
launched on it), and ``replay_op`` (each op a replay of a captured step re-issues; 0 on cuda, where
the replay is one CUDA-graph launch). Each is a median of a few batches of ``reps`` calls, measured through the runtime
itself on ``backend``.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from typing import Any, Callable

import torch

import dbo
from dbo.streams.current import launch, set_stream
from dbo.trace import Tracer

__all__ = ["measure_host"]


def _per_call(fn: Callable[[], Any], n: int, batches: int = 7) -> float:
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n)
    return statistics.median(out)


def _tiny(t: torch.Tensor) -> None:
    t.add_(1)


def _launches(x: torch.Tensor, n: int) -> float:
    """Seconds per launch of a tiny kernel on the calling thread's current stream."""
    t0 = time.perf_counter()
    for _ in range(n):
        launch(_tiny, x, name="tiny")
    return (time.perf_counter() - t0) / n


def _replay_op(b: Any, x: torch.Tensor, n: int) -> float:
    """Host seconds per op a replay of a captured step re-issues (``HostCosts.replay_op``): a
    one-ubatch step of ``n`` tiny launches, captured once; the median over 7 replays of the time to
    issue one (no sync), per op. On threads a replay re-issues each recorded op from Python."""

    def body(_: Any) -> None:
        for _ in range(n):
            launch(_tiny, x, name="tiny")

    per = []
    with dbo.UBatchOrchestrator(1, backend=b) as o:
        step = o.capture(body, [None])
        try:
            step.replay()
            for _ in range(7):
                t0 = time.perf_counter()
                step.replay(sync=False)
                per.append((time.perf_counter() - t0) / step.num_ops)
                b.synchronize()
        finally:
            step.close()
    return statistics.median(per)


def _step_seconds(orch: dbo.UBatchOrchestrator, fn: Callable[[Any], Any], batches: int = 5) -> float:
    """The median of ``batches`` steps."""
    out = []
    for _ in range(batches):
        t0 = time.perf_counter()
        orch.run(fn, [None] * orch.num_ubatches)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _event_latency(b: Any, x: torch.Tensor, n: int) -> float:
    """Median seconds from the end of a 0.2 ms comm kernel to the start of a compute kernel on
    another stream that waits for it (queued before the comm kernel ends): the wake-up across
    engines."""
    comm, comp = b.new_stream("cal-comm"), b.new_stream("cal-comp")
    tr = Tracer()
    b.tracer = tr
    try:
        for i in range(n):
            comm.launch(None, name=f"a{i}", kind="comm", cost=2e-4)
            ev = b.new_event()
            ev.record(comm)
            comp.wait_event(ev)
            comp.launch(_tiny, x, name=f"b{i}", kind="compute")
            comp.synchronize()
        b.synchronize()
    finally:
        b.tracer = None
    recs = {r.name: r for r in tr.kernels()}
    lat = [recs[f"b{i}"].start - recs[f"a{i}"].end for i in range(n) if f"a{i}" in recs and f"b{i}" in recs]
    return max(0.0, statistics.median(lat)) if lat else 0.0


def _idle_hold(b: Any, x: torch.Tensor, n: int = 7) -> float:
    """Median seconds by which host code that runs without blocking delays the start of a kernel
    launched onto an idle device, the host running for twice the interpreter's switch interval
    (at most 20 ms). On the threads backend the executor needs the GIL. Other backends: 0 (a GPU
    runs what it was given whatever the host thread does)."""
    if b.name != "threads":
        return 0.0
    s = b.new_stream("cal-hold")
    spin = min(0.02, 2 * sys.getswitchinterval())
    tr = Tracer()
    out = []
    try:
        for i in range(n):
            s.synchronize()
            time.sleep(0.001)  # the executors go idle
            b.tracer = tr
            t0 = time.perf_counter()
            s.launch(_tiny, x, name=f"h{i}", kind="compute")
            b.tracer = None
            while time.perf_counter() - t0 < spin:  # host code that never blocks
                pass
            s.synchronize()
            rec = next((r for r in tr.kernels() if r.name == f"h{i}"), None)
            if rec is not None:  # threads: kernel records are on the perf_counter clock
                out.append(max(0.0, rec.start - t0))
    finally:
        b.tracer = None
        b.synchronize()
    return statistics.median(out) if out else 0.0


def _bare_thread_split(n: int = 50) -> float:
    """Share of a bare thread's start + join spent in ``start()``."""
    start, join = [], []
    for _ in range(n):
        th = threading.Thread(target=lambda: None, daemon=True)
        t0 = time.perf_counter()
        th.start()
        t1 = time.perf_counter()
        time.sleep(0)
        th.join(5)
        start.append(t1 - t0)
        join.append(time.perf_counter() - t1)
    s, j = statistics.median(start), statistics.median(join)
    return s / (s + j) if s + j > 0 else 0.5


def _threaded(b: Any, o2: dbo.UBatchOrchestrator, x: torch.Tensor, n: int, rounds: int = 9) -> float:
    """``threaded``: seconds per launch from inside a two-ubatch step over seconds per launch from
    one thread, the two measured in turn with the same batch of ``n`` launches (median of the
    rounds' ratios; at least 1). In turn, because measured apart (the single-thread figure first,
    from longer batches) the factor follows the machine's load between the two measurements
    (docs/fidelity.md, "Calibrating", has the figures)."""
    s = b.new_stream("cal-threaded")
    prev = set_stream(s)
    per: list[float] = []

    def launches_then_yield(_: Any) -> None:  # onto the ubatch's own stream
        per.append(_launches(x, n))
        dbo.dbo_yield()

    ratios = []
    try:
        for _ in range(rounds):
            single = _launches(x, n)
            s.synchronize()
            del per[:]
            o2.run(launches_then_yield, [None, None])  # synchronizes its streams
            if single > 0 and per:
                ratios.append(statistics.median(per) / single)
    finally:
        set_stream(prev)
    return max(1.0, statistics.median(ratios)) if ratios else 1.0


def measure_host(backend: str, reps: int = 500, progress: Callable[[str], None] | None = None) -> dict[str, float]:
    """The host constants of ``backend`` ("threads" or "cuda"), seconds (``threaded``: a factor)."""
    dev = "cuda" if backend == "cuda" else "cpu"
    # pinned as the model's single-process runs are (Runner), so that both see the same machine
    b = dbo.get_backend(backend, **({"pin_engines": True} if backend == "threads" else {}))
    x = torch.zeros(1, device=dev)
    out: dict[str, float] = {}
    prev = None
    try:
        s1, s2 = b.new_stream("cal-a"), b.new_stream("cal-b")
        if progress:
            progress("host: launch, stream switch, event, sync")
        prev = set_stream(s1)
        _launches(x, reps)  # warm
        s1.synchronize()
        per = []
        for _ in range(7):
            per.append(_launches(x, reps))
            s1.synchronize()
        out["kernel"] = statistics.median(per)

        def switch() -> None:
            set_stream(s2)
            set_stream(s1)

        out["stream_switch"] = _per_call(switch, reps) / 2
        ev = b.new_event()

        def record_wait() -> None:
            ev.record(s1)
            s2.wait_event(ev)

        out["event"] = _per_call(record_wait, reps) / 2
        s1.synchronize()
        s2.synchronize()
        out["sync"] = _per_call(s1.synchronize, reps)
        set_stream(prev)
        prev = None
        out["event_latency"] = _event_latency(b, x, max(30, reps // 5))
        out["idle_hold"] = _idle_hold(b, x)
        out["replay_op"] = 0.0 if backend == "cuda" else _replay_op(b, x, max(50, reps // 2))  # cuda: one graph launch

        if progress:
            progress("host: handoffs, threads")
        n_yield = max(10, reps // 10)

        loops: list[float] = []

        def yields(_: Any) -> None:
            t0 = time.perf_counter()
            for _ in range(n_yield):
                dbo.dbo_yield()
            if dbo.dbo_current_ubatch_id() == 0:
                loops.append(time.perf_counter() - t0)

        with dbo.UBatchOrchestrator(2, backend=b) as o2:
            noop = lambda _: None  # noqa: E731
            _step_seconds(o2, noop, 2)
            # a two-ubatch step that does nothing: its threads' start, barrier and join (the median:
            # what a step typically pays on this machine as loaded now)
            per_thread = _step_seconds(o2, noop, 21) / 2
            _step_seconds(o2, yields, 7)
            out["handoff"] = statistics.median(loops) / (2 * n_yield)  # each yield: a handoff there and back
            share = _bare_thread_split()
            out["thread_start"] = per_thread * share
            out["thread_join"] = per_thread * (1 - share)

            out["threaded"] = _threaded(b, o2, x, max(10, reps // 4))
    finally:
        if prev is not None:
            set_stream(prev)
        b.synchronize()
        b.close()
    return out
