"""The virtual backend's streams and events: each keeps a ``Lane`` or a ``Mark`` (``_state``) on its
backend's ``VirtualClock`` (``_clock``), changed only through the clock's methods.

A stream runs a kernel's math at once on the calling thread (none when a tensor argument is on
the meta device) and hands the clock a ``Launch`` priced by its backend (``launch_costs``). A
failed kernel makes the stream fail (sticky), as every backend's streams do (``dbo.streams.base``).
"""

from __future__ import annotations

from typing import Any, Callable

from dbo.registry import acting_ubatch_id
from dbo.streams import base
from dbo.streams.base import Event, KernelSpec, Stream, sticky_error
from dbo.streams.virtual._state import Lane, Launch, Mark


class VirtualStream(Stream):
    backend: Any  # the VirtualBackend that made it (which imports this module)

    def __init__(self, backend: Any, name: str):
        super().__init__(backend, name)
        self.lane = Lane(name)  # its ready time and last engine on the backend's clock

    @property
    def ready_time(self) -> float:
        """Virtual time at which everything launched so far on this stream is done (a sleeping
        device is woken first: the host looks)."""
        return self.backend.clock.ready(self.lane)

    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        b = self.backend
        kname = spec.name
        host_s, first_s, duration, calls, meta, syncs = b.launch_costs(fn, spec.kind, spec.cost, args, spec.op)
        tr = b._tracing()
        ub = acting_ubatch_id() if tr is not None else None
        engine, share = spec.kind, 0.0
        if self.role == "side" and spec.kind == "compute":  # beside the compute engine, holding its bytes' share
            engine, share = "side", b.bandwidth_share(spec.cost, args, duration)
        launch = Launch(
            spec.kind, kname, spec.op, spec.layer, ub, tr, duration, calls, host_s, first_s, syncs, engine, share
        )
        b.clock.issue(self.lane, launch)
        if base._observer is not None:
            fn = base._observer.launch(self, fn, args, kname)
        if fn is not None and not meta:
            try:
                fn(*args)
            except Exception as e:
                with b.clock.lock:
                    if self._error is None:
                        self._error = e
                        self._error_note = f"kernel {kname!r} raised"

    def wait_event(self, event: Event) -> None:
        ev = self._check_event(event)
        clock = self.backend.clock
        if base._observer is not None:
            base._observer.wait(self, ev)
        err = clock.wait(self.lane, ev._mark)
        if err is not None:
            with clock.lock:
                if self._error is None:
                    self._error = err
                    self._error_note = f"it waited on an event recorded on failed stream {ev._mark.stream!r}"

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        lane = self.lane
        self.backend.clock.sync(lambda: lane.ready, self.name)
        self._raise_if_failed("synchronize")

    def _activate(self) -> None:
        self.backend.clock.switch_stream()

    def query(self) -> bool:
        return self.backend.clock.query(self.lane)


class VirtualEvent(Event):
    backend: Any  # the VirtualBackend that made it (which imports this module)

    def __init__(self, backend: Any):
        super().__init__(backend)
        self._mark = Mark()  # the most recent record, on the backend's clock

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        clock = self.backend.clock
        if base._observer is not None:
            base._observer.record(self, s)
        # A fresh mark per record: a wait issued before this record, still queued on a sleeping
        # device, keeps the record it waited for (CUDA: a wait sees the most recent record at its call).
        self._mark = Mark()
        clock.record(self._mark, s.lane, s._error, s._error_note)  # type: ignore[attr-defined]

    @property
    def time(self) -> float | None:
        """Virtual completion time of the most recent record (None: never recorded; 0.0 once
        recorded before a ``reset_clock``)."""
        if not self._mark.recorded:
            return None
        return self.backend.clock.time_of(self._mark)

    def query(self) -> bool:
        t = self.time
        return t is None or t <= self.backend.clock.host

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        if not self._mark.recorded:
            return
        m = self._mark
        self.backend.clock.sync(lambda: self.time, m.stream)
        if m.error is not None:
            raise sticky_error(m.stream, m.error, "Event.synchronize", m.note)
