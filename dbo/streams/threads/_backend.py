"""Threads backend: real asynchrony on the CPU. Streams are in-order queues; one executor thread
per engine runs the kernels.

* Engines: the backend has a compute engine and a comm engine, each served by one daemon executor
  thread ("dbo-stream-<backend id>-compute", "dbo-stream-<backend id>-comm"), started at first use.
  Every compute kernel of every stream runs on the compute executor, so two compute kernels never
  overlap (as ubatches share a GPU's SMs); every comm kernel runs on the comm executor. A compute
  kernel and a comm kernel run on different threads, so they overlap, and a consumer that forgot
  its ``wait_event`` really races with the producer.
* Streams are logical queues of kernels, event records (markers) and waits, with no thread of
  their own. A stream's head advances as soon as it can: a marker completes when everything before
  it is done, a wait passes when its event is complete (else the stream is parked on the event), a
  kernel is handed to its engine and the stream's next item waits until that kernel has finished
  (so a stream stays in order across engines). Advancing runs on whichever thread made it possible
  (the host thread that launched or recorded, or the executor that just finished a kernel or
  completed a marker) under one scheduler lock, which is never held while a kernel runs.
* Order: an engine runs its ready kernels (stream heads whose waits are satisfied) one at a time,
  in launch order (``engine_order="launch"``, the default, as the virtual backend and a saturated
  GPU do) or in the order they became ready (``engine_order="ready"``: round-robin between streams
  with backlogs). An executor that finishes a kernel takes the next ready one at once: streams that
  share an engine never hand anything between threads, so the engine costs the same with one
  stream per ubatch as with one shared stream.
* Occupancy: a compute kernel runs ``fn`` and then keeps its engine until the modelled seconds have
  passed, so it takes max(real time, modelled). A comm kernel first waits the modelled seconds and
  then runs ``fn``: its data lands at the end of the transfer, so a consumer that does not wait for
  it reads stale data (the race a missing wait_event causes on a GPU). Modelled seconds: a float
  cost; ``Transfer`` -> latency + bytes / bandwidth (link profile); ``Work`` only when ``fn`` is
  None (otherwise the real math takes what it takes); None -> 0. Waiting uses an Event wait
  (releases the GIL) and ends early when the backend closes.
* Pinning (``pin_engines=True``; off by default): each executor keeps to its own CPUs, the comm
  executor to the last CPU the thread that made the backend may use, the compute executor to the others
  (``engine_cpus``; nothing changes with one CPU or where the OS has no thread
  affinity). A GPU's engines never wait for each other's processor; unpinned, on a machine with
  few cores, the OS may queue an executor that was just woken behind the other engine's running
  kernel on the same core for a scheduler slice (docs/streams.md, "Pinned engines", has the
  measurement), which no GPU does. Several processes that each pin on the same CPUs would share one core for
  compute, so leave it off for ranks that run side by side.
* Errors are sticky per stream (see ``dbo.streams.base``). Every wait is bounded by ``timeout``:
  host waits raise StreamTimeout; a stream parked on an event for longer than ``timeout``, or a
  ready kernel whose engine has been running one and the same kernel for longer than ``timeout``,
  fails with StreamTimeout (detected by a watchdog thread, "dbo-watchdog-<backend id>", that looks
  every timeout / 8 seconds, at least every 0.25 s). A backlog that moves never times out.
* ``close()`` stops the executors: work not started yet is dropped (a host thread waiting on it
  gets StreamError), a running kernel's ``fn`` finishes, modelled waits are cut short, and the
  threads are joined with a bound.

Here: ``ThreadsBackend`` (its engines, the scheduling, the bounded waits and the watchdog,
closing); its streams and events are ``_stream``'s (re-exported here).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Callable

from dbo.costs import Work, seconds_for
from dbo.errors import StreamTimeout
from dbo.streams.base import Backend, Event, Stream
from dbo.streams.threads._engine import Done, Engine, Kernel, allowed_cpus
from dbo.streams.threads._stream import ThreadEvent, ThreadStream

logger = logging.getLogger(__name__)

ENGINE_ORDERS = ("launch", "ready")
_JOIN_BOUND = 5.0  # most seconds close() spends joining the executors and the watchdog
_WATCH_MIN = 0.002  # the watchdog checks every timeout / 8 seconds, clamped to [_WATCH_MIN, _WATCH_MAX]
_WATCH_MAX = 0.25


class ThreadsBackend(Backend):
    """CPU backend: streams are queues, one executor thread per engine (compute, comm) runs the kernels.

    ``engine_order``: "launch" (default) runs an engine's ready kernels in launch order; "ready" in
    the order they became ready (round-robin between streams, which exposes more missing waits
    between two streams of the same engine). ``pin_engines``: give the compute and the comm
    executor CPUs of their own (see the module's docstring).
    """

    name = "threads"

    def __init__(self, *, engine_order: str = "launch", pin_engines: bool = False, **options: Any):
        if engine_order not in ENGINE_ORDERS:
            raise ValueError(f"engine_order must be one of {', '.join(ENGINE_ORDERS)}; got {engine_order!r}")
        if not isinstance(pin_engines, bool):
            raise TypeError(f"pin_engines must be True or False, got {pin_engines!r}")
        super().__init__(**options)
        self.engine_order = engine_order
        self.pin_engines = pin_engines
        self._cpus_allowed = allowed_cpus() if pin_engines else None  # the creating thread's CPUs
        self._stop = threading.Event()  # set at close: cuts modelled waits short, stops the watchdog
        self._lock = threading.Lock()  # the scheduler lock: queues, tokens' waiters, engines' heaps
        self._stopping = False  # under _lock: closing (the engines are stopped with it)
        self._seq = itertools.count()
        self._engines = {kind: self._make_engine(kind) for kind in ("compute", "comm")}
        self._watchdog: threading.Thread | None = None

    def _make_engine(self, kind: str) -> Engine:
        return Engine(
            kind,
            self._lock,
            thread_name=f"dbo-stream-{self.id}-{kind}",
            owner=f"{self.name}#{self.id}",
            on_done=self._kernel_done,
            on_start=self._ensure_watchdog,
            order=self.engine_order,
            pin_to=self._cpus_allowed if self.pin_engines else None,
            interrupt=self._stop,
        )

    def _make_stream(self, name: str) -> Stream:
        return ThreadStream(self, name)

    def pinned_cpus(self) -> dict[str, list[int]]:
        """The CPUs each started executor keeps to, by engine ("compute", "comm"); empty when the
        engines are not pinned (``pin_engines`` off, one CPU, no thread affinity on this OS)."""
        return {k: sorted(e.cpus) for k, e in self._engines.items() if e.cpus is not None}

    def new_event(self) -> Event:
        return ThreadEvent(self)

    def kernel_seconds(self, kind: str, cost: Any, args: tuple) -> float | None:
        """Modelled seconds of a kernel with a real ``fn``: float and Transfer costs; None and Work
        give None (the real math takes what it takes)."""
        if cost is None or isinstance(cost, Work):
            return None
        return seconds_for(kind, cost, args, self.profile, self.link)

    def _modelled_seconds(self, fn: Callable | None, kind: str, cost: Any, args: tuple) -> float | None:
        if cost is None or (isinstance(cost, Work) and fn is not None):
            return None
        return seconds_for(kind, cost, args, self.profile, self.link)

    # --- scheduling (self._lock held) ------------------------------------------------------------

    def _pump(self, stream: ThreadStream) -> None:
        """Advance ``stream`` and every stream its progress wakes (no recursion)."""
        work = [stream]
        while work:
            work.pop()._advance(work)

    def _kernel_done(self, s: ThreadStream, k: Kernel, error: BaseException | None) -> None:
        """The engines' report (``Engine``'s ``on_done``, lock held): ``k`` of ``s`` ran, raising
        ``error`` (or None); after an executor crash, ``error`` is the crash. Advance ``s``."""
        s._inflight = None
        if error is not None:
            crashed = self._engines[k.kind].crashed is not None
            s._fail(error, f"the {k.kind} engine's executor crashed" if crashed else f"kernel {k.name!r} raised")
        self._pump(s)

    # --- bounded waits -----------------------------------------------------------------------

    def _wait_host(self, flag: threading.Event, what: str) -> None:
        if not flag.wait(self.timeout):
            raise StreamTimeout(f"{what} did not finish within {self.timeout:g}s (backend {self.name}#{self.id})")

    def _ensure_watchdog(self) -> None:
        """Start the watchdog thread at first need (scheduler lock held)."""
        if self._watchdog is None and not self._stopping:
            t = threading.Thread(target=self._watch, name=f"dbo-watchdog-{self.id}", daemon=True)
            t.start()
            self._watchdog = t

    def _watch(self) -> None:
        """Fail streams parked on an event, or kernels waiting for their engine, past the timeout."""
        interval = min(max(self.timeout / 8, _WATCH_MIN), _WATCH_MAX)
        while not self._stop.wait(interval):
            try:
                self._expire(time.monotonic() - self.timeout)
            except BaseException:  # never let the watchdog die silently
                logger.exception("watchdog of backend %s#%d failed", self.name, self.id)

    def _expire(self, limit: float) -> None:
        streams = self.streams
        with self._lock:
            if self._stopping:
                return
            for s in streams:
                tok = s._blocked
                if tok is not None and s._blocked_since <= limit:
                    if tok.waiters is not None:
                        tok.waiters.remove(s)
                    s._blocked = None
                    s._queue.popleft()  # the wait
                    s._fail(
                        StreamTimeout(
                            f"stream {s.name!r} waited more than {self.timeout:g}s for an event recorded on "
                            f"stream {tok.stream.name!r}"
                        )
                    )
                    self._pump(s)
            for engine in self._engines.values():
                # Only a kernel stuck on the engine times the others out: a backlog that moves
                # (kernels launched earlier, running one after another) never does.
                running = engine.running
                for s, k in engine.take_late(limit):
                    s._inflight = None
                    s._fail(
                        StreamTimeout(
                            f"kernel {k.name!r} on stream {s.name!r} waited more than {self.timeout:g}s "
                            f"for the {k.kind} engine, busy all that time with kernel {running[1].name!r} "
                            f"of stream {running[0].name!r}"
                        )
                    )
                    self._pump(s)

    # --- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the executors (work not started is dropped) and join them, at most a few seconds."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        streams = self.streams
        with self._lock:
            self._stopping = True
            dropped: list[Done] = []
            for s in streams:
                s._closing = True
                dropped += s._drop()
            for engine in self._engines.values():
                for s, _ in engine.stop():
                    s._inflight = None  # handed to the engine but not started: dropped
            for t in dropped:
                t.waiters = None
                t.flag.set()
        threads = [e.thread for e in self._engines.values()] + [self._watchdog]
        threads = [t for t in threads if t is not None]
        deadline = time.monotonic() + min(self.timeout, _JOIN_BOUND)
        for t in threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            logger.warning("backend %s#%d closed with executors still running a kernel: %s", self.name, self.id, alive)
