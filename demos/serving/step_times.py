"""The predictor's time of a serving step: its real mix on every rank, priced from a grid of predicted
points (``StepPricer``).

A step of a data-parallel deployment waits for its busiest rank (the all-to-all of every MoE layer joins
the ranks), so it costs what the predictor's step costs at that rank's batch (``demos.zoo.run.ZooRun``: the
busiest rank's step is what the predictor prices, every rank waiting for it). Per step:

* **decode only** (every busy rank decodes one token per request): the decode step of the busiest
  rank's requests (the count vLLM padded every rank to where it pads) at their mean context, replayed
  from a CUDA graph where the engine replays one (``SplitDecision.graph``), else eager;
* **with prefill chunks** (a prefill step, or vLLM's mixed step): the prefill step of the busiest rank's
  tokens, eager, in requests as long as its chunks end (a chunk's tokens and the tokens cached before
  it), at most the step's tokens: a chunk after cached tokens is priced as a prompt of the step's
  tokens, its attention to the cached ones not charged, and a decode token in a mixed step as one more
  prompt token, its attention over its whole context not charged (two stated approximations, which
  under-price long-context chunked prefill);
* split (``SplitDecision.split``): the DBO step of the same batch; single-batch overlap where the run
  asks for it and it applies (the low-latency schedule, EP > 1).

The grid: tokens at 1, 2, 3, 4, 6, 8, 12, ... (steps of x1.5 or x1.33, rounded), contexts at powers of
two from 64; a step between grid points is interpolated linearly in tokens and in context (attention is
linear in context, the rest of the step does not depend on it). Each grid point runs once, on first use
(``ZooRun`` on the virtual backend, about 0.2-0.4 s), and is kept for the pricer's life.
``interpolation_error(samples)`` measures the error of the interpolation against direct runs (each run
once for the pricer's life too: a run that shares the pricer does not repeat them).
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from demos.serving.batch import RankBatch, SplitDecision
from demos.vocabulary import Mode, Phase, Schedule
from demos.zoo.kernel_times import kernel_times
from demos.zoo.memory import kv_bytes_per_token, memory_estimate, state_bytes_per_request
from demos.zoo.overlap_costs import step_profile
from demos.zoo.run import ZooRun
from demos.zoo.workload import Workload

__all__ = ["GRID_TOKENS", "Priced", "StepPricer", "kv_capacity_tokens", "token_grid"]


def token_grid(most: int) -> tuple[int, ...]:
    """1, 2, 3, 4, 6, 8, 12, 16, 24, ... up to the first value >= ``most``."""
    out, k = [], 0
    while True:
        v = (1 << (k // 2)) * (3 if k % 2 else 2) // 2 if k else 1
        if not out or v > out[-1]:
            out.append(v)
        if v >= most:
            return tuple(out)
        k += 1


GRID_TOKENS = token_grid(1 << 17)


@dataclass(frozen=True)
class Priced:
    """One grid point's step seconds: without overlap, split (DBO), with single-batch overlap (None
    where it does not apply)."""

    none: float
    dbo: float | None
    sbo: float | None


LL_DISPATCH_TOKENS = 256
"""Tokens per rank DeepEP's low-latency buffers are sized for: vLLM 0.34.0 runs the batched MoE in chunks
of ``SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP`` = 256 tokens per DP rank
(``FusedMoEConfig.max_num_tokens``), so its buffers hold 256, not a whole step's tokens."""


def kv_capacity_tokens(w: Workload, step_tokens: int, max_seqs: int = 0) -> int:
    """The KV cache one rank holds, in tokens: the usable HBM less the weights, a step of ``step_tokens``
    tokens' activations, the all-to-all buffers (the low-latency ones for ``LL_DISPATCH_TOKENS``;
    ``demos.zoo.memory``; no workspace measured) and, for a hybrid model, the linear-attention states of
    ``max_seqs`` requests (the engines set a state pool aside for their running requests:
    ``demos.zoo.memory.state_bytes_per_request``), over the bytes one token's cache takes."""
    m = memory_estimate(w.with_(tokens=max(step_tokens, w.ubatches), context=1))
    comm = m.comm_buffers
    if w.schedule == Schedule.LL:
        comm = memory_estimate(w.with_(tokens=max(min(step_tokens, LL_DISPATCH_TOKENS), w.ubatches), context=1))
        comm = comm.comm_buffers
    free = m.usable - m.weights - m.activations - comm - max_seqs * state_bytes_per_request(w)
    return max(0, int(free // kv_bytes_per_token(w)))


class StepPricer:
    """Step seconds of ``base`` (a ``Workload``: the model, cluster, attention TP, schedule, imbalance and
    mechanisms; its tokens, context and phase are set per point) on the virtual backend (module docstring);
    ``kernels``: the kernel-time source (``demos.zoo.kernel_times``), of ``engine``'s kernels where they differ,
    its all-reduces on ``allreduce``'s line (``demos.zoo.engine_allreduce``; None: the engine's)."""

    def __init__(
        self,
        base: Workload,
        kernels: str = "roofline",
        run: Callable | None = None,
        engine: str | None = None,
        allreduce: str | None = None,
    ):
        self.base, self.allreduce = base, allreduce
        self.profile = step_profile(base)
        self.kernels = kernel_times(kernels, base.gpu, self.profile, engine, allreduce) if run is None else None
        self._points: dict[tuple, Priced] = {}
        self._direct: dict[tuple, float] = {}  # interpolation_error's direct runs, kept like the grid's
        self._run = run or self._zoo
        self.runs = 0

    def _zoo(self, phase: Phase, tokens: int, context: int, mode: Mode) -> Priced:
        w = self.base.with_(phase=phase, tokens=tokens, context=context, ubatches=min(self.base.ubatches, tokens))
        sbo_ok = w.schedule == Schedule.LL and w.cluster.ep > 1 and w.spec.moe is not None
        with ZooRun(w, backend="virtual", mode=mode, profile=self.profile, kernels=self.kernels) as r:
            none = r.step(False).seconds
            dbo = r.step(True).seconds if w.ubatches > 1 else None
            sbo = r.step(False, sbo=True).seconds if sbo_ok else None
        return Priced(none, dbo, sbo)

    def point(self, phase: Phase, tokens: int, context: int, mode: Mode) -> Priced:
        key = (phase, tokens, context, mode)
        p = self._points.get(key)
        if p is None:
            p = self._points[key] = self._run(phase, tokens, context, mode)
            self.runs += 1
        return p

    def _interp(self, phase: Phase, tokens: float, context: float, mode: Mode, kind: str) -> float:
        t0, t1 = _bracket(GRID_TOKENS, tokens)
        contexts = _contexts(context)
        c0, c1 = _bracket(contexts, context)

        def at(t: int, c: int) -> float:
            p = self.point(phase, t, c, mode)
            v = getattr(p, kind)
            return p.none if v is None else v

        def along_c(t: int) -> float:
            return _lerp(context, c0, c1, at(t, c0), at(t, c1))

        return _lerp(tokens, t0, t1, along_c(t0), along_c(t1))

    def seconds(self, ranks: Sequence[RankBatch], decision: SplitDecision, *, sbo: bool = False) -> float:
        """The step's seconds (module docstring); 0 for a step no rank has work in."""
        busy = [r for r in ranks if not r.idle]
        if not busy:
            return 0.0
        top = max(busy, key=lambda r: r.tokens)
        kind = "dbo" if decision.split else ("sbo" if sbo else "none")
        if all(r.uniform_decode for r in busy):
            tokens = max(decision.padded_tokens or 0, top.tokens)
            context = max(1.0, statistics.fmean(top.decode))
            mode = Mode.GRAPH if decision.graph else Mode.EAGER
            return self._interp(Phase.DECODE, tokens, context, mode, kind)
        ends = [c + k for c, k in top.prefill] or [1]
        context = max(1.0, statistics.fmean(ends))
        tokens = max(decision.padded_tokens or 0, top.tokens)
        return self._interp(Phase.PREFILL, tokens, min(context, tokens), Mode.EAGER, kind)

    def interpolation_error(self, samples: Sequence[tuple[Phase, int, int, Mode]]) -> dict[str, float]:
        """The interpolated step against a direct run at each ``(phase, tokens, context, mode)``: median and
        largest |error| of the plain step (the samples should fall between grid points)."""
        errs = []
        for phase, t, c, mode in samples:
            key = (phase, t, c, mode)
            direct = self._direct.get(key)
            if direct is None:
                direct = self._direct[key] = self._run(phase, t, c, mode).none
            errs.append(abs(self._interp(phase, t, c, mode, "none") / direct - 1))
        return {"samples": len(errs), "median": statistics.median(errs), "max": max(errs)}


def _contexts(context: float) -> tuple[int, ...]:
    top = max(64, 1 << math.ceil(math.log2(max(context, 1))))
    return tuple(1 << k for k in range(6, top.bit_length()))


def _bracket(grid: Sequence[int], x: float) -> tuple[int, int]:
    """The grid points around ``x`` (both the first one below ``grid[0]``, the last two beyond the end)."""
    i = bisect.bisect_left(grid, x)
    if i < len(grid) and grid[i] == x:
        return grid[i], grid[i]
    if i == 0:
        return grid[0], grid[0]
    if i == len(grid):
        return grid[-2], grid[-1]
    return grid[i - 1], grid[i]


def _lerp(x: float, x0: float, x1: float, y0: float, y1: float) -> float:
    if x1 == x0:
        return y0
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
