"""The stream interface every backend implements: Backend, Stream, Event (CUDA semantics).

* A kernel is ``fn(*args)`` (``fn`` may be None: a purely modelled kernel); it writes its results
  into tensors passed as arguments. Reading them before a synchronize (or a wait) is a race.
* A stream runs its kernels in launch order. ``Event.record(stream)`` captures "everything launched
  on ``stream`` so far"; ``stream.wait_event(ev)`` makes later work on ``stream`` wait for the most
  recent record of ``ev`` at the time of the call; an event never recorded counts as complete.
* A failed kernel makes its stream fail (sticky): later kernels of that stream are skipped and
  ``launch`` / ``synchronize`` / ``Event.synchronize`` raise ``StreamError`` with the original
  exception as ``__cause__``. A stream that waits on an event recorded after a failure fails too.
* Every blocking wait is bounded by the backend's ``timeout`` and raises ``StreamTimeout``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Any, Callable, NamedTuple

from dbo.costs import KERNEL_KINDS, DeviceProfile, LinkProfile, get_link, get_profile, seconds_for
from dbo.errors import StreamError

logger = logging.getLogger(__name__)

__all__ = [
    "Backend",
    "Stream",
    "Event",
    "KernelSpec",
    "DEFAULT_TIMEOUT",
    "ROLES",
    "sticky_error",
    "install_current_stream",
]

DEFAULT_TIMEOUT = 300.0
# How Event.record(None) finds the calling thread's current stream. The module that keeps the current
# stream (current.py) installs it at import, so this module never imports that one (no cycle).
_current_stream: Callable[[], "Stream"] | None = None
ROLES = ("compute", "comm", "side")
# "side": a second compute stream, beside the main one (a model's shared experts on an auxiliary stream): its
# kernels are compute kernels; the virtual backend runs them on an engine of their own (``dbo.streams.virtual``).
# The observer slot every backend reads at launch, record, wait and synchronize: None, or a
# ``dbo.streams.observer.StreamObserver``. Written only by that module (``add_stream_observer``);
# off (None), every call site costs one global read and one ``is not None`` test.
_observer: Any = None
_backend_ids = itertools.count(1)


class KernelSpec(NamedTuple):
    """What a launch says about its kernel besides ``fn(*args)``: the one definition of the keywords
    every ``launch`` takes (``Stream.launch``, whose signature must list exactly these fields, a test
    holds it to that; ``dbo.streams.launch`` and the capture proxies forward them untouched).

    ``Stream.launch`` builds one, resolved (``name`` and ``kind`` filled in), and hands it to the
    backend's ``_launch``; nothing else rebuilds the keyword list. Immutable: a NamedTuple, since a
    launch builds one per kernel and a frozen dataclass costs several times more to build.
    """

    name: str | None = None  # display only: nothing parses it (None: fn's name, else the kind)
    kind: str | None = None  # "compute" or "comm" (None: the stream's role)
    cost: Any = None  # what the kernel costs: a Work, a Transfer, seconds, or None
    op: str | None = None  # the model's operation: what per-op corrections are keyed on
    layer: int | None = None  # the model's layer, where it has one


def check_kind(kind: str) -> str:
    """``kind`` if it is a kernel kind ("compute" or "comm"), else ValueError."""
    if kind not in KERNEL_KINDS:
        raise ValueError(f"kernel kind must be one of {', '.join(KERNEL_KINDS)}; got {kind!r}")
    return kind


def check_identity(op: str | None, layer: int | None) -> None:
    """What a launch may declare as its identity: ``op`` a non-empty string without spaces or None,
    ``layer`` a non-negative int or None; else ValueError or TypeError."""
    if op is not None:
        if not isinstance(op, str):
            raise TypeError(f"op must be a string or None, got {type(op).__name__}: {op!r}")
        if not op or op != op.strip() or " " in op:
            raise ValueError(f"op must be a non-empty name without spaces, got {op!r}")
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise TypeError(f"layer must be an int or None, got {type(layer).__name__}: {layer!r}")
        if layer < 0:
            raise ValueError(f"layer must be non-negative, got {layer}")


def kernel_name(fn: Callable | None, name: str | None, kind: str) -> str:
    """The display name of a kernel: ``name``, else ``fn``'s name, else its kind. Nothing reads it back."""
    if name is not None:
        return str(name)
    if fn is None:
        return kind
    return getattr(fn, "__name__", None) or type(fn).__name__


class Backend(ABC):
    """A family of streams and events sharing engines, a clock, a cost model and a tracer.

    ``profile`` / ``link``: device and link profiles (names or objects, see ``dbo.costs``).
    ``tracer``: a ``dbo.trace.Tracer`` or None (recording off); settable at any time.
    ``timeout``: bound in seconds on every blocking wait (``StreamTimeout`` past it).
    """

    name: str = "abstract"

    def __init__(
        self,
        *,
        profile: str | DeviceProfile = "cpu",
        link: str | LinkProfile = "nvlink",
        tracer: Any = None,
        timeout: float = DEFAULT_TIMEOUT,
    ):
        self.profile: DeviceProfile = get_profile(profile)
        self.link: LinkProfile = get_link(link)
        self.tracer = tracer
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.timeout = float(timeout)
        self.id = next(_backend_ids)
        self._streams: dict[str, Stream] = {}
        self._streams_lock = threading.Lock()
        self._closed = False

    # --- streams and events ------------------------------------------------------------------

    def new_stream(self, name: str | None = None, role: str = "compute") -> "Stream":
        """Create a stream. Names are unique per backend (a taken name -> ValueError). ``role``
        ("compute" or "comm") is what the stream is for: the default kind of kernels launched on it; "side"
        is a second compute stream (compute kernels, which the virtual backend runs beside the main ones)."""
        if role not in ROLES:
            raise ValueError(f"stream role must be one of {', '.join(ROLES)}; got {role!r}")
        self._check_open()
        with self._streams_lock:
            if name is None:
                n = len(self._streams)
                while f"s{n}" in self._streams:
                    n += 1
                name = f"s{n}"
            name = str(name)
            if name in self._streams:
                raise ValueError(
                    f"backend {self.name}#{self.id} already has a stream named {name!r}; "
                    f"use backend.stream({name!r}) to get it or pick another name"
                )
            s = self._make_stream(name)
            s.role = role
            self._streams[name] = s
        return s

    def stream(self, name: str, role: str | None = None) -> "Stream":
        """The stream called ``name``, created if it does not exist yet, of ``role`` (None: "compute"); an existing
        one of another role than ``role`` names is a ValueError."""
        with self._streams_lock:
            s = self._streams.get(name)
        if s is None:
            return self.new_stream(name, role or "compute")
        if role is not None and s.role != role:
            raise ValueError(f"backend {self.name}#{self.id} has a stream {name!r} of role {s.role!r}, not {role!r}")
        return s

    @property
    def streams(self) -> list["Stream"]:
        """The streams created so far, in creation order."""
        with self._streams_lock:
            return list(self._streams.values())

    @abstractmethod
    def _make_stream(self, name: str) -> "Stream": ...

    @abstractmethod
    def new_event(self) -> "Event":
        """Create an event (never recorded: complete)."""

    def synchronize(self) -> None:
        """Wait for every stream of this backend; raise the first stream's sticky error, if any."""
        first: BaseException | None = None
        for s in self.streams:
            try:
                s.synchronize()
            except StreamError as e:
                if first is None:
                    first = e
        if first is not None:
            raise first

    def now(self) -> float:
        """The backend clock in seconds: wall clock (``time.perf_counter``) unless a backend keeps
        its own (virtual)."""
        return time.perf_counter()

    def host_event(self, what: str) -> None:
        """Hook: the runtime reports host work ("yield": a turn handoff, "thread_start",
        "thread_join"); a backend with a modelled host clock (virtual) charges it. No-op here."""

    def kernel_seconds(self, kind: str, cost: Any, args: tuple) -> float | None:
        """Modelled seconds of a kernel as this backend uses them (None: not modelled)."""
        return seconds_for(kind, cost, args, self.profile, self.link)

    # --- lifetime ----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the backend's resources (threads: its executor and watchdog threads). Idempotent."""
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StreamError(f"backend {self.name}#{self.id} is closed")

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _tracing(self):
        """The tracer if recording is on, else None (one attribute read and one flag check)."""
        tr = self.tracer
        return tr if tr is not None and tr.enabled else None

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self.name}#{self.id} profile={self.profile.name} link={self.link.name}{state}>"


class Stream(ABC):
    """An in-order queue of kernels on a backend."""

    def __init__(self, backend: Backend, name: str):
        self.backend = backend
        self.name = name
        self.role = "compute"  # "compute", "comm" or "side" (set by new_stream): the default kind of its kernels
        self._error: BaseException | None = None  # sticky: the failure that ended this stream
        self._error_note = ""  # how it failed ("kernel 'x' raised", "it waited on ...")

    @property
    def error(self) -> BaseException | None:
        """The exception that made this stream fail (sticky), or None."""
        return self._error

    def _raise_if_failed(self, action: str) -> None:
        err = self._error
        if err is not None:
            raise sticky_error(self.name, err, action, self._error_note)

    def _check_launch(self, kind: str | None, op: str | None = None, layer: int | None = None) -> str:
        """What every ``launch`` checks first: a valid kind (None: the stream's role) and identity
        (``check_identity``), an open backend, a stream not failed. Returns the kind."""
        kind = check_kind(("compute" if self.role == "side" else self.role) if kind is None else kind)
        check_identity(op, layer)
        self.backend._check_open()
        self._raise_if_failed("launch")
        return kind

    def launch(
        self,
        fn: Callable | None,
        *args: Any,
        name: str | None = None,
        kind: str | None = None,
        cost: Any = None,
        op: str | None = None,
        layer: int | None = None,
    ) -> None:
        """Enqueue ``fn(*args)`` (a kernel of ``kind`` "compute" or "comm", modelled by ``cost``;
        ``kind=None``: the stream's ``role``). ``op`` and ``layer`` declare what the kernel is (the
        model's operation, and its layer where it has one): they are recorded on ``KernelRecord`` and
        are what a profile's per-op corrections (``HostCosts.ops``) are keyed on. ``name`` is only
        displayed.

        The keywords are ``KernelSpec``'s fields. Backends do not override this method: they
        implement ``_launch``, which gets them as one resolved ``KernelSpec``, so no backend can
        take a different set."""
        kind = self._check_launch(kind, op, layer)
        spec = KernelSpec(name=kernel_name(fn, name, kind), kind=kind, cost=cost, op=op, layer=layer)
        self._launch(fn, args, spec)

    @abstractmethod
    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        """Enqueue ``fn(*args)`` as ``spec`` says (checked already: ``spec.kind`` is a kernel kind,
        ``spec.name`` the display name, the stream has not failed)."""

    @abstractmethod
    def wait_event(self, event: "Event") -> None:
        """Make later work on this stream wait for ``event``'s most recent record (now)."""

    def wait_stream(self, other: "Stream") -> None:
        """Make later work on this stream wait for everything launched on ``other`` so far."""
        self._check_same_backend(other, "wait_stream on")
        if other is self:
            return
        ev = self.backend.new_event()
        ev.record(other)
        self.wait_event(ev)

    @abstractmethod
    def synchronize(self) -> None:
        """Block the caller until every kernel launched so far on this stream is done."""

    @abstractmethod
    def query(self) -> bool:
        """True iff every kernel launched so far is done (never blocks, never raises)."""

    def _activate(self) -> None:
        """Called when the stream becomes a thread's current stream (CUDA: set torch's stream)."""

    def _deactivate(self) -> None:
        """Called when the stream stops being a thread's current stream (CUDA: torch's default stream)."""

    def _check_same_backend(self, obj: Any, what: str) -> None:
        backend = getattr(obj, "backend", None)
        if backend is not self.backend:
            raise StreamError(
                f"{what} {obj!r}: it belongs to {backend!r}, but stream {self.name!r} belongs to {self.backend!r}"
            )

    def _check_event(self, event: Any) -> "Event":
        if not isinstance(event, Event):
            raise TypeError(f"expected an Event, got {type(event).__name__}: {event!r}")
        if event.backend is not self.backend:
            raise StreamError(f"stream {self.name!r} of {self.backend!r} cannot wait on an event of {event.backend!r}")
        return event

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} of {self.backend.name}#{self.backend.id}>"


def sticky_error(stream_name: str, cause: BaseException, action: str, note: str = "") -> StreamError:
    """The StreamError raised at ``action`` on a stream that failed earlier with ``cause``."""
    why = f" ({note})" if note else ""
    err = StreamError(
        f"{action}: stream {stream_name!r} failed earlier{why} and stays failed: {type(cause).__name__}: {cause}"
    )
    err.__cause__ = cause
    return err


class Event(ABC):
    """A marker in a stream's queue (CUDA event semantics)."""

    def __init__(self, backend: Backend):
        self.backend = backend

    @abstractmethod
    def record(self, stream: Stream | None = None) -> None:
        """Capture all work launched so far on ``stream`` (None: the calling thread's current stream)."""

    @abstractmethod
    def query(self) -> bool:
        """True iff the most recent record is complete (or the event was never recorded)."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block until the most recent record is complete; raise its stream's sticky error."""

    @property
    def time(self) -> float | None:
        """Completion time on the backend clock, where the backend knows it (virtual); else None."""
        return None

    def _resolve_stream(self, stream: Stream | None) -> Stream:
        if stream is None:
            if _current_stream is None:
                raise StreamError(
                    "no current-stream lookup is installed (import dbo.streams, not its base module alone)"
                )
            stream = _current_stream()
        if not isinstance(stream, Stream):
            raise TypeError(f"expected a Stream, got {type(stream).__name__}: {stream!r}")
        if stream.backend is not self.backend:
            raise StreamError(
                f"cannot record an event of {self.backend!r} on stream {stream.name!r} of {stream.backend!r}; "
                f"record it on a stream of the same backend (pass stream=, or make one current with use_stream)"
            )
        return stream


def install_current_stream(getter: Callable[[], Stream]) -> None:
    """Install the function ``Event.record(None)`` calls for the calling thread's current stream."""
    global _current_stream
    _current_stream = getter
