"""Recording what ran, and reading it back.

Parts: ``_recorder`` (``Tracer``: kernels, host spans, handoffs; Chrome trace export) and
``_timeline`` (merged intervals, busy and overlap seconds, the ASCII timeline).
"""

from dbo.trace._recorder import KernelRecord, SpanRecord, HandoffRecord, InstantRecord, Tracer, ubatch_track, HOST_PID, STREAMS_PID
from dbo.trace._timeline import Window, fmt_seconds, fmt_seconds_group, merge_intervals, engine_sums, busy_seconds, busy_fraction, overlap_seconds, stream_sort_key, render_ascii, legend_lines

__all__ = ['KernelRecord', 'SpanRecord', 'HandoffRecord', 'InstantRecord', 'Tracer', 'ubatch_track', 'HOST_PID', 'STREAMS_PID', 'Window', 'fmt_seconds', 'fmt_seconds_group', 'merge_intervals', 'engine_sums', 'busy_seconds', 'busy_fraction', 'overlap_seconds', 'stream_sort_key', 'render_ascii', 'legend_lines']
