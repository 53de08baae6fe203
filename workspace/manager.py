"""WorkspaceManager: per-ubatch scratch slots, and the process-global manager singleton.

Each ubatch owns one slot, a 1-D uint8 buffer. ``get_simultaneous`` carves a group of views out of
the calling ubatch's slot (slot = ``dbo.registry.current_ubatch_id()``), each at a 256-byte
aligned offset. Treat it like a group of ``torch.empty`` calls whose results live until the same
slot's next ``get_simultaneous`` call. See docs/workspace.md.

Threading model:

* Growth, locking and view construction run under one ``threading.Lock``.
* The hot path (a request seen before, for the calling slot) is lock-free: one dict lookup in the
  slot's cache and a fresh list of the cached view objects. No torch op, no allocation.
* A thread may read a cache entry just before another thread's growth replaces every slot. It then
  returns views of the *old* buffer. That is memory-safe: the views keep the old storage alive, and
  no one else writes to it. The thread's next call finds the new (empty) cache and gets views of the
  new buffer. The price is that the old storage lives as long as those views (see the docs on
  lockstep growth).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import warnings
from typing import Any

import torch

from dbo.registry import current_ubatch_id

from .errors import WorkspaceLockedError
from .layout import Plan, canonical_request, carve, plan

__all__ = [
    "CACHE_LIMIT",
    "DEBUG_ENV",
    "WorkspaceManager",
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "lock_workspace",
    "reset_workspace_manager",
    "unlock_workspace",
]

logger = logging.getLogger(__name__)

DEBUG_ENV = "DBO_DEBUG_WORKSPACE"
"""Set to 1 (read when a manager is constructed) to log every resize, lock and unlock at INFO."""

CACHE_LIMIT = 1024
"""Most request signatures cached per slot; a slot's cache is cleared when it would exceed this."""

DEFAULT_NUM_UBATCHES = 2
_MB = 1024 * 1024
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_Size = torch.Size


def _mb(nbytes: int) -> str:
    return f"{nbytes / _MB:.2f} MB"


def _caller() -> str:
    """``file:line:function`` of the first stack frame outside the workspace package."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown caller>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}:{frame.f_code.co_name}"


def _debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _check_device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as exc:
            raise ValueError(f"not a valid torch device: {device!r} ({exc})") from None
    raise TypeError(f"device must be a str or torch.device, got {type(device).__name__}: {device!r}")


def _check_num_ubatches(num_ubatches: object) -> int:
    if num_ubatches is None:
        return DEFAULT_NUM_UBATCHES
    if isinstance(num_ubatches, bool) or not isinstance(num_ubatches, int):
        raise TypeError(f"num_ubatches must be an int or None, got {type(num_ubatches).__name__}: {num_ubatches!r}")
    if num_ubatches < 1:
        raise ValueError(f"num_ubatches must be >= 1, got {num_ubatches}")
    return num_ubatches


class WorkspaceManager:
    """Scratch memory for ``num_ubatches`` ubatch threads: one uint8 slot each, grown in lockstep.

    ``num_ubatches=None`` means 2 (the DBO default). Slots start empty and grow lazily to exactly
    the bytes a request needs, never shrink, and always share one capacity. After ``lock()`` a
    request that does not fit raises ``WorkspaceLockedError``.
    """

    def __init__(self, device: str | torch.device, num_ubatches: int | None = None) -> None:
        self._device = _check_device(device)
        n = _check_num_ubatches(num_ubatches)
        self._num_slots = n
        self._buffers: list[torch.Tensor | None] = [None] * n
        self._sizes: list[int] = [0] * n
        # Per slot: request key -> tuple of ready-made views of that slot's current buffer.
        # Replaced (never mutated in place after growth) so lock-free readers see old or new, whole.
        self._caches: list[dict[Any, tuple[torch.Tensor, ...]]] = [{} for _ in range(n)]
        self._locked = False
        self._lock = threading.Lock()
        self._debug = _debug_enabled()
        self._grows = 0
        self._allocations = 0
        self._allocations_after_lock = 0
        self._cache_misses = 0
        self._cache_clears = 0
        self._largest_request = 0
        self._largest_request_exact = 0

    # ------------------------------------------------------------------ properties

    @property
    def device(self) -> torch.device:
        """The device every slot lives on."""
        return self._device

    @property
    def num_slots(self) -> int:
        """Number of slots (= num_ubatches); valid ubatch ids are 0 .. num_slots - 1."""
        return self._num_slots

    def __repr__(self) -> str:
        state = "locked" if self._locked else "unlocked"
        return f"WorkspaceManager(device={str(self._device)!r}, slots={self._num_slots}, capacity={_mb(max(self._sizes))}, {state})"

    # ------------------------------------------------------------------ the API

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        """Views for each ``(shape, dtype)``, carved from the calling ubatch's slot in request order.

        Like a group of ``torch.empty`` calls (no zeroing) whose results live until this slot's next
        call. The returned tensors are shared handles: never change their metadata (``resize_``,
        ``set_``, ``as_strided_``, ``unsqueeze_``, ``requires_grad_``...), only their contents.
        """
        slot = current_ubatch_id()
        try:
            views = self._caches[slot].get(shapes_and_dtypes)
        except (IndexError, TypeError):  # slot beyond the slots, or an unhashable spec (list shape)
            views = None
        if views is not None:
            # Python says True == 1 == 1.0: a hit may come from a request with bool or float dims,
            # which must be rejected exactly as on a cold manager. Only exact ints pass here.
            for shape, _ in shapes_and_dtypes:
                kind = type(shape)
                if kind is int:
                    continue
                if kind is tuple or kind is _Size:
                    for dim in shape:
                        if type(dim) is not int:
                            break
                    else:
                        continue
                views = None
                break
            else:
                if self._debug:
                    self._verify_views(slot, views, shapes_and_dtypes)
                return list(views)
        # No reference to a cached view may stay alive here: growth must be able to free the old buffer.
        return self._get_slow(slot, shapes_and_dtypes)

    def lock(self) -> None:
        """Forbid growth: from now on a request that does not fit raises ``WorkspaceLockedError``."""
        with self._lock:
            self._locked = True
            if self._debug:
                logger.info("workspace locked: %s", self._describe_sizes())

    def unlock(self) -> None:
        """Allow growth again (e.g. to re-warm after a reconfiguration, then lock again)."""
        with self._lock:
            self._locked = False
            if self._debug:
                logger.info("workspace unlocked: %s", self._describe_sizes())

    def is_locked(self) -> bool:
        """True between ``lock()`` and ``unlock()``."""
        return self._locked

    def slot_sizes(self) -> list[int]:
        """Each slot's capacity in bytes (equal for every slot: growth is lockstep)."""
        with self._lock:
            return list(self._sizes)

    def slot_ranges(self) -> list[tuple[int, int]]:
        """Each slot's current byte range as ``(data_ptr, nbytes)``; ``(0, 0)`` for a slot never grown.

        For isolation checks: every view handed to ubatch i lies in range i (until the next growth).
        """
        with self._lock:
            return [(0, 0) if b is None or b.numel() == 0 else (b.data_ptr(), b.numel()) for b in self._buffers]

    def stats(self) -> dict[str, Any]:
        """Counters: ``grows``, ``bytes_reserved`` (sum over slots), ``allocations``, ``allocations_after_lock``, ...

        ``allocations`` counts buffer allocations (one per slot per growth); ``allocations_after_lock``
        counts those made while locked and must stay 0. ``cache_misses`` counts calls that built views.
        """
        with self._lock:
            return {
                "num_slots": self._num_slots,
                "locked": self._locked,
                "capacity_bytes": max(self._sizes),
                "bytes_reserved": sum(self._sizes),
                "grows": self._grows,
                "allocations": self._allocations,
                "allocations_after_lock": self._allocations_after_lock,
                "cache_entries": sum(len(c) for c in self._caches),
                "cache_misses": self._cache_misses,
                "cache_clears": self._cache_clears,
                "largest_request_bytes": self._largest_request,
                "largest_request_exact_bytes": self._largest_request_exact,
            }

    # ------------------------------------------------------------------ overridable hooks

    def _allocate(self, nbytes: int) -> torch.Tensor:
        """Allocate one slot buffer: a 1-D uint8 tensor of exactly ``nbytes`` on the device.

        Tests override this to observe allocation order; it must not keep a reference.
        """
        return torch.empty((nbytes,), dtype=torch.uint8, device=self._device)

    def _release_cached_memory(self) -> None:
        """Between freeing the old buffers and allocating the new: hand cached blocks back (CUDA only)."""
        if self._device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    # ------------------------------------------------------------------ slow path

    def _get_slow(self, slot: int, specs: tuple[Any, ...]) -> list[torch.Tensor]:
        if slot >= self._num_slots:
            raise ValueError(
                f"ubatch id {slot} has no workspace slot: this manager has {self._num_slots} slot(s) "
                f"(ids 0..{self._num_slots - 1}). Create it with num_ubatches >= {slot + 1}."
            )
        canon = canonical_request(specs)  # validates; raises before anything changes
        views = self._caches[slot].get(canon)
        if views is not None:  # e.g. list shapes: unhashable as given, cached under the canonical key
            if self._debug:
                self._verify_views(slot, views, canon)
            return list(views)
        layout = plan(canon)
        with self._lock:
            if layout.total > self._sizes[slot]:
                self._grow(slot, layout.total)
            buffer = self._buffers[slot]
            if buffer is None:  # a zero-byte request on a slot that never grew: no memory involved
                buffer = self._buffers[slot] = torch.empty((0,), dtype=torch.uint8, device=self._device)
            views = tuple(carve(buffer, layout))
            del buffer
            self._cache_misses += 1
            if layout.total > self._largest_request:
                self._largest_request = layout.total
                self._largest_request_exact = layout.exact_total
            cache = self._caches[slot]
            if len(cache) + 2 > CACHE_LIMIT:  # room for the canonical key and the key as given
                cache = self._caches[slot] = {}
                self._cache_clears += 1
            cache[canon] = views
            try:
                cache[specs] = views  # the key as given, so the next identical call hits directly
            except TypeError:
                pass
        return list(views)

    def _grow(self, slot: int, required: int) -> None:
        """Grow every slot to exactly ``required`` bytes, freeing all old buffers first. Holds ``_lock``."""
        current = self._sizes[slot]
        if self._locked:
            caller = _caller()
            raise WorkspaceLockedError(
                f"Workspace is locked, but {caller} needs {_mb(required)} ({required} bytes) in the slot "
                f"of ubatch {slot}, which holds {_mb(current)} ({current} bytes): growth is not allowed "
                "after locking. Warm up with the largest request before lock(), or unlock() to grow.",
                caller=caller,
                ubatch_id=slot,
                required_bytes=required,
                current_bytes=current,
            )
        old_sizes = list(self._sizes)
        # Free first: drop the cached views (they hold the storage too), then the buffers.
        for i in range(self._num_slots):
            self._caches[i] = {}
        for i in range(self._num_slots):
            self._buffers[i] = None
            self._sizes[i] = 0
        self._release_cached_memory()
        try:
            for i in range(self._num_slots):
                buffer = self._allocate(required)
                if buffer.dtype != torch.uint8 or buffer.dim() != 1 or buffer.numel() != required:
                    raise RuntimeError(
                        f"_allocate({required}) returned {buffer.dtype} {tuple(buffer.shape)}, "
                        f"not a 1-D uint8 tensor of {required} bytes"
                    )
                self._buffers[i] = buffer
                self._sizes[i] = required
                del buffer
                self._allocations += 1
                if self._locked:  # cannot happen: lock() waits for _lock; kept as a tripwire for stats
                    self._allocations_after_lock += 1
        except BaseException:
            # Keep lockstep: every slot empty rather than some new and some missing. Next call retries.
            for i in range(self._num_slots):
                self._buffers[i] = None
                self._sizes[i] = 0
            raise
        self._grows += 1
        if self._debug:
            logger.info(
                "workspace resize requested by %s (ubatch %d): %s -> %s per slot, %d slots, %s total",
                _caller(),
                slot,
                _mb(old_sizes[slot]),
                _mb(required),
                self._num_slots,
                _mb(required * self._num_slots),
            )

    def _describe_sizes(self) -> str:
        sizes = ", ".join(_mb(s) for s in self._sizes)
        return f"{self._num_slots} slots [{sizes}], {_mb(sum(self._sizes))} total"

    def _verify_views(self, slot: int, views: tuple[torch.Tensor, ...], specs: tuple[Any, ...]) -> None:
        """Debug mode: check that cached views still look as they were handed out."""
        layout: Plan = plan(canonical_request(specs))
        for i, (view, (shape, dtype), offset) in enumerate(zip(views, layout.specs, layout.offsets)):
            base = view.untyped_storage().data_ptr()
            if (
                tuple(view.shape) != shape
                or view.dtype != dtype
                or not view.is_contiguous()
                or view.data_ptr() != base + offset
                or view.requires_grad
            ):
                raise RuntimeError(
                    f"cached workspace view {i} of ubatch {slot} was changed in place: expected "
                    f"{tuple(shape)} {dtype} at byte {offset}, found {tuple(view.shape)} {view.dtype} at byte "
                    f"{view.data_ptr() - base} (requires_grad={view.requires_grad}). Views are shared "
                    "handles: change their contents, never their metadata (resize_, set_, as_strided_, "
                    "unsqueeze_, requires_grad_...); use out-of-place .view()/.reshape() instead."
                )


# ---------------------------------------------------------------------- process-global singleton
#
# The one workspace manager of the process (with the registry, one of the project's two
# process-globals). Every thread sees the same manager.

_manager: WorkspaceManager | None = None
_manager_lock = threading.Lock()


def init_workspace_manager(device: str | torch.device, num_ubatches: int | None = None) -> WorkspaceManager:
    """Create the process-global manager; warns (``UserWarning``) and replaces an existing one."""
    global _manager
    new = WorkspaceManager(device, num_ubatches)  # bad arguments raise here and change nothing
    with _manager_lock:
        old, _manager = _manager, new
    if old is not None:
        warnings.warn(
            f"init_workspace_manager: replacing the existing process-global {old!r}; views it handed "
            "out stay valid but its slots are no longer used",
            stacklevel=2,
        )
    return new


def current_workspace_manager() -> WorkspaceManager:
    """The process-global manager; RuntimeError if ``init_workspace_manager`` was not called."""
    manager = _manager
    if manager is None:
        raise RuntimeError(
            "the workspace manager is not initialised: call workspace.init_workspace_manager(device, num_ubatches) first"
        )
    return manager


def is_workspace_manager_initialized() -> bool:
    """True iff the process-global manager exists."""
    return _manager is not None


def lock_workspace() -> None:
    """Lock the process-global manager (see ``WorkspaceManager.lock``)."""
    current_workspace_manager().lock()


def unlock_workspace() -> None:
    """Unlock the process-global manager (see ``WorkspaceManager.unlock``)."""
    current_workspace_manager().unlock()


def reset_workspace_manager() -> None:
    """Drop the process-global manager (shutdown and tests). Views handed out stay valid."""
    global _manager
    with _manager_lock:
        _manager = None
