"""Recording what ran, and reading it back.

Parts: ``_recorder`` (``Tracer``: kernels, host spans, handoffs; Chrome trace export) and
``_timeline`` (merged intervals, busy and overlap seconds, the ASCII timeline).
"""

from dbo.trace._recorder import (
    HOST_PID,
    STREAMS_PID,
    HandoffRecord,
    InstantRecord,
    KernelRecord,
    SpanRecord,
    Tracer,
    ubatch_track,
)
from dbo.trace._timeline import (
    Window,
    busy_fraction,
    busy_seconds,
    engine_sums,
    fmt_seconds,
    fmt_seconds_group,
    legend_lines,
    merge_intervals,
    overlap_seconds,
    render_ascii,
    stream_sort_key,
)

__all__ = [
    "KernelRecord",
    "SpanRecord",
    "HandoffRecord",
    "InstantRecord",
    "Tracer",
    "ubatch_track",
    "HOST_PID",
    "STREAMS_PID",
    "Window",
    "fmt_seconds",
    "fmt_seconds_group",
    "merge_intervals",
    "engine_sums",
    "busy_seconds",
    "busy_fraction",
    "overlap_seconds",
    "stream_sort_key",
    "render_ascii",
    "legend_lines",
]
