"""The stream observer seam: the typed interface every backend calls on launch, record, wait and
synchronize, and the registry a client (``dbo.races``) installs itself through.

* ``StreamObserver``: what an observer implements. Each backend calls it on the calling (host)
  thread, before the operation takes effect; ``launch`` may hand back a wrapped ``fn``, which is
  what the kernel then runs (on whichever thread runs kernels). The orchestrator calls
  ``wrap_ubatch`` once per step (and capture) on the function its ubatch threads run.
* ``add_stream_observer`` / ``remove_stream_observer``: install and uninstall one (idempotent);
  ``stream_observers()`` lists them in the order they were added.
* ``stream_observer()``: what the backends call now: None (no observer), the one registered, or
  one that calls each registered observer in turn, in the order they were added (each ``launch``
  gets the ``fn`` the one before returned; each ``wrap_ubatch`` wraps the one before's result).

Off costs one read and one test: the backends read the module global ``dbo.streams.base._observer``
(``if base._observer is not None: ...``), which only this module writes, with the value
``stream_observer()`` returns.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol

from dbo.streams import base

if TYPE_CHECKING:
    from dbo.streams.base import Backend, Event, Stream

__all__ = ["StreamObserver", "add_stream_observer", "remove_stream_observer", "stream_observers", "stream_observer"]

_METHODS = ("launch", "record", "wait", "sync", "wrap_ubatch")


class StreamObserver(Protocol):
    """What the backends and the orchestrator call on an installed observer."""

    def launch(self, stream: "Stream", fn: Callable | None, args: tuple, name: str) -> Callable | None:
        """A kernel ``fn(*args)`` called ``name`` is being launched on ``stream``; return the ``fn``
        to enqueue instead (``fn`` itself, or a wrapper; None stays None)."""
        ...

    def record(self, event: "Event", stream: "Stream") -> None:
        """``event`` is being recorded on ``stream``."""
        ...

    def wait(self, stream: "Stream", event: "Event") -> None:
        """``stream`` is being made to wait for ``event``'s most recent record."""
        ...

    def sync(self, what: "Stream | Event | Backend") -> None:
        """The host is synchronizing with a stream, an event or a whole backend."""
        ...

    def wrap_ubatch(self, fn: Callable) -> Callable:
        """The function a step's ubatch threads run (``fn`` itself, or a wrapper)."""
        ...


class _FanOut:
    """Several observers seen as one: each call goes to every observer, in order."""

    __slots__ = ("observers",)

    def __init__(self, observers: tuple[StreamObserver, ...]):
        self.observers = observers

    def launch(self, stream: Any, fn: Callable | None, args: tuple, name: str) -> Callable | None:
        for o in self.observers:
            fn = o.launch(stream, fn, args, name)
        return fn

    def record(self, event: Any, stream: Any) -> None:
        for o in self.observers:
            o.record(event, stream)

    def wait(self, stream: Any, event: Any) -> None:
        for o in self.observers:
            o.wait(stream, event)

    def sync(self, what: Any) -> None:
        for o in self.observers:
            o.sync(what)

    def wrap_ubatch(self, fn: Callable) -> Callable:
        for o in self.observers:
            fn = o.wrap_ubatch(fn)
        return fn


_lock = threading.Lock()
_registered: tuple[StreamObserver, ...] = ()


def _publish() -> None:
    """Point the backends' slot at what ``_registered`` now says (``_lock`` held)."""
    n = len(_registered)
    base._observer = None if n == 0 else _registered[0] if n == 1 else _FanOut(_registered)


def add_stream_observer(observer: StreamObserver) -> None:
    """Install ``observer``: every backend calls it from now on, after the observers added before
    it. Adding one already installed changes nothing. TypeError if it lacks a method of
    ``StreamObserver``."""
    global _registered
    missing = [m for m in _METHODS if not callable(getattr(observer, m, None))]
    if missing:
        raise TypeError(
            f"a stream observer needs {', '.join(_METHODS)}; {type(observer).__name__} lacks {', '.join(missing)}"
        )
    with _lock:
        if not any(o is observer for o in _registered):
            _registered = _registered + (observer,)
        _publish()


def remove_stream_observer(observer: StreamObserver) -> None:
    """Uninstall ``observer`` (one not installed: nothing); with none left, the backends' calls
    cost one test again."""
    global _registered
    with _lock:
        _registered = tuple(o for o in _registered if o is not observer)
        _publish()


def stream_observers() -> tuple[StreamObserver, ...]:
    """The installed observers, in the order they were added."""
    return _registered


def stream_observer() -> StreamObserver | None:
    """What the backends call now: None when no observer is installed, else one object (the one
    observer, or one that calls each in turn)."""
    return base._observer
