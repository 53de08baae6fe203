"""The sanitizer's state and checks: what each known storage is, and how an access is judged.

Used by ``workspace.sanitizer`` (the public API and the dispatch mode); see its docstring for what
the findings mean. Process-global: one ``STATE`` per process.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from dbo import races, registry
from dbo._sites import PLUMBING_DIRS, PLUMBING_FILES, first_frame_outside
from dbo.races import byte_range
from workspace.errors import WorkspaceError
from workspace.manager import WorkspaceManager
from workspace.observers import WorkspaceObserver

FINDING_KINDS = ("cross-slot", "stale-view", "orphaned-view", races.KIND)
MODES = ("raise", "collect")
MAX_FINDINGS = 1000
"""Distinct findings kept (a repeat of a known finding only increments its ``count``)."""
_HANDED_PRUNE_AT = 20_000
_HANDOUTS_KEPT = 512  # per buffer: the most recent handed-out ranges the identity check looks at
_NEVER = float("inf")


class SanitizerError(WorkspaceError, RuntimeError):
    """Raised (mode "raise") by the op that made a finding, before the op runs; ``.finding`` says what."""

    def __init__(self, finding: "Finding"):
        super().__init__(str(finding))
        self.finding = finding


@dataclass(frozen=True)
class Finding:
    """One isolation problem.

    ``kind``: one of ``FINDING_KINDS``. ``op``: the aten op. ``ubatch``: the ubatch whose thread made the
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

    __slots__ = ("ref", "manager", "slot", "owner", "lane", "retired", "persistent", "intervals", "calls", "handouts")

    def __init__(self, storage: Any, manager: WorkspaceManager, slot: int, persistent: Any = None):
        self.ref = weakref.ref(storage)
        self.manager = weakref.ref(manager)
        self.slot = slot
        self.owner, self.lane = manager.owner_of(slot)
        self.retired: float | bool = False  # once retired: dbo.races.launch_count() at that time
        self.persistent = persistent  # the key, for a persistent tensor
        # (start, end, call) byte ranges relative to the storage start, as last handed out
        self.intervals: list[tuple[int, int, int]] = []
        self.calls = 0
        # (start, end, call, launches before it) of each recent handed-out view, oldest first
        self.handouts: list[tuple[int, int, int, int]] = []

    def where(self) -> str:
        lane = f", lane {self.lane}" if self.lane else ""
        what = f"persistent tensor {self.persistent!r} of" if self.persistent is not None else "the slot of"
        return f"{what} ubatch {self.owner}{lane} (slot {self.slot})"


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


def _fresh(v: torch.Tensor) -> torch.Tensor:
    """A new tensor object on ``v``'s bytes that is not a view of anything (``_base`` None)."""
    t = torch.empty((0,), dtype=v.dtype, device=v.device)
    t.set_(v.untyped_storage(), v.storage_offset(), v.shape, v.stride())
    return t


def _caller() -> str:
    """``file:line:function`` of the first frame outside torch, dbo and workspace."""
    frame = first_frame_outside(PLUMBING_DIRS, PLUMBING_FILES, depth=2)
    if frame is None:
        return "<unknown caller>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}:{frame.f_code.co_name}"


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
                entry.retired = races.launch_count()

    def persistent_created(self, manager: WorkspaceManager, slot: int, key: Any, tensor: torch.Tensor) -> None:
        if tensor.numel() == 0:
            return
        storage = tensor.untyped_storage()
        with self.lock:
            self.buffers[storage.data_ptr()] = _Buffer(storage, manager, slot, persistent=key)

    def views_handed_out(self, manager: WorkspaceManager, slot: int, views: list[torch.Tensor]) -> None:
        """Record the call's byte ranges, and replace each view in ``views`` (the list the caller
        gets) by a fresh tensor on the same bytes: a cache hit hands out the same view objects,
        so without a new identity per call the first call's view could not be told from the
        second's. The fresh tensor is not a view of another tensor, so whatever is derived from it
        (slices, ``.view``, ``.t()``) has it as ``_base``."""
        if not views:
            return
        launched = races.launch_count()
        with self.lock:
            entry = None
            for i, v in enumerate(views):
                if v.numel() == 0:
                    continue
                storage = v.untyped_storage()
                if entry is None:
                    entry = self.buffers.get(storage.data_ptr())
                    if entry is None or entry.ref() is not storage:
                        return  # a buffer the sanitizer never saw allocated (attached late): no history
                    entry.calls += 1
                s, e = byte_range(v)
                entry.intervals = _cut(entry.intervals, s, e, entry.calls)
                entry.handouts.append((s, e, entry.calls, launched))
                fresh = _fresh(v)
                views[i] = fresh
                self.handed[id(fresh)] = (weakref.ref(fresh), entry.calls, entry, s, e)
            if entry is not None and len(entry.handouts) > 2 * _HANDOUTS_KEPT:
                del entry.handouts[:-_HANDOUTS_KEPT]
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
        kernel = races.current_kernel()
        # A kernel is judged as of its launch (on threads it may run after the host moved on):
        # only what was handed out or retired before it was launched counts.
        ticket = kernel.ticket if kernel is not None else _NEVER
        with self.lock:
            s, e = byte_range(t)
            if entry.retired is not False and entry.retired < ticket:
                self._report(
                    "orphaned-view",
                    func,
                    accessor,
                    entry,
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
            detail = self._stale(t, entry, s, e, ticket)
            if detail is not None:
                self._report("stale-view", func, accessor, entry, detail)

    def _stale(self, t: torch.Tensor, entry: _Buffer, s: int, e: int, ticket: float = _NEVER) -> str | None:
        derived = ""
        handed = self.handed.get(id(t))
        if handed is None or handed[0]() is not t:
            base = t._base  # a slice / .view / .t() of a handed-out view keeps its judgement
            handed = self.handed.get(id(base)) if base is not None else None
            if handed is not None and handed[0]() is base:
                derived = "a tensor derived from "
            else:
                handed = None
        if handed is not None and handed[2] is entry:
            _, call, _, vs, ve = handed
            for a, b, c, launched in reversed(entry.handouts):
                if c <= call:
                    break
                if a < ve and vs < b and launched < ticket:
                    return (
                        f"{derived}a view from call #{call} of {entry.where()}, used after call #{c} handed "
                        f"out bytes [{max(a, vs)}, {min(b, ve)}) of it again"
                    )
            if entry.handouts and entry.handouts[0][2] > call + 1:  # older than the kept history
                for a, b, c in entry.intervals:
                    if a < ve and vs < b and c > call:
                        return (
                            f"{derived}a view from call #{call} of {entry.where()}, used after call #{c} handed "
                            "out bytes of it again"
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

    def _report(self, kind: str, func: Any, accessor: int | None, entry: _Buffer, detail: str) -> None:
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
_state = STATE = _State()


def _accessor() -> int | None:
    """The ubatch of the calling thread (None: not a ubatch thread while a step is active); inside a
    kernel body, the ubatch its launching code acted for (on any thread that runs it)."""
    kernel = races.current_kernel()
    if kernel is not None and kernel.ubatch is not None:
        return kernel.ubatch
    uid = registry.registered_ubatch_id()
    if uid is not None:
        return uid
    return None if registry.step_active() else 0
