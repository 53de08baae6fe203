"""The threads backend's streams and events: ``ThreadStream``, ``ThreadEvent``.

A stream is a logical queue of kernels, event records (markers) and waits, with no thread of its
own; its head advances as soon as it can, under the backend's scheduler lock (``_backend``): a
marker completes when everything before it is done, a wait passes when its event is complete (else
the stream is parked on the event), a kernel is handed to its engine (``_engine``) and the
stream's next item waits until that kernel has finished. An event is the marker of its latest
record. Failures are sticky per stream (``dbo.streams.base``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

from dbo.errors import StreamError
from dbo.registry import acting_ubatch_id
from dbo.streams import base
from dbo.streams.base import Event, KernelSpec, Stream
from dbo.streams.threads._engine import Done, Kernel, Wait, complete

logger = logging.getLogger("dbo.streams.threads._backend")  # the backend's: streams and backend log as one


class ThreadStream(Stream):
    """An in-order queue; its kernels run on the backend's engine executors."""

    backend: Any  # the ThreadsBackend that made it (_backend, which imports this module)

    def __init__(self, backend: Any, name: str):
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

    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        b = self.backend
        kind = spec.kind
        seconds = b._modelled_seconds(fn, kind, spec.cost, args)
        tr = b._tracing()
        ubatch = acting_ubatch_id() if tr is not None else None
        if base._observer is not None:
            fn = base._observer.launch(self, fn, args, spec.name)
        self._enqueue(Kernel(fn, args, spec.name, kind, seconds, tr, ubatch, next(b._seq), spec.op, spec.layer))

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
    backend: Any  # the ThreadsBackend that made it

    def __init__(self, backend: Any):
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
