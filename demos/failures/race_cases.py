"""Stream-order races that dbo.races finds on every CPU backend, whether or not they bite in the run.

Each scenario runs one small DBO step twice per backend (virtual, inline, threads): with the bug,
and fixed. It prints what the detector reports and whether the numbers came out right in that
run (on virtual and inline nothing runs concurrently, so the bug never shows in the data there;
on threads it may or may not). The result maps each backend to its race findings.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import dbo
from dbo import races
from demos.failures.text import STEP_BOUNDS, para, say, wrapped

BACKENDS = ("virtual", "inline", "threads")
N = 4096


def _fill(buf: torch.Tensor, value: float) -> None:
    buf.fill_(value)


def _sum_into(buf: torch.Tensor, out: torch.Tensor) -> None:
    out.copy_(buf.sum().reshape(1))


def _run(backend: str, body: Callable[[int], None], outs: list[torch.Tensor], **orch: Any) -> tuple[list, list[float]]:
    with races.use_races() as found:
        with dbo.UBatchOrchestrator(2, backend=backend, **STEP_BOUNDS, **orch) as o:
            o.run(body, [0, 1])
            o.backend.synchronize()  # the link stream is not one of the step's streams: wait for it too
        return found(), [float(x[0]) for x in outs]


def _report(title: str, results: dict[str, tuple[list, list[float]]], expected: list[float]) -> None:
    say(f"  {title}")
    for backend, (found, got) in results.items():
        ok = "right" if got == expected else f"WRONG {got}"
        say(f"    {backend:<8} {len(found)} race(s); numbers {ok}")
    first = next((f for f, _ in results.values() if f), [])
    for r in first[:1]:
        wrapped(f"report: {r}", 4)


def _both(
    make: Callable[[bool], tuple[Callable[[int], None], list[torch.Tensor], dict]], expected: list[float], what: str
) -> dict:
    out: dict[str, Any] = {"expected": expected}
    for fixed in (False, True):
        results = {}
        for backend in BACKENDS:
            body, outs, orch = make(fixed)
            results[backend] = _run(backend, body, outs, **orch)
        _report(f"{'fixed' if fixed else what}:", results, expected)
        out["fixed" if fixed else "bug"] = {b: r[0] for b, r in results.items()}
        out[("fixed" if fixed else "bug") + "_values"] = {b: r[1] for b, r in results.items()}
    say()
    return out


# ---------------------------------------------------------------------- scenarios


def scenario_compute_streams() -> dict:
    """Two compute streams of one ubatch: a producer on one, a consumer on the other, no wait."""

    def make(fixed: bool):
        bufs = [torch.zeros(N) for _ in range(2)]
        outs = [torch.full((1,), -1.0) for _ in range(2)]

        def body(u: int) -> None:
            backend = dbo.current_stream().backend
            side = backend.stream(f"side{u}")  # a second compute stream of this ubatch
            side.launch(None, kind="compute", cost=2e-3)  # busy: the producer runs late
            side.launch(_fill, bufs[u], float(u + 1), name="produce")
            if fixed:
                dbo.current_stream().wait_stream(side)
            dbo.launch(_sum_into, bufs[u], outs[u], name="consume")
            dbo.dbo_yield()

        return body, outs, {}

    say("Each ubatch fills a buffer on a second compute stream and sums it on its main compute stream.")
    return _both(make, [float(N * (u + 1)) for u in range(2)], "no wait between the two compute streams")


def scenario_recv_hook() -> dict:
    """A recv hook that launches the receive without waiting for the transfer's arrival event."""

    def make(fixed: bool):
        wire = [torch.zeros(N) for _ in range(2)]
        recv = [torch.zeros(N) for _ in range(2)]
        outs = [torch.full((1,), -1.0) for _ in range(2)]

        def body(u: int) -> None:
            dbo.dbo_maybe_run_recv_hook()  # the sibling's receive, if parked here
            stream = dbo.current_stream()
            b = stream.backend
            link = b.stream("link")  # one link queue for both ubatches
            sent = b.new_event()
            sent.record(stream)
            link.wait_event(sent)
            link.launch(_fill, wire[u], float(u + 1), name="transfer", kind="comm", cost=5e-3)  # lands at its end
            arrived = b.new_event()
            arrived.record(link)

            def hook() -> None:
                if fixed:
                    stream.wait_event(arrived)
                stream.launch(lambda w, r: r.copy_(w), wire[u], recv[u], name="receive")

            dbo.dbo_register_recv_hook(hook)  # the sibling runs it at its next hook site
            dbo.dbo_yield()
            dbo.dbo_maybe_run_recv_hook()  # the sibling's receive
            dbo.launch(_sum_into, recv[u], outs[u], name="consume")  # after our own receive (same stream)
            dbo.dbo_yield()

        return body, outs, {}

    say("Each ubatch sends a buffer over a shared link stream and parks the receive as a recv hook,")
    say("which the sibling runs. The hook launches the receive on the sender's compute stream.")
    return _both(make, [float(N * (u + 1)) for u in range(2)], "the hook does not wait for the arrival event")


def scenario_event_after_yield() -> dict:
    """An event recorded after the yield: the sibling's wait comes first and sees an older record."""

    def make(fixed: bool):
        shared = torch.zeros(N)
        done: dict[str, Any] = {"ev": None}
        out = torch.full((1,), -1.0)

        def body(u: int) -> None:
            b = dbo.current_stream().backend
            if u == 0:
                ev = done["ev"] = b.new_event()
                dbo.launch(None, kind="compute", cost=2e-3)
                dbo.launch(_fill, shared, 3.0, name="produce")
                if fixed:
                    ev.record()  # before the yield: covers the producer when the sibling waits
                dbo.dbo_yield()
                if not fixed:
                    ev.record()  # after the yield: the sibling has already waited (vllm#38451)
            else:
                dbo.current_stream().wait_event(done["ev"])  # a never-recorded event orders nothing
                dbo.launch(_sum_into, shared, out, name="consume")
                dbo.dbo_yield()
            dbo.dbo_yield()

        return body, [out], {}

    say("Ubatch 0 produces a buffer and records an event for ubatch 1, which waits on it after the")
    say("turn passes and then reads the buffer on its own compute stream.")
    found = _both(make, [float(N * 3)], "the event recorded after the yield")
    para(
        "What happens",
        "Recorded after the yield, the event is recorded once the sibling has already issued its wait, and a "
        "wait on an event that was never recorded (or recorded earlier) orders nothing: the consumer's stream "
        "runs ahead of the producer. With vLLM's shared streams the same late record does not race but covers "
        "the sibling's work too and serializes the streams (vllm#38451); either way the record belongs before "
        "the yield. dbo.races reports the pair on every backend, whether or not the sum came out wrong.",
    )
    return found


def finding_names(found: list) -> list[tuple[str, str]]:
    """(first kernel, second kernel) names of each finding, for the tests."""
    return [(r.first[0], r.second[0]) for r in found]


__all__ = ["BACKENDS", "scenario_compute_streams", "scenario_recv_hook", "scenario_event_after_yield", "finding_names"]
