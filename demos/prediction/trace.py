"""``demos.predict --trace PATH``: one point's steps as a Perfetto (Chrome JSON) trace, with the host
(each ubatch thread's spans), compute and comm tracks and the handoff flows between the ubatches.

The point is ``--trace-tokens`` (default: where DBO starts to pay, else the largest swept count), in
eager mode: a graph replay runs without ubatch threads, so it has no handoffs to show.
"""

from __future__ import annotations

from typing import Any, Sequence

from demos.vocabulary import Mode
from demos.zoo.run import ZooRun, merged_trace

__all__ = ["trace_tokens", "write_trace"]


def trace_tokens(rep: dict[str, Any], tokens: Sequence[int], chosen: int | None) -> int:
    """The token count the trace shows (module docstring)."""
    if chosen is not None:
        return chosen
    for c in rep["crossover"].values():
        if c is not None:
            return c["at"]
    return max(tokens)


def write_trace(rep: dict[str, Any], sweep: Any, results: Sequence[Any], path: str, chosen: int | None) -> str:
    """Run the chosen point's no-DBO and DBO steps eagerly with a tracer and write them to ``path``."""
    t = trace_tokens(rep, sweep.tokens, chosen)
    best = next(iter(rep["best"].values()), {"ubatches": sweep.ubatches[0], "comm_sms": sweep.comm_sms[0]})
    w = sweep.workload(t, best["ubatches"], best["comm_sms"])
    with ZooRun(w, mode=Mode.EAGER, profile=sweep.profile(w)) as r:
        no = r.step(False)
        shift = no.seconds * 1.05  # the DBO step drawn after the no-DBO one
        yes = r.step(True)
    parts = []
    for step, dt in ((no, 0.0), (yes, shift)):
        t0 = min((x.start for x in step.tracer.records), default=0.0)
        parts.append((step.tracer, dt - t0))
    out = merged_trace(parts)
    out.to_chrome(path)
    return path
