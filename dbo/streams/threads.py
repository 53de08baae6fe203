"""Threads backend: real asynchrony on the CPU. One worker thread per stream.

* Each stream has a daemon worker ("dbo-stream-<backend id>-<stream name>"), started at the
  stream's first use, that runs the stream's queue in FIFO order: kernels, event records
  (markers) and waits.
* Engines: every compute kernel of the backend holds one compute lock while it runs (one compute
  kernel at a time across streams, as ubatches share a GPU's SMs); every comm kernel holds one
  link lock. Compute and comm kernels overlap.
* Occupancy: a compute kernel runs ``fn`` and then holds its engine until the modelled seconds
  have passed, so it takes max(real time, modelled). A comm kernel first waits the modelled
  seconds and then runs ``fn``: its data lands at the end of the transfer, so a consumer that
  does not wait for it reads stale data (the race a missing wait_event causes on a GPU).
  Modelled seconds: a float cost; ``Transfer`` -> latency + bytes / bandwidth (link profile);
  ``Work`` only when ``fn`` is None (otherwise the real math takes what it takes); None -> 0.
  Waiting uses an Event wait (releases the GIL) and ends early when the backend closes.
* Errors are sticky per stream (see ``dbo.streams.base``). All waits are bounded by ``timeout``.
* ``close()`` stops the workers: work not started yet is dropped (a host thread waiting on it gets
  StreamError), a running kernel's ``fn`` finishes, and the workers are joined with a bound.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

from ..costs import Work, seconds_for
from ..errors import StreamError, StreamTimeout
from ..registry import registered_ubatch_id
from .base import Backend, Event, Stream, _check_kind, _kernel_name, sticky_error

logger = logging.getLogger(__name__)

__all__ = ["ThreadsBackend", "ThreadStream", "ThreadEvent"]

_POLL = 0.01  # seconds between checks of the stop flag inside worker waits
_JOIN_BOUND = 5.0  # most seconds close() spends joining workers


class _Done:
    """Completion token of a marker: an event record or a synchronize point."""

    __slots__ = ("flag", "error", "note", "stream", "dropped")

    def __init__(self, stream: "ThreadStream"):
        self.flag = threading.Event()
        self.error: BaseException | None = None
        self.note = ""
        self.stream = stream
        self.dropped = False  # the backend closed before the stream reached this point

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
    __slots__ = ("fn", "args", "name", "kind", "seconds", "tracer", "ubatch")

    def __init__(self, fn, args, name, kind, seconds, tracer, ubatch):
        self.fn = fn
        self.args = args
        self.name = name
        self.kind = kind
        self.seconds = seconds
        self.tracer = tracer
        self.ubatch = ubatch


class ThreadStream(Stream):
    backend: "ThreadsBackend"

    def __init__(self, backend: "ThreadsBackend", name: str):
        super().__init__(backend, name)
        self._cond = threading.Condition()
        self._queue: collections.deque = collections.deque()
        self._busy = False
        self._closing = False
        self._worker: threading.Thread | None = None
        self._error: BaseException | None = None
        self._error_note = ""

    # --- host side ---------------------------------------------------------------------------

    @property
    def error(self) -> BaseException | None:
        """The exception that made this stream fail, or None."""
        return self._error

    def _raise_if_failed(self, action: str) -> None:
        err = self._error
        if err is not None:
            raise sticky_error(self.name, err, action, self._error_note)

    def _enqueue(self, item: Any) -> None:
        with self._cond:
            if self._closing:
                raise StreamError(f"stream {self.name!r}: backend {self.backend.name}#{self.backend.id} is closed")
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name=f"dbo-stream-{self.backend.id}-{self.name}", daemon=True
                )
                self._worker.start()
            self._queue.append(item)
            self._cond.notify()

    def launch(self, fn: Callable | None, *args: Any, name: str | None = None, kind: str = "compute", cost: Any = None) -> None:
        _check_kind(kind)
        b = self.backend
        b._check_open()
        self._raise_if_failed("launch")
        seconds = b._modelled_seconds(fn, kind, cost, args)
        tr = b._tracing()
        ubatch = registered_ubatch_id() if tr is not None else None
        self._enqueue(_Kernel(fn, args, _kernel_name(fn, name, kind), kind, seconds, tr, ubatch))

    def wait_event(self, event: Event) -> None:
        self._check_event(event)
        token = event._token  # the most recent record, now
        if token is None or (token.flag.is_set() and token.error is None and not token.dropped):
            return
        self._enqueue(_Wait(token))

    def synchronize(self) -> None:
        with self._cond:
            idle = self._worker is None or self._closing
        if not idle:
            token = _Done(self)
            self._enqueue(token)
            self.backend._wait_host(token.flag, f"synchronize of stream {self.name!r}")
            token.check("synchronize")
        self._raise_if_failed("synchronize")

    def query(self) -> bool:
        with self._cond:
            return not self._queue and not self._busy

    # --- worker side -------------------------------------------------------------------------

    def _fail(self, exc: BaseException, note: str = "") -> None:
        if self._error is None:
            self._error = exc
            self._error_note = note
            logger.debug("stream %r failed: %r", self.name, exc)

    def _run(self) -> None:
        dropped: list = []
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._closing:
                        self._cond.wait()
                    if self._closing:
                        dropped = list(self._queue)
                        self._queue.clear()
                        return
                    item = self._queue.popleft()
                    self._busy = True
                try:
                    self._execute(item)
                finally:
                    with self._cond:
                        self._busy = False
        except BaseException as e:  # a bug in the worker itself: fail the stream, never raise out
            logger.exception("worker of stream %r crashed", self.name)
            self._fail(e, "worker crashed")
            with self._cond:
                self._closing = True
                dropped = list(self._queue)
                self._queue.clear()
        finally:
            for item in dropped:
                if isinstance(item, _Done):
                    item.error = self._error
                    item.note = self._error_note
                    item.dropped = True
                    item.flag.set()

    def _execute(self, item: Any) -> None:
        b = self.backend
        if isinstance(item, _Done):
            item.error = self._error
            item.note = self._error_note
            item.flag.set()
            return
        if self._error is not None:
            return  # sticky: skip everything after a failure
        if isinstance(item, _Wait):
            tok = item.token
            if not b._wait_worker(tok.flag):
                if not b._stop.is_set():
                    self._fail(
                        StreamTimeout(
                            f"stream {self.name!r} waited more than {b.timeout:g}s for an event recorded on "
                            f"stream {tok.stream.name!r}"
                        )
                    )
                return
            if tok.error is not None:
                self._fail(tok.error, f"it waited on an event recorded on failed stream {tok.stream.name!r}")
            elif tok.dropped:
                self._fail(StreamError(f"it waited on an event of stream {tok.stream.name!r} that was closed first"))
            return
        self._run_kernel(item)

    def _run_kernel(self, k: _Kernel) -> None:
        b = self.backend
        engine = b._engines[k.kind]
        if not b._acquire_worker(engine):
            if not b._stop.is_set():
                self._fail(StreamTimeout(f"kernel {k.name!r} on stream {self.name!r} waited more than {b.timeout:g}s for the {k.kind} engine"))
            return
        t0 = time.perf_counter()
        try:
            if k.kind == "comm":
                if k.seconds:
                    b._stop.wait(k.seconds)
                if k.fn is not None:
                    k.fn(*k.args)
            else:
                if k.fn is not None:
                    k.fn(*k.args)
                if k.seconds:
                    left = t0 + k.seconds - time.perf_counter()
                    if left > 0:
                        b._stop.wait(left)
        except BaseException as e:
            self._fail(e, f"kernel {k.name!r} raised")
        finally:
            t1 = time.perf_counter()
            engine.release()
        if k.tracer is not None:
            k.tracer.kernel(self.name, k.name, k.kind, k.ubatch, t0, t1)


class ThreadEvent(Event):
    backend: "ThreadsBackend"

    def __init__(self, backend: "ThreadsBackend"):
        super().__init__(backend)
        self._token: _Done | None = None

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        token = _Done(s)
        s._enqueue(token)
        self._token = token

    def query(self) -> bool:
        token = self._token
        return token is None or token.flag.is_set()

    def synchronize(self) -> None:
        token = self._token
        if token is None:
            return
        self.backend._wait_host(token.flag, f"Event.synchronize (recorded on stream {token.stream.name!r})")
        token.check("Event.synchronize")


class ThreadsBackend(Backend):
    """CPU backend with one worker thread per stream and shared compute / link engines."""

    name = "threads"

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._stop = threading.Event()
        self._engines = {"compute": threading.Lock(), "comm": threading.Lock()}

    def _make_stream(self, name: str) -> Stream:
        return ThreadStream(self, name)

    def new_event(self) -> Event:
        return ThreadEvent(self)

    def now(self) -> float:
        return time.perf_counter()

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

    # --- bounded waits -----------------------------------------------------------------------

    def _wait_host(self, flag: threading.Event, what: str) -> None:
        if not flag.wait(self.timeout):
            raise StreamTimeout(f"{what} did not finish within {self.timeout:g}s (backend {self.name}#{self.id})")

    def _wait_worker(self, flag: threading.Event) -> bool:
        """Wait for ``flag`` up to the timeout; False on timeout or when the backend stops."""
        deadline = time.monotonic() + self.timeout
        while not flag.wait(min(_POLL, max(0.0, deadline - time.monotonic()))):
            if self._stop.is_set() or time.monotonic() >= deadline:
                return False
        return True

    def _acquire_worker(self, lock: threading.Lock) -> bool:
        deadline = time.monotonic() + self.timeout
        while not lock.acquire(timeout=min(_POLL, max(0.0, deadline - time.monotonic()))):
            if self._stop.is_set() or time.monotonic() >= deadline:
                return False
        return True

    # --- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers (work not started is dropped) and join them, at most a few seconds."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        streams = self.streams
        for s in streams:
            with s._cond:
                s._closing = True
                s._cond.notify_all()
        deadline = time.monotonic() + min(self.timeout, _JOIN_BOUND)
        for s in streams:
            w = s._worker
            if w is not None and w is not threading.current_thread():
                w.join(max(0.0, deadline - time.monotonic()))
        alive = [s._worker.name for s in streams if s._worker is not None and s._worker.is_alive()]
        if alive:
            logger.warning("backend %s#%d closed with workers still running a kernel: %s", self.name, self.id, alive)
