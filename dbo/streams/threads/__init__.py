"""The threads backend: one executor thread per engine (compute and comm), shared by all streams.

Parts: ``_backend`` (``ThreadsBackend``: its engines, the scheduling, the watchdog, closing),
``_stream`` (``ThreadStream``, ``ThreadEvent``) and ``_engine`` (the queued records and the
executor thread that runs them, which reports each kernel to the backend through one callback and
knows nothing else of it or of the streams).
"""

from dbo.streams.threads._backend import ENGINE_ORDERS, ThreadEvent, ThreadsBackend, ThreadStream

__all__ = ["ThreadsBackend", "ThreadStream", "ThreadEvent", "ENGINE_ORDERS"]
