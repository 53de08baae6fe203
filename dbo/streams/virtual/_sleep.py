"""The virtual backend's lazy device: a sleeping device (``HostCosts.idle_hold``) and kernels that
wait on the host's future (``OpCost.gil_calls``, ``virtual_gil``).

On the threads backend the engines are Python threads: a kernel launched onto an idle engine
waits for the GIL until the issuing thread blocks, or until the interpreter's switch interval
runs out. ``SleepingDevice`` models that for ``VirtualBackend``: a kernel launched while every
engine and stream is idle puts the device to sleep; the device ops issued while it sleeps
(launches, event records, event waits) are queued, and placed in order when it wakes: when the
host blocks or looks at the device (the backend calls ``wake``), or ``hold`` seconds after it
fell asleep, whichever is first. No kernel placed then starts before the wake-up.

The same queue holds a kernel whose end depends on what the host does later (its torch calls
wait for the GIL while the host runs Python): its placer answers "not yet, ask again once the
host clock has passed ``need``", and it and every op issued after it stay queued, in order,
until the host clock passes that point (``advanced``) or the host blocks for good (``wake`` with
``final``: the host is free from then on, so every placer can answer).

A placer is ``op(wake, final) -> need``: it places its device op given the moment the device woke
(0.0: it did not sleep) and returns None, or places nothing and returns the host time it must
wait for. With ``hold == 0`` and no GIL calls (every built-in profile) nothing is ever queued and
this costs nothing. Guarded by the backend's lock.
"""

from __future__ import annotations

import collections
import math
from typing import Callable

Placer = Callable[[float, bool], "float | None"]
"""A queued device op: places itself given the moment the device woke and whether the host is
free from now on; returns None when placed, else the host time to wait for."""


class SleepingDevice:
    """The queue of a lazy device: ops of a sleeping device, or ops waiting on the host's future."""

    def __init__(self, hold: float = 0.0):
        self.hold = hold
        self._queue: collections.deque[list] = collections.deque()  # [placer, wake time or None]
        self._asleep = False
        self._since = 0.0
        self._retry_at = math.inf  # the head waits until the host clock passes this

    @property
    def asleep(self) -> bool:
        return self._asleep

    @property
    def pending(self) -> bool:
        """Awake, with ops queued behind one that waits on the host's future."""
        return bool(self._queue) and not self._asleep

    @property
    def deadline(self) -> float:
        """When a sleeping device wakes by itself (the hold runs out)."""
        return self._since + self.hold

    def launch(self, t: float, idle: Callable[[float], bool], op: Placer) -> None:
        """A kernel that could start at ``t``: queued behind ops already queued, or on a device
        that falls asleep now (``hold`` > 0 and ``idle(t)``), else placed at once (and queued if its
        placer must wait on the host)."""
        if self._asleep and t >= self.deadline:  # the hold ran out before this launch
            self.wake(self.deadline)
        if self._queue:
            self._queue.append([op, None if self._asleep else 0.0])
            return
        if self.hold > 0 and idle(t):
            self._asleep, self._since = True, t
            self._queue.append([op, None])
            return
        need = op(0.0, False)
        if need is not None:
            self._queue.append([op, 0.0])
            self._retry_at = need

    def now_or_at_wake(self, now: float, op: Callable[[], None]) -> None:
        """Run a device op that needs no start time (an event record or wait) at once, or, while
        ops are queued (the device sleeps, or a kernel waits on the host), queue it behind what it
        follows."""
        self.expire(now)
        if not self._queue:
            op()
        else:
            self._queue.append([lambda w, final: op(), None if self._asleep else 0.0])

    def wake(self, now: float, final: bool = False) -> None:
        """The host blocks or looks at ``now``: a sleeping device wakes (no later than the hold's
        end) and the queue is placed in issue order, as far as the placers can answer (all of it
        with ``final``: the host is free from ``now`` on)."""
        if self._asleep:
            w = min(now, self.deadline)
            self._asleep = False
            for entry in self._queue:
                if entry[1] is None:
                    entry[1] = w
        self._drain(final)

    def advanced(self, now: float) -> None:
        """The host clock moved to ``now``: a queued kernel waiting on it may be placed now."""
        if self._queue and not self._asleep and now > self._retry_at:
            self._drain(False)

    def expire(self, now: float) -> None:
        """Wake a sleeping device whose hold has run out by ``now``."""
        if self._asleep and now >= self.deadline:
            self.wake(self.deadline)

    def _drain(self, final: bool) -> None:
        q = self._queue
        while q:
            op, w = q[0]
            need = op(w, final)
            if need is not None:
                self._retry_at = need
                return
            q.popleft()
        self._retry_at = math.inf

    def clear(self) -> None:
        """Forget everything queued (a reset after everything was placed)."""
        self._queue.clear()
        self._asleep = False
        self._retry_at = math.inf
