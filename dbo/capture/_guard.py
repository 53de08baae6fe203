"""Host-sync refusal during capture: a TorchFunctionMode, and the recording stream/event proxies.

A captured step must not wait on the device from the host: a replay has no host to wait. During a
capture every ubatch thread, and every kernel body on whichever thread runs it, runs under
``HostSyncGuard``; the contexts get ``RecordingStream`` / ``RecordingEvent`` proxies of the real
streams and events, which record each launch, event record and wait (for the CPU replay) and refuse
``synchronize`` / ``query``. Every refusal is a ``CaptureError`` naming the op and the user's
``file:line`` (the first frame outside torch, dbo, workspace and the standard library's threading).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from dbo._sites import user_site
from dbo.errors import CaptureError
from dbo.streams import Event, Stream
from dbo.streams.base import KernelSpec

# Tensor -> host scalars / lists, and ops whose output shape depends on the data (the host reads it).
_ALWAYS = {
    "item": "Tensor.item()",
    "tolist": "Tensor.tolist()",
    "__bool__": "bool(tensor)",
    "__int__": "int(tensor)",
    "__float__": "float(tensor)",
    "__index__": "operator.index(tensor)",
    "__complex__": "complex(tensor)",
    "numpy": "Tensor.numpy()",
    "nonzero": "nonzero",
    "argwhere": "argwhere",
    "unique": "unique",
    "unique_consecutive": "unique_consecutive",
    "masked_select": "masked_select",
    "bincount": "bincount",
}


def _host_sync(func: Callable, args: tuple, kwargs: dict) -> str | None:
    """The name of the host sync ``func(*args, **kwargs)`` would do, or None."""
    name = getattr(func, "__name__", "")
    what = _ALWAYS.get(name)
    if what is not None:
        return what
    if name == "repeat_interleave" and kwargs.get("output_size") is None:
        repeats = kwargs.get("repeats", args[1] if len(args) > 1 else args[0] if args else None)
        if isinstance(repeats, torch.Tensor):
            return "repeat_interleave with tensor repeats and no output_size"
    elif name == "where" and len(args) + len(kwargs) == 1:
        return "torch.where(condition) (nonzero)"
    elif name in ("cpu", "to", "copy_") and args and isinstance(args[0], torch.Tensor):
        src = args[0]
        if name == "copy_":
            dst, src = args[0], (args[1] if len(args) > 1 else kwargs.get("src"))
            blocking = not kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            if not isinstance(src, torch.Tensor) or src.is_cuda == dst.is_cuda:
                return None
            host = dst if src.is_cuda else src
            if host.device.type == "cpu" and (blocking or not host.is_pinned()):
                way = "from the GPU into" if src.is_cuda else "to the GPU from"
                return f"copy_ {way} host memory that is not pinned or without non_blocking=True"
        elif src.is_cuda:
            dev = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(dev, torch.Tensor):
                dev = dev.device
            if name == "cpu" or (isinstance(dev, (str, torch.device)) and torch.device(dev).type == "cpu"):
                return f"Tensor.{name}() to pageable host memory"
    return None


_tls = threading.local()  # .kernel_depth: > 0 while a kernel launched during a capture runs here
_NOT_WRITES = {"requires_grad_", "share_memory_", "retain_grad"}


def _writes(func: Callable, kwargs: dict) -> str | None:
    """The name of ``func`` if it writes into an existing tensor (in place, ``out=``, ``x[i] = v``)."""
    name = getattr(func, "__name__", "")
    if kwargs.get("out") is not None or name == "__setitem__":
        return name
    if name.endswith("_") and not name.startswith("_") and name not in _NOT_WRITES:
        return name
    return None


class HostSyncGuard(TorchFunctionMode):
    """Raise ``CaptureError`` at any torch call that makes the host wait on the device's data.

    ``replay_kind``: set (to the backend's name) on the CPU backends, where only launched kernels
    are replayed: a torch op that writes a tensor on the host *outside* a kernel is refused too,
    since the replay would not repeat it.
    """

    def __init__(self, replay_kind: str | None = None):
        super().__init__()
        self.replay_kind = replay_kind

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        what = _host_sync(func, args, kwargs)
        if what is not None:
            raise CaptureError(f"host sync during capture: {what} at {user_site()}")
        if self.replay_kind is not None and not getattr(_tls, "kernel_depth", 0):
            name = _writes(func, kwargs)
            if name is not None:
                raise CaptureError(
                    f"torch op {name!r} writes a tensor outside a kernel during capture, at {user_site()}: on the "
                    f"{self.replay_kind} backend a replay repeats only launched kernels; launch it (dbo.launch)"
                )
        return func(*args, **kwargs)


class GuardedKernel:
    """A kernel launched during capture: runs ``fn`` under ``HostSyncGuard`` on whichever thread runs it."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        _tls.kernel_depth = getattr(_tls, "kernel_depth", 0) + 1
        try:
            with HostSyncGuard():
                return self.fn(*args)
        finally:
            _tls.kernel_depth -= 1


class Recorder:
    """The ops of one capture, in issue order: ("launch", stream, fn, args, spec) (``spec``: the
    launch's resolved ``KernelSpec``), ("record", event, stream), ("wait", stream, event).
    ``active`` is False once the capture ends."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.ops: list[tuple] = []
        self.active = True
        self.lock = threading.Lock()
        self.proxies: dict[int, RecordingStream] = {}
        self.on_new_stream: Callable[[Stream], None] | None = None  # cuda: fork a new stream into the graph

    def add(self, op: tuple) -> None:
        with self.lock:
            self.ops.append(op)

    def stream(self, real: Stream) -> "RecordingStream":
        """The one proxy of ``real`` (identity matters: ``current_stream() is ctx.compute_stream``)."""
        if isinstance(real, RecordingStream):
            return real
        with self.lock:
            p = self.proxies.get(id(real))
            if p is None:
                p = self.proxies[id(real)] = RecordingStream(real, self)
        return p

    def refuse(self, what: str) -> None:
        raise CaptureError(f"host sync during capture: {what} at {user_site()}")


def _real_stream(s: Any) -> Any:
    return s._real if isinstance(s, RecordingStream) else s


def _real_event(e: Any) -> Any:
    return e._real if isinstance(e, RecordingEvent) else e


class RecordingStream(Stream):
    """Proxy of a real stream during a capture: records and forwards launches and waits; refuses
    ``synchronize`` and ``query``. Once the capture is over it only forwards."""

    def __init__(self, real: Stream, rec: Recorder):  # no Stream.__init__: state stays on ``real``
        self.__dict__.update(_real=real, _rec=rec, backend=real.backend, name=real.name)

    def __getattr__(self, attr: str) -> Any:
        if attr in ("_enqueue", "lane") and self._rec.active:
            # A real (not recording) event is being recorded on this stream: its record would be
            # missing from the replay.
            raise CaptureError(
                f"an event created before the capture was recorded on stream {self.name!r} during it, at "
                f"{user_site()}; create events inside the captured step (backend.new_event())"
            )
        return getattr(self._real, attr)

    @property
    def error(self) -> BaseException | None:
        return self._real.error

    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        # ``Stream.launch`` ran its checks on this proxy (role, backend and error are the real
        # stream's) and resolved ``spec``; the real stream gets the same spec, untouched.
        real, rec = self._real, self._rec
        if not rec.active:
            return real._launch(fn, args, spec)
        type(real)._launch(real, None if fn is None else GuardedKernel(fn), args, spec)
        rec.add(("launch", real, fn, args, spec))

    def wait_event(self, event: Event) -> None:
        real, ev = self._real, _real_event(event)
        if not self._rec.active:
            return real.wait_event(ev)
        type(real).wait_event(real, ev)
        self._rec.add(("wait", real, ev))

    def wait_stream(self, other: Stream) -> None:
        self._check_same_backend(other, "wait_stream on")
        if _real_stream(other) is self._real:
            return
        ev = RecordingEvent(type(self.backend).new_event(self.backend), self._rec)
        ev.record(other)
        self.wait_event(ev)

    def synchronize(self) -> None:
        if self._rec.active:
            self._rec.refuse(f"Stream.synchronize() of stream {self.name!r}")
        self._real.synchronize()

    def query(self) -> bool:
        if self._rec.active:
            self._rec.refuse(f"Stream.query() of stream {self.name!r}")
        return self._real.query()

    def _activate(self) -> None:
        self._real._activate()

    def _deactivate(self) -> None:
        self._real._deactivate()

    def __repr__(self) -> str:
        return f"<recording {self._real!r}>"


class RecordingEvent(Event):
    """Proxy of a real event during a capture: records and forwards ``record``; refuses
    ``synchronize`` and ``query``. Once the capture is over it only forwards."""

    def __init__(self, real: Event, rec: Recorder):
        self.__dict__.update(_real=real, _rec=rec, backend=real.backend)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._real, attr)

    def record(self, stream: Stream | None = None) -> None:
        s = _real_stream(self._resolve_stream(stream))
        type(self._real).record(self._real, s)
        if self._rec.active:
            self._rec.add(("record", self._real, s))

    def query(self) -> bool:
        if self._rec.active:
            self._rec.refuse("Event.query()")
        return self._real.query()

    def synchronize(self) -> None:
        if self._rec.active:
            self._rec.refuse("Event.synchronize()")
        self._real.synchronize()

    @property
    def time(self) -> float | None:
        return self._real.time
