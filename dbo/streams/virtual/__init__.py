"""The virtual backend: a deterministic host and device timeline from the cost model.

Parts: ``_backend`` (``VirtualBackend``: its options, costs and the runtime's host events),
``_stream`` (``VirtualStream``, ``VirtualEvent``), ``_clock`` (``VirtualClock``: the host clock,
the engines, the device queue and the host's GIL, which the streams and events change through its
methods), ``_state`` (what the clock keeps per stream, event and launch), ``_sleep`` (the device
queue that sleeps while the host runs code) and ``_gil`` (the host's Python and a kernel's GIL returns).
"""

from dbo.streams.virtual._backend import VirtualBackend
from dbo.streams.virtual._clock import VirtualClock
from dbo.streams.virtual._stream import VirtualEvent, VirtualStream

__all__ = ["VirtualBackend", "VirtualStream", "VirtualEvent", "VirtualClock"]
