"""The virtual backend: a deterministic host and device timeline from the cost model.

Parts: ``_backend`` (``VirtualBackend``, its streams and events), ``_sleep`` (the device queue
that sleeps while the host runs code) and ``_gil`` (the host's Python and a kernel's GIL returns).
"""

from dbo.streams.virtual._backend import VirtualBackend, VirtualStream, VirtualEvent
from dbo.streams.virtual._gil import HostGil
from dbo.streams.virtual._sleep import SleepingDevice

__all__ = ['VirtualBackend', 'VirtualStream', 'VirtualEvent', 'HostGil', 'SleepingDevice']
