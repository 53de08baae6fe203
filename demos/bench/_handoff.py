"""Handoff benchmarks: cost per yield on the threads backend against bare ping-pongs.

Every figure is seconds per handoff (one thread giving the CPU to another), so the DBO yield and
the baselines compare directly:

* ``lock ping-pong``: two threads, two ``threading.Lock``s; each releases the other's lock and
  blocks on its own. The cheapest blocking handoff Python has.
* ``lock ring``: the same with N threads and N locks around a ring (the primitive under an
  N-ubatch yield).
* ``event ping-pong``: two threads, two ``threading.Event``s; each sets the other's, waits on its
  own and clears it, as the reference (vLLM) does.
* ``dbo_yield``: N ubatch threads of a ``UBatchOrchestrator`` on the threads backend, each calling
  ``dbo_yield()`` K times; ubatch 0 times its K yields, each a full turn of N handoffs.
* ``step fixed cost``: a step whose function does nothing (spawn, barrier, join, stream sync).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from typing import Callable, Iterator

import dbo

# Thread placement. A handoff whose wake-up crosses CPUs costs several times one between threads
# that share a CPU (docs/performance.md, "handoff"), and the kernel picks either at random from
# one run to the next, whatever the code. Every candidate therefore runs with all of its
# threads pinned to the same CPU (Linux; elsewhere unpinned), so the comparison is like for like.
PIN_CPU: int | None = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


@contextlib.contextmanager
def pinned(cpu: int | None = PIN_CPU) -> Iterator[None]:
    """Pin the calling thread to ``cpu`` for the block (no-op where affinity is unsupported)."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def lock_ping_pong(handoffs: int) -> float:
    """Seconds per handoff between two threads over two locks."""
    a, b = threading.Lock(), threading.Lock()
    a.acquire()
    b.acquire()
    rounds = handoffs // 2

    def other() -> None:
        with pinned():
            for _ in range(rounds):
                b.acquire()
                a.release()

    t = threading.Thread(target=other, daemon=True)
    t.start()
    with pinned():
        start = time.perf_counter()
        for _ in range(rounds):
            b.release()
            a.acquire()
        elapsed = time.perf_counter() - start
    t.join(10)
    return elapsed / (2 * rounds)


def lock_ring(n: int, handoffs: int) -> float:
    """Seconds per handoff around a ring of ``n`` threads over ``n`` locks (``n=2``: the ping-pong)."""
    locks = [threading.Lock() for _ in range(n)]
    for lock in locks:
        lock.acquire()
    rounds = max(handoffs // n, 1)
    elapsed: list[float] = []

    def member(i: int) -> None:
        mine, nxt = locks[i], locks[(i + 1) % n]
        with pinned():
            start = time.perf_counter()
            for r in range(rounds):
                if i != 0 or r != 0:
                    mine.acquire()
                nxt.release()
            if i == 0:
                mine.acquire()  # the last turn comes back
                elapsed.append(time.perf_counter() - start)

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(1, n)]
    for t in threads:
        t.start()
    member(0)
    for t in threads:
        t.join(10)
    return elapsed[0] / (rounds * n)


def event_ping_pong(handoffs: int) -> float:
    """Seconds per handoff between two threads over two Events (set, wait, clear)."""
    ea, eb = threading.Event(), threading.Event()
    rounds = handoffs // 2

    def other() -> None:
        with pinned():
            for _ in range(rounds):
                eb.wait()
                eb.clear()
                ea.set()

    t = threading.Thread(target=other, daemon=True)
    t.start()
    with pinned():
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
    """Seconds per handoff of ``dbo_yield`` on ``orch``.

    Timed inside ubatch 0, from its first yield to its last: each of its yields is one full turn
    around the ring, i.e. N handoffs. Spawn, barrier and join are outside the timed region.
    """
    n = orch.num_ubatches
    k = yields_per_ubatch
    elapsed: list[float] = []

    def fn(uid: int) -> int:
        with pinned():  # a ubatch thread lives for one step; pinning ends with it
            if uid == 0:
                dbo.dbo_yield()  # everyone has started and yielded once
                start = time.perf_counter()
                for _ in range(k):
                    dbo.dbo_yield()
                elapsed.append(time.perf_counter() - start)
            else:
                for _ in range(k + 1):
                    dbo.dbo_yield()
        return uid

    orch.run(fn, list(range(n)))
    return elapsed[0] / (n * k)


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
