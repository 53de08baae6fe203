"""The threads backend's executor side: the records a stream queues (kernels, markers, waits) and
the engine that runs one kind of kernel on its own daemon thread (see ``dbo.streams.threads`` for
the model). Split out of threads.py, which keeps the streams, events and the backend."""

from __future__ import annotations

import heapq
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Collection

import torch

from dbo.errors import StreamError
from dbo.streams.base import sticky_error

if TYPE_CHECKING:
    from dbo.streams.threads._backend import ThreadsBackend, ThreadStream

logger = logging.getLogger("dbo.streams.threads")

_SYNC_TORCH_THREADS = True  # executors follow torch.get_num_threads() (off only to measure the difference)


def engine_cpus(kind: str, allowed: Collection[int]) -> set[int] | None:
    """The CPUs the executor of engine ``kind`` ("compute" or "comm") keeps to when the backend pins
    its engines, out of the CPUs ``allowed`` to the thread that made the backend: the link executor
    gets the last one to itself, the compute executor all the others (its intra-op threads inherit
    them). None with fewer than two CPUs: nothing to separate."""
    cpus = sorted(allowed)
    if len(cpus) < 2:
        return None
    return {cpus[-1]} if kind == "comm" else set(cpus[:-1])


def allowed_cpus() -> set[int] | None:
    """The CPUs the calling thread may run on, or None where the OS has no thread affinity."""
    get = getattr(os, "sched_getaffinity", None)
    try:
        return set(get(0)) if get is not None else None
    except OSError:
        return None


def _pin_this_thread(kind: str, allowed: Collection[int] | None) -> set[int] | None:
    """Keep the calling executor thread to ``engine_cpus(kind, allowed)``; the set, or None where
    the platform cannot (no ``os.sched_setaffinity``), there is one CPU, or the OS refused. (Not the
    executor's own CPUs: the first executor starts the second, which inherits its pinning.)"""
    put = getattr(os, "sched_setaffinity", None)
    if put is None or allowed is None:
        return None
    try:
        cpus = engine_cpus(kind, allowed)
        if cpus is not None:
            put(0, cpus)
        return cpus
    except OSError as e:  # a cpuset that changed under us, a seccomp filter: run unpinned
        logger.debug("could not pin the %s executor: %s", kind, e)
        return None


class _Done:
    """Completion token of a marker: an event record or a synchronize point."""

    __slots__ = ("flag", "error", "note", "stream", "dropped", "waiters")

    def __init__(self, stream: "ThreadStream"):
        self.flag = threading.Event()  # set (under the scheduler lock) when the marker completes
        self.error: BaseException | None = None
        self.note = ""
        self.stream = stream
        self.dropped = False  # the backend closed before the stream reached this point
        self.waiters: list[ThreadStream] | None = []  # streams parked on this token (None once set)

    def check(self, action: str) -> None:
        """Raise what a waiter on this completed token must see (nothing if all went well)."""
        if self.error is not None:
            raise sticky_error(self.stream.name, self.error, action, self.note)
        if self.dropped:
            b = self.stream.backend
            raise StreamError(
                f"{action}: backend {b.name}#{b.id} was closed before stream {self.stream.name!r} reached this point"
            )


class _Wait:
    __slots__ = ("token",)

    def __init__(self, token: _Done):
        self.token = token


class _Kernel:
    __slots__ = ("fn", "args", "name", "kind", "seconds", "tracer", "ubatch", "seq", "ready_at")

    def __init__(self, fn, args, name, kind, seconds, tracer, ubatch, seq):
        self.fn = fn
        self.args = args
        self.name = name
        self.kind = kind
        self.seconds = seconds
        self.tracer = tracer
        self.ubatch = ubatch
        self.seq = seq  # launch order across the backend
        self.ready_at = 0.0  # monotonic time the kernel was handed to its engine


def _complete(token: _Done, work: list) -> None:
    """Complete ``token`` (scheduler lock held): wake host waiters, queue the parked streams."""
    token.flag.set()
    parked = token.waiters
    token.waiters = None
    if parked:
        for s in parked:
            s._blocked = None
            work.append(s)


class _Engine:
    """One engine (compute or link): a heap of ready kernels and the executor thread that runs them."""

    def __init__(self, backend: "ThreadsBackend", kind: str):
        self.backend = backend
        self.kind = kind
        self.cond = threading.Condition(backend._lock)
        self.heap: list[tuple[int, _Kernel, ThreadStream]] = []
        self.thread: threading.Thread | None = None
        self.idle = False  # the executor sleeps on cond
        self.running: tuple[ThreadStream, _Kernel] | None = None
        self.busy_since = 0.0  # monotonic time the running kernel started
        self.crashed: BaseException | None = None
        self.cpus: set[int] | None = None  # the CPUs its executor keeps to (pinned engines), else None

    def submit(self, s: ThreadStream, k: _Kernel) -> None:
        """Hand a ready kernel to the engine (scheduler lock held)."""
        b = self.backend
        if self.thread is None:
            t = threading.Thread(target=self._run, name=f"dbo-stream-{b.id}-{self.kind}", daemon=True)
            t.start()  # waits on our lock before it looks at the heap
            self.thread = t
            b._ensure_watchdog()
        elif self.idle:
            self.cond.notify()
        k.ready_at = time.monotonic()
        key = k.seq if b.engine_order == "launch" else next(b._ready_seq)
        heapq.heappush(self.heap, (key, k, s))
        s._worker = self.thread

    def _run(self) -> None:
        b = self.backend
        lock, heap, stop = b._lock, self.heap, b._stop
        s: ThreadStream | None = None
        k: _Kernel | None = None
        exc: BaseException | None = None
        applied_threads = -1
        if b.pin_engines:
            self.cpus = _pin_this_thread(self.kind, b._cpus_allowed)
        try:
            while True:
                with lock:
                    if s is not None:  # finish the kernel that just ran and advance its stream
                        self.running = None
                        s._inflight = None
                        if exc is not None:
                            s._fail(exc, f"kernel {k.name!r} raised")
                        b._pump(s)
                        s = k = exc = None
                    while not heap:
                        if b._stopping:
                            return
                        self.idle = True
                        self.cond.wait()
                        self.idle = False
                    if b._stopping:
                        return
                    _, k, s = heapq.heappop(heap)
                    self.running = (s, k)
                    self.busy_since = time.monotonic()
                if _SYNC_TORCH_THREADS:
                    # A new thread does not inherit torch.set_num_threads (OpenMP keeps the
                    # setting per thread): apply the process's value, and follow changes.
                    n = torch.get_num_threads()
                    if n != applied_threads:
                        torch.set_num_threads(n)
                        applied_threads = n
                t0 = time.perf_counter()
                try:
                    if k.kind == "comm":
                        if k.seconds:
                            stop.wait(k.seconds)
                        if k.fn is not None:
                            k.fn(*k.args)
                    else:
                        if k.fn is not None:
                            k.fn(*k.args)
                        if k.seconds:
                            left = t0 + k.seconds - time.perf_counter()
                            if left > 0:
                                stop.wait(left)
                except BaseException as e:
                    exc = e
                t1 = time.perf_counter()
                if k.tracer is not None:  # before the stream advances: a synchronize sees the record
                    k.tracer.kernel(s.name, k.name, k.kind, k.ubatch, t0, t1)
        except BaseException as e:  # a bug in the executor itself: fail its streams, never raise out
            logger.exception("executor of the %s engine of backend %s#%d crashed", self.kind, b.name, b.id)
            with lock:
                self.crashed = e
                self.running = None
                victims = [v for (_, _, v) in heap]
                heap.clear()
                if s is not None and s._inflight is not None:
                    victims.append(s)
                for v in victims:
                    v._inflight = None
                    v._fail(e, f"the {self.kind} engine's executor crashed")
                    b._pump(v)
