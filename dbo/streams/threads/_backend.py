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
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from typing import Any, Callable

from dbo.costs import Work, seconds_for
from dbo.errors import StreamError, StreamTimeout
from dbo.registry import acting_ubatch_id
from dbo.streams import base
from dbo.streams.base import Backend, Event, Stream, kernel_name
from dbo.streams.threads._engine import Done, Engine, Kernel, Wait, allowed_cpus, complete

logger = logging.getLogger(__name__)

__all__ = ["ThreadsBackend", "ThreadStream", "ThreadEvent", "ENGINE_ORDERS"]

ENGINE_ORDERS = ("launch", "ready")
_JOIN_BOUND = 5.0  # most seconds close() spends joining the executors and the watchdog
_WATCH_MIN = 0.002  # the watchdog checks every timeout / 8 seconds, clamped to [_WATCH_MIN, _WATCH_MAX]
_WATCH_MAX = 0.25


class ThreadStream(Stream):
    """An in-order queue; its kernels run on the backend's engine executors."""

    backend: "ThreadsBackend"

    def __init__(self, backend: "ThreadsBackend", name: str):
        super().__init__(backend, name)
        # All below is guarded by the backend's scheduler lock (backend._lock).
        # Invariant: the queue is non-empty only while a kernel is in flight or the head is a
        # wait on an incomplete event (everything else is processed at once).
        self._queue: collections.deque = collections.deque()
        self._inflight: Kernel | None = None  # handed to an engine (ready or running), not finished
        self._blocked: Done | None = None  # the head waits on this token
        self._blocked_since = 0.0
        self._closing = False
        self._worker: threading.Thread | None = None  # the executor of this stream's latest kernel

    # --- host side ---------------------------------------------------------------------------

    def _enqueue(self, item: Any) -> None:
        b = self.backend
        with b._lock:
            if self._closing:
                raise StreamError(f"stream {self.name!r}: backend {b.name}#{b.id} is closed")
            self._queue.append(item)
            if self._inflight is None and self._blocked is None:
                b._pump(self)

    def launch(
        self,
        fn: Callable | None,
        *args: Any,
        name: str | None = None,
        kind: str | None = None,
        cost: Any = None,
        op: str | None = None,
        layer: int | None = None,
    ) -> None:
        kind = self._check_launch(kind, op, layer)
        b = self.backend
        seconds = b._modelled_seconds(fn, kind, cost, args)
        tr = b._tracing()
        ubatch = acting_ubatch_id() if tr is not None else None
        kname = kernel_name(fn, name, kind)
        if base._observer is not None:
            fn = base._observer.launch(self, fn, args, kname)
        self._enqueue(Kernel(fn, args, kname, kind, seconds, tr, ubatch, next(b._seq), op, layer))

    def wait_event(self, event: Event) -> None:
        self._check_event(event)
        if base._observer is not None:
            base._observer.wait(self, event)
        token = event._token  # the most recent record, now
        if token is None or (token.flag.is_set() and token.error is None and not token.dropped):
            return
        self._enqueue(Wait(token))

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        b = self.backend
        token = None
        with b._lock:
            if not self._closing and (self._queue or self._inflight is not None):
                token = Done(self)
                self._queue.append(token)  # behind busy work: cannot complete now, no pump needed
        if token is not None:
            b._wait_host(token.flag, f"synchronize of stream {self.name!r}")
            token.check("synchronize")
        self._raise_if_failed("synchronize")

    def query(self) -> bool:
        with self.backend._lock:
            return not self._queue and self._inflight is None

    # --- scheduler side (backend._lock held) ---------------------------------------------------

    def _fail(self, exc: BaseException, note: str = "") -> None:
        if self._error is None:
            self._error = exc
            self._error_note = note
            logger.debug("stream %r failed: %r", self.name, exc)

    def _advance(self, work: list) -> None:
        """Process the head of the queue as far as it goes; streams this wakes go to ``work``."""
        q = self._queue
        while q and self._inflight is None and self._blocked is None:
            item = q[0]
            cls = type(item)
            if cls is Kernel:
                q.popleft()
                if self._error is not None:
                    continue  # sticky: skip everything after a failure
                engine = self.backend._engines[item.kind]
                if engine.crashed is not None:
                    self._fail(engine.crashed, f"the {item.kind} engine's executor crashed")
                    continue
                try:
                    engine.submit(self, item)
                except Exception as e:  # could not start the executor (out of threads): fail, don't hang
                    self._fail(e, f"the {item.kind} engine's executor could not start")
                    continue
                self._worker = engine.thread
                self._inflight = item
                return
            if cls is Done:
                q.popleft()
                item.error = self._error
                item.note = self._error_note
                for parked in complete(item):
                    parked._blocked = None
                    work.append(parked)
                continue
            tok = item.token  # a Wait
            if self._error is None:
                if not tok.flag.is_set():
                    self._blocked = tok
                    self._blocked_since = time.monotonic()
                    tok.waiters.append(self)
                    self.backend._ensure_watchdog()
                    return
                if tok.error is not None:
                    self._fail(tok.error, f"it waited on an event recorded on failed stream {tok.stream.name!r}")
                elif tok.dropped:
                    self._fail(
                        StreamError(f"it waited on an event of stream {tok.stream.name!r} that was closed first")
                    )
            q.popleft()

    def _drop(self) -> list[Done]:
        """Forget the queue (backend closing); return its markers, to be completed as dropped."""
        tokens = [item for item in self._queue if type(item) is Done]
        self._queue.clear()
        if self._blocked is not None:
            if self._blocked.waiters is not None and self in self._blocked.waiters:
                self._blocked.waiters.remove(self)
            self._blocked = None
        for t in tokens:
            t.error = self._error
            t.note = self._error_note
            t.dropped = True
        return tokens


class ThreadEvent(Event):
    backend: "ThreadsBackend"

    def __init__(self, backend: "ThreadsBackend"):
        super().__init__(backend)
        self._token: Done | None = None

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        if base._observer is not None:
            base._observer.record(self, s)
        token = Done(s)
        s._enqueue(token)
        self._token = token

    def query(self) -> bool:
        token = self._token
        return token is None or token.flag.is_set()

    def synchronize(self) -> None:
        token = self._token
        if base._observer is not None:
            base._observer.sync(self)
        if token is None:
            return
        self.backend._wait_host(token.flag, f"Event.synchronize (recorded on stream {token.stream.name!r})")
        token.check("Event.synchronize")


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
