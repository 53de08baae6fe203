"""Streams and events with one interface and four backends.

* ``cuda``: real ``torch.cuda.Stream`` / ``torch.cuda.Event``.
* ``threads``: CPU, one executor thread per engine (compute, comm) runs the kernels of every stream;
  real asynchrony, so a missing wait is a real race.
* ``virtual``: CPU, deterministic virtual clock from the cost model (``dbo.costs``); no sleeping.
* ``inline``: CPU, synchronous: every kernel runs at once on the caller.

``get_backend(name, **options)`` builds one; ``launch`` / ``current_stream`` / ``use_stream`` work
on the calling thread's current stream. See docs/streams.md.
"""

from __future__ import annotations

from typing import Any

import torch

from dbo.streams.base import DEFAULT_TIMEOUT, Backend, Event, Stream
from dbo.streams.cuda import CudaBackend
from dbo.streams.current import current_stream, default_stream, launch, set_stream, use_stream
from dbo.streams.inline import InlineBackend
from dbo.streams.threads import ThreadsBackend
from dbo.streams.virtual import VirtualBackend
from dbo.trace import KernelRecord

__all__ = [
    "get_backend",
    "BACKENDS",
    "Backend",
    "Stream",
    "Event",
    "current_stream",
    "set_stream",
    "use_stream",
    "launch",
    "default_stream",
    "KernelRecord",
    "ThreadsBackend",
    "VirtualBackend",
    "CudaBackend",
    "InlineBackend",
    "DEFAULT_TIMEOUT",
]

BACKENDS: dict[str, type[Backend]] = {
    "cuda": CudaBackend,
    "threads": ThreadsBackend,
    "virtual": VirtualBackend,
    "inline": InlineBackend,
}


def get_backend(name: str = "auto", **options: Any) -> Backend:
    """Create a stream backend: "cuda", "threads", "virtual", "inline" or "auto" (cuda when
    ``torch.cuda.is_available()``, else threads).

    Options: ``profile`` (device profile name or DeviceProfile, default "cpu"), ``link`` (link
    profile name or LinkProfile, default "nvlink"), ``tracer`` (a ``dbo.trace.Tracer`` or None),
    ``timeout`` (seconds bounding every blocking wait, default 300); cuda also takes ``device``.
    """
    if not isinstance(name, str):
        raise TypeError(f"backend name must be a string, got {type(name).__name__}: {name!r}")
    key = name.strip().lower()
    if key == "auto":
        key = "cuda" if torch.cuda.is_available() else "threads"
    cls = BACKENDS.get(key)
    if cls is None:
        raise ValueError(f"unknown stream backend {name!r}; valid names: auto, {', '.join(sorted(BACKENDS))}")
    return cls(**options)
