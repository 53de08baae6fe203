"""The race detector's shadow memory and the dispatch mode that feeds it (used by ``dbo.races``).

A ``KernelStamp`` is what the detector knows about one launched kernel: its stream (a small int id),
its sequence number on that stream, the vector clock it launched with, and what a report names
(kernel, stream, ubatch, launch site). ``RaceMode`` is entered around the kernel's body, on
whichever thread runs it; for every op it reads the op schema (``alias_info.is_write``: in-place
and ``out=`` arguments are writes, every other tensor argument is a read) and hands each access to
``Shadow.access``, which judges it by byte range against the earlier accesses to the same storage.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

MAX_RECORDS = 4096
"""Access records kept per storage; past it the oldest are forgotten (a race with them is missed)."""

# The ops that touch no tensor's bytes, by overload packet name, besides views and in-place view
# ops (which ``touches_no_bytes`` finds from the op itself). The one list: the race detector and
# the workspace sanitizer (``workspace.sanitizer``, through ``dbo.races.touches_no_bytes``) skip
# exactly these, so the two tools never disagree on what counts as an access.
METADATA_OPS = frozenset(
    {
        # A new tensor shaped like an argument: reads its sizes, dtype and device, never its bytes.
        "empty_like",
        "new_empty",
        "new_empty_strided",
        "new_zeros",
        "new_ones",
        "new_full",
        "zeros_like",
        "ones_like",
        "full_like",
        "rand_like",
        "randn_like",
        "randint_like",
        # Size, stride, offset and identity queries: the tensor object's metadata.
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_same_size",
        "_has_compatible_shallow_copy_type",
        "is_set_to",
        # Change which shape or storage a tensor object has. (A growing ``resize_`` copies the old bytes
        # into new memory; both tools leave that copy unjudged, as they always have.)
        "resize_",
        "set_",
        # Hand back the same bytes under another tensor object (aliases, as views are).
        "lift_fresh",
        "_reshape_alias",
        "_unsafe_view",
        # These three were the race detector's alone until the two tools shared this set:
        "empty",  # allocates fresh memory from a list of sizes: it has no tensor argument to touch
        "empty_strided",  # the same, with explicit strides
        "record_stream",  # tells the CUDA caching allocator that a stream uses the tensor: no byte moves
    }
)


@functools.lru_cache(maxsize=None)
def touches_no_bytes(func: Any) -> bool:
    """Whether the aten op ``func`` reads and writes no tensor's bytes: a view, an in-place view op
    (it changes its argument's metadata), or one of ``METADATA_OPS``. Neither the race detector nor
    the workspace sanitizer judges such an op."""
    if getattr(func, "is_view", False):
        return True
    if torch.Tag.inplace_view in getattr(func, "tags", ()):
        return True
    packet = getattr(func, "overloadpacket", None)
    return getattr(packet, "__name__", "") in METADATA_OPS


class KernelStamp:
    """One launched kernel, as the detector sees it."""

    __slots__ = ("sid", "seq", "clock", "name", "stream", "ubatch", "site", "thread", "local", "ticket", "writes")

    def __init__(
        self,
        sid: int,
        seq: int,
        clock: dict[int, int],
        name: str,
        stream: str,
        ubatch: int | None,
        site: str,
        ticket: int = 0,
    ):
        self.ticket = ticket  # launch order across every backend (dbo.races.launch_count() at its launch)
        self.sid = sid
        self.seq = seq
        self.clock = clock  # stream id -> the last sequence number of that stream ordered before this kernel
        self.name = name
        self.stream = stream
        self.ubatch = ubatch
        self.site = site
        self.thread = ""  # the thread that ran it (set when it runs)
        self.local: set[int] = set()  # storages created inside this kernel (temporaries: not judged)
        self.writes: list[tuple[int, int, int]] = []  # (storage, start, end) this kernel wrote

    def ordered_after(self, other: "KernelStamp") -> bool:
        """Whether ``other`` happens before this kernel (same kernel: True)."""
        return self.clock.get(other.sid, 0) >= other.seq

    def describe(self) -> str:
        who = "no ubatch" if self.ubatch is None else f"ubatch {self.ubatch}"
        return f"kernel {self.name!r} (stream {self.stream!r} #{self.seq}, {who}, launched at {self.site})"


@functools.lru_cache(maxsize=None)
def op_spec(func: Any) -> tuple[frozenset, frozenset, bool] | None:
    """(positions of written arguments, names of written keyword arguments, results are fresh) of
    an op, or None for an op that touches no bytes (views, metadata) or has no schema."""
    if touches_no_bytes(func):
        return None
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    pos, kw = set(), set()
    for i, a in enumerate(schema.arguments):
        info = a.alias_info
        if info is not None and info.is_write:
            kw.add(a.name)
            if not a.kwarg_only:
                pos.add(i)
    fresh = all(r.alias_info is None for r in schema.returns)
    return frozenset(pos), frozenset(kw), fresh


def byte_range(t: torch.Tensor) -> tuple[int, int]:
    """[start, end) of the bytes ``t`` can touch, relative to its storage's start."""
    size = t.element_size()
    start = t.storage_offset() * size
    extent = 1
    for n, s in zip(t.shape, t.stride()):
        if n == 0:
            return start, start
        extent += (n - 1) * abs(s)
    return start, start + extent * size


class _Storage:
    __slots__ = ("ref", "records", "nbytes", "what")

    def __init__(self, storage: Any, what: str):
        self.ref = weakref.ref(storage)
        self.records: list[tuple[int, int, bool, KernelStamp]] = []  # (start, end, is_write, kernel)
        self.nbytes = storage.nbytes()
        self.what = what


class Shadow:
    """Per storage, the accesses not yet superseded; ``report(first, second, ...)`` on a race."""

    def __init__(self, report: Callable[..., None]):
        self.lock = threading.Lock()
        self.storages: dict[int, _Storage] = {}
        self.report = report

    def clear(self) -> None:
        with self.lock:
            self.storages.clear()

    def access(self, k: KernelStamp, op: str, t: torch.Tensor, write: bool) -> None:
        if t.is_meta or t.numel() == 0:
            return
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
            return
        ptr = storage.data_ptr()
        if ptr == 0 or ptr in k.local:
            return
        s, e = byte_range(t)
        if write:
            k.writes.append((ptr, s, e))
        races = []
        with self.lock:
            sh = self.storages.get(ptr)
            if sh is None or sh.ref() is not storage:  # new, or freed and its address reused
                desc = f"{str(t.dtype).replace('torch.', '')} storage of {storage.nbytes()} bytes on {t.device}"
                sh = self.storages[ptr] = _Storage(storage, desc)
                if len(self.storages) % 1024 == 0:
                    self.storages = {p: x for p, x in self.storages.items() if x.ref() is not None}
            keep = []
            dup = False
            for rec in sh.records:
                a, b, w, other = rec
                if b <= s or e <= a:
                    keep.append(rec)
                    continue
                if other is k:
                    if a <= s and e <= b and (w or not write):
                        dup = True  # this kernel already made this access (or a write covering it)
                    keep.append(rec)
                    continue
                if (w or write) and not k.ordered_after(other):
                    races.append((other, w, max(a, s), min(b, e)))
                    keep.append(rec)
                    continue
                # ``other`` happens before this access: it is superseded when this access covers it
                # and is a write, or both are reads (a later access ordered after this one is
                # ordered after ``other`` too; one that is not races with this one).
                if s <= a and b <= e and (write or not w):
                    continue
                keep.append(rec)
            if not dup:
                keep.append((s, e, write, k))
                if len(keep) > MAX_RECORDS:
                    del keep[: len(keep) - MAX_RECORDS]
            sh.records = keep
            what = sh.what
        for other, w, a, b in races:
            self.report(other, w, k, write, op, a, b, what)

    def touched_by(self, k: KernelStamp) -> dict[int, list[tuple[int, int, bool]]]:
        """The byte ranges kernel ``k`` accessed (and kept in the records), per storage."""
        out: dict[int, list[tuple[int, int, bool]]] = {}
        with self.lock:
            for ptr, sh in self.storages.items():
                mine = [(a, b, w) for a, b, w, other in sh.records if other is k]
                if mine:
                    out[ptr] = mine
        return out

    def overlap(
        self, touched: dict[int, list[tuple[int, int, bool]]], t: torch.Tensor
    ) -> tuple[int, int, bool, str] | None:
        """The first of ``touched`` that overlaps tensor ``t``'s bytes: (start, end, write, storage)."""
        if t.is_meta or t.numel() == 0:
            return None
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return None
        ranges = touched.get(storage.data_ptr())
        if not ranges:
            return None
        s, e = byte_range(t)
        for a, b, w in ranges:
            if a < e and s < b:
                with self.lock:
                    sh = self.storages.get(storage.data_ptr())
                    what = sh.what if sh is not None else "storage"
                return max(a, s), min(b, e), w, what
        return None

    def concurrent_accesses(self, p: KernelStamp, t: torch.Tensor) -> list[tuple[KernelStamp, bool, int, int, str]]:
        """Recorded accesses to ``t``'s bytes by kernels neither ordered before nor after ``p``."""
        if t.is_meta or t.numel() == 0:
            return []
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return []
        s, e = byte_range(t)
        out = []
        with self.lock:
            sh = self.storages.get(storage.data_ptr())
            if sh is None or sh.ref() is not storage:
                return []
            for a, b, w, x in sh.records:
                if x is not p and a < e and s < b and not p.ordered_after(x) and not x.ordered_after(p):
                    out.append((x, w, max(a, s), min(b, e), sh.what))
        return out


def written_args(k: KernelStamp, args: tuple) -> set[int]:
    """Positions of the arguments of kernel ``k`` whose bytes its body wrote."""
    out: set[int] = set()
    if not k.writes:
        return out
    for i, a in enumerate(args):
        for t in a if isinstance(a, (list, tuple)) else (a,):
            if not isinstance(t, torch.Tensor) or t.is_meta or t.numel() == 0:
                continue
            try:
                ptr = t.untyped_storage().data_ptr()
            except (RuntimeError, NotImplementedError):
                continue
            s, e = byte_range(t)
            if any(p == ptr and a2 < e and s < b2 for p, a2, b2 in k.writes):
                out.add(i)
                break
    return out


class RaceMode(TorchDispatchMode):
    """Entered around one kernel's body: every op's accesses go to ``shadow`` stamped with ``stamp``."""

    def __init__(self, stamp: KernelStamp, shadow: Shadow):
        super().__init__()
        self.stamp = stamp
        self.shadow = shadow

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        spec = op_spec(func)
        if spec is None:
            return func(*args, **kwargs)
        pos, kw, fresh = spec
        k, access = self.stamp, self.shadow.access
        op = str(getattr(func, "__name__", func))
        for i, a in enumerate(args):
            _each(a, lambda t, w=i in pos: access(k, op, t, w))
        for name, a in kwargs.items():
            _each(a, lambda t, w=name in kw: access(k, op, t, w))
        out = func(*args, **kwargs)
        if fresh:  # new memory: a temporary of this kernel, never seen by another
            _each(out, lambda t: k.local.add(t.untyped_storage().data_ptr()) if not t.is_meta else None)
        return out


def _each(x: Any, fn: Callable[[torch.Tensor], Any]) -> None:
    if isinstance(x, torch.Tensor):
        fn(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            if isinstance(y, torch.Tensor):
                fn(y)
