"""Stream-order race detection: the detector, a stream observer (``dbo.streams.observer``) that
keeps happens-before over streams and events, on every backend; its switches are in
``dbo.races._api``. See docs/races.md.

The model (as CUDA's): each stream has a vector clock (stream id -> sequence number). A launch on
stream S joins the host's clock into S's, takes the next sequence number of S and stamps the kernel
with a copy; ``Event.record(S)`` snapshots S's clock; ``T.wait_event(e)`` joins e's snapshot into
T's (``wait_stream`` is a record and a wait); a host ``synchronize`` of a stream, an event or a
backend joins what it waited for into the host's clock. Graph replays on the CPU backends re-issue
the captured launches, records and waits, so they update the clocks as those ops do. The kernel's
body runs under a ``TorchDispatchMode`` (entered inside the kernel, on the thread that runs it):
each op's tensor arguments are reads, or writes when the op schema marks them written (in-place,
``out=``), judged by byte range (storage, offset, strided extent). Two accesses to overlapping
bytes, at least one a write, by kernels neither of which happens before the other, are a race.

The host is one agent: ubatch threads pass one turn around, so their host work is ordered, and
every host thread shares one clock. Clients (``workspace.sanitizer``) add their own context
around every kernel body (``add_kernel_hook``) and every ubatch body (``add_ubatch_hook``), and
see every stamp at its launch (``add_launch_hook``); the detector is installed as a stream
observer while races are on or any hook is registered.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import replace
from typing import Any, Callable, Iterator

from dbo import registry
from dbo._sites import user_site as launch_site
from dbo.races._report import MAX_FINDINGS, Race, RaceError
from dbo.races._shadow import KernelStamp, RaceMode, Shadow, written_args
from dbo.streams.base import Event, Stream

_PENDING_MAX = 100_000


def _tensors(x: Any) -> Iterator[Any]:
    import torch

    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from _tensors(y)


def _unwrap(fn: Any) -> Any:
    """The user's kernel function under the runtime's wrappers (a capture's guard, our body)."""
    for _ in range(4):
        inner = getattr(fn, "fn", None)
        if inner is None or not callable(inner):
            break
        fn = inner
    return fn


_tls = threading.local()  # .kernel: the KernelStamp of the kernel running on this thread


def current_kernel() -> KernelStamp | None:
    """The kernel whose body the calling thread is running (while the observer is on), or None."""
    return getattr(_tls, "kernel", None)


def _join(into: dict[int, int], other: dict[int, int]) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class _Detector:
    """The stream observer the backends call (a ``dbo.streams.observer.StreamObserver``) and the
    detector's state."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False  # race checking (the observer may be installed for hooks alone)
        self.mode = "collect"
        self.sids: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self.clocks: dict[int, dict[int, int]] = {}  # stream id -> its vector clock
        self.events: "weakref.WeakKeyDictionary[Any, dict[int, int]]" = weakref.WeakKeyDictionary()
        self.host: dict[int, int] = {}
        self.launches = 0  # kernels launched while the observer is installed (KernelStamp.ticket)
        self.found: dict[tuple, Race] = {}
        self.dropped = 0
        self.shadow = Shadow(self._report)
        self.pending: dict[KernelStamp, tuple] = {}  # launched, not started: (its arguments, its fn)
        self.learned: dict[Any, set[int]] = {}  # kernel fn -> positions of the arguments it was seen writing
        self.kernel_hooks: list[Callable[[KernelStamp], Any]] = []
        self.ubatch_hooks: list[Callable[[Callable], Callable]] = []
        self.launch_hooks: list[Callable[[KernelStamp], None]] = []

    def reset(self) -> None:
        with self.lock:
            self.sids = weakref.WeakKeyDictionary()
            self.clocks = {}
            self.events = weakref.WeakKeyDictionary()
            self.host = {}
            self.pending = {}
        self.shadow.clear()

    def _sid(self, stream: Any) -> int:
        sid = self.sids.get(stream)
        if sid is None:
            sid = self.sids[stream] = len(self.clocks) + 1
            self.clocks[sid] = {}
        return sid

    # -- the observer's calls (from the backends) --------------------------------------------------
    def launch(self, stream: Any, fn: Callable | None, args: tuple, name: str) -> Callable | None:
        site = launch_site()
        ub = registry.acting_ubatch_id()
        with self.lock:
            sid = self._sid(stream)
            clock = self.clocks[sid]
            _join(clock, self.host)
            seq = clock[sid] = clock.get(sid, 0) + 1
            self.launches += 1
            stamp = KernelStamp(sid, seq, dict(clock), name, stream.name, ub, site, self.launches)
        for hook in self.launch_hooks:
            hook(stamp)
        if fn is None:
            return None
        if self.on:
            with self.lock:
                if len(self.pending) >= _PENDING_MAX:  # kernels dropped unrun (failed streams): forget the oldest
                    del self.pending[next(iter(self.pending))]
                self.pending[stamp] = (args, _unwrap(fn))
        return _Body(fn, stamp, self)

    def learn(self, fn: Any, k: KernelStamp, args: tuple) -> None:
        """After a kernel ran: remember which of its arguments its fn writes."""
        idx = written_args(k, args)
        if idx:
            key = _unwrap(fn)
            with self.lock:
                known = self.learned.get(key)
                if known is None or not idx <= known:
                    if len(self.learned) >= _PENDING_MAX:
                        self.learned.clear()
                    self.learned[key] = (known or set()) | idx

    def failed(self, k: KernelStamp, exc: BaseException) -> None:
        """Kernel ``k`` raised: a race that bit (it read bytes a concurrent kernel was to write
        first) can make a kernel raise before that kernel runs, and a failed step never runs it.
        Report each kernel launched and not yet run, concurrent with ``k``, that takes as an
        argument bytes ``k`` touched (its access is unknown: counted as a write)."""
        with self.lock:
            everyone = [(p, a, f, self.learned.get(f)) for p, (a, f) in self.pending.items()]
        # 1. a kernel launched and not yet run, concurrent with k, whose fn was seen writing an
        #    argument: every recorded access to those bytes by a kernel concurrent with it races
        #    with the write it would have made (whichever kernel raised).
        why = (
            f"it had not run when {k.name!r} raised {type(exc).__name__} and the step could fail; "
            f"its fn writes this argument"
        )
        for p, args, _, wrote in everyone:
            for i in sorted(wrote or ()):
                for t in _tensors(args[i]) if i < len(args) else ():
                    for x, w, a, b, what in self.shadow.concurrent_accesses(p, t):
                        self._report(x, w, p, True, "(not run)", a, b, what, note=why)
        # 2. a kernel launched and not yet run, concurrent with k, that takes as an argument bytes
        #    k touched (its access is unknown: counted as a write).
        pending = [
            (p, a) for p, a, _, wrote in everyone if not wrote and not k.ordered_after(p) and not p.ordered_after(k)
        ]
        if not pending:
            return
        touched = self.shadow.touched_by(k)
        why = (
            f"{type(exc).__name__} raised by the second kernel before the first one ran; "
            f"the first takes these bytes as an argument"
        )
        for p, args in pending:
            for t in _tensors(args):
                hit = self.shadow.overlap(touched, t)
                if hit is not None:
                    a, b, w, what = hit
                    self._report(p, True, k, w, "(kernel raised)", a, b, what, note=why)
                    break

    def record(self, event: Any, stream: Any) -> None:
        with self.lock:
            self.events[event] = dict(self.clocks[self._sid(stream)])

    def wait(self, stream: Any, event: Any) -> None:
        with self.lock:
            snap = self.events.get(event)
            if snap is not None:  # an event never recorded orders nothing
                _join(self.clocks[self._sid(stream)], snap)

    def sync(self, what: Any) -> None:
        """A host synchronize of a stream, an event or a backend (all its streams)."""
        with self.lock:
            if isinstance(what, Event):
                snap = self.events.get(what)
                if snap is not None:
                    _join(self.host, snap)
            elif isinstance(what, Stream):
                _join(self.host, self.clocks[self._sid(what)])
            else:
                for s in what.streams:
                    _join(self.host, self.clocks[self._sid(s)])

    def wrap_ubatch(self, fn: Callable) -> Callable:
        for hook in list(self.ubatch_hooks):
            fn = hook(fn)
        return fn

    # -- findings ----------------------------------------------------------------------------------
    def _report(
        self,
        first: KernelStamp,
        w1: bool,
        second: KernelStamp,
        w2: bool,
        op: str,
        a: int,
        b: int,
        what: str,
        note: str = "",
    ) -> None:
        access = f"{'write' if w1 else 'read'}-{'write' if w2 else 'read'}"
        key = (first.site, first.stream, second.site, second.stream, access)
        with self.lock:
            known = self.found.get(key)
            if known is not None:
                race = self.found[key] = replace(known, count=known.count + 1)
            else:
                race = Race(
                    (first.name, first.stream, first.ubatch, first.site),
                    (second.name, second.stream, second.ubatch, second.site),
                    access,
                    op,
                    b - a,
                    what,
                    second.thread,
                    note=note,
                )
                if len(self.found) < MAX_FINDINGS:
                    self.found[key] = race
                else:
                    self.dropped += 1
        if self.mode == "raise" and not note:
            raise RaceError(race)


class _Body:
    """A kernel's ``fn`` run with its stamp: the race mode (if on) and the clients' kernel hooks."""

    __slots__ = ("fn", "stamp", "det", "__name__")

    def __init__(self, fn: Callable, stamp: KernelStamp, det: _Detector):
        self.fn = fn
        self.stamp = stamp
        self.det = det
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __call__(self, *args: Any) -> Any:
        det, stamp = self.det, self.stamp
        stamp.thread = threading.current_thread().name
        if det.pending:
            with det.lock:
                det.pending.pop(stamp, None)
        prev = getattr(_tls, "kernel", None)
        _tls.kernel = stamp
        try:
            with contextlib.ExitStack() as stack:
                for hook in list(det.kernel_hooks):
                    cm = hook(stamp)
                    if cm is not None:
                        stack.enter_context(cm)
                if det.on:
                    stack.enter_context(RaceMode(stamp, det.shadow))
                out = self.fn(*args)
            if stamp.writes and det.on:
                det.learn(self.fn, stamp, args)
            return out
        except RaceError:
            raise
        except Exception as exc:
            if det.on:
                det.failed(stamp, exc)
            raise
        finally:
            _tls.kernel = prev

    def __getattr__(self, attr: str) -> Any:  # markers on the kernel fn (dbo_syncs_host, ...)
        return getattr(self.fn, attr)


DETECTOR = _Detector()
