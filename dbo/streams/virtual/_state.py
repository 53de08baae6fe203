"""What the virtual backend's clock (``VirtualClock``) keeps per stream, per event and per launch.

Streams and events hold these and hand them to the clock's methods; only the clock changes them,
under its lock.
"""

from __future__ import annotations

from typing import Any


class Lane:
    """One stream on the timeline: ``ready``, when everything launched on it so far is done, and
    ``last_kind``, the engine of its last kernel (None: none yet). Changed by the clock only."""

    __slots__ = ("name", "ready", "last_kind")

    def __init__(self, name: str):
        self.name = name
        self.ready = 0.0
        self.last_kind: str | None = None


class Mark:
    """An event's most recent record: ``recorded`` (False: never), the stream it was recorded on,
    the epoch it was recorded in, ``time``, the stream's ready time then (None while the record
    waits in the device queue), and the stream's sticky ``error`` then (None: none) with its
    ``note``. A new one for each record (a wait holds the one it waited for); changed by the clock."""

    __slots__ = ("recorded", "time", "epoch", "stream", "error", "note")

    def __init__(self) -> None:
        self.recorded = False
        self.time: float | None = None
        self.epoch = -1
        self.stream = ""
        self.error: BaseException | None = None
        self.note = ""


class Launch:
    """One launched kernel on its way to its engine: what it is (``kind``, display ``name``,
    declared ``op`` and ``layer``, acting ``ubatch``, the ``tracer`` to record it on, or None), what
    it costs (``duration`` device seconds, ``calls`` GIL returns, ``host_s`` host seconds to issue,
    ``first_s`` of them to issue its first kernel, ``syncs``: it makes a host sync first), the engine it
    runs on (``engine``: its kind, or "side" for a compute kernel on a side stream) with the share of the
    device's bandwidth a side kernel holds while it runs (``share``; 0 for the others), and what
    ``VirtualClock.issue`` notes when the host issues it: the host clock after its first kernel
    (``first_at``) and after all of it (``issued_at``), the cross-engine latency and the engine gap."""

    __slots__ = (
        "kind",
        "name",
        "op",
        "layer",
        "ubatch",
        "tracer",
        "duration",
        "calls",
        "host_s",
        "first_s",
        "syncs",
        "first_at",
        "issued_at",
        "latency",
        "gap",
        "engine",
        "share",
    )

    def __init__(
        self,
        kind: str,
        name: str,
        op: str | None,
        layer: int | None,
        ubatch: Any,
        tracer: Any,
        duration: float,
        calls: int,
        host_s: float,
        first_s: float,
        syncs: Any,
        engine: str | None = None,
        share: float = 0.0,
    ):
        self.kind, self.name, self.op, self.layer, self.ubatch, self.tracer = kind, name, op, layer, ubatch, tracer
        self.duration, self.calls, self.host_s, self.first_s, self.syncs = duration, calls, host_s, first_s, syncs
        self.engine, self.share = engine or kind, share
