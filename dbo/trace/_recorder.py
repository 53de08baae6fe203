"""Recorder of kernels, host spans, handoffs and instants; Chrome / Perfetto trace export.

A ``Tracer`` collects records from any number of threads (appends are guarded by a lock). Stream
backends record one ``KernelRecord`` per kernel, on their own clock (``backend.now()``): wall time
(``time.perf_counter``) on threads / cuda / inline, virtual seconds on virtual. Host code records
spans, handoffs and instants; give them times from the same clock (``backend.now()``) so that one
trace lines up.

``to_chrome()`` writes the JSON object format of the Trace Event Format, which Perfetto
(ui.perfetto.dev) and chrome://tracing open:

* pid 1 "host": one track (tid) per host track name (``span``/``instant`` track, ``ubatch_track(i)``
  for handoffs); pid 2 "device streams": one track per stream, named ``"stream <name>"``.
* "X" complete events for kernels and spans, "i" instants, and per handoff a pair of flow events
  ("s" on the source ubatch's track, "f" with ``bp: "e"`` on the destination's) with the same id,
  each bound to a tiny "X" marker slice so the arrow always has a slice to attach to.
* Timestamps in microseconds since ``origin`` (default: the earliest time recorded).

Recording is off when ``enabled`` is False; a backend whose ``tracer`` is None records nothing.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

HOST_PID = 1
STREAMS_PID = 2
_MARKER_US = 0.001  # width of a handoff's marker slice (1 ns), so a flow arrow has a slice to bind to


@dataclass(frozen=True)
class KernelRecord:
    """One kernel on one stream: ``start``/``end`` in seconds on its backend's clock.

    ``op`` and ``layer`` are the identity the launch declared (``launch(..., op=, layer=)``), None
    where it declared none; ``name`` is for display only and nothing parses it."""

    stream: str
    name: str
    kind: str
    ubatch: int | None
    start: float
    end: float
    op: str | None = None
    layer: int | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class SpanRecord:
    """A host span on a named track (a thread, a ubatch)."""

    track: str
    name: str
    start: float
    end: float
    args: dict = field(default_factory=dict)


@dataclass(frozen=True)
class HandoffRecord:
    """The turn passing from ubatch ``src`` (at ``t_src``) to ubatch ``dst`` (resuming at ``t_dst``)."""

    src: int | None
    dst: int | None
    t_src: float
    t_dst: float


@dataclass(frozen=True)
class InstantRecord:
    """A point event on a host track (grow, lock, abort, ...)."""

    track: str
    name: str
    t: float
    args: dict = field(default_factory=dict)


def ubatch_track(ubatch: int | None) -> str:
    """Name of the host track of ubatch ``ubatch`` ("ubatch 0", ...); None is the main thread ("main")."""
    return "main" if ubatch is None else f"ubatch {ubatch}"


def _stream_track(name: str) -> str:
    return name if "stream" in name.lower() else f"stream {name}"


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return repr(value)


class Tracer:
    """Thread-safe recorder of kernels, host spans, handoffs and instants."""

    def __init__(self, enabled: bool = True):
        self.enabled = bool(enabled)
        self._lock = threading.Lock()
        self.records: list[KernelRecord] = []
        self.spans: list[SpanRecord] = []
        self.handoffs: list[HandoffRecord] = []
        self.instants: list[InstantRecord] = []

    # --- recording ---------------------------------------------------------------------------

    def kernel(
        self,
        stream_name: str,
        name: str,
        kind: str,
        ubatch: int | None,
        start: float,
        end: float,
        op: str | None = None,
        layer: int | None = None,
    ) -> None:
        """Record a kernel that ran on ``stream_name`` from ``start`` to ``end`` (seconds), with the
        ``op`` and ``layer`` its launch declared."""
        if not self.enabled:
            return
        rec = KernelRecord(str(stream_name), str(name), str(kind), ubatch, float(start), float(end), op, layer)
        with self._lock:
            self.records.append(rec)

    def span(self, track: str | None, name: str, start: float, end: float, **args: Any) -> None:
        """Record a host span on ``track`` (None: the calling thread's name)."""
        if not self.enabled:
            return
        if track is None:
            track = threading.current_thread().name
        rec = SpanRecord(str(track), str(name), float(start), float(end), dict(args))
        with self._lock:
            self.spans.append(rec)

    def handoff(self, src_ubatch: int | None, dst_ubatch: int | None, t_src: float, t_dst: float) -> None:
        """Record the turn passing from ``src_ubatch`` to ``dst_ubatch`` (None: the main thread)."""
        if not self.enabled:
            return
        rec = HandoffRecord(src_ubatch, dst_ubatch, float(t_src), float(t_dst))
        with self._lock:
            self.handoffs.append(rec)

    def instant(self, track: str | None, name: str, t: float, **args: Any) -> None:
        """Record a point event on ``track`` (None: the calling thread's name)."""
        if not self.enabled:
            return
        if track is None:
            track = threading.current_thread().name
        rec = InstantRecord(str(track), str(name), float(t), dict(args))
        with self._lock:
            self.instants.append(rec)

    # --- reading -----------------------------------------------------------------------------

    def kernels(
        self, stream: str | None = None, ubatch: int | None = None, kind: str | None = None
    ) -> list[KernelRecord]:
        """A copy of the kernel records, in recording order, optionally filtered."""
        with self._lock:
            recs = list(self.records)
        return [
            r
            for r in recs
            if (stream is None or r.stream == stream)
            and (ubatch is None or r.ubatch == ubatch)
            and (kind is None or r.kind == kind)
        ]

    def clear(self) -> None:
        """Drop everything recorded so far."""
        with self._lock:
            self.records.clear()
            self.spans.clear()
            self.handoffs.clear()
            self.instants.clear()

    # --- export ------------------------------------------------------------------------------

    def to_chrome(self, path: str | None = None, *, origin: float | None = None) -> dict:
        """Return (and write to ``path`` if given) the trace as a Chrome trace JSON object."""
        with self._lock:
            kernels = list(self.records)
            spans = list(self.spans)
            handoffs = list(self.handoffs)
            instants = list(self.instants)

        if origin is None:
            times = [r.start for r in kernels] + [s.start for s in spans] + [i.t for i in instants]
            times += [min(h.t_src, h.t_dst) for h in handoffs]
            origin = min(times) if times else 0.0

        def us(t: float) -> float:
            return (t - origin) * 1e6

        host_tids: dict[str, int] = {}
        stream_tids: dict[str, int] = {}

        def host_tid(track: str) -> int:
            if track not in host_tids:
                host_tids[track] = len(host_tids) + 1
            return host_tids[track]

        def stream_tid(name: str) -> int:
            if name not in stream_tids:
                stream_tids[name] = len(stream_tids) + 1
            return stream_tids[name]

        events: list[dict] = []
        for s in spans:
            events.append(
                {
                    "name": s.name,
                    "cat": "host",
                    "ph": "X",
                    "ts": us(s.start),
                    "dur": max(0.0, us(s.end) - us(s.start)),
                    "pid": HOST_PID,
                    "tid": host_tid(s.track),
                    "args": _jsonable(s.args),
                }
            )
        for i in instants:
            events.append(
                {
                    "name": i.name,
                    "cat": "host",
                    "ph": "i",
                    "s": "t",
                    "ts": us(i.t),
                    "pid": HOST_PID,
                    "tid": host_tid(i.track),
                    "args": _jsonable(i.args),
                }
            )
        for n, h in enumerate(handoffs, start=1):
            src_tid = host_tid(ubatch_track(h.src))
            dst_tid = host_tid(ubatch_track(h.dst))
            t_src = us(h.t_src) - _MARKER_US
            t_dst = us(h.t_dst)
            dst_name = ubatch_track(h.dst)
            src_name = ubatch_track(h.src)
            common = {"cat": "handoff", "pid": HOST_PID}
            events.append(
                {**common, "name": f"yield to {dst_name}", "ph": "X", "ts": t_src, "dur": _MARKER_US, "tid": src_tid}
            )
            events.append(
                {**common, "name": f"resume from {src_name}", "ph": "X", "ts": t_dst, "dur": _MARKER_US, "tid": dst_tid}
            )
            events.append({**common, "name": "handoff", "ph": "s", "id": n, "ts": t_src, "tid": src_tid})
            events.append({**common, "name": "handoff", "ph": "f", "bp": "e", "id": n, "ts": t_dst, "tid": dst_tid})
        for k in kernels:
            events.append(
                {
                    "name": k.name,
                    "cat": k.kind,
                    "ph": "X",
                    "ts": us(k.start),
                    "dur": max(0.0, us(k.end) - us(k.start)),
                    "pid": STREAMS_PID,
                    "tid": stream_tid(k.stream),
                    "args": {"ubatch": k.ubatch, "kind": k.kind, "stream": k.stream},
                }
            )

        meta: list[dict] = [
            {"name": "process_name", "ph": "M", "pid": HOST_PID, "tid": 0, "args": {"name": "host"}},
            {"name": "process_sort_index", "ph": "M", "pid": HOST_PID, "tid": 0, "args": {"sort_index": 0}},
            {"name": "process_name", "ph": "M", "pid": STREAMS_PID, "tid": 0, "args": {"name": "device streams"}},
            {"name": "process_sort_index", "ph": "M", "pid": STREAMS_PID, "tid": 0, "args": {"sort_index": 1}},
        ]
        for track, tid in host_tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": HOST_PID, "tid": tid, "args": {"name": track}})
            meta.append(
                {"name": "thread_sort_index", "ph": "M", "pid": HOST_PID, "tid": tid, "args": {"sort_index": tid}}
            )
        for name, tid in stream_tids.items():
            meta.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": STREAMS_PID,
                    "tid": tid,
                    "args": {"name": _stream_track(name)},
                }
            )
            meta.append(
                {"name": "thread_sort_index", "ph": "M", "pid": STREAMS_PID, "tid": tid, "args": {"sort_index": tid}}
            )

        trace = {"traceEvents": meta + events, "displayTimeUnit": "ms", "otherData": {"origin_s": origin}}
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(trace, f)
        return trace
