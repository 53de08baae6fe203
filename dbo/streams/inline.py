"""Inline backend: synchronous, no threads. A kernel runs at once on the calling thread.

Events are always complete and waits are no-ops: everything launched has already run. A kernel
that raises propagates its exception to the caller unchanged (it is a plain call); the stream
does not become failed. Clock: ``time.perf_counter``.
"""

from __future__ import annotations

import time
from typing import Callable

from dbo.registry import acting_ubatch_id
from dbo.streams import base
from dbo.streams.base import Backend, Event, KernelSpec, Stream

__all__ = ["InlineBackend", "InlineStream", "InlineEvent"]


class InlineStream(Stream):
    def _launch(self, fn: Callable | None, args: tuple, spec: KernelSpec) -> None:
        b = self.backend
        if spec.cost is not None:
            b.kernel_seconds(spec.kind, spec.cost, args)  # validates the cost; inline does not model time
        if base._observer is not None:
            fn = base._observer.launch(self, fn, args, spec.name)
        tr = b._tracing()
        if tr is None:
            if fn is not None:
                fn(*args)
            return
        t0 = time.perf_counter()
        try:
            if fn is not None:
                fn(*args)
        finally:
            tr.kernel(self.name, spec.name, spec.kind, acting_ubatch_id(), t0, time.perf_counter(), spec.op, spec.layer)

    def wait_event(self, event: Event) -> None:
        self._check_event(event)
        if base._observer is not None:
            base._observer.wait(self, event)

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)

    def query(self) -> bool:
        return True


class InlineEvent(Event):
    def __init__(self, backend: Backend):
        super().__init__(backend)
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        s = self._resolve_stream(stream)
        if base._observer is not None:
            base._observer.record(self, s)
        self._time = time.perf_counter()

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        if base._observer is not None:
            base._observer.sync(self)

    @property
    def time(self) -> float | None:
        """When the event was last recorded (perf_counter seconds); None if never."""
        return self._time


class InlineBackend(Backend):
    """Synchronous CPU backend: ``launch`` runs the kernel before returning."""

    name = "inline"

    def _make_stream(self, name: str) -> Stream:
        return InlineStream(self, name)

    def new_event(self) -> Event:
        return InlineEvent(self)
