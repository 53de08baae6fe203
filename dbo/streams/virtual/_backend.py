"""Virtual backend: deterministic timing from the cost model, no sleeping, no worker threads.

* Math: ``launch`` runs ``fn(*args)`` at once on the calling thread, or skips it when any tensor
  argument is on the meta device (shape-only runs of big models).
* Host clock (one per backend: the Python work of different ubatches never overlaps): each launch
  costs ``HostCosts.launch + kernels * HostCosts.kernel`` (+ the op's extra host time; the op is the
  one the launch declared, looked up in ``HostCosts.ops``); a stream switch (``_activate``), an
  event record or wait, a handoff / thread start / thread join (``host_event``) and a graph replay
  (``on_graph_replay``: one plain launch) add theirs; a host sync (stream, event, backend
  ``synchronize``, or launching a kernel function marked with ``dbo.costs.syncs_host``) moves the
  host clock to ``max(host, device completion) + HostCosts.sync``. ``now()`` is the host clock.
* Device timing, per kernel: ``start = max(stream ready, engine free + engine gap, host clock after
  issuing its first kernel)`` (the gap: the profile's ``engine_gap``, plus ``engine_gap_threaded``
  while two or more ubatch threads are live); ``end = max(start + duration, host clock after
  issuing all of it)``; then the stream's ready time and the engine's free time become ``end``.
  Two engines: every compute kernel shares one (compute kernels serialize in launch order), every
  comm kernel shares the link. A compute kernel running while a comm kernel runs progresses at
  ``1 - comm_sm_share`` of its rate. A stream of role "side" (a second compute stream) runs its compute
  kernels on a third engine, beside the compute engine's: each holds, while it runs, the share of the
  device its bytes need at the profile's bandwidth (``bandwidth_share``), and a compute kernel running
  meanwhile progresses at 1 less that share (less the comm share too where both run). What overlaps is
  the rest of its time (its kernels' floors, their latency); its bytes are taken from the main stream's.
  Duration: ``dbo.costs.seconds_for`` with the dtype of the first floating-point tensor argument
  (when the profile has per-dtype rates) and the op's kernel count, corrected by the op's
  ``OpCost``: ``device + scale * that + memory_scale * its memory time`` (``device`` times the
  profile's ``fixed_threaded`` while two or more ubatch threads are live). A kernel marked
  ``syncs_host`` syncs the host only when ``HostCosts.kernel_sync`` (a GPU-like host) is set.
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
* The clock, engines, device queue and host GIL are one ``VirtualClock`` (``clock``), shared by the
  backend's streams and events, which change them only through its methods.
* Nothing reads the wall clock: the same program gives the same timeline on any machine. With a
  profile whose host costs are all zero (``cpu``), the host clock moves only at syncs and
  ``advance`` (the device-only model).
* A kernel whose ``fn`` raises makes its stream fail (sticky): the next launch / synchronize /
  event synchronize raises StreamError with the original as ``__cause__``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from dbo.costs import OpCost, iter_tensors, memory_seconds, seconds_for
from dbo.streams import base
from dbo.streams.base import Backend, Event, Stream, check_kind
from dbo.streams.virtual._clock import VirtualClock
from dbo.streams.virtual._state import Lane
from dbo.streams.virtual._stream import VirtualEvent, VirtualStream

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


class VirtualBackend(Backend):
    """Deterministic CPU backend: a virtual clock driven by the cost model.

    ``clock``: its ``VirtualClock`` (host clock, engines, device queue, host GIL), which its
    streams and events share."""

    name = "virtual"

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.clock = VirtualClock(lambda: self.profile, self._lanes, self._tracing)
        self._set_profile_cache()

    def _lanes(self) -> list[Lane]:
        return [s.lane for s in self.streams]  # type: ignore[attr-defined]

    def _set_profile_cache(self) -> None:
        p = self.profile
        self._hc = p.host
        self.clock.configure(p.host, p.comm_sm_share)
        self._per_dtype = bool(p.dtype_flops)
        self._op_costs: dict[str | None, tuple[float, float, int, OpCost]] = {}
        self._cached_profile = p

    def _op_cost(self, op: str | None) -> tuple[float, float, int, OpCost]:
        """(host seconds to issue, host seconds to issue the first kernel, device kernels, the
        device correction, ``OpCost()`` for none) of a launch that declared ``op``: the profile's
        ``HostCosts.ops[op]`` entry, or the plain launch cost where there is none (or no op)."""
        if self.profile is not self._cached_profile:  # profile replaced after creation
            self._set_profile_cache()
        c = self._op_costs.get(op)
        if c is None:
            hc = self._hc
            total, nk = hc.launch_cost(op)
            oc = (hc.ops.get(op) if op is not None else None) or _NO_CORRECTION
            c = self._op_costs[op] = (total, min(total, hc.launch + hc.kernel), nk, oc)
        return c

    def launch_costs(
        self, fn: Callable | None, kind: str, cost: Any, args: tuple, op: str | None
    ) -> tuple[float, float, float, int, bool, Any]:
        """What launching ``fn(*args)`` (a ``kind`` kernel modelled by ``cost``, declaring ``op``)
        costs now: ``(host_s, first_s, duration, calls, meta, syncs)``: the host seconds to issue
        it and, of them, its first kernel (times ``HostCosts.threaded`` while two or more ubatch
        threads are live; 0 while a graph replay re-issues it), its device seconds
        (``kernel_seconds``), its GIL returns that wait for the host's Python (0 unless the clock
        keeps them), whether a tensor argument is on the meta device (its math is skipped), and
        whether (truthy) it makes a host sync first (``syncs_host`` on a GPU-like host)."""
        host_s, first_s, nk, oc = self._op_cost(op)
        clock = self.clock
        if clock.replaying:  # a replay re-issues the op: HostCosts.replay_op (0 for a CUDA graph)
            host_s = first_s = self._hc.replay_op
        elif clock.threaded:
            host_s *= self._hc.threaded
            first_s *= self._hc.threaded
        meta, dtype = _scan(args, self._per_dtype)
        duration = self._duration(kind, cost, args, dtype, nk, oc)
        calls = oc.gil_calls if clock.gil_on else 0
        syncs = fn is not None and self._hc.kernel_sync and getattr(fn, "dbo_syncs_host", False)
        return host_s, first_s, duration, calls, meta, syncs

    def synchronize(self) -> None:
        """One host sync for every stream (as ``torch.cuda.synchronize``); raise the first stream's
        sticky error."""
        if base._observer is not None:
            base._observer.sync(self)
        streams = self.streams
        lanes = [s.lane for s in streams]  # type: ignore[attr-defined]
        self.clock.sync(lambda: max((lane.ready for lane in lanes), default=0.0), "device")
        for s in streams:
            s._raise_if_failed("synchronize")

    def host_event(self, what: str) -> None:
        """Host cost of a runtime event: "yield" (a handoff), "thread_start", "thread_join"."""
        hc = self._hc
        clock = self.clock
        if what != "thread_start":  # the host blocks: a sleeping device wakes
            clock.settle(final=False)
        if what == "yield":
            dt = hc.handoff
        elif what == "thread_start":
            dt = hc.thread_start
            clock.thread_started()
        elif what == "thread_join":
            dt = hc.thread_join
            clock.thread_joined()
        else:
            raise ValueError(f"host_event: unknown event {what!r}; known: {', '.join(HOST_EVENTS)}")
        if dt:
            if what == "thread_start":
                t0, _ = clock.run_python(dt)
            else:  # a handoff or a join waits for another thread
                t0, _ = clock.block_host(dt)
            tr = self._tracing()
            if tr is not None and what != "yield":
                tr.span("main", what.replace("_", " "), t0, t0 + dt)

    def on_graph_replay(self) -> contextlib.AbstractContextManager[None]:
        """A CUDA-graph replay costs the host one plain launch; the ops it re-issues inside this
        context cost no further host time (no launches, stream switches or event calls)."""
        return self.clock.replay()

    def _make_stream(self, name: str) -> Stream:
        return VirtualStream(self, name)

    def new_event(self) -> Event:
        return VirtualEvent(self)

    def now(self) -> float:
        """The virtual host clock (seconds)."""
        return self.clock.host

    def kernel_seconds(self, kind: str, cost: Any, args: tuple, op: str | None = None) -> float:
        """Modelled device duration of a kernel (always a float on virtual): the dtype of the first
        floating-point tensor argument, the kernel count and correction of the declared ``op``."""
        _, _, nk, oc = self._op_cost(op)
        _, dtype = _scan(args, self._per_dtype)
        return self._duration(kind, cost, args, dtype, nk, oc)

    def _duration(self, kind: str, cost: Any, args: tuple, dtype: Any, nk: int, oc: OpCost) -> float:
        """A kernel's device seconds: the cost model's, corrected by its op's ``OpCost`` (the fixed
        part times ``fixed_threaded`` while two or more ubatch threads are live)."""
        p = self.profile
        model = seconds_for(kind, cost, args, p, self.link, dtype=dtype, kernels=nk)
        memory = memory_seconds(kind, cost, args, p) if oc.memory_scale else 0.0
        return oc.seconds(model, memory, p.fixed_threaded if self.clock.threaded else 1.0)

    def bandwidth_share(self, cost: Any, args: tuple, duration: float) -> float:
        """The share of the device a side stream's compute kernel of ``duration`` device seconds holds while it
        runs: its bytes' time at the profile's bandwidth (``memory_seconds``) over its duration, at most 1; 0
        for a kernel without bytes or duration."""
        if duration <= 0:
            return 0.0
        return min(1.0, memory_seconds("compute", cost, args, self.profile) / duration)

    def engine_free(self, kind: str) -> float:
        """Virtual time at which the ``kind`` engine ("compute" or "comm") is next free."""
        check_kind(kind)
        return self.clock.engine_free(kind)

    def advance(self, seconds: float) -> float:
        """Move the host clock forward by ``seconds`` (host-side work); return the new time."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ValueError(f"advance() needs seconds >= 0, got {seconds!r}")
        return self.clock.run_python(float(seconds))[1]

    def reset_clock(self) -> None:
        """Start a new timed region at 0 (host clock, engines, streams; older events read as 0).

        Raises StreamError if some stream still has work beyond the host clock (synchronize first).
        """
        self.clock.reset()
