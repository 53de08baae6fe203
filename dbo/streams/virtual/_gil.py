"""The virtual backend's interpreter lock (``OpCost.gil_calls``).

On the threads backend the engines are Python threads and a kernel's body is Python: each torch
call releases the GIL while it computes and needs it back when it returns. While a host thread
runs Python (it issues launches, records events, starts threads), that return waits until the
host blocks (a handoff, a sync, a join), or at most the interpreter's switch interval. A kernel
that runs while the host is busy therefore takes longer than its device time (how much, measured:
docs/fidelity.md, "Host clock").

``HostGil`` keeps when the host held the lock (its busy intervals, merged) and walks a kernel over
them: a kernel of ``calls`` torch calls over ``duration`` device seconds reaches a return every
``duration / calls`` seconds; a return that falls while the host is busy waits for the host's
release, at most ``cap`` seconds (the switch interval, ``HostCosts.idle_hold``). The host's busy
intervals are only known up to the host clock: a walk that needs to know more waits (the virtual
backend keeps the kernel queued until the host clock passes that point, or the host blocks and
everything later is free). Guarded by the backend's lock.
"""

from __future__ import annotations

import bisect


class HostGil:
    """The host's busy intervals (half-open, sorted, merged when they touch)."""

    def __init__(self) -> None:
        self._starts: list[float] = []
        self._ends: list[float] = []

    def __len__(self) -> int:
        return len(self._starts)

    def hold(self, t0: float, t1: float) -> None:
        """The host ran Python from ``t0`` to ``t1`` (never before an interval already held)."""
        if t1 <= t0:
            return
        if self._ends and t0 <= self._ends[-1]:
            self._ends[-1] = max(self._ends[-1], t1)
        else:
            self._starts.append(t0)
            self._ends.append(t1)

    def busy_until(self, t: float) -> float | None:
        """End of the busy interval holding ``t`` (None: the host is free at ``t``)."""
        i = bisect.bisect_right(self._starts, t) - 1
        if i >= 0 and t < self._ends[i]:
            return self._ends[i]
        return None

    def walk(
        self, start: float, duration: float, calls: int, cap: float, host: float, final: bool
    ) -> tuple[float | None, float]:
        """``(end, 0.0)`` of a kernel from ``start`` that makes ``calls`` GIL returns over
        ``duration`` device seconds, or ``(None, need)`` when the host's state after the host
        clock ``host`` decides it: place it again once the host clock has passed ``need``.
        ``final``: the host blocks at ``host`` (free from then on)."""
        if calls <= 0 or duration <= 0:
            return start + max(duration, 0.0), 0.0
        seg = duration / calls
        t = start
        for _ in range(calls):
            t += seg
            if t >= host:  # past what the host has done so far
                if final:
                    continue
                return None, t
            end = self.busy_until(t)
            if end is None:
                continue
            if end >= host and not final and t + cap > host:  # the host still runs: release unknown
                return None, host
            t = min(end, t + cap)
        return t, 0.0

    def prune(self, before: float) -> None:
        """Forget intervals that end before ``before`` (no kernel can start earlier any more)."""
        i = bisect.bisect_left(self._ends, before)
        if i:
            del self._starts[:i]
            del self._ends[:i]

    def clear(self) -> None:
        self._starts.clear()
        self._ends.clear()
