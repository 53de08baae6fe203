"""The calling thread's current stream (thread-local), and ``launch`` on it.

When a thread has set no stream, ``current_stream()`` is the process-wide default stream: an
inline stream that runs each kernel at once on the caller, so model code runs standalone. That
default backend is process-global (it holds no threads and no resources).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from typing import Any, Callable, Iterator

from dbo.streams import base
from dbo.streams.base import Stream
from dbo.streams.inline import InlineBackend

__all__ = ["current_stream", "set_stream", "use_stream", "launch", "default_stream"]

_local = threading.local()  # .stream: the thread's current stream, or absent / None
_default: Stream | None = None
_default_lock = threading.Lock()


def default_stream() -> Stream:
    """The process-wide inline stream used by threads that set no stream."""
    global _default
    s = _default
    if s is None:
        with _default_lock:
            if _default is None:
                _default = InlineBackend().new_stream("default")
            s = _default
    return s


def current_stream() -> Stream:
    """The calling thread's current stream (the process-wide inline stream if none is set)."""
    s = getattr(_local, "stream", None)
    return s if s is not None else default_stream()


def set_stream(stream: Stream | None) -> Stream:
    """Make ``stream`` the calling thread's current stream (None: back to the default); return the
    previous current stream. Does nothing when ``stream`` already is current."""
    if stream is not None and not isinstance(stream, Stream):
        raise TypeError(f"expected a Stream or None, got {type(stream).__name__}: {stream!r}")
    prev = getattr(_local, "stream", None)
    if stream is not prev:
        _local.stream = stream
        if prev is not None:
            prev._deactivate()
        (stream if stream is not None else default_stream())._activate()
    return prev if prev is not None else default_stream()


@contextlib.contextmanager
def use_stream(stream: Stream) -> Iterator[Stream]:
    """Make ``stream`` current for the ``with`` block; restore the previous stream on exit."""
    prev = getattr(_local, "stream", None)
    set_stream(stream)
    try:
        yield stream
    finally:
        set_stream(prev)


def launch(fn: Callable | None, *args: Any, **keywords: Any) -> None:
    """Launch ``fn(*args)`` on the calling thread's current stream: ``Stream.launch``, with its
    keywords (``KernelSpec``'s fields). They are passed on as they came, so this function cannot
    drop or rename one; an unknown keyword raises TypeError there."""
    current_stream().launch(fn, *args, **keywords)


# What help() and inspect show for ``launch``: Stream.launch's own signature, less ``self``.
_signature = inspect.signature(Stream.launch)
launch.__signature__ = _signature.replace(parameters=list(_signature.parameters.values())[1:])  # type: ignore[attr-defined]
del _signature

base.install_current_stream(current_stream)
