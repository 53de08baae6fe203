"""The virtual backend's sleeping device (``HostCosts.idle_hold``).

On the threads backend the engines are Python threads: a kernel launched onto an idle engine
waits for the GIL until the issuing thread blocks, or until the interpreter's switch interval
runs out. ``SleepingDevice`` models that for ``VirtualBackend``: a kernel launched while every
engine and stream is idle puts the device to sleep; the device ops issued while it sleeps
(launches, event records, event waits) are queued, and placed in order when it wakes: when the
host blocks or looks at the device (the backend calls ``wake``), or ``hold`` seconds after it
fell asleep, whichever is first. No kernel placed then starts before the wake-up.

With ``hold == 0`` (every built-in profile) the device never sleeps and this costs nothing.
Guarded by the backend's lock.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["SleepingDevice"]

Placer = Callable[[float], None]
"""A queued device op: places itself given the moment the device woke."""


class SleepingDevice:
    """The queue of a sleeping device and when it fell asleep."""

    def __init__(self, hold: float = 0.0):
        self.hold = hold
        self._queue: list[Placer] | None = None  # None: awake
        self._since = 0.0

    @property
    def asleep(self) -> bool:
        return self._queue is not None

    @property
    def deadline(self) -> float:
        """When a sleeping device wakes by itself (the hold runs out)."""
        return self._since + self.hold

    def sleeps_at(self, t: float, idle: Callable[[float], bool]) -> bool:
        """Whether a kernel that could start at ``t`` finds the device asleep: it already sleeps
        and the hold has not run out by ``t`` (if it has, the queue is placed first), or it is idle
        by ``t`` (``idle(t)``) and falls asleep now."""
        if self.hold <= 0:
            return False
        if self._queue is not None:
            if t < self.deadline:
                return True
            self.wake(self.deadline)
        if not idle(t):
            return False
        self._queue, self._since = [], t
        return True

    def queue(self, op: Placer) -> None:
        """Queue a device op of the sleeping device (``asleep`` must be true)."""
        assert self._queue is not None
        self._queue.append(op)

    def now_or_at_wake(self, now: float, op: Callable[[], None]) -> None:
        """Run a device op that needs no start time (an event record or wait) at once, or, while
        the device sleeps (its hold not run out by ``now``), queue it behind what it follows."""
        self.expire(now)
        if self._queue is None:
            op()
        else:
            self._queue.append(lambda w: op())

    def wake(self, now: float) -> None:
        """Wake the device at ``now`` (no later than the hold's end) and place the queued ops in
        the order they were issued. Awake: nothing to do."""
        q = self._queue
        if q is None:
            return
        self._queue = None
        w = min(now, self.deadline)
        for op in q:
            op(w)

    def expire(self, now: float) -> None:
        """Wake a sleeping device whose hold has run out by ``now``."""
        if self._queue is not None and now >= self.deadline:
            self.wake(self.deadline)
