"""The threads backend's executor side: the records a stream queues (kernels, markers, waits) and
the engine that runs one kind of kernel on its own daemon thread (see ``dbo.streams.threads`` for
the model).

The engine knows the streams it serves only as opaque objects with a ``name``: it reports every
kernel it ran (or dropped when its executor crashed) through the ``on_done`` callback its owner
gave it, and touches nothing else of theirs. Its owner (``ThreadsBackend``) keeps the streams'
state and advances them."""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from typing import Any, Callable, Collection

import torch

from dbo.errors import StreamError
from dbo.streams.base import sticky_error

logger = logging.getLogger("dbo.streams.threads")

_SYNC_TORCH_THREADS = True  # executors follow torch.get_num_threads() (off only to measure the difference)

OnDone = Callable[[Any, "Kernel", "BaseException | None"], None]
"""``on_done(stream, kernel, error)``: the engine's one report to its owner (see ``Engine``)."""


def engine_cpus(kind: str, allowed: Collection[int]) -> set[int] | None:
    """The CPUs the executor of engine ``kind`` ("compute" or "comm") keeps to when the backend pins
    its engines, out of the CPUs ``allowed`` to the thread that made the backend: the comm executor
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


class Done:
    """Completion token of a marker: an event record or a synchronize point."""

    __slots__ = ("flag", "error", "note", "stream", "dropped", "waiters")

    def __init__(self, stream: Any):
        self.flag = threading.Event()  # set (under the scheduler lock) when the marker completes
        self.error: BaseException | None = None
        self.note = ""
        self.stream = stream
        self.dropped = False  # the backend closed before the stream reached this point
        self.waiters: list[Any] | None = []  # streams parked on this token (None once set)

    def check(self, action: str) -> None:
        """Raise what a waiter on this completed token must see (nothing if all went well)."""
        if self.error is not None:
            raise sticky_error(self.stream.name, self.error, action, self.note)
        if self.dropped:
            b = self.stream.backend
            raise StreamError(
                f"{action}: backend {b.name}#{b.id} was closed before stream {self.stream.name!r} reached this point"
            )


class Wait:
    """A stream's wait on a marker (``wait_event``): the stream's head stays here until ``token`` completes."""

    __slots__ = ("token",)

    def __init__(self, token: Done):
        self.token = token


class Kernel:
    """A launched kernel, as queued on its stream and run by its engine."""

    __slots__ = ("fn", "args", "name", "kind", "seconds", "tracer", "ubatch", "seq", "ready_at", "op", "layer")

    def __init__(self, fn, args, name, kind, seconds, tracer, ubatch, seq, op=None, layer=None):
        self.fn = fn
        self.args = args
        self.name = name
        self.kind = kind
        self.seconds = seconds
        self.tracer = tracer
        self.ubatch = ubatch
        self.seq = seq  # launch order across the backend
        self.ready_at = 0.0  # monotonic time the kernel was handed to its engine
        self.op = op  # the identity its launch declared
        self.layer = layer


def complete(token: Done) -> list[Any]:
    """Complete ``token`` (scheduler lock held): wake its host waiters; return the streams parked
    on it (their owner moves them on)."""
    token.flag.set()
    parked = token.waiters
    token.waiters = None
    return parked or []


class Engine:
    """One engine (compute or comm): a heap of ready kernels and the executor thread that runs them.

    ``lock``: the owner's scheduler lock (every method but the executor's own loop runs with it
    held). ``on_done(stream, kernel, error)`` is called on the executor thread with ``lock`` held:
    after each kernel ran (``error``: what it raised, or None), and, when the executor itself
    crashes, once for every kernel it had taken and not reported, ready or running (``error``: the
    crash, also kept in ``crashed``). A callback that raises is an executor crash: the kernel it
    was reporting is reported again with that error, and no exception leaves the thread.
    ``on_start()`` is called (lock held) right after the executor thread starts. ``order``:
    "launch" takes ready kernels by ``Kernel.seq``, "ready" in the order they were submitted.
    ``pin_to``: the CPUs to pin the executor within (``engine_cpus``), or None (unpinned).
    ``interrupt``: set when the owner closes; it cuts modelled waits short.
    """

    def __init__(
        self,
        kind: str,
        lock: Any,
        *,
        thread_name: str,
        owner: str,
        on_done: OnDone,
        on_start: Callable[[], None] | None = None,
        order: str = "launch",
        pin_to: Collection[int] | None = None,
        interrupt: threading.Event | None = None,
    ):
        self.kind = kind
        self.cond = threading.Condition(lock)
        self.heap: list[tuple[int, Kernel, Any]] = []
        self.thread: threading.Thread | None = None
        self.idle = False  # the executor sleeps on cond
        self.running: tuple[Any, Kernel] | None = None  # (stream, kernel) on the executor now
        self.busy_since = 0.0  # monotonic time the running kernel started
        self.crashed: BaseException | None = None
        self.cpus: set[int] | None = None  # the CPUs its executor keeps to (pinned engines), else None
        self.stopping = False  # under lock: the executor exits (``stop``)
        self._lock = lock
        self._thread_name = thread_name
        self._owner = owner
        self._on_done = on_done
        self._on_start = on_start
        self._by_launch = order == "launch"
        self._ready_seq = itertools.count()
        self._pin_to = pin_to
        self._interrupt = interrupt if interrupt is not None else threading.Event()

    def submit(self, stream: Any, k: Kernel) -> None:
        """Hand a ready kernel to the engine (lock held); start the executor at first use (its
        failure to start raises here, before the kernel is queued)."""
        if self.thread is None:
            t = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            t.start()  # waits on our lock before it looks at the heap
            self.thread = t
            if self._on_start is not None:
                self._on_start()
        elif self.idle:
            self.cond.notify()
        k.ready_at = time.monotonic()
        key = k.seq if self._by_launch else next(self._ready_seq)
        heapq.heappush(self.heap, (key, k, stream))

    def take_late(self, limit: float) -> list[tuple[Any, Kernel]]:
        """(lock held) The ready kernels submitted at or before ``limit`` while one and the same
        kernel has been running since at or before ``limit``, taken off the heap as (stream,
        kernel); none while the engine moves (a backlog never times out)."""
        if self.running is None or self.busy_since > limit:
            return []
        late = [(s, k) for (_, k, s) in self.heap if k.ready_at <= limit]
        if late:
            self.heap[:] = [e for e in self.heap if e[1].ready_at > limit]
            heapq.heapify(self.heap)
        return late

    def stop(self) -> list[tuple[Any, Kernel]]:
        """(lock held) Make the executor exit; return the kernels submitted and not started, as
        (stream, kernel), dropped (never reported). A running kernel finishes first."""
        self.stopping = True
        dropped = [(s, k) for (_, k, s) in self.heap]
        self.heap.clear()
        self.cond.notify_all()
        return dropped

    def _run(self) -> None:
        lock, heap, stop = self._lock, self.heap, self._interrupt
        current: tuple[Any, Kernel] | None = None  # taken off the heap, not reported yet
        exc: BaseException | None = None
        applied_threads = -1
        if self._pin_to is not None:
            self.cpus = _pin_this_thread(self.kind, self._pin_to)
        try:
            while True:
                with lock:
                    if current is not None:  # report the kernel that just ran
                        self.running = None
                        self._on_done(current[0], current[1], exc)
                        current = exc = None
                    while not heap:
                        if self.stopping:
                            return
                        self.idle = True
                        self.cond.wait()
                        self.idle = False
                    if self.stopping:
                        return
                    _, k, s = heapq.heappop(heap)
                    current = self.running = (s, k)
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
                    k.tracer.kernel(s.name, k.name, k.kind, k.ubatch, t0, t1, k.op, k.layer)
        except BaseException as e:  # a bug in the executor or its callback: report, never raise out
            logger.exception("executor of the %s engine of backend %s crashed", self.kind, self._owner)
            with lock:
                self._crash(e, current)

    def _crash(self, e: BaseException, current: tuple[Any, Kernel] | None) -> None:
        """(lock held) Report every kernel taken and not reported (the heap's, then ``current``) as
        failed with ``e``; a report that raises again is logged and the next one made."""
        self.crashed = e
        self.running = None
        victims = [(s, k) for (_, k, s) in self.heap]
        self.heap.clear()
        if current is not None:
            victims.append(current)
        for s, k in victims:
            try:
                self._on_done(s, k, e)
            except BaseException:
                logger.exception(
                    "the %s engine of backend %s could not report kernel %r of its crash",
                    self.kind,
                    self._owner,
                    k.name,
                )
