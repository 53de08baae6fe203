"""Virtual backend: deterministic timing from the cost model, no sleeping, no worker threads.

* Math: ``launch`` runs ``fn(*args)`` at once on the calling thread, or skips it when any tensor
  argument is on the meta device (shape-only runs of big models).
* Host clock (one per backend: the Python work of different ubatches never overlaps): each launch
  costs ``HostCosts.launch + kernels * HostCosts.kernel`` (+ the op's extra host time; the op is the
  kernel name's first word, looked up in ``HostCosts.ops``); a stream switch (``_activate``), an
  event record or wait, a handoff / thread start / thread join (``host_event``) and a graph replay
  (``on_graph_replay``: one plain launch) add theirs; a host sync (stream, event, backend
  ``synchronize``, or launching a kernel function marked with ``dbo.costs.syncs_host``) moves the
  host clock to ``max(host, device completion) + HostCosts.sync``. ``now()`` is the host clock.
* Device timing, per kernel: ``start = max(stream ready, engine free + engine gap, host clock after
  issuing its first kernel)`` (the gap: the profile's ``engine_gap``, plus ``engine_gap_threaded``
  while two or more ubatch threads are live); ``end = max(start + duration, host clock after
  issuing all of it)``; then the stream's ready time and the engine's free time become ``end``.
  Two engines: every compute kernel shares one (compute kernels serialize in launch order), every
  comm kernel shares the link. A compute kernel running while a comm kernel runs progresses at ``1 - comm_sm_share`` of its rate.
  Duration: ``dbo.costs.seconds_for`` with the dtype of the first floating-point tensor argument
  (when the profile has per-dtype rates) and the op's kernel count, corrected by the op's
  ``OpCost``: ``device + scale * that + memory_scale * its memory time`` (``device`` times the
  profile's ``fixed_threaded`` while two or more ubatch threads are live). A kernel marked ``syncs_host`` syncs the host only when
  ``HostCosts.kernel_sync`` (a GPU-like host) is set.
* A sleeping device (``HostCosts.idle_hold`` > 0, ``virtual_sleep``): a kernel launched while
  every engine and stream is idle puts the device to sleep until the host blocks (a sync, a
  handoff, a thread join) or looks (a query, a ready time, an event's time), or the hold runs out;
  the ops issued meanwhile are placed then, in order, none starting earlier.
* The GIL for busy kernels (an op's ``OpCost.gil_calls``, only while ``idle_hold`` > 0,
  ``virtual_gil``): the host's Python (launches, event calls, stream switches, thread starts,
  ``advance``) is kept as busy intervals; each of a kernel's GIL returns, spread evenly over its
  device time, that falls inside one waits for its end (at most ``idle_hold``). Such a kernel,
  and everything issued after it, stays queued until the host's Python has decided its end (the
  host clock passed the return, or the host blocks for good: a sync or a look).
* Events: ``record`` stores the stream's ready time (``Event.time``); ``wait_event`` raises the
  waiting stream's ready time to it, plus the profile's wake-up latency when the event was
  recorded on another stream (``event_latency``, and ``event_latency_threaded`` while two or more
  ubatch threads are live); a stream whose next kernel runs on the other engine than its last
  pays the same latency. ``advance(dt)`` moves the host clock by ``dt``.
* ``reset_clock()`` starts a new timed region at 0: host clock, engines and stream ready times
  become 0, and events recorded before the reset count as complete at 0. Call it when nothing is
  in flight (after ``synchronize``), else it raises StreamError.
* Nothing reads the wall clock: the same program gives the same timeline on any machine. With a
  profile whose host costs are all zero (``cpu``), the host clock moves only at syncs and
  ``advance`` (the device-only model).
* A kernel whose ``fn`` raises makes its stream fail (sticky): the next launch / synchronize /
  event synchronize raises StreamError with the original as ``__cause__``.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from typing import Any, Callable, Iterator

from dbo.costs import OpCost, iter_tensors, memory_seconds, seconds_for
from dbo.errors import StreamError
from dbo.registry import acting_ubatch_id
from dbo.trace import ubatch_track
from dbo.streams import base
from dbo.streams.base import Backend, Event, Stream, _check_kind, _kernel_name, sticky_error
from dbo.streams.virtual._gil import HostGil
from dbo.streams.virtual._sleep import SleepingDevice

__all__ = ["VirtualBackend", "VirtualStream", "VirtualEvent"]


HOST_EVENTS = ("yield", "thread_start", "thread_join")
_NO_CORRECTION = OpCost()


def _scan(args: tuple, want_dtype: bool) -> tuple[bool, Any]:
    """(any tensor argument on meta, dtype of the first floating-point tensor or None)."""
    meta, dtype = False, None
    for t in iter_tensors(args):
        if t.is_meta:
            meta = True
        if want_dtype and dtype is None and t.is_floating_point():
            dtype = t.dtype
    return meta, dtype


def _stretch(start: float, duration: float, busy: Any, share: float) -> float:
    """End of a compute kernel of ``duration`` from ``start`` that runs at ``1 - share`` of its
    rate while one of the (ordered, disjoint) comm intervals ``busy`` runs."""
    t, left, rate = start, duration, 1.0 - share
    for cs, ce in busy:
        if ce <= t:
            continue
        if cs > t:
            if left <= cs - t:
                return t + left
            left -= cs - t
            t = cs
        done = (ce - t) * rate
        if left <= done:
            return t + left / rate
        left -= done
        t = ce
    return t + left


class VirtualStream(Stream):
    backend: "VirtualBackend"

    def __init__(self, backend: "VirtualBackend", name: str):
        super().__init__(backend, name)
        self._ready = 0.0
        self._last_kind: str | None = None  # engine of the last kernel launched on this stream

    @property
    def ready_time(self) -> float:
        """Virtual time at which everything launched so far on this stream is done (a sleeping
        device is woken first: the host looks)."""
        with self.backend._lock:
            self.backend._settle()
            return self._ready

    def launch(self, fn: Callable | None, *args: Any, name: str | None = None, kind: str | None = None, cost: Any = None) -> None:
        kind = self._check_launch(kind)
        b = self.backend
        kname = _kernel_name(fn, name, kind)
        host_s, first_s, nk, oc = b._op_cost(kname, fn)
        if b._replaying:  # inside a graph replay the launch was paid once, by on_graph_replay
            host_s = first_s = 0.0
        elif b._live > 1:
            host_s *= b._hc.threaded
            first_s *= b._hc.threaded
        meta, dtype = _scan(args, b._per_dtype)
        duration = b._duration(kind, cost, args, dtype, nk, oc)
        calls = oc.gil_calls if b._gil_on else 0
        syncs = fn is not None and b._hc.kernel_sync and getattr(fn, "dbo_syncs_host", False)
        tr = b._tracing()
        ub = acting_ubatch_id() if tr is not None else None
        with b._lock:
            if syncs:
                b._settle()  # the host waits for the device: it blocks
            host0 = host_before = b._host
            if syncs:
                b._free(max(host0, self._ready) + b._hc.sync - host0)
                host0 = b._host
            b._busy(host_s)  # the launch's Python
            issued = b._host
            item = (kind, duration, host0 + first_s, issued, kname, ub, tr, b._wake_latency(), calls, b._engine_gap())
            # placed now, or queued: on a sleeping device until the host blocks, or while its end
            # depends on what the host does next (virtual_sleep)
            b._sleep.launch(host0 + first_s, b._idle_by,
                            lambda w, final, item=item: self._schedule(*item, wake=w, final=final))
        if tr is not None and syncs and not b._hc.zero:
            tr.span(ubatch_track(ub), "host sync", host_before, host0, ubatch=ub, kernel=kname)
        if base._observer is not None:
            fn = base._observer.launch(self, fn, args, kname)
        if fn is not None and not meta:
            try:
                fn(*args)
            except Exception as e:
                with b._lock:
                    if self._error is None:
                        self._error = e
                        self._error_note = f"kernel {kname!r} raised"

    def _schedule(self, kind: str, duration: float, host_first: float, issued: float, kname: str, ub: Any,
                  tr: Any, lat: float, calls: int = 0, gap: float = 0.0, wake: float = 0.0,
                  final: bool = True) -> float | None:
        """Place one launched kernel on its engine (backend lock held): it starts when its stream,
        its engine (``gap`` after its last kernel) and the host have issued its first kernel (and
        the device is awake: ``wake``), and ends no earlier than the host has issued all of it.
        With ``calls`` GIL returns its end
        also waits for the host's Python (``virtual_gil``): returns the host time to wait for, and
        places nothing, when that depends on what the host does after now (unless ``final``)."""
        b = self.backend
        ready = self._ready
        if self._last_kind is not None and self._last_kind != kind:  # the stream moves to the other engine
            ready += lat
        start = max(ready, b._engine_free[kind] + gap, host_first, wake)
        if kind == "compute" and b._share > 0 and b._comm_busy:
            busy = b._comm_busy
            while busy and busy[0][1] <= b._engine_free["compute"]:
                busy.popleft()
            end = _stretch(start, duration, busy, b._share)
        else:
            end = start + duration
        if calls:
            walked, need = b._gil.walk(start, end - start, calls, b._sleep.hold, b._host, final)
            if walked is None:
                return need
            end = walked
            if len(b._gil) > 4096:
                b._gil.prune(min(b._engine_free.values()))
        self._last_kind = kind
        if end < issued:
            end = issued
        self._ready = end
        b._engine_free[kind] = end
        if kind == "comm" and b._share > 0:
            b._comm_busy.append((start, end))
        if tr is not None:
            tr.kernel(self.name, kname, kind, ub, start, end)
        return None

    def _wait_for(self, ev: "VirtualEvent", lat: float) -> None:
        self._ready = max(self._ready, ev._time + lat)  # type: ignore[operator]

    def wait_event(self, event: Event) -> None:
        ev = self._check_event(event)
        b = self.backend
        if base._observer is not None:
            base._observer.wait(self, ev)
        with b._lock:
            if not b._replaying:
                b._busy(b._hc.event)
            if not ev._recorded or ev._epoch != b._epoch:
                return
            lat = b._wake_latency() if ev._stream_name != self.name else 0.0
            b._sleep.now_or_at_wake(b._host, lambda: self._wait_for(ev, lat))  # after the record is placed
            if ev._error is not None and self._error is None:
                self._error = ev._error
                self._error_note = f"it waited on an event recorded on failed stream {ev._stream_name!r}"

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        b = self.backend
        b._host_sync(lambda: self._ready, self.name)
        self._raise_if_failed("synchronize")

    def _activate(self) -> None:
        b = self.backend
        if b._hc.stream_switch:
            with b._lock:
                b._busy(b._hc.stream_switch)

    def query(self) -> bool:
        b = self.backend
        with b._lock:
            b._settle()
            return self._ready <= b._host


class VirtualEvent(Event):
    backend: "VirtualBackend"

    def __init__(self, backend: "VirtualBackend"):
        super().__init__(backend)
        self._time: float | None = None  # None while its record waits for a sleeping device
        self._recorded = False
        self._epoch = -1
        self._error: BaseException | None = None
        self._error_note = ""
        self._stream_name = ""

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        b = self.backend
        if base._observer is not None:
            base._observer.record(self, s)
        with b._lock:
            if not b._replaying:
                b._busy(b._hc.event)
            self._recorded = True
            self._time = None  # known once a sleeping device wakes
            b._sleep.now_or_at_wake(b._host, lambda: self._place(s))
            self._epoch = b._epoch
            self._error = s._error
            self._error_note = s._error_note
            self._stream_name = s.name

    def _place(self, s: VirtualStream) -> None:
        self._time = s._ready

    @property
    def time(self) -> float | None:
        """Virtual completion time of the most recent record (None: never recorded; 0.0 once
        recorded before a ``reset_clock``)."""
        if not self._recorded:
            return None
        with self.backend._lock:
            self.backend._settle()
        return self._time if self._epoch == self.backend._epoch else 0.0

    def query(self) -> bool:
        t = self.time
        return t is None or t <= self.backend._host

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        if not self._recorded:
            return
        self.backend._host_sync(lambda: self.time, self._stream_name)
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
        self._comm_busy: collections.deque = collections.deque()  # comm intervals (comm SM share)
        self._live = 0  # ubatch threads started and not yet joined (HostCosts.threaded)
        self._replaying = False  # inside on_graph_replay's context: re-issued ops cost no host time
        self._sleep = SleepingDevice()  # HostCosts.idle_hold and kernels waiting on the host (virtual_sleep)
        self._gil = HostGil()  # when the host ran Python (OpCost.gil_calls, virtual_gil)
        self._set_profile_cache()

    def _set_profile_cache(self) -> None:
        p = self.profile
        self._hc = p.host
        self._sleep.hold = p.host.idle_hold
        # a host whose Python keeps an idle device waiting (threads) also keeps kernels' GIL returns waiting
        self._gil_on = p.host.idle_hold > 0 and any(oc.gil_calls for oc in p.host.ops.values())
        self._share = p.comm_sm_share
        self._per_dtype = bool(p.dtype_flops)
        self._op_costs: dict[tuple[str, str | None], tuple[float, float, int, OpCost]] = {}
        self._cached_profile = p

    def _op_cost(self, kname: str, fn: Any = None) -> tuple[float, float, int, OpCost]:
        """(host seconds to issue, host seconds to issue the first kernel, device kernels, the
        device correction, ``OpCost()`` for none) of a launch named ``kname`` of kernel function ``fn``:
        the profile's ``HostCosts.ops`` entry ``"<op>/<fn.__name__>"`` if there is one, else
        ``"<op>"`` (the op: the name's first word)."""
        if self.profile is not self._cached_profile:  # profile replaced after creation
            self._set_profile_cache()
        op = kname.split(" ", 1)[0]
        fname = getattr(fn, "__name__", None) if fn is not None else None
        c = self._op_costs.get((op, fname))
        if c is None:
            hc = self._hc
            key = f"{op}/{fname}" if fname is not None and f"{op}/{fname}" in hc.ops else op
            total, nk = hc.launch_cost(key)
            oc = hc.ops.get(key) or _NO_CORRECTION
            c = self._op_costs[(op, fname)] = (total, min(total, hc.launch + hc.kernel), nk, oc)
        return c

    def _wake_latency(self) -> float:
        """Seconds before work handed across engines can start (``event_latency``, plus
        ``event_latency_threaded`` while two or more ubatch threads are live)."""
        p = self.profile
        return p.event_latency + (p.event_latency_threaded if self._live > 1 else 0.0)

    def _engine_gap(self) -> float:
        """Seconds an engine takes from one kernel's end to the start of the next, waiting one
        (``engine_gap``, plus ``engine_gap_threaded`` while two or more ubatch threads are live)."""
        p = self.profile
        return p.engine_gap + (p.engine_gap_threaded if self._live > 1 else 0.0)

    def _idle_by(self, t: float) -> bool:
        """Whether every engine and stream is idle by ``t`` (lock held)."""
        return all(e <= t for e in self._engine_free.values()) and all(
            s._ready <= t for s in self.streams)  # type: ignore[attr-defined]

    def _settle(self, final: bool = True) -> None:
        """The host blocks or looks at the device (lock held): a sleeping device wakes now, and the
        queued ops are placed; ``final``: all of them, the host being free from now on (a sync, a
        look), else as far as the host's Python so far decides (a handoff, a join: the host goes on
        running Python in another thread soon after)."""
        self._sleep.wake(self._host, final)

    def _busy(self, dt: float) -> None:
        """The host runs Python for ``dt`` seconds (lock held)."""
        t0 = self._host
        self._host = t0 + dt
        if self._gil_on:
            self._gil.hold(t0, self._host)
            self._sleep.advanced(self._host)

    def _free(self, dt: float) -> None:
        """The host waits ``dt`` seconds without running Python (lock held)."""
        self._host += dt
        if self._gil_on:
            self._sleep.advanced(self._host)

    def _host_sync(self, t: Callable[[], float | None], what: str) -> None:
        """A host sync waiting for device time ``t()`` (read once a sleeping device is woken):
        host = max(host, t) + sync cost (traced)."""
        with self._lock:
            self._settle()
            before = self._host
            self._free(max(before, t() or 0.0) + self._hc.sync - before)
            after = self._host
        tr = self._tracing()
        if tr is not None and after > before and not self._hc.zero:  # device-only model: no host spans
            ub = acting_ubatch_id()
            tr.span(ubatch_track(ub), "sync", before, after, ubatch=ub, on=what)

    def synchronize(self) -> None:
        """One host sync for every stream (as ``torch.cuda.synchronize``); raise the first stream's
        sticky error."""
        if base._observer is not None:
            base._observer.sync(self)
        streams = self.streams
        self._host_sync(lambda: max((s._ready for s in streams), default=0.0), "device")  # type: ignore[attr-defined]
        for s in streams:
            s._raise_if_failed("synchronize")

    def host_event(self, what: str) -> None:
        """Host cost of a runtime event: "yield" (a handoff), "thread_start", "thread_join"."""
        hc = self._hc
        if what != "thread_start":  # the host blocks: a sleeping device wakes
            with self._lock:
                self._settle(final=False)
        if what == "yield":
            dt = hc.handoff
        elif what == "thread_start":
            dt = hc.thread_start
            with self._lock:
                self._live += 1
        elif what == "thread_join":
            dt = hc.thread_join
            with self._lock:
                self._live = max(0, self._live - 1)
        else:
            raise ValueError(f"host_event: unknown event {what!r}; known: {', '.join(HOST_EVENTS)}")
        if dt:
            with self._lock:
                t0 = self._host
                if what == "thread_start":
                    self._busy(dt)
                else:  # a handoff or a join waits for another thread
                    self._free(dt)
            tr = self._tracing()
            if tr is not None and what != "yield":
                tr.span("main", what.replace("_", " "), t0, t0 + dt)

    @contextlib.contextmanager
    def on_graph_replay(self) -> Iterator[None]:
        """A CUDA-graph replay costs the host one plain launch; the ops it re-issues inside this
        context cost no further host time (no launches, stream switches or event calls)."""
        with self._lock:
            self._busy(self._hc.launch + self._hc.kernel)
            self._replaying = True
        try:
            yield
        finally:
            with self._lock:
                self._replaying = False

    def _make_stream(self, name: str) -> Stream:
        return VirtualStream(self, name)

    def new_event(self) -> Event:
        return VirtualEvent(self)

    def now(self) -> float:
        """The virtual host clock (seconds)."""
        return self._host

    def kernel_seconds(self, kind: str, cost: Any, args: tuple, name: str | None = None) -> float:
        """Modelled device duration of a kernel (always a float on virtual): the dtype of the first
        floating-point tensor argument, the kernel count of op ``name`` (its first word)."""
        _, _, nk, oc = self._op_cost(name or kind)
        _, dtype = _scan(args, self._per_dtype)
        return self._duration(kind, cost, args, dtype, nk, oc)

    def _duration(self, kind: str, cost: Any, args: tuple, dtype: Any, nk: int, oc: OpCost) -> float:
        """A kernel's device seconds: the cost model's, corrected by its op's ``OpCost`` (the fixed
        part times ``fixed_threaded`` while two or more ubatch threads are live)."""
        p = self.profile
        model = seconds_for(kind, cost, args, p, self.link, dtype=dtype, kernels=nk)
        memory = memory_seconds(kind, cost, args, p) if oc.memory_scale else 0.0
        return oc.seconds(model, memory, p.fixed_threaded if self._live > 1 else 1.0)

    def engine_free(self, kind: str) -> float:
        """Virtual time at which the ``kind`` engine ("compute" or "comm") is next free."""
        _check_kind(kind)
        with self._lock:
            self._settle()
            return self._engine_free[kind]

    def advance(self, seconds: float) -> float:
        """Move the host clock forward by ``seconds`` (host-side work); return the new time."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"advance() needs seconds >= 0, got {seconds!r}")
        with self._lock:
            self._busy(float(seconds))
            return self._host

    def reset_clock(self) -> None:
        """Start a new timed region at 0 (host clock, engines, streams; older events read as 0).

        Raises StreamError if some stream still has work beyond the host clock (synchronize first).
        """
        with self._lock:
            self._settle()
            busy = [s.name for s in self.streams if s._ready > self._host]  # type: ignore[attr-defined]
            if busy:
                raise StreamError(
                    f"reset_clock() with work in flight on streams {busy}; call synchronize() first"
                )
            self._host = 0.0
            self._engine_free = {"compute": 0.0, "comm": 0.0}
            self._comm_busy.clear()
            self._gil.clear()
            for s in self.streams:
                s._ready = 0.0  # type: ignore[attr-defined]
            self._epoch += 1
