"""Stream-order race detection: a happens-before sanitizer over streams and events, on every backend.

Off by default, and then free: nothing is installed, and each backend's launch / record / wait /
synchronize pays one ``is not None`` test of ``dbo.streams.base._observer``. See docs/races.md.

Use::

    from dbo import races

    races.enable()                      # "collect" (default) or "raise"
    orch.run(model.forward, inputs)     # no wrapping: every kernel is watched, on any thread
    for r in races.findings():
        print(r)                        # both kernels, their streams, ubatches and launch lines
    races.disable()

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
around every kernel body (``add_kernel_hook``) and every ubatch body (``add_ubatch_hook``); the
observer is installed while races are on or any hook is registered.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import replace
from typing import Any, Callable, Iterator

from dbo import registry
from dbo.races._report import KIND, MAX_FINDINGS, MODES, Race, RaceError, launch_site
from dbo.races._shadow import KernelStamp, RaceMode, Shadow, written_args
from dbo.streams import base as _base

__all__ = [
    "KIND",
    "MODES",
    "MAX_FINDINGS",
    "Race",
    "RaceError",
    "enable",
    "disable",
    "enabled",
    "findings",
    "clear",
    "use_races",
    "current_kernel",
    "launch_count",
    "add_kernel_hook",
    "remove_kernel_hook",
    "add_ubatch_hook",
    "remove_ubatch_hook",
]

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


def launch_count() -> int:
    """Kernels launched so far while the observer was installed: a kernel's ``ticket`` is this
    count right after its launch, so "handed out before kernel k was launched" is
    ``launch_count() (then) < k.ticket``."""
    return _DET.launches


def _join(into: dict[int, int], other: dict[int, int]) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


class _Detector:
    """The observer the backends call (``dbo.streams.base._observer``) and the detector's state."""

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
        why = f"it had not run when {k.name!r} raised {type(exc).__name__} and the step could fail; its fn writes this argument"
        for p, args, _, wrote in everyone:
            for i in sorted(wrote or ()):
                for t in _tensors(args[i]) if i < len(args) else ():
                    for x, w, a, b, what in self.shadow.concurrent_accesses(p, t):
                        self._report(x, w, p, True, "(not run)", a, b, what, note=why)
        # 2. a kernel launched and not yet run, concurrent with k, that takes as an argument bytes
        #    k touched (its access is unknown: counted as a write).
        pending = [(p, a) for p, a, _, wrote in everyone if not wrote and not k.ordered_after(p) and not p.ordered_after(k)]
        if not pending:
            return
        touched = self.shadow.touched_by(k)
        why = f"{type(exc).__name__} raised by the second kernel before the first one ran; the first takes these bytes as an argument"
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
            if isinstance(what, _base.Event):
                snap = self.events.get(what)
                if snap is not None:
                    _join(self.host, snap)
            elif isinstance(what, _base.Stream):
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
        self, first: KernelStamp, w1: bool, second: KernelStamp, w2: bool, op: str, a: int, b: int, what: str, note: str = ""
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
                    access, op, b - a, what, second.thread, note=note,
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


_DET = _Detector()


def _install() -> None:
    on = _DET.on or bool(_DET.kernel_hooks) or bool(_DET.ubatch_hooks)
    _base._observer = _DET if on else None


# ---------------------------------------------------------------------- public API


def enable(mode: str = "collect") -> None:
    """Start watching every backend's streams and events; forget earlier clocks and findings.

    ``mode``: "collect" (default: read ``findings()`` afterwards) or "raise" (the op that completes
    a race raises ``RaceError`` inside its kernel, which fails the kernel's stream). Enable when
    nothing is in flight: work launched before is not seen.
    """
    if mode not in MODES:
        raise ValueError(f"race detection mode must be one of {MODES}, got {mode!r}")
    _DET.reset()
    with _DET.lock:
        _DET.mode = mode
        _DET.found = {}
        _DET.dropped = 0
        _DET.on = True
    _install()


def disable() -> None:
    """Stop watching. Findings stay readable until the next ``enable`` / ``clear``."""
    with _DET.lock:
        _DET.on = False
    _install()
    _DET.reset()


def enabled() -> bool:
    """Whether race detection is on."""
    return _DET.on


def findings() -> list[Race]:
    """Distinct races since the last ``enable`` / ``clear``, in the order first seen."""
    with _DET.lock:
        return list(_DET.found.values())


def clear() -> None:
    """Forget the findings (detection stays on)."""
    with _DET.lock:
        _DET.found = {}
        _DET.dropped = 0


@contextlib.contextmanager
def use_races(mode: str = "collect") -> Iterator[Callable[[], list[Race]]]:
    """Race detection on for the ``with`` block (then off); yields ``findings``."""
    enable(mode)
    try:
        yield findings
    finally:
        disable()


def add_kernel_hook(hook: Callable[[KernelStamp], Any]) -> None:
    """Call ``hook(stamp)`` at the start of every kernel body, on the thread that runs it; a context
    manager it returns is entered around the body (None: nothing). Installs the observer."""
    with _DET.lock:
        if hook not in _DET.kernel_hooks:
            _DET.kernel_hooks = _DET.kernel_hooks + [hook]
    _install()


def remove_kernel_hook(hook: Callable[[KernelStamp], Any]) -> None:
    with _DET.lock:
        _DET.kernel_hooks = [h for h in _DET.kernel_hooks if h is not hook]
    _install()


def add_ubatch_hook(hook: Callable[[Callable], Callable]) -> None:
    """``hook(fn) -> fn'``: applied to the function every ``UBatchOrchestrator`` step runs in its
    ubatch threads (and in a capture). Installs the observer."""
    with _DET.lock:
        if hook not in _DET.ubatch_hooks:
            _DET.ubatch_hooks = _DET.ubatch_hooks + [hook]
    _install()


def remove_ubatch_hook(hook: Callable[[Callable], Callable]) -> None:
    with _DET.lock:
        _DET.ubatch_hooks = [h for h in _DET.ubatch_hooks if h is not hook]
    _install()
