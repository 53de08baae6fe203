"""Workspace isolation sanitizer: a TorchDispatchMode that judges every tensor access by byte range.

Off by default, and then free: importing this module registers nothing, the managers' hot path is
unchanged, and ``use_sanitizer()`` / ``wrap()`` do nothing. Process-global state (like the registry and the
workspace singleton): one sanitizer per process.

Use::

    from workspace import sanitizer

    sanitizer.enable("collect")               # or "raise": the offending op raises SanitizerError
    orch.run(sanitizer.wrap(model.forward), inputs)   # the mode is entered inside each ubatch thread
    for f in sanitizer.findings():
        print(f.kind, f.op, f.ubatch, f.caller)
    sanitizer.disable()

A dispatch mode is per thread (a mode entered on the main thread never sees a ubatch thread's
ops), so it must be entered in every thread that runs model code: ``wrap(fn)`` or
``with sanitizer.use_sanitizer():`` at the top of the function each ubatch runs.
``with sanitizer.use_sanitizer("collect") as found:`` turns the sanitizer on for a block (and
checks the calling thread too), then off; ``found()`` lists the findings. The orchestrator knows
nothing about the sanitizer.

What it knows: while enabled it observes every manager (``WorkspaceManager.add_observer``): which
buffer belongs to which slot, which buffers were replaced, which byte ranges each
``get_simultaneous`` call handed out, and the persistent tensors. For every op except view and
metadata-only ops it looks at each tensor argument (in-place and ``out=`` results are arguments,
and other results are fresh memory), takes its storage and its byte range (storage start +
storage_offset * itemsize to the end of its strided extent; never just its start address) and
reports:

* ``cross-slot``: the bytes belong to another ubatch's slot (or a persistent tensor of another
  ubatch), or a thread that is not a ubatch thread touches a slot while a step is active. A recv
  hook acts for the ubatch that registered it, so a hook run by the next ubatch may touch the
  registrant's slot: the sanitizer asks ``dbo.registry.acting_ubatch_id()`` who is acting. A
  helper thread that works for a ubatch registers as that ubatch (``dbo.registry`` scope).
* ``stale-view``: the slot's later ``get_simultaneous`` call handed out bytes that overlap the
  tensor (a view used after its lifetime, whose bytes may now hold another tensor's data).
  Judged by ranges: a view object handed out by call k is stale if a later call handed out any
  of its bytes; a derived tensor (slice, reshape) is stale if it does not lie inside a single
  view's bytes as they were last handed out. Limitation: a derived tensor whose bytes were
  handed out again as exactly one view (same start, same end) looks like that view.
* ``orphaned-view``: the tensor's storage is a buffer the manager has replaced (lockstep growth
  while the owner held views, or a view kept past its slot's deferred reallocation).

Ops that run inside stream kernels on the ``threads`` backend execute on the backend's executor
threads (one per engine), which have no dispatch mode of their own, and are not seen (use
``virtual`` or ``inline`` to sanitize kernels); on ``virtual`` a kernel's math runs in the
launching thread, inside its scope.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dbo import registry

from .errors import InvalidArgumentError, WorkspaceError
from .manager import WorkspaceManager
from .observers import WorkspaceObserver, add_global_observer, remove_global_observer

__all__ = [
    "KINDS",
    "MODES",
    "Finding",
    "SanitizerError",
    "clear",
    "disable",
    "enable",
    "enabled",
    "findings",
    "mode",
    "use_sanitizer",
    "wrap",
]

KINDS = ("cross-slot", "stale-view", "orphaned-view")
MODES = ("raise", "collect")
MAX_FINDINGS = 1000
"""Distinct findings kept (a repeat of a known finding only increments its ``count``)."""
_HANDED_PRUNE_AT = 20_000

T = TypeVar("T")

_SKIP_DIRS = tuple(
    os.path.dirname(os.path.abspath(p)) + os.sep
    for p in (torch.__file__, __file__, registry.__file__)
) + (os.path.abspath(contextlib.__file__), os.path.abspath(threading.__file__), os.path.abspath(functools.__file__))


class SanitizerError(WorkspaceError, RuntimeError):
    """Raised (mode "raise") by the op that made a finding, before the op runs; ``.finding`` says what."""

    def __init__(self, finding: "Finding"):
        super().__init__(str(finding))
        self.finding = finding


@dataclass(frozen=True)
class Finding:
    """One isolation problem.

    ``kind``: one of ``KINDS``. ``op``: the aten op. ``ubatch``: the ubatch whose thread made the
    access (None: a thread that is not a ubatch thread, during a step). ``caller``:
    ``file:line:function`` of the first frame outside torch, dbo and workspace. ``slot`` /
    ``owner``: the slot whose bytes were touched and the ubatch owning it. ``count``: how many
    times the same (kind, op, ubatch, caller, slot) was seen.
    """

    kind: str
    op: str
    ubatch: int | None
    caller: str
    slot: int
    owner: int
    thread: str
    detail: str
    count: int = 1

    def __str__(self) -> str:
        who = "a thread that is not a ubatch thread" if self.ubatch is None else f"ubatch {self.ubatch}"
        return f"{self.kind}: {self.op} by {who} ({self.thread}) at {self.caller}: {self.detail}"


class _Buffer:
    """What the sanitizer knows about one storage the manager handed out views of."""

    __slots__ = ("ref", "manager", "slot", "owner", "lane", "retired", "persistent", "intervals", "calls")

    def __init__(self, storage: Any, manager: WorkspaceManager, slot: int, persistent: Any = None):
        self.ref = weakref.ref(storage)
        self.manager = weakref.ref(manager)
        self.slot = slot
        self.owner, self.lane = manager.owner_of(slot)
        self.retired = False
        self.persistent = persistent  # the key, for a persistent tensor
        # (start, end, call) byte ranges relative to the storage start, as last handed out
        self.intervals: list[tuple[int, int, int]] = []
        self.calls = 0

    def where(self) -> str:
        lane = f", lane {self.lane}" if self.lane else ""
        what = f"persistent tensor {self.persistent!r} of" if self.persistent is not None else "the slot of"
        return f"{what} ubatch {self.owner}{lane} (slot {self.slot})"


def _byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[start, end) of the bytes ``t`` can touch, relative to its storage's start."""
    size = t.element_size()
    start = t.storage_offset() * size
    extent = 1
    for n, s in zip(t.shape, t.stride()):
        if n == 0:
            return start, start
        extent += (n - 1) * abs(s)
    return start, start + extent * size


def _cut(intervals: list[tuple[int, int, int]], s: int, e: int, call: int) -> list[tuple[int, int, int]]:
    out = []
    for a, b, c in intervals:
        if b <= s or e <= a:
            out.append((a, b, c))
            continue
        if a < s:
            out.append((a, s, c))
        if e < b:
            out.append((e, b, c))
    out.append((s, e, call))
    out.sort()
    return out


def _caller() -> str:
    """``file:line:function`` of the first frame outside torch, dbo and workspace."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_SKIP_DIRS):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown caller>"


class _State(WorkspaceObserver):
    """The process-global sanitizer state; also the observer attached to every manager."""

    def __init__(self) -> None:
        self.enabled = False
        self.mode = "raise"
        self.lock = threading.RLock()
        self.buffers: dict[int, _Buffer] = {}  # storage data_ptr -> what it is
        self.handed: dict[int, tuple[weakref.ref, int, _Buffer]] = {}  # id(view) -> (view, call, buffer)
        self.findings: dict[tuple, Finding] = {}
        self.dropped = 0

    # -- observer ---------------------------------------------------------------------------------
    def buffer_allocated(self, manager: WorkspaceManager, slot: int, buffer: torch.Tensor) -> None:
        storage = buffer.untyped_storage()
        with self.lock:
            self.buffers[storage.data_ptr()] = _Buffer(storage, manager, slot)

    def buffer_retired(self, manager: WorkspaceManager, slot: int, storage_ref: weakref.ref, nbytes: int) -> None:
        storage = storage_ref()
        if storage is None:  # freed: its address may be reused, forget it
            with self.lock:
                for ptr, b in list(self.buffers.items()):
                    if b.ref() is None:
                        del self.buffers[ptr]
            return
        with self.lock:
            entry = self.buffers.get(storage.data_ptr())
            if entry is not None and entry.ref() is storage:
                entry.retired = True

    def persistent_created(self, manager: WorkspaceManager, slot: int, key: Any, tensor: torch.Tensor) -> None:
        if tensor.numel() == 0:
            return
        storage = tensor.untyped_storage()
        with self.lock:
            self.buffers[storage.data_ptr()] = _Buffer(storage, manager, slot, persistent=key)

    def views_handed_out(self, manager: WorkspaceManager, slot: int, views: list[torch.Tensor]) -> None:
        if not views:
            return
        with self.lock:
            entry = None
            for v in views:
                if v.numel() == 0:
                    continue
                storage = v.untyped_storage()
                if entry is None:
                    entry = self.buffers.get(storage.data_ptr())
                    if entry is None or entry.ref() is not storage:
                        return  # a buffer the sanitizer never saw allocated (attached late): no history
                    entry.calls += 1
                s, e = _byte_range(v)
                entry.intervals = _cut(entry.intervals, s, e, entry.calls)
                self.handed[id(v)] = (weakref.ref(v), entry.calls, entry)
            if len(self.handed) > _HANDED_PRUNE_AT:
                self.handed = {k: h for k, h in self.handed.items() if h[0]() is not None}

    # -- checking ---------------------------------------------------------------------------------
    def check(self, func: Any, args: tuple, kwargs: dict) -> None:
        accessor: Any = _UNSET
        for t in tree_leaves((args, kwargs)):
            if not isinstance(t, torch.Tensor) or t.is_meta or t.numel() == 0:
                continue
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
                continue
            ptr = storage.data_ptr()
            entry = self.buffers.get(ptr)
            if entry is None:
                continue
            if entry.ref() is not storage:
                if entry.ref() is None:
                    with self.lock:
                        if self.buffers.get(ptr) is entry:
                            del self.buffers[ptr]
                continue
            if accessor is _UNSET:
                accessor = _accessor()
            self._check_one(func, t, entry, accessor)

    def _check_one(self, func: Any, t: torch.Tensor, entry: _Buffer, accessor: int | None) -> None:
        with self.lock:
            s, e = _byte_range(t)
            if entry.retired:
                self._report(
                    "orphaned-view", func, accessor, entry,
                    f"bytes [{s}, {e}) of a buffer the manager has replaced ({entry.where()}, old buffer); "
                    "the view points at storage kept alive only by views, no longer part of any slot",
                )
                return
            if accessor != entry.owner and registry.acting_ubatch_id() != entry.owner:
                who = "not a ubatch thread (during a step)" if accessor is None else f"ubatch {accessor}"
                self._report(
                    "cross-slot", func, accessor, entry, f"bytes [{s}, {e}) of {entry.where()}, accessed by {who}"
                )
                return
            if entry.persistent is not None:
                return
            detail = self._stale(t, entry, s, e)
            if detail is not None:
                self._report("stale-view", func, accessor, entry, detail)

    def _stale(self, t: torch.Tensor, entry: _Buffer, s: int, e: int) -> str | None:
        handed = self.handed.get(id(t))
        if handed is not None and handed[0]() is t and handed[2] is entry:
            call = handed[1]
            for a, b, c in entry.intervals:
                if a < e and s < b and c > call:
                    return (
                        f"this view came from call #{call} of {entry.where()}, but call #{c} handed out "
                        f"bytes [{max(a, s)}, {min(b, e)}) of it again"
                    )
            return None
        over = [(a, b, c) for a, b, c in entry.intervals if a < e and s < b]
        if not over or (len(over) == 1 and over[0][0] <= s and e <= over[0][1]):
            return None
        calls = sorted({c for _, _, c in over})
        return (
            f"bytes [{s}, {e}) of {entry.where()} are not one view's bytes as last handed out: calls "
            f"{', '.join('#' + str(c) for c in calls)} handed them out to {len(over)} different views"
        )

    def _report(
        self, kind: str, func: Any, accessor: int | None, entry: _Buffer, detail: str
    ) -> None:
        caller = _caller()
        op = str(getattr(func, "__name__", func))
        key = (kind, op, accessor, caller, entry.slot)
        known = self.findings.get(key)
        if known is not None:
            finding = self.findings[key] = replace(known, count=known.count + 1)
        else:
            thread = threading.current_thread().name
            finding = Finding(kind, op, accessor, caller, entry.slot, entry.owner, thread, detail)
            if len(self.findings) < MAX_FINDINGS:
                self.findings[key] = finding
            else:
                self.dropped += 1
        if self.mode == "raise":
            raise SanitizerError(finding)

    def reset_maps(self) -> None:
        with self.lock:
            self.buffers.clear()
            self.handed.clear()


_UNSET = object()
_state = _State()
_tls = threading.local()  # .active: use_sanitizer() has entered the dispatch mode in this thread


def _accessor() -> int | None:
    """The ubatch of the calling thread (None: not a ubatch thread while a step is active)."""
    uid = registry.registered_ubatch_id()
    if uid is not None:
        return uid
    return None if registry.step_active() else 0


@functools.lru_cache(maxsize=None)
def _skipped(func: Any) -> bool:
    """View and metadata-only ops touch no bytes: never checked."""
    if getattr(func, "is_view", False):
        return True
    tags = getattr(func, "tags", ())
    if torch.Tag.inplace_view in tags:
        return True
    packet = getattr(func, "overloadpacket", None)
    return getattr(packet, "__name__", "") in _METADATA_OPS


_METADATA_OPS = frozenset(
    {
        "empty_like", "new_empty", "new_empty_strided", "new_zeros", "new_ones", "new_full",
        "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like",
        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
        "_has_compatible_shallow_copy_type", "is_set_to", "resize_", "set_", "lift_fresh",
        "_reshape_alias", "_unsafe_view",
    }
)


class _Mode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _state.enabled and not _skipped(func):
            _state.check(func, args, kwargs)
        return func(*args, **kwargs)


# ---------------------------------------------------------------------- public API


def enable(mode: str = "raise") -> None:
    """Start checking: attach to every workspace manager (live and future) and clear old findings.

    ``mode``: "raise" (the offending op raises ``SanitizerError`` before it runs) or "collect"
    (the op runs; read ``findings()`` afterwards). Enable before the step whose ubatch threads
    enter ``use_sanitizer()``.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"sanitizer mode must be one of {MODES}, got {mode!r}")
    with _state.lock:
        _state.mode = mode
        _state.findings = {}
        _state.dropped = 0
        was = _state.enabled
        _state.enabled = True
    if not was:
        add_global_observer(_state)


def disable() -> None:
    """Stop checking and detach from every manager. Findings stay readable until the next ``enable``."""
    with _state.lock:
        was = _state.enabled
        _state.enabled = False
    if was:
        remove_global_observer(_state)
    _state.reset_maps()


def enabled() -> bool:
    """Whether the sanitizer is on."""
    return _state.enabled


def mode() -> str:
    """The current mode ("raise" or "collect")."""
    return _state.mode


def findings() -> list[Finding]:
    """Distinct findings since the last ``enable`` / ``clear``, in the order first seen."""
    with _state.lock:
        return list(_state.findings.values())


def clear() -> None:
    """Forget the findings (the sanitizer stays on)."""
    with _state.lock:
        _state.findings = {}
        _state.dropped = 0


@contextlib.contextmanager
def use_sanitizer(mode: str | None = None) -> Iterator[Callable[[], list[Finding]]]:
    """Check the calling thread's ops for the ``with`` block; yields ``findings``.

    With ``mode`` ("raise" or "collect"): ``enable(mode)`` for the block and ``disable()`` after it.
    Without: only while the sanitizer is enabled (a no-op otherwise). Nested blocks in one thread
    enter the dispatch mode once.
    """
    if mode is not None:
        enable(mode)
    try:
        if not _state.enabled or getattr(_tls, "active", False):
            yield findings
        else:
            _tls.active = True
            try:
                with _Mode():
                    yield findings
            finally:
                _tls.active = False
    finally:
        if mode is not None:
            disable()


def wrap(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` run inside ``use_sanitizer()``: pass ``wrap(model.forward)`` to ``UBatchOrchestrator.run``."""

    @functools.wraps(fn)
    def sanitized(*args: Any, **kwargs: Any) -> T:
        with use_sanitizer():
            return fn(*args, **kwargs)

    return sanitized
