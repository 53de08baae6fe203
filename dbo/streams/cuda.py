"""CUDA backend: real ``torch.cuda.Stream`` / ``torch.cuda.Event``.

* ``launch`` runs ``fn(*args)`` on the calling thread with the stream as torch's current stream, so
  the torch ops it issues are enqueued on it. Making a stream current (``set_stream`` /
  ``use_stream``) makes it torch's current stream on that thread (one ``torch.cuda.set_stream`` per
  switch), so plain torch ops follow; when it stops being current, torch's current stream goes
  back to the device's default stream. A launch checks torch's current device and raw stream
  (two cheap C calls): when they already are the stream's (the usual case: a ubatch launches on
  the stream it made current), ``fn`` runs directly; otherwise (a launch on a stream that is not
  the thread's current one) it runs under ``torch.cuda.stream(s)``, which costs host time per
  launch (measured on an H200 host: docs/gpu.md).
* Modelled time: a comm kernel with a float or ``Transfer`` cost, and a kernel whose ``fn`` is
  None with a float, ``Transfer`` or ``Work`` cost, enqueue ``torch.cuda._sleep`` for the modelled
  seconds (GPU clock cycles, calibrated once when the backend is created). A comm kernel sleeps
  before ``fn`` (its data lands at the end of the transfer), a modelled compute kernel after. The
  spin occupies one SM, not the link: it delays the stream, it does not model contention. Compute
  kernels with a real ``fn`` ignore their cost. Without ``torch.cuda._sleep``, nothing is modelled.
* Errors: an exception raised by ``fn`` on the host makes the stream fail (sticky, as on the
  other backends); a CUDA error surfacing in a query/synchronize is raised as StreamError.
* Waits (``synchronize``) poll ``query()`` so that they are bounded by ``timeout``.
* Tracing: each kernel is bracketed by timing events; records reach the tracer once the kernel is
  complete and a synchronize (stream, event or backend) or a later launch notices it. Times are on
  the ``time.perf_counter`` clock, anchored by an event synchronized at backend creation.

Importing this module needs no GPU; creating a ``CudaBackend`` without CUDA raises StreamError.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable

import torch

from dbo.costs import Work, seconds_for
from dbo.errors import StreamError, StreamTimeout
from dbo.registry import acting_ubatch_id
from dbo.streams import base
from dbo.streams.base import Backend, Event, KernelSpec, Stream, sticky_error

logger = logging.getLogger(__name__)

__all__ = ["CudaBackend", "CudaStream", "CudaEvent"]

_CALIBRATION_CYCLES = 10_000_000


class CudaStream(Stream):
    backend: "CudaBackend"

    def __init__(self, backend: "CudaBackend", name: str):
        super().__init__(backend, name)
        self.torch_stream = torch.cuda.Stream(device=backend.device)
        self._raw = self.torch_stream.cuda_stream  # the cudaStream_t, to compare with torch's current one
        self._device_index = backend.device.index

    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        if _is_torch_current(self._device_index, self._raw):
            self._issue(fn, args, spec)
        else:
            with torch.cuda.stream(self.torch_stream):
                self._issue(fn, args, spec)

    def _issue(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        """Enqueue the kernel; torch's current stream is this stream."""
        b = self.backend
        kind = spec.kind
        seconds = b._modelled_seconds(fn, kind, spec.cost, args)
        if base._observer is not None:  # dbo.races: stamp the kernel, watch its body
            fn = base._observer.launch(self, fn, args, spec.name)
        tr = b._tracing()
        s = self.torch_stream
        if tr is not None:
            ev0 = torch.cuda.Event(enable_timing=True)
            ev0.record(s)
        try:
            if kind == "comm" and seconds:
                b._spin(seconds)
            if fn is not None:
                fn(*args)
            if kind != "comm" and seconds:
                b._spin(seconds)
        except Exception as e:
            self._error = e
            self._error_note = f"kernel {spec.name!r} raised"
        if tr is not None:
            ev1 = torch.cuda.Event(enable_timing=True)
            ev1.record(s)
            with b._pending_lock:
                b._pending.append((tr, self.name, spec.name, kind, acting_ubatch_id(), ev0, ev1, spec.op, spec.layer))
            if len(b._pending) > 64:
                b._flush_traces()

    def wait_event(self, event: Event) -> None:
        ev = self._check_event(event)
        if base._observer is not None:
            base._observer.wait(self, ev)
        if not ev._recorded:
            return
        self.torch_stream.wait_event(ev.torch_event)
        if ev._error is not None and self._error is None:
            self._error = ev._error
            self._error_note = f"it waited on an event recorded on failed stream {ev._stream_name!r}"

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        self.backend._poll(self.torch_stream.query, f"synchronize of stream {self.name!r}")
        self.backend._flush_traces()
        self._raise_if_failed("synchronize")

    def query(self) -> bool:
        try:
            return bool(self.torch_stream.query())
        except RuntimeError:
            return True

    def _activate(self) -> None:
        torch.cuda.set_stream(self.torch_stream)

    def _deactivate(self) -> None:
        torch.cuda.set_stream(self.backend._default_torch_stream)


def _is_torch_current(device_index: int, raw: int) -> bool:
    """Whether the calling thread's current CUDA device is ``device_index`` and torch's current
    stream on it is the CUDA stream ``raw`` (so ops issued now go there)."""
    get_device = getattr(torch._C, "_cuda_getDevice", None)
    get_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get_device is None or get_raw is None:  # a torch without these bindings: ask the slow way
        return (
            torch.cuda.current_device() == device_index and torch.cuda.current_stream(device_index).cuda_stream == raw
        )
    return get_device() == device_index and get_raw(device_index) == raw


class CudaEvent(Event):
    backend: "CudaBackend"

    def __init__(self, backend: "CudaBackend"):
        super().__init__(backend)
        self.torch_event = torch.cuda.Event()
        self._recorded = False
        self._error: BaseException | None = None
        self._error_note = ""
        self._stream_name = ""

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        if base._observer is not None:
            base._observer.record(self, s)
        self.torch_event.record(s.torch_stream)  # type: ignore[attr-defined]
        self._recorded = True
        self._error = s._error  # type: ignore[attr-defined]
        self._error_note = s._error_note  # type: ignore[attr-defined]
        self._stream_name = s.name

    def query(self) -> bool:
        try:
            return bool(self.torch_event.query())
        except RuntimeError:
            return True

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)
        if self._recorded:
            self.backend._poll(self.torch_event.query, f"Event.synchronize (recorded on stream {self._stream_name!r})")
            self.backend._flush_traces()
        if self._error is not None:
            raise sticky_error(self._stream_name, self._error, "Event.synchronize", self._error_note)


class CudaBackend(Backend):
    """Real CUDA streams and events on one device (``device=``: default the current device)."""

    name = "cuda"

    def __init__(self, *, device: Any = None, **options: Any):
        if not torch.cuda.is_available():
            raise StreamError(
                f"the 'cuda' stream backend needs a CUDA device, but torch.cuda.is_available() is False "
                f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); "
                f"use get_backend('threads') or get_backend('virtual') on a CPU"
            )
        super().__init__(**options)
        if device is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            d = torch.device(device)
            self.device = torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())
        self._pending: collections.deque = collections.deque()
        self._pending_lock = threading.Lock()
        self._cycles_per_second: float | None = None
        self._default_torch_stream = torch.cuda.default_stream(self.device)
        with torch.cuda.device(self.device):
            self._anchor = torch.cuda.Event(enable_timing=True)
            self._anchor.record(torch.cuda.current_stream(self.device))
            self._anchor.synchronize()
            self._anchor_t = time.perf_counter()
            if hasattr(torch.cuda, "_sleep"):
                self._calibrate()
            else:
                logger.info("torch.cuda._sleep is missing: modelled kernel durations are ignored on CUDA")

    def _make_stream(self, name: str) -> Stream:
        return CudaStream(self, name)

    def new_event(self) -> Event:
        return CudaEvent(self)

    def kernel_seconds(self, kind: str, cost: Any, args: tuple) -> float | None:
        """Modelled seconds of a kernel with a real ``fn``: only comm kernels with a float or
        Transfer cost are modelled."""
        if cost is None or isinstance(cost, Work) or kind != "comm":
            return None
        return seconds_for(kind, cost, args, self.profile, self.link)

    def _modelled_seconds(self, fn: Callable | None, kind: str, cost: Any, args: tuple) -> float | None:
        if cost is None:
            return None
        if fn is None:
            return seconds_for(kind, cost, args, self.profile, self.link)
        return self.kernel_seconds(kind, cost, args)

    # --- modelled time -----------------------------------------------------------------------

    def _calibrate(self) -> None:
        s = torch.cuda.Stream(device=self.device)
        with torch.cuda.stream(s):
            torch.cuda._sleep(1000)  # warm up the spin kernel
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record(s)
            torch.cuda._sleep(_CALIBRATION_CYCLES)
            e1.record(s)
        e1.synchronize()
        ms = e0.elapsed_time(e1)
        self._cycles_per_second = _CALIBRATION_CYCLES / (ms / 1e3) if ms > 0 else None

    def _spin(self, seconds: float) -> None:
        cps = self._cycles_per_second
        if cps is None:
            return
        cycles = int(seconds * cps)
        if cycles > 0:
            torch.cuda._sleep(cycles)

    # --- waits and tracing -------------------------------------------------------------------

    def _poll(self, query: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.timeout
        pause = 1e-5
        while True:
            try:
                if query():
                    return
            except RuntimeError as e:
                raise StreamError(f"{what}: CUDA reported an error: {e}") from e
            if time.monotonic() >= deadline:
                raise StreamTimeout(f"{what} did not finish within {self.timeout:g}s (backend {self.name}#{self.id})")
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)

    def _flush_traces(self) -> None:
        """Hand complete kernels' records to their tracer."""
        with self._pending_lock:
            items = list(self._pending)
            self._pending.clear()
        keep = []
        for item in items:
            tr, stream, kname, kind, ubatch, ev0, ev1, op, layer = item
            try:
                done = ev1.query()
            except RuntimeError:
                continue
            if not done:
                keep.append(item)
                continue
            start = self._anchor_t + self._anchor.elapsed_time(ev0) / 1e3
            end = self._anchor_t + self._anchor.elapsed_time(ev1) / 1e3
            tr.kernel(stream, kname, kind, ubatch, start, end, op, layer)
        if keep:
            with self._pending_lock:
                self._pending.extendleft(reversed(keep))

    def synchronize(self) -> None:
        super().synchronize()
        self._flush_traces()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._flush_traces()
        except Exception:  # closing must not fail on a trace
            logger.exception("could not flush CUDA kernel traces at close")
