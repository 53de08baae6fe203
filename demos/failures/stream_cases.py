"""Scenarios of the streams and the turn protocol: a missing wait, a late event, a failure while parked."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import torch

import dbo
from dbo import races, registry
from dbo.trace import KernelRecord, Tracer, overlap_seconds
from demos.failures.text import F32, STEP_BOUNDS, findings_line, para, say, wrapped
from workspace import WorkspaceManager, sanitizer

# ---------------------------------------------------------------------- streams


def scenario_missing_wait() -> dict:
    n = 4096
    transfer_s = 0.05
    m = WorkspaceManager("cpu", 2)

    def make_body(sync: bool) -> Callable[[Any], None]:
        def recv(buf: torch.Tensor, value: float) -> None:
            buf.fill_(value)

        def consume(buf: torch.Tensor, out: torch.Tensor) -> None:
            out.copy_(buf.sum().reshape(1))

        def body(_: Any) -> None:
            u = dbo.dbo_current_ubatch_id()
            buf, out = m.get_simultaneous(((n,), F32), ((1,), F32))
            buf.zero_()
            out.fill_(-1.0)
            dbo.dbo_switch_to_comm()
            dbo.launch(recv, buf, float(u + 1), name="recv", kind="comm", cost=transfer_s)  # data lands at the end
            if sync:
                dbo.dbo_switch_to_compute_sync()  # record comm-done, switch, compute waits for it
            else:
                dbo.dbo_switch_to_compute()  # the bug: switch without the event
            dbo.launch(consume, buf, out, name="consume", kind="compute")
            dbo.dbo_yield()

        return body

    def run(sync: bool) -> tuple[list[float], list[sanitizer.Finding], list]:
        with sanitizer.use_sanitizer("collect") as found, races.use_races() as raced:
            with dbo.UBatchOrchestrator(2, backend="threads", **STEP_BOUNDS) as orch:
                orch.run(sanitizer.wrap(make_body(sync)), [None, None])
            got = []
            for u in range(2):
                with registry.use_ubatch(u):
                    _, out = m.get_simultaneous(((n,), F32), ((1,), F32))
                    got.append(float(out[0]))
            return got, found(), raced()

    wrong, wrong_findings, wrong_races = run(False)
    right, _, right_races = run(True)
    expected = [float(n * (u + 1)) for u in range(2)]
    say("Each ubatch receives 4096 floats on its comm stream (a 50 ms transfer whose data lands at its end),")
    say("switches to its compute stream and sums them there. Threads backend: a compute and a comm executor thread.")
    say()
    say(f"  dbo_switch_to_compute()       (no event): sums {wrong}  expected {expected}")
    say(f"  dbo_switch_to_compute_sync()  (event)   : sums {right}")
    wrapped(
        f"sanitizer: {findings_line(wrong_findings)} (kernels run on the backend's executor threads, and it checks "
        "slot ownership and view lifetimes, not the ordering between streams)",
        2,
    )
    say("  policies: all the same (no growth is involved)")
    wrapped(f"dbo.races: {len(wrong_races)} stream race(s) without the event, {len(right_races)} with it", 2)
    for r in wrong_races[:1]:
        wrapped(f"report: {r}", 4)
    say()
    para(
        "What happens",
        "A stream switch without an event orders nothing: the compute stream's sum starts at once, while the "
        "transfer is still in flight, and reads the zeros that were there before (on a GPU: whatever the "
        "buffer held, sometimes). dbo_switch_to_compute_sync records comm-done on the comm stream and makes "
        "the compute stream wait for it. This is a stream-ordering race, not an isolation one: the bytes are "
        "the ubatch's own and live, so the workspace sanitizer is silent by design. The threads backend makes "
        "the race real on a CPU; dbo.races, a vector-clock checker fed with the streams' record/wait events, "
        "flags it on every backend whether or not it bites.",
    )
    return {
        "wrong": wrong,
        "right": right,
        "expected": expected,
        "findings": wrong_findings,
        "races": wrong_races,
        "races_fixed": right_races,
    }


def _timeline(kernels: Sequence[KernelRecord], width: int = 72) -> list[str]:
    """One text row per stream: a letter per kernel (upper case: ubatch 0, lower case: another
    ubatch, '?': no ubatch), ubatch taken from the kernel record."""
    end = max(k.end for k in kernels)
    streams = sorted({k.stream for k in kernels}, key=lambda s: (not s.startswith("compute"), s))
    rows = []
    for s in streams:
        line = []
        for c in range(width):
            t = (c + 0.5) * end / width
            ch = "."
            for k in kernels:
                if k.stream == s and k.start <= t < k.end:
                    if k.ubatch is None:  # launched outside any ubatch
                        ch = "?"
                    else:
                        ch = k.name[0].upper() if k.ubatch == 0 else k.name[0].lower()
            line.append(ch)
        rows.append(f"  {s:<8}|{''.join(line)}|")
    rows.append(f"  {'':<8} 0{'':<{width - 10}}{end * 1e3:6.2f} ms")
    return rows


def scenario_late_event(layers: int = 4) -> dict:
    tc, tm = 1e-3, 1e-3

    def body_for(late: bool) -> Callable[[Any], None]:
        def body(_: Any) -> None:
            ctx = registry.current_context()
            for _layer in range(layers):
                dbo.launch(None, name="attn", kind="compute", cost=tc)
                if late:  # the bug: yield first, then capture the event
                    dbo.dbo_yield()
                    ctx.compute_done.record(ctx.compute_stream)  # now also covers the sibling's attention
                    dbo.set_stream(ctx.comm_stream)
                    ctx.comm_stream.wait_event(ctx.compute_done)
                else:
                    dbo.dbo_yield_and_switch_from_compute_to_comm()  # record, yield, switch, wait
                dbo.launch(None, name="dispatch", kind="comm", cost=tm)
                dbo.dbo_yield_and_switch_from_comm_to_compute()
                dbo.launch(None, name="experts", kind="compute", cost=tc)

        return body

    out: dict[str, Any] = {}
    for late in (False, True):
        tracer = Tracer()
        with dbo.UBatchOrchestrator(2, backend="virtual", stream_layout="shared", tracer=tracer, **STEP_BOUNDS) as orch:
            orch.run(body_for(late), [None, None])
            kernels = tracer.kernels()
        step = max(k.end for k in kernels) - min(k.start for k in kernels)
        comm = sum(k.duration for k in kernels if k.kind == "comm")
        out["late" if late else "right"] = {
            "step_s": step,
            "overlap_s": overlap_seconds(kernels),
            "comm_s": comm,
            "timeline": _timeline(kernels),
        }
    say(f"{layers} layers per ubatch: attention (1 ms compute), dispatch (1 ms comm), experts (1 ms compute);")
    say("shared compute and comm streams, as vLLM. Virtual backend (deterministic). A/a attention, D/d")
    say("dispatch, E/e experts; upper case ubatch 0, lower case ubatch 1.")
    for key, label in (
        ("right", "dbo_yield_and_switch_from_compute_to_comm (record, yield, switch, wait)"),
        ("late", "by hand, wrong: yield, then record, switch, wait"),
    ):
        r = out[key]
        say()
        say(f"  {label}")
        for line in r["timeline"]:
            say(line)
        say(
            f"  step {r['step_s'] * 1e3:.2f} ms, comm hidden under compute {r['overlap_s'] * 1e3:.2f} of "
            f"{r['comm_s'] * 1e3:.2f} ms"
        )
    say()
    say("  sanitizer: not involved (no workspace access); policies: not involved")
    say()
    para(
        "What happens",
        "The compute-done event must be recorded before the yield: it then covers exactly this ubatch's "
        "attention. Recorded after the yield, it also covers the attention the sibling enqueued on the shared "
        "compute stream meanwhile, so each dispatch waits for the sibling's compute and no longer runs under "
        "it: the overlap is lost and the step gets longer (vllm#38451, DeepEP's 'previous event' captured "
        "after the yield). Nothing fails and the outputs are right, which is why only a timeline shows it.",
    )
    return out


# ---------------------------------------------------------------------- failure while parked


class _WouldHang(Exception):
    pass


def _reference_model(patience: float) -> dict:
    """A model of vLLM V1's handoff: a ring of threading.Events, no abort, untimed waits (bounded here
    by ``patience`` so that the demonstration cannot hang), a failure goes to the thread's excepthook."""
    n = 2
    events = [threading.Event() for _ in range(n)]
    barrier = threading.Barrier(n + 1, timeout=5.0)
    log: list[str] = []
    lost: list[BaseException] = []
    release = threading.Event()

    def wait_turn(i: int, where: str) -> None:
        if not events[i].wait(patience):  # the reference waits forever here
            log.append(f"ubatch {i} still parked at {where} after {patience:.1f} s: the reference would hang")
            release.wait(5.0)
            raise _WouldHang(where)
        events[i].clear()

    def yield_(i: int, where: str) -> None:
        events[(i + 1) % n].set()
        wait_turn(i, where)

    def main(i: int) -> None:
        try:
            barrier.wait()
            wait_turn(i, "its start")
            try:
                for k in range(1, 4):  # three layers, one yield each
                    yield_(i, f"yield {k}")
                    if i == 1:
                        raise RuntimeError("ubatch 1 failed after its first yield")
            finally:
                events[(i + 1) % n].set()  # __exit__ signals the next ubatch, exception or not
        except _WouldHang:
            pass
        except BaseException as exc:  # V1: goes to threading.excepthook, never reaches the main thread
            lost.append(exc)
            log.append(f"ubatch {i} raised {type(exc).__name__}: {exc} (lost in threading.excepthook)")

    threads = [threading.Thread(target=main, args=(i,), name=f"ref-ubatch-{i}", daemon=True) for i in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    barrier.wait()
    events[0].set()
    joined = True
    for t in threads:
        t.join(patience + 0.5)  # the reference joins with no timeout
        joined = joined and not t.is_alive()
    hung = not joined or any("would hang" in line for line in log)
    release.set()
    for t in threads:
        t.join(5.0)
    return {
        "hung": hung,
        "log": log,
        "main_thread_saw": None,
        "lost": lost,
        "seconds": time.perf_counter() - t0,
        "threads_left": [t.name for t in threads if t.is_alive()],
    }


def scenario_parked_failure(patience: float = 0.3) -> dict:
    def body(_: Any) -> None:
        u = dbo.dbo_current_ubatch_id()
        for _layer in range(3):  # three layers, one yield each
            dbo.dbo_yield()  # ubatch 0 parks here while ubatch 1 runs
            if u == 1:
                raise RuntimeError("ubatch 1 failed after its first yield")

    t0 = time.perf_counter()
    err: dbo.UBatchFailed | None = None
    with dbo.UBatchOrchestrator(2, backend="threads", **STEP_BOUNDS) as orch:
        try:
            orch.run(body, [None, None])
        except dbo.UBatchFailed as exc:
            err = exc
    ours_s = time.perf_counter() - t0
    left = [t.name for t in threading.enumerate() if t.name.startswith("dbo-ubatch")]
    ref = _reference_model(patience)
    say("Ubatch 1 raises after its first yield, while ubatch 0 is parked waiting for the turn.")
    say()
    cause = type(err.__cause__).__name__ if err is not None else None
    say(f"  ours:      {type(err).__name__} after {ours_s * 1e3:.1f} ms: {err}")
    say(
        f"             .ubatch_id={err.ubatch_id if err is not None else None}, __cause__ {cause}; registry empty: "
        f"{not registry.snapshot()}, ubatch threads left: {left or 'none'}"
    )
    say(f"  reference (a model of V1's event ring, waits bounded here at {patience:.1f} s instead of forever):")
    for line in ref["log"]:
        say(f"             {line}")
    say("             the main thread's join would block forever; it never sees the exception")
    say("  sanitizer: not involved; policies: not involved")
    say()
    para(
        "What happens",
        "In the reference the failing thread still signals its successor once on exit and its exception goes "
        "to threading.excepthook. Ubatch 0 resumes, runs to its next yield, passes the turn to a dead thread "
        "and waits for a turn that never comes; the untimed join hangs the step (#55586 was closed unmerged). "
        "Here the first failure aborts the step: it is recorded, every turn lock is released so every waiter "
        "wakes at once and unwinds with UBatchAborted, and run() raises UBatchFailed naming ubatch 1 with the "
        "original exception as __cause__, in milliseconds, with no thread or registry entry left behind.",
    )
    return {"error": err, "seconds": ours_s, "threads_left": left, "reference": ref}
