"""Virtual backend: deterministic timing from the cost model, no sleeping, no worker threads.

* Math: ``launch`` runs ``fn(*args)`` at once on the calling thread, or skips it when any tensor
  argument is on the meta device (shape-only runs of big models).
* Timing, per kernel: ``start = max(stream ready, engine free, host clock)`` where the stream's
  ready time already includes the events it waited on; ``end = start + duration``; then the
  stream's ready time and the engine's free time become ``end``. Two engines: every compute
  kernel shares one (compute kernels serialize in launch order), every comm kernel shares the
  link. Duration (``dbo.costs.seconds_for``): a float cost as given; ``Work`` -> launch_overhead +
  max(flops / peak_flops, bytes / mem_bandwidth); ``Transfer`` -> latency + bytes / bandwidth;
  None -> from the tensor args' bytes B: compute launch_overhead + B / mem_bandwidth, comm
  latency + B / bandwidth.
* Events: ``record`` stores the stream's ready time (``Event.time``); ``wait_event`` raises the
  waiting stream's ready time to it. ``synchronize`` (stream, event, backend) moves the host
  clock forward to the ready / event time. ``now()`` is the host clock; ``advance(dt)`` moves it
  by ``dt`` (to model host-side work).
* ``reset_clock()`` starts a new timed region at 0: host clock, engines and stream ready times
  become 0, and events recorded before the reset count as complete at 0. Call it when nothing is
  in flight (after ``synchronize``), else it raises StreamError.
* Nothing reads the wall clock: the same program gives the same timeline on any machine.
* A kernel whose ``fn`` raises makes its stream fail (sticky): the next launch / synchronize /
  event synchronize raises StreamError with the original as ``__cause__``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..costs import iter_tensors
from ..errors import StreamError
from ..registry import registered_ubatch_id
from .base import Backend, Event, Stream, _check_kind, _kernel_name, sticky_error

__all__ = ["VirtualBackend", "VirtualStream", "VirtualEvent"]


def _has_meta(args: tuple) -> bool:
    return any(t.is_meta for t in iter_tensors(args))


class VirtualStream(Stream):
    backend: "VirtualBackend"

    def __init__(self, backend: "VirtualBackend", name: str):
        super().__init__(backend, name)
        self._ready = 0.0

    @property
    def ready_time(self) -> float:
        """Virtual time at which everything launched so far on this stream is done."""
        return self._ready

    def launch(self, fn: Callable | None, *args: Any, name: str | None = None, kind: str | None = None, cost: Any = None) -> None:
        kind = self._check_launch(kind)
        b = self.backend
        duration = b.kernel_seconds(kind, cost, args)
        kname = _kernel_name(fn, name, kind)
        with b._lock:
            start = max(self._ready, b._engine_free[kind], b._host)
            end = start + duration
            self._ready = end
            b._engine_free[kind] = end
        tr = b._tracing()
        if tr is not None:
            tr.kernel(self.name, kname, kind, registered_ubatch_id(), start, end)
        if fn is not None and not _has_meta(args):
            try:
                fn(*args)
            except Exception as e:
                with b._lock:
                    if self._error is None:
                        self._error = e
                        self._error_note = f"kernel {kname!r} raised"

    def wait_event(self, event: Event) -> None:
        ev = self._check_event(event)
        b = self.backend
        with b._lock:
            if ev._time is None or ev._epoch != b._epoch:
                return
            self._ready = max(self._ready, ev._time)
            if ev._error is not None and self._error is None:
                self._error = ev._error
                self._error_note = f"it waited on an event recorded on failed stream {ev._stream_name!r}"

    def synchronize(self) -> None:
        b = self.backend
        with b._lock:
            b._host = max(b._host, self._ready)
        self._raise_if_failed("synchronize")

    def query(self) -> bool:
        return self._ready <= self.backend._host


class VirtualEvent(Event):
    backend: "VirtualBackend"

    def __init__(self, backend: "VirtualBackend"):
        super().__init__(backend)
        self._time: float | None = None
        self._epoch = -1
        self._error: BaseException | None = None
        self._error_note = ""
        self._stream_name = ""

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        b = self.backend
        with b._lock:
            self._time = s._ready
            self._epoch = b._epoch
            self._error = s._error
            self._error_note = s._error_note
            self._stream_name = s.name

    @property
    def time(self) -> float | None:
        """Virtual completion time of the most recent record (None: never recorded; 0.0 once
        recorded before a ``reset_clock``)."""
        if self._time is None:
            return None
        return self._time if self._epoch == self.backend._epoch else 0.0

    def query(self) -> bool:
        t = self.time
        return t is None or t <= self.backend._host

    def synchronize(self) -> None:
        t = self.time
        if t is None:
            return
        b = self.backend
        with b._lock:
            b._host = max(b._host, t)
        if self._error is not None:
            raise sticky_error(self._stream_name, self._error, "Event.synchronize", self._error_note)


class VirtualBackend(Backend):
    """Deterministic CPU backend: a virtual clock driven by the cost model."""

    name = "virtual"

    def __init__(self, **options: Any):
        super().__init__(**options)
        self._lock = threading.RLock()
        self._host = 0.0
        self._engine_free = {"compute": 0.0, "comm": 0.0}
        self._epoch = 0

    def _make_stream(self, name: str) -> Stream:
        return VirtualStream(self, name)

    def new_event(self) -> Event:
        return VirtualEvent(self)

    def now(self) -> float:
        """The virtual host clock (seconds)."""
        return self._host

    def kernel_seconds(self, kind: str, cost: Any, args: tuple) -> float:
        """Modelled duration of a kernel (always a float on virtual)."""
        return super().kernel_seconds(kind, cost, args)  # type: ignore[return-value]

    def engine_free(self, kind: str) -> float:
        """Virtual time at which the ``kind`` engine ("compute" or "comm") is next free."""
        _check_kind(kind)
        return self._engine_free[kind]

    def advance(self, seconds: float) -> float:
        """Move the host clock forward by ``seconds`` (host-side work); return the new time."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"advance() needs seconds >= 0, got {seconds!r}")
        with self._lock:
            self._host += float(seconds)
            return self._host

    def reset_clock(self) -> None:
        """Start a new timed region at 0 (host clock, engines, streams; older events read as 0).

        Raises StreamError if some stream still has work beyond the host clock (synchronize first).
        """
        with self._lock:
            busy = [s.name for s in self.streams if s._ready > self._host]  # type: ignore[attr-defined]
            if busy:
                raise StreamError(
                    f"reset_clock() with work in flight on streams {busy}; call synchronize() first"
                )
            self._host = 0.0
            self._engine_free = {"compute": 0.0, "comm": 0.0}
            for s in self.streams:
                s._ready = 0.0  # type: ignore[attr-defined]
            self._epoch += 1
