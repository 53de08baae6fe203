"""A deterministic live-bytes tracker for workspace memory studies.

CPU torch has no caching allocator to ask, ``tracemalloc`` does not see tensor memory, and the
process RSS is coarse. ``LiveBytesTracker`` counts instead: it observes a manager (it is a
``WorkspaceObserver``), puts a ``weakref.finalize`` on the storage of every buffer the manager
allocates (slot buffers, right after ``_allocate``, and persistent tensors), and so knows at every
moment how many bytes are alive. When the manager drops a buffer that is still alive (someone
holds views of it), those bytes are *orphaned* until the last view dies. With CPython's reference
counting every figure is exact and repeatable.

    tracker = LiveBytesTracker().attach(manager)   # attach before the first allocation
    ... run ...
    tracker.peak, tracker.orphaned_peak, tracker.orphaned_total, tracker.events
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any

import torch

from workspace.manager import WorkspaceManager
from workspace.observers import WorkspaceObserver

__all__ = ["LiveBytesTracker"]


@dataclass
class _Record:
    slot: int
    nbytes: int
    kind: str  # "buffer" or "persistent"
    orphaned: bool = False
    alive: bool = True


class LiveBytesTracker(WorkspaceObserver):
    """Live, peak and orphaned bytes of the buffers of the managers it is attached to.

    ``live`` / ``peak``: bytes alive now / at most. ``orphaned`` / ``orphaned_peak``: bytes of
    dropped-but-alive buffers now / at most; ``orphaned_total``: bytes ever orphaned.
    ``events``: ``(what, slot, nbytes)`` with what in "alloc", "free", "retire", "orphan",
    "persistent", in order.
    """

    def __init__(self) -> None:
        self.live = 0
        self.peak = 0
        self.orphaned = 0
        self.orphaned_peak = 0
        self.orphaned_total = 0
        self.events: list[tuple[str, int, int]] = []
        self._records: dict[int, _Record] = {}  # id(storage) -> record, while the storage lives
        self._lock = threading.Lock()
        self._managers: list[weakref.ref] = []

    def attach(self, manager: WorkspaceManager) -> "LiveBytesTracker":
        """Observe ``manager`` (buffers it already holds count as allocated now); returns self."""
        manager.add_observer(self)
        self._managers.append(weakref.ref(manager))
        return self

    def detach(self) -> None:
        """Stop observing (finalizers already placed still count frees)."""
        for ref in self._managers:
            m = ref()
            if m is not None:
                m.remove_observer(self)
        self._managers.clear()

    # -- observer -----------------------------------------------------------------------------
    def _track(self, slot: int, storage: Any, nbytes: int, kind: str) -> None:
        key = id(storage)
        with self._lock:
            if key in self._records:  # attached twice, or a repeated report
                return
            rec = self._records[key] = _Record(slot, nbytes, kind)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            self.events.append(("alloc" if kind == "buffer" else "persistent", slot, nbytes))
        weakref.finalize(storage, self._freed, key, rec)

    def _freed(self, key: int, rec: _Record) -> None:
        with self._lock:
            if self._records.get(key) is rec:
                del self._records[key]
            rec.alive = False
            self.live -= rec.nbytes
            if rec.orphaned:
                self.orphaned -= rec.nbytes
            self.events.append(("free", rec.slot, rec.nbytes))

    def buffer_allocated(self, manager: WorkspaceManager, slot: int, buffer: torch.Tensor) -> None:
        self._track(slot, buffer.untyped_storage(), buffer.numel(), "buffer")

    def persistent_created(self, manager: WorkspaceManager, slot: int, key: Any, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes:
            self._track(slot, tensor.untyped_storage(), nbytes, "persistent")

    def buffer_retired(self, manager: WorkspaceManager, slot: int, storage_ref: weakref.ref, nbytes: int) -> None:
        storage = storage_ref()
        with self._lock:
            self.events.append(("retire", slot, nbytes))
            if storage is None:
                return
            rec = self._records.get(id(storage))
            if rec is None or not rec.alive or rec.orphaned:
                return
            rec.orphaned = True
            self.orphaned += rec.nbytes
            self.orphaned_peak = max(self.orphaned_peak, self.orphaned)
            self.orphaned_total += rec.nbytes
            self.events.append(("orphan", slot, rec.nbytes))

    def summary(self) -> dict[str, int]:
        """The figures as a dict."""
        with self._lock:
            return {
                "live": self.live,
                "peak": self.peak,
                "orphaned": self.orphaned,
                "orphaned_peak": self.orphaned_peak,
                "orphaned_total": self.orphaned_total,
            }
