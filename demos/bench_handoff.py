"""Handoff benchmarks: cost per yield on the threads backend against bare ping-pongs.

Every figure is seconds per handoff (one thread giving the CPU to another), so the DBO yield and
the baselines compare directly:

* ``lock ping-pong``: two threads, two ``threading.Lock``s; each releases the other's lock and
  blocks on its own. The cheapest blocking handoff Python has.
* ``event ping-pong``: two threads, two ``threading.Event``s; each sets the other's, waits on its
  own and clears it, as the reference (vLLM) does.
* ``dbo_yield``: N ubatch threads of a ``UBatchOrchestrator`` on the threads backend, each calling
  ``dbo_yield()`` K times; (step time with K yields - step time with none) / (N * K).
* ``step fixed cost``: a step whose function does nothing (spawn, barrier, join, stream sync).
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Callable

import dbo


def lock_ping_pong(handoffs: int) -> float:
    """Seconds per handoff between two threads over two locks."""
    a, b = threading.Lock(), threading.Lock()
    a.acquire()
    b.acquire()
    rounds = handoffs // 2

    def other() -> None:
        for _ in range(rounds):
            b.acquire()
            a.release()

    t = threading.Thread(target=other, daemon=True)
    t.start()
    start = time.perf_counter()
    for _ in range(rounds):
        b.release()
        a.acquire()
    elapsed = time.perf_counter() - start
    t.join(10)
    return elapsed / (2 * rounds)


def event_ping_pong(handoffs: int) -> float:
    """Seconds per handoff between two threads over two Events (set, wait, clear)."""
    ea, eb = threading.Event(), threading.Event()
    rounds = handoffs // 2

    def other() -> None:
        for _ in range(rounds):
            eb.wait()
            eb.clear()
            ea.set()

    t = threading.Thread(target=other, daemon=True)
    t.start()
    start = time.perf_counter()
    for _ in range(rounds):
        eb.set()
        ea.wait()
        ea.clear()
    elapsed = time.perf_counter() - start
    t.join(10)
    return elapsed / (2 * rounds)


def _yield_k(k: int) -> Callable[[int], int]:
    def fn(uid: int) -> int:
        for _ in range(k):
            dbo.dbo_yield()
        return uid

    return fn


def dbo_yield_cost(orch: dbo.UBatchOrchestrator, yields_per_ubatch: int) -> float:
    """Seconds per handoff of ``dbo_yield`` on ``orch`` (its step fixed cost subtracted)."""
    n = orch.num_ubatches
    inputs = list(range(n))
    empty = _yield_k(0)
    busy = _yield_k(yields_per_ubatch)
    t0 = time.perf_counter()
    orch.run(empty, inputs)
    t1 = time.perf_counter()
    orch.run(busy, inputs)
    t2 = time.perf_counter()
    return max((t2 - t1) - (t1 - t0), 0.0) / (n * yields_per_ubatch)


def step_fixed_cost(orch: dbo.UBatchOrchestrator) -> float:
    """Seconds for one step that does nothing (spawn, barrier, join, sync)."""
    inputs = list(range(orch.num_ubatches))
    fn = _yield_k(0)
    t0 = time.perf_counter()
    orch.run(fn, inputs)
    return time.perf_counter() - t0


def repeat(measure: Callable[[], float], repeats: int) -> list[float]:
    """Run ``measure`` ``repeats`` times after one warmup; return the samples."""
    measure()
    return [measure() for _ in range(repeats)]


def median(samples: list[float]) -> float:
    return statistics.median(samples)
