"""The virtual backend's timeline: one object for its host clock and its device, under one lock.

``VirtualClock`` owns what a ``VirtualBackend``'s streams and events share:

* the host clock (``host``): it moves when the host runs Python (``run_python``: launches, event
  calls, stream switches, thread starts, ``advance``) or waits without running it (``block_host``:
  a sync, a handoff, a join);
* the engines' free times (compute, comm, and side: a side stream's compute kernels), the comm
  kernels' intervals (``comm_sm_share``) and the side kernels' with their bandwidth shares;
* the lazy device queue (``SleepingDevice``: ``HostCosts.idle_hold``, kernels waiting on the host)
  and the host's Python kept as GIL intervals (``HostGil``: ``OpCost.gil_calls``);
* the ubatch threads live (``threaded``), whether a graph replay is re-issuing ops (``replaying``)
  and the epoch ``reset`` starts.

A stream's place on the timeline is a ``Lane``, an event's most recent record a ``Mark``, a launch
on its way to its engine a ``Launch`` (``_state``); only the clock's methods change them, each under the lock
(``lock``: re-entrant, for a caller that must do more under the same hold). The clock reads its
backend through three functions: the device profile now (``profile``), the lanes of its streams in
creation order (``lanes``) and the tracer, if recording (``tracing``); ``configure`` gives it the
host costs to charge.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from typing import Any, Callable, Iterator

from dbo.costs import DeviceProfile, HostCosts
from dbo.errors import StreamError
from dbo.registry import acting_ubatch_id
from dbo.streams.virtual._gil import HostGil
from dbo.streams.virtual._sleep import SleepingDevice
from dbo.streams.virtual._state import Lane, Launch, Mark
from dbo.trace import ubatch_track


def _stretch(start: float, duration: float, busy: list[tuple[float, float, float]]) -> float:
    """End of a compute kernel of ``duration`` from ``start`` that runs, while the ``(start, end, share)``
    intervals of ``busy`` run, at ``1 -`` the sum of their shares of its rate (none below 0)."""
    edges = sorted({x for s, e, _ in busy for x in (s, e) if x > start})
    t, left = start, duration
    if left <= 0:
        return start
    for edge in edges:
        rate = max(0.0, 1.0 - sum(sh for s, e, sh in busy if s <= t < e))
        done = (edge - t) * rate
        if rate > 0 and left <= done:
            return t + left / rate
        left -= done
        t = edge
    return t + left


class VirtualClock:
    """The host clock, the engines, the device queue and the host's GIL of one virtual backend."""

    def __init__(
        self, profile: Callable[[], DeviceProfile], lanes: Callable[[], list[Lane]], tracing: Callable[[], Any]
    ):
        self._profile = profile
        self._lanes = lanes
        self._tracing = tracing
        self._lock = threading.RLock()
        self._host = 0.0
        self._engine_free = {"compute": 0.0, "comm": 0.0, "side": 0.0}
        self._epoch = 0
        self._comm_busy: collections.deque = collections.deque()  # comm intervals (comm SM share)
        self._side_busy: collections.deque = collections.deque()  # side kernels' (start, end, share)
        self._live = 0  # ubatch threads started and not yet joined (HostCosts.threaded)
        self._replaying = False  # inside replay(): re-issued ops cost HostCosts.replay_op each
        self._sleep = SleepingDevice()  # HostCosts.idle_hold and kernels waiting on the host (virtual_sleep)
        self._gil = HostGil()  # when the host ran Python (OpCost.gil_calls, virtual_gil)
        self._hc = HostCosts()
        self._gil_on = False
        self._share = 0.0

    def configure(self, host: HostCosts, comm_sm_share: float) -> None:
        """Charge ``host``'s costs from now on, hold a sleeping device for its ``idle_hold`` and
        slow compute under comm by ``comm_sm_share``."""
        self._hc = host
        self._sleep.hold = host.idle_hold
        # a host whose Python keeps an idle device waiting (threads) also keeps kernels' GIL returns waiting
        self._gil_on = host.idle_hold > 0 and any(oc.gil_calls for oc in host.ops.values())
        self._share = comm_sm_share

    # --- what the clock says ---------------------------------------------------------------------

    @property
    def lock(self) -> Any:
        """The re-entrant lock every method takes."""
        return self._lock

    @property
    def host(self) -> float:
        """The host clock (seconds)."""
        return self._host

    @property
    def threaded(self) -> bool:
        """Whether two or more ubatch threads are live (the profile's threaded costs apply)."""
        return self._live > 1

    @property
    def replaying(self) -> bool:
        """Whether a graph replay is re-issuing ops (they cost no host time)."""
        return self._replaying

    @property
    def gil_on(self) -> bool:
        """Whether kernels' GIL returns wait for the host's Python (``OpCost.gil_calls`` apply)."""
        return self._gil_on

    # --- the host ----------------------------------------------------------------------------

    def run_python(self, dt: float) -> tuple[float, float]:
        """The host runs Python for ``dt`` seconds; returns the host clock before and after."""
        with self._lock:
            t0 = self._host
            self._busy(dt)
            return t0, self._host

    def block_host(self, dt: float) -> tuple[float, float]:
        """The host waits ``dt`` seconds without running Python (for another thread); returns the
        host clock before and after."""
        with self._lock:
            t0 = self._host
            self._free(dt)
            return t0, self._host

    def switch_stream(self) -> None:
        """The host makes another stream current (``HostCosts.stream_switch`` of Python)."""
        if self._hc.stream_switch:
            with self._lock:
                self._busy(self._hc.stream_switch)

    def thread_started(self) -> None:
        """One more ubatch thread is live."""
        with self._lock:
            self._live += 1

    def thread_joined(self) -> None:
        """One ubatch thread less is live."""
        with self._lock:
            self._live = max(0, self._live - 1)

    @contextlib.contextmanager
    def replay(self) -> Iterator[None]:
        """A graph replay: one plain launch of host Python, then each op re-issued inside the
        context costs ``HostCosts.replay_op`` (0 for a CUDA graph)."""
        with self._lock:
            self._busy(self._hc.launch + self._hc.kernel)
            self._replaying = True
        try:
            yield
        finally:
            with self._lock:
                self._replaying = False

    def settle(self, final: bool = True) -> None:
        """The host blocks or looks at the device: a sleeping device wakes now, and the queued ops
        are placed; ``final``: all of them, the host being free from now on (a sync, a look), else
        as far as the host's Python so far decides (a handoff, a join: the host goes on running
        Python in another thread soon after)."""
        with self._lock:
            self._sleep.wake(self._host, final)

    def sync(self, until: Callable[[], float | None], what: str) -> None:
        """A host sync waiting for device time ``until()`` (read once a sleeping device is woken):
        host = max(host, until()) + ``HostCosts.sync``; traced as a "sync" span on ``what``."""
        with self._lock:
            self._settle()
            before = self._host
            self._free(max(before, until() or 0.0) + self._hc.sync - before)
            after = self._host
        tr = self._tracing()
        if tr is not None and after > before and not self._hc.zero:  # device-only model: no host spans
            ub = acting_ubatch_id()
            tr.span(ubatch_track(ub), "sync", before, after, ubatch=ub, on=what)

    # --- the device --------------------------------------------------------------------------

    def issue(self, lane: Lane, k: Launch) -> None:
        """The host issues ``k`` onto ``lane``'s stream: a host sync first when ``k.syncs`` (traced
        as a "host sync" span), then ``k.host_s`` of Python; the kernel is placed now, or queued
        (on a sleeping device until the host blocks, or while its end depends on what the host
        does next)."""
        with self._lock:
            if k.syncs:
                self._settle()  # the host waits for the device: it blocks
            host0 = host_before = self._host
            if k.syncs:
                self._free(max(host0, lane.ready) + self._hc.sync - host0)
                host0 = self._host
            self._busy(k.host_s)  # the launch's Python
            k.first_at = host0 + k.first_s
            k.issued_at = self._host
            k.latency = self._latency()
            k.gap = self._gap()
            self._sleep.launch(k.first_at, self._idle_by, lambda w, final: self._place(lane, k, w, final))
        if k.tracer is not None and k.syncs and not self._hc.zero:
            k.tracer.span(ubatch_track(k.ubatch), "host sync", host_before, host0, ubatch=k.ubatch, kernel=k.name)

    def record(self, mark: Mark, lane: Lane, error: BaseException | None, note: str) -> None:
        """An event record on ``lane``'s stream (``HostCosts.event``; ``replay_op`` while replaying):
        ``mark`` takes the stream's ready time once everything issued before it is placed, and the
        stream's sticky ``error`` and its ``note``."""
        with self._lock:
            if not self._replaying:
                self._busy(self._hc.event)
            elif self._hc.replay_op:
                self._busy(self._hc.replay_op)
            mark.recorded = True
            mark.time = None  # known once a sleeping device wakes

            def place() -> None:
                mark.time = lane.ready

            self._sleep.now_or_at_wake(self._host, place)
            mark.epoch = self._epoch
            mark.error = error
            mark.note = note
            mark.stream = lane.name

    def wait(self, lane: Lane, mark: Mark) -> BaseException | None:
        """``lane``'s stream waits for ``mark`` (``HostCosts.event``; ``replay_op`` while replaying): its
        ready time rises to the record's time, plus the wake-up latency when the record is another
        stream's. Returns the sticky error the record captured; None, and no wait, when the event
        was never recorded or was recorded before a reset."""
        with self._lock:
            if not self._replaying:
                self._busy(self._hc.event)
            elif self._hc.replay_op:
                self._busy(self._hc.replay_op)
            if not mark.recorded or mark.epoch != self._epoch:
                return None
            lat = self._latency() if mark.stream != lane.name else 0.0

            def wait() -> None:
                lane.ready = max(lane.ready, mark.time + lat)  # type: ignore[operator]

            self._sleep.now_or_at_wake(self._host, wait)  # after the record is placed
            return mark.error

    def ready(self, lane: Lane) -> float:
        """When everything launched on ``lane``'s stream is done (the host looks: it settles)."""
        with self._lock:
            self._settle()
            return lane.ready

    def query(self, lane: Lane) -> bool:
        """Whether everything launched on ``lane``'s stream is done by the host clock (a look)."""
        with self._lock:
            self._settle()
            return lane.ready <= self._host

    def time_of(self, mark: Mark) -> float | None:
        """A recorded ``mark``'s time (a look: it settles); 0.0 when recorded before a reset."""
        with self._lock:
            self._settle()
        return mark.time if mark.epoch == self._epoch else 0.0

    def engine_free(self, kind: str) -> float:
        """When the ``kind`` engine is next free (a look: it settles)."""
        with self._lock:
            self._settle()
            return self._engine_free[kind]

    def reset(self) -> None:
        """Start a new timed region at 0: host clock, engines, lanes; the epoch moves on (older
        marks read as 0). StreamError, changing nothing, if a lane is busy past the host clock."""
        with self._lock:
            self._settle()
            busy = [lane.name for lane in self._lanes() if lane.ready > self._host]
            if busy:
                raise StreamError(f"reset_clock() with work in flight on streams {busy}; call synchronize() first")
            self._host = 0.0
            self._engine_free = {"compute": 0.0, "comm": 0.0, "side": 0.0}
            self._comm_busy.clear()
            self._side_busy.clear()
            self._gil.clear()
            for lane in self._lanes():
                lane.ready = 0.0
            self._epoch += 1

    # --- under the lock ------------------------------------------------------------------------

    def _place(self, lane: Lane, k: Launch, wake: float, final: bool) -> float | None:
        """Place ``k`` on its engine: it starts when its stream, its engine (``k.gap`` after its last
        kernel) and the host have issued its first kernel (and the device is awake: ``wake``), and
        ends no earlier than the host has issued all of it. With GIL calls its end also waits for
        the host's Python (``virtual_gil``): returns the host time to wait for, and places nothing,
        when that depends on what the host does after now (unless ``final``)."""
        kind, engine = k.kind, k.engine
        ready = lane.ready
        if lane.last_kind is not None and lane.last_kind != kind:  # the stream moves to the other engine
            ready += k.latency
        start = max(ready, self._engine_free[engine] + k.gap, k.first_at, wake)
        end = start + k.duration
        if engine == "compute" and ((self._share > 0 and self._comm_busy) or self._side_busy):
            free = self._engine_free["compute"]
            for busy in (self._comm_busy, self._side_busy):
                while busy and busy[0][1] <= free:
                    busy.popleft()
            held = [(s, e, self._share) for s, e in self._comm_busy] if self._share > 0 else []
            end = _stretch(start, k.duration, held + list(self._side_busy))
        if k.calls:
            walked, need = self._gil.walk(start, end - start, k.calls, self._sleep.hold, self._host, final)
            if walked is None:
                return need
            end = walked
            if len(self._gil) > 4096:
                self._gil.prune(min(self._engine_free.values()))
        lane.last_kind = kind
        if end < k.issued_at:
            end = k.issued_at
        lane.ready = end
        self._engine_free[engine] = end
        if kind == "comm" and self._share > 0:
            self._comm_busy.append((start, end))
        if engine == "side" and k.share > 0:
            self._side_busy.append((start, end, k.share))
        if k.tracer is not None:
            k.tracer.kernel(lane.name, k.name, kind, k.ubatch, start, end, k.op, k.layer)
        return None

    def _latency(self) -> float:
        """Seconds before work handed across engines can start (``event_latency``, plus
        ``event_latency_threaded`` while two or more ubatch threads are live)."""
        p = self._profile()
        return p.event_latency + (p.event_latency_threaded if self._live > 1 else 0.0)

    def _gap(self) -> float:
        """Seconds an engine takes from one kernel's end to the start of the next, waiting one
        (``engine_gap``, plus ``engine_gap_threaded`` while two or more ubatch threads are live)."""
        p = self._profile()
        return p.engine_gap + (p.engine_gap_threaded if self._live > 1 else 0.0)

    def _idle_by(self, t: float) -> bool:
        """Whether every engine and stream is idle by ``t``."""
        return all(e <= t for e in self._engine_free.values()) and all(lane.ready <= t for lane in self._lanes())

    def _settle(self) -> None:
        self._sleep.wake(self._host, True)

    def _busy(self, dt: float) -> None:
        """The host runs Python for ``dt`` seconds."""
        t0 = self._host
        self._host = t0 + dt
        if self._gil_on:
            self._gil.hold(t0, self._host)
            self._sleep.advanced(self._host)

    def _free(self, dt: float) -> None:
        """The host waits ``dt`` seconds without running Python."""
        self._host += dt
        if self._gil_on:
            self._sleep.advanced(self._host)
