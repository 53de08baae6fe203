"""WorkspaceManager: per-ubatch (and per-lane) scratch slots, persistent resources, and the singleton.

Each (ubatch, lane) owns one slot, a 1-D uint8 buffer; slot = ubatch * num_lanes + lane, where the
ubatch is ``dbo.registry.current_ubatch_id()`` and the lane comes from ``use_workspace_lane``.
``get_simultaneous`` carves a group of views out of the calling slot, each at a 256-byte aligned
offset. Treat it like a group of ``torch.empty`` calls whose results live until the same slot's
next ``get_simultaneous`` call. How sibling slots follow a growing slot is the growth policy
(``workspace.policy``). See docs/workspace.md.

Threading model:

* Growth, deferred reallocation, locking, persistent creation and view construction run under one
  ``threading.Lock``.
* The hot path (a request seen before, for the calling slot) is lock-free: one dict lookup in the
  slot's cache and a fresh list of the cached view objects. No torch op, no allocation.
* A thread may read a cache entry just before another thread's growth replaces its slot's cache.
  It then returns views of the buffer it had. That is memory-safe: the views keep that storage
  alive. Under ``lockstep`` that buffer may just have been replaced (the views are orphaned);
  under ``deferred-lockstep`` and ``requester`` a sibling's buffer is never replaced by another
  thread, so the views are simply its current ones.

Observers (``add_observer``; used by ``workspace.sanitizer`` and memory trackers) are told about
buffer allocations and retirements, persistent tensors and, only while at least one observer is
attached, every hand-out of views. With no observer the hot path is unchanged: observation swaps in
an instrumented ``get_simultaneous`` on the instance instead of testing a flag on every call.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import sys
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from dbo.registry import current_ubatch_id

from .errors import WorkspaceLockedError
from .layout import Plan, canonical_dtype, canonical_request, canonical_shape, carve, nbytes_of, plan
from .policy import GrowthPolicy, get_policy

__all__ = [
    "CACHE_LIMIT",
    "DEBUG_ENV",
    "WorkspaceManager",
    "WorkspaceObserver",
    "add_global_observer",
    "current_workspace_lane",
    "current_workspace_manager",
    "init_workspace_manager",
    "is_workspace_manager_initialized",
    "lock_workspace",
    "remove_global_observer",
    "reset_workspace_manager",
    "unlock_workspace",
    "use_workspace_lane",
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

_lane_var: contextvars.ContextVar[int] = contextvars.ContextVar("workspace_lane", default=0)


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


def _check_count(name: str, value: object, default: int | None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if default is not None else "an int"
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__}: {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def _check_lane(lane: object) -> int:
    if isinstance(lane, bool) or not isinstance(lane, int):
        raise TypeError(f"workspace lane must be an int, got {type(lane).__name__}: {lane!r}")
    if lane < 0:
        raise ValueError(f"workspace lane must be >= 0, got {lane}")
    return lane


class WorkspaceObserver:
    """Base class of manager observers; every method is a no-op.

    ``buffer_allocated``, ``buffer_retired`` and ``persistent_created`` run under the manager's
    lock: keep them quick and never call back into the manager. ``views_handed_out`` runs in the
    calling thread after every ``get_simultaneous`` (hits included) while the observer is attached.
    ``buffer_retired`` comes after the manager dropped every reference it held: a live
    ``storage_ref()`` means someone else still holds views of the buffer (they are orphaned).
    """

    def buffer_allocated(self, manager: "WorkspaceManager", slot: int, buffer: torch.Tensor) -> None:
        """A slot got a new buffer (also called on attach for each buffer the manager already holds)."""

    def buffer_retired(self, manager: "WorkspaceManager", slot: int, storage_ref: weakref.ref, nbytes: int) -> None:
        """The manager dropped a slot's buffer (growth or deferred reallocation)."""

    def views_handed_out(self, manager: "WorkspaceManager", slot: int, views: list[torch.Tensor]) -> None:
        """A ``get_simultaneous`` call of ``slot`` returned ``views``."""

    def persistent_created(self, manager: "WorkspaceManager", slot: int, key: Any, tensor: torch.Tensor) -> None:
        """``get_persistent`` created a tensor for ``slot`` (also called on attach for existing ones)."""


@dataclass
class _Persistent:
    kind: str  # "resource" or "tensor"
    value: Any
    shape: tuple[int, ...] | None = None
    dtype: torch.dtype | None = None


def _observed_entry(manager: "WorkspaceManager") -> Callable[..., list[torch.Tensor]]:
    """An instance-level ``get_simultaneous`` that reports every hand-out to the observers.

    Holds the manager weakly, so installing it creates no reference cycle.
    """
    ref = weakref.ref(manager)

    def get_simultaneous(*shapes_and_dtypes: Any) -> list[torch.Tensor]:
        m = ref()
        slot = m._current_slot()
        views = m._get_at(slot, shapes_and_dtypes)
        for obs in m._observers:
            obs.views_handed_out(m, slot, views)
        return views

    get_simultaneous.__doc__ = WorkspaceManager.get_simultaneous.__doc__
    return get_simultaneous


def _lanes_entry(manager: "WorkspaceManager") -> Callable[..., list[torch.Tensor]]:
    """An instance-level ``get_simultaneous`` for managers with several lanes (slot includes the lane)."""
    ref = weakref.ref(manager)

    def get_simultaneous(*shapes_and_dtypes: Any) -> list[torch.Tensor]:
        m = ref()
        return m._get_at(m._current_slot(), shapes_and_dtypes)

    get_simultaneous.__doc__ = WorkspaceManager.get_simultaneous.__doc__
    return get_simultaneous


class WorkspaceManager:
    """Scratch memory for ``num_ubatches`` ubatch threads x ``num_lanes`` lanes: one uint8 slot each.

    ``num_ubatches=None`` means 2 (the DBO default). Slots start empty and grow lazily to exactly
    the bytes a request needs and never shrink; ``growth`` (a name from ``workspace.policy``, or a
    ``GrowthPolicy``; default ``policy.DEFAULT_GROWTH``) says how the other slots of the same lane
    follow. After ``lock()`` a request that does not fit raises ``WorkspaceLockedError``.
    """

    def __init__(
        self,
        device: str | torch.device,
        num_ubatches: int | None = None,
        *,
        growth: str | GrowthPolicy | None = None,
        num_lanes: int = 1,
    ) -> None:
        self._device = _check_device(device)
        self._num_ubatches = _check_count("num_ubatches", num_ubatches, DEFAULT_NUM_UBATCHES)
        self._num_lanes = _check_count("num_lanes", num_lanes, None)
        self._policy = get_policy(growth)
        n = self._num_slots = self._num_ubatches * self._num_lanes
        self._buffers: list[torch.Tensor | None] = [None] * n
        self._sizes: list[int] = [0] * n  # bytes of the buffer each slot holds now
        self._capacity: list[int] = [0] * n  # bytes each slot is guaranteed at its next call
        # Per slot: request key -> tuple of ready-made views of that slot's current buffer.
        # Replaced (never mutated in place after growth) so lock-free readers see old or new, whole.
        self._caches: list[dict[Any, tuple[torch.Tensor, ...]]] = [{} for _ in range(n)]
        self._persistent: list[dict[Any, _Persistent]] = [{} for _ in range(n)]
        self._locked = False
        self._lock = threading.Lock()
        self._debug = _debug_enabled()
        self._observers: tuple[WorkspaceObserver, ...] = ()
        self._retired: list[tuple[weakref.ref, int]] = []  # dropped buffers, to count orphaned bytes
        self._grows = 0
        self._allocations = 0
        self._allocations_after_lock = 0
        self._deferred_reallocations = 0
        self._persistent_allocations = 0
        self._cache_misses = 0
        self._cache_clears = 0
        self._largest_request = 0
        self._largest_request_exact = 0
        if self._num_lanes > 1:
            self.get_simultaneous = _lanes_entry(self)  # type: ignore[method-assign]
        with _registry_lock:
            _all_managers.add(self)
            observers = tuple(_global_observers)
        for obs in observers:
            self.add_observer(obs)

    # ------------------------------------------------------------------ properties

    @property
    def device(self) -> torch.device:
        """The device every slot lives on."""
        return self._device

    @property
    def num_slots(self) -> int:
        """Number of slots (= num_ubatches * num_lanes); slot = ubatch * num_lanes + lane."""
        return self._num_slots

    @property
    def num_ubatches(self) -> int:
        """Number of ubatches; valid ubatch ids are 0 .. num_ubatches - 1."""
        return self._num_ubatches

    @property
    def num_lanes(self) -> int:
        """Number of lanes per ubatch (1 unless configured)."""
        return self._num_lanes

    @property
    def policy(self) -> GrowthPolicy:
        """The growth policy (``policy.name`` is "lockstep", "requester" or "deferred-lockstep")."""
        return self._policy

    def slot_of(self, ubatch_id: int, lane: int = 0) -> int:
        """The slot index of (ubatch, lane)."""
        return ubatch_id * self._num_lanes + lane

    def owner_of(self, slot: int) -> tuple[int, int]:
        """The (ubatch, lane) that owns ``slot``."""
        return divmod(slot, self._num_lanes)

    def __repr__(self) -> str:
        state = "locked" if self._locked else "unlocked"
        lanes = f", lanes={self._num_lanes}" if self._num_lanes > 1 else ""
        return (
            f"WorkspaceManager(device={str(self._device)!r}, slots={self._num_slots}{lanes}, "
            f"growth={self._policy.name!r}, capacity={_mb(max(self._capacity))}, {state})"
        )

    # ------------------------------------------------------------------ the API

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        """Views for each ``(shape, dtype)``, carved from the calling ubatch's slot in request order.

        Like a group of ``torch.empty`` calls (no zeroing) whose results live until this slot's next
        call. The returned tensors are shared handles: never change their metadata (``resize_``,
        ``set_``, ``as_strided_``, ``unsqueeze_``, ``requires_grad_``...), only their contents.
        """
        return self._get_at(current_ubatch_id(), shapes_and_dtypes)

    def _get_at(self, slot: int, shapes_and_dtypes: tuple[Any, ...]) -> list[torch.Tensor]:
        """``get_simultaneous`` for a given slot: the one hit path behind every entry point."""
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

    def get_persistent_resource(self, key: Any, factory: Callable[[], Any]) -> Any:
        """The object ``factory()`` built for ``key`` in the calling (ubatch, lane) slot.

        Built lazily on first use, once per slot, and cached; the same key in another ubatch or lane
        is another object. After ``lock()`` a key the slot does not hold yet raises
        ``WorkspaceLockedError``. Uses of one resource must not overlap in time (two streams that
        run concurrently need two keys).
        """
        if not callable(factory):
            raise TypeError(f"factory must be callable, got {type(factory).__name__}")
        slot = self._checked_slot(self._current_slot())
        entry = self._persistent[slot].get(key)
        if entry is not None:
            if entry.kind != "resource":
                raise ValueError(
                    f"persistent key {key!r} of {self._describe_slot(slot)} holds a tensor (get_persistent), "
                    "not a resource; use another key"
                )
            return entry.value
        with self._lock:
            self._refuse_new_persistent_if_locked(slot, key)
        value = factory()  # outside the lock: a factory may use the workspace itself
        with self._lock:
            existing = self._persistent[slot].get(key)
            if existing is not None:  # a helper acting as the same slot created it meanwhile
                return existing.value
            self._persistent[slot][key] = _Persistent("resource", value)
        return value

    def get_persistent(
        self, key: Any, shape: Any, dtype: torch.dtype, *, zero_init: bool = False
    ) -> torch.Tensor:
        """A tensor kept for ``key`` in the calling (ubatch, lane) slot, separate from the scratch.

        Created on first use (zeroed then if ``zero_init``, never again), returned as the same object
        afterwards, and never touched by ``get_simultaneous``. Asking for the key with another shape
        or dtype raises ``ValueError``; after ``lock()`` a new key raises ``WorkspaceLockedError``.
        """
        shape_c = canonical_shape(shape)
        dtype_c = canonical_dtype(dtype)
        slot = self._checked_slot(self._current_slot())
        entry = self._persistent[slot].get(key)
        if entry is None:
            with self._lock:
                entry = self._persistent[slot].get(key)
                if entry is None:
                    self._refuse_new_persistent_if_locked(slot, key)
                    tensor = self._new_persistent_tensor(shape_c, dtype_c, zero_init)
                    entry = self._persistent[slot][key] = _Persistent("tensor", tensor, shape_c, dtype_c)
                    for obs in self._observers:
                        obs.persistent_created(self, slot, key, tensor)
                    return tensor
        if entry.kind != "tensor":
            raise ValueError(
                f"persistent key {key!r} of {self._describe_slot(slot)} holds a resource "
                "(get_persistent_resource), not a tensor; use another key"
            )
        if entry.shape != shape_c or entry.dtype != dtype_c:
            raise ValueError(
                f"persistent tensor {key!r} of {self._describe_slot(slot)} was created as {entry.shape} "
                f"{entry.dtype}, but is now asked for as {shape_c} {dtype_c}: a persistent tensor cannot "
                "change shape or dtype (use another key)"
            )
        return entry.value

    def persistent_keys(self, ubatch_id: int, lane: int = 0) -> list[Any]:
        """Keys of the persistent resources and tensors that (ubatch, lane) holds."""
        return list(self._persistent[self._checked_slot(self.slot_of(ubatch_id, lane))])

    def lock(self) -> None:
        """Forbid growth and new persistent keys; first reallocate every slot still pending growth.

        Under ``deferred-lockstep`` a sibling that has not called since a growth gets its bigger
        buffer here, so no slot is undersized when locked and no buffer is allocated while locked.
        """
        with self._lock:
            for slot in range(self._num_slots):
                if self._sizes[slot] < self._capacity[slot]:
                    self._materialize(slot, "lock")
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
        """Each slot's capacity in bytes: what its next call is guaranteed to fit.

        Equal within a lane under ``lockstep`` and ``deferred-lockstep``. A slot whose buffer is
        still smaller (deferred, see ``pending_slots``) gets its bigger buffer at its next call.
        """
        with self._lock:
            return list(self._capacity)

    def pending_slots(self) -> list[int]:
        """Slots whose buffer is smaller than their capacity (reallocated at their next call or lock)."""
        with self._lock:
            return [s for s in range(self._num_slots) if self._sizes[s] < self._capacity[s]]

    def undersized_slots(self) -> list[int]:
        """Slots whose capacity is below the largest capacity of their lane (``requester`` growth)."""
        with self._lock:
            return self._undersized()

    def slot_ranges(self) -> list[tuple[int, int]]:
        """Each slot's current buffer as ``(data_ptr, nbytes)``; ``(0, 0)`` for a slot without one.

        For isolation checks: every view handed to a slot lies in its range (until it is reallocated).
        """
        with self._lock:
            return [(0, 0) if b is None or b.numel() == 0 else (b.data_ptr(), b.numel()) for b in self._buffers]

    def orphaned_bytes(self) -> int:
        """Bytes of buffers the manager has dropped that are still alive (someone holds their views)."""
        with self._lock:
            return self._orphaned()

    def stats(self) -> dict[str, Any]:
        """Counters: ``grows``, ``bytes_reserved`` (sum of buffers held), ``allocations``, ...

        ``grows`` counts growth events (a request that outgrew its slot's capacity); ``allocations``
        counts slot buffer allocations; ``deferred_reallocations`` those made at a sibling's safe
        point or at lock; ``allocations_after_lock`` must stay 0. ``orphaned_bytes``: dropped buffers
        still alive. ``cache_misses`` counts calls that built views.
        """
        with self._lock:
            return {
                "num_slots": self._num_slots,
                "num_ubatches": self._num_ubatches,
                "num_lanes": self._num_lanes,
                "policy": self._policy.name,
                "locked": self._locked,
                "capacity_bytes": max(self._capacity),
                "bytes_reserved": sum(self._sizes),
                "pending_slots": sum(1 for s in range(self._num_slots) if self._sizes[s] < self._capacity[s]),
                "undersized_slots": len(self._undersized()),
                "orphaned_bytes": self._orphaned(),
                "grows": self._grows,
                "allocations": self._allocations,
                "deferred_reallocations": self._deferred_reallocations,
                "allocations_after_lock": self._allocations_after_lock,
                "persistent_entries": sum(len(p) for p in self._persistent),
                "persistent_allocations": self._persistent_allocations,
                "cache_entries": sum(len(c) for c in self._caches),
                "cache_misses": self._cache_misses,
                "cache_clears": self._cache_clears,
                "largest_request_bytes": self._largest_request,
                "largest_request_exact_bytes": self._largest_request_exact,
            }

    # ------------------------------------------------------------------ observers

    def add_observer(self, observer: WorkspaceObserver) -> None:
        """Attach ``observer``: it is told about the buffers and persistent tensors held now, then
        about every later event. While any observer is attached, ``get_simultaneous`` reports every
        hand-out (an instrumented instance attribute; a bound ``get_simultaneous`` taken before
        attaching bypasses it)."""
        with self._lock:
            if observer in self._observers:
                return
            self._observers = self._observers + (observer,)
            for slot, buffer in enumerate(self._buffers):
                if buffer is not None and buffer.numel() > 0:
                    observer.buffer_allocated(self, slot, buffer)
            for slot, entries in enumerate(self._persistent):
                for key, entry in entries.items():
                    if entry.kind == "tensor":
                        observer.persistent_created(self, slot, key, entry.value)
            self.get_simultaneous = _observed_entry(self)  # type: ignore[method-assign]

    def remove_observer(self, observer: WorkspaceObserver) -> None:
        """Detach ``observer`` (no error if it is not attached)."""
        with self._lock:
            self._observers = tuple(o for o in self._observers if o is not observer)
            if not self._observers:
                if self._num_lanes > 1:
                    self.get_simultaneous = _lanes_entry(self)  # type: ignore[method-assign]
                else:
                    self.__dict__.pop("get_simultaneous", None)

    @property
    def observers(self) -> tuple[WorkspaceObserver, ...]:
        return self._observers

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

    # ------------------------------------------------------------------ slots

    def _current_slot(self) -> int:
        """The calling thread's slot: its ubatch id * num_lanes + its lane."""
        lane = _lane_var.get()
        if lane >= self._num_lanes:
            raise RuntimeError(
                f"workspace lane {lane} is not configured: this manager has {self._num_lanes} lane(s) "
                f"(0..{self._num_lanes - 1}); create it with num_lanes >= {lane + 1}"
            )
        return current_ubatch_id() * self._num_lanes + lane

    def _checked_slot(self, slot: int) -> int:
        if slot >= self._num_slots:
            ubatch, lane = self.owner_of(slot)
            where = f"ubatch id {ubatch}" + (f" (lane {lane})" if self._num_lanes > 1 else "")
            raise ValueError(
                f"{where} has no workspace slot: this manager has {self._num_slots} slot(s) "
                f"({self._num_ubatches} ubatch(es), ids 0..{self._num_ubatches - 1}). "
                f"Create it with num_ubatches >= {ubatch + 1}."
            )
        return slot

    def _group(self, slot: int) -> range:
        """The slots that follow ``slot`` under lockstep policies: one per ubatch, same lane."""
        return range(slot % self._num_lanes, self._num_slots, self._num_lanes)

    def _describe_slot(self, slot: int) -> str:
        ubatch, lane = self.owner_of(slot)
        return f"ubatch {ubatch}" + (f", lane {lane}" if self._num_lanes > 1 else "")

    def _undersized(self) -> list[int]:
        out = []
        for slot in range(self._num_slots):
            top = max(self._capacity[s] for s in self._group(slot))
            if self._capacity[slot] < top:
                out.append(slot)
        return out

    def _orphaned(self) -> int:
        self._retired = [(ref, n) for ref, n in self._retired if ref() is not None]
        return sum(n for _, n in self._retired)

    # ------------------------------------------------------------------ slow path

    def _get_slow(self, slot: int, specs: tuple[Any, ...]) -> list[torch.Tensor]:
        self._checked_slot(slot)
        if self._num_lanes == 1 and _lane_var.get() != 0:
            raise RuntimeError(
                f"workspace lane {_lane_var.get()} is not configured: this manager has 1 lane; "
                "create it with num_lanes > 1 to use use_workspace_lane"
            )
        canon = canonical_request(specs)  # validates; raises before anything changes
        views = self._caches[slot].get(canon)
        if views is not None:  # e.g. list shapes: unhashable as given, cached under the canonical key
            if self._debug:
                self._verify_views(slot, views, canon)
            return list(views)
        layout = plan(canon)
        with self._lock:
            if layout.total > self._capacity[slot]:
                self._grow(slot, layout.total)
            elif self._sizes[slot] < self._capacity[slot]:
                self._materialize(slot, "safe point")  # deferred growth: this call is the safe point
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

    def _drop(self, slot: int, retired: list[tuple[int, weakref.ref, int]]) -> None:
        """Drop a slot's cached views and buffer (free first). Holds ``_lock``."""
        self._caches[slot] = {}
        buffer = self._buffers[slot]
        self._buffers[slot] = None
        self._sizes[slot] = 0
        if buffer is not None and buffer.numel() > 0:
            retired.append((slot, weakref.ref(buffer.untyped_storage()), buffer.numel()))
        del buffer

    def _after_drop(self, retired: list[tuple[int, weakref.ref, int]]) -> int:
        """Account for the buffers just dropped, tell observers, flush; return the bytes orphaned
        (dropped buffers still alive because someone holds their views)."""
        orphaned = 0
        for slot, ref, nbytes in retired:
            if ref() is not None:
                self._orphaned()  # prune the dead ones first
                self._retired.append((ref, nbytes))
                orphaned += nbytes
            for obs in self._observers:
                obs.buffer_retired(self, slot, ref, nbytes)
        self._release_cached_memory()
        return orphaned

    def _allocate_slot(self, slot: int, nbytes: int) -> None:
        buffer = self._allocate(nbytes)
        if buffer.dtype != torch.uint8 or buffer.dim() != 1 or buffer.numel() != nbytes:
            raise RuntimeError(
                f"_allocate({nbytes}) returned {buffer.dtype} {tuple(buffer.shape)}, "
                f"not a 1-D uint8 tensor of {nbytes} bytes"
            )
        self._buffers[slot] = buffer
        self._sizes[slot] = nbytes
        if nbytes > self._capacity[slot]:
            self._capacity[slot] = nbytes
        self._allocations += 1
        if self._locked:  # cannot happen: growth is refused and lock() reallocates first; a tripwire
            self._allocations_after_lock += 1
        for obs in self._observers:
            obs.buffer_allocated(self, slot, buffer)

    def _grow(self, slot: int, required: int) -> None:
        """Grow ``slot`` (and its siblings, as the policy says) to exactly ``required`` bytes. Holds ``_lock``."""
        current = self._capacity[slot]
        if self._locked:
            caller = _caller()
            ubatch, lane = self.owner_of(slot)
            raise WorkspaceLockedError(
                f"Workspace is locked, but {caller} needs {_mb(required)} ({required} bytes) in the slot "
                f"of {self._describe_slot(slot)}, which holds {_mb(current)} ({current} bytes): growth is "
                "not allowed after locking. Warm up with the largest request before lock(), or unlock() to grow.",
                caller=caller,
                ubatch_id=ubatch,
                lane=lane,
                required_bytes=required,
                current_bytes=current,
            )
        old_capacity = list(self._capacity)
        policy = self._policy
        group = self._group(slot)
        now = list(group) if policy.grows_siblings_now else [slot]
        retired: list[tuple[int, weakref.ref, int]] = []
        for s in now:  # free first: cached views (they hold the storage too), then the buffer
            self._drop(s, retired)
        self._after_drop(retired)
        del retired
        try:
            for s in now:
                self._allocate_slot(s, required)
        except BaseException:
            for s in now:
                self._buffers[s] = None
                self._sizes[s] = 0
            if policy.grows_siblings_now:  # keep lockstep: every slot of the group empty
                for s in group:
                    self._capacity[s] = 0
            raise  # requester / deferred: the slot is empty but keeps its capacity; the next call retries
        for s in now:
            self._capacity[s] = required
        if policy.defers_siblings:
            for s in group:
                if s != slot and self._capacity[s] < required:
                    self._capacity[s] = required
                    self._caches[s] = {}  # its next call misses, reaching its safe point
        self._grows += 1
        if self._debug:
            logger.info(
                "workspace resize requested by %s (%s): %s -> %s per slot, growth %s, %d slots, %s total",
                _caller(),
                self._describe_slot(slot),
                _mb(old_capacity[slot]),
                _mb(required),
                policy.name,
                self._num_slots,
                _mb(sum(self._capacity)),
            )

    def _materialize(self, slot: int, when: str) -> None:
        """Give ``slot`` a buffer of its capacity (deferred growth). Holds ``_lock``."""
        old = self._sizes[slot]
        target = self._capacity[slot]
        retired: list[tuple[int, weakref.ref, int]] = []
        self._drop(slot, retired)
        orphaned = self._after_drop(retired)
        del retired
        if orphaned and when == "lock":
            logger.warning(
                "lock(): the slot of %s grew while it held views and has not called since; its old "
                "buffer (%s) stays alive as long as those views do",
                self._describe_slot(slot),
                _mb(orphaned),
            )
        try:
            self._allocate_slot(slot, target)
        except BaseException:
            self._buffers[slot] = None
            self._sizes[slot] = 0
            raise
        self._deferred_reallocations += 1
        if self._debug:
            logger.info(
                "workspace slot %d (%s) reallocated at its %s: %s -> %s",
                slot,
                self._describe_slot(slot),
                when,
                _mb(old),
                _mb(target),
            )

    def _refuse_new_persistent_if_locked(self, slot: int, key: Any) -> None:
        if not self._locked:
            return
        caller = _caller()
        ubatch, lane = self.owner_of(slot)
        raise WorkspaceLockedError(
            f"Workspace is locked, but {caller} asked for persistent resource {key!r}, which was not "
            f"created during warmup for ubatch {ubatch}, lane {lane}: creating persistent resources is "
            "not allowed after locking. Create it for every ubatch and lane during warmup, or unlock() first.",
            caller=caller,
            ubatch_id=ubatch,
            lane=lane,
            key=key,
        )

    def _new_persistent_tensor(self, shape: tuple[int, ...], dtype: torch.dtype, zero_init: bool) -> torch.Tensor:
        nbytes = nbytes_of(shape, dtype)
        buffer = self._allocate(nbytes)
        if buffer.dtype != torch.uint8 or buffer.dim() != 1 or buffer.numel() != nbytes:
            raise RuntimeError(f"_allocate({nbytes}) returned {buffer.dtype} {tuple(buffer.shape)}, not 1-D uint8")
        tensor = buffer.view(dtype).reshape(shape)
        del buffer
        if zero_init:
            tensor.zero_()
        self._persistent_allocations += 1
        return tensor

    def _describe_sizes(self) -> str:
        sizes = ", ".join(_mb(s) for s in self._capacity)
        return f"{self._num_slots} slots [{sizes}], {_mb(sum(self._capacity))} total"

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
                    f"cached workspace view {i} of {self._describe_slot(slot)} was changed in place: expected "
                    f"{tuple(shape)} {dtype} at byte {offset}, found {tuple(view.shape)} {view.dtype} at byte "
                    f"{view.data_ptr() - base} (requires_grad={view.requires_grad}). Views are shared "
                    "handles: change their contents, never their metadata (resize_, set_, as_strided_, "
                    "unsqueeze_, requires_grad_...); use out-of-place .view()/.reshape() instead."
                )


# ---------------------------------------------------------------------- lanes


@contextlib.contextmanager
def use_workspace_lane(lane: int) -> Iterator[int]:
    """Use workspace lane ``lane`` in this thread (and its context) for the ``with`` block.

    A negative lane raises ``ValueError``; a lane the process-global manager (if there is one) was
    not configured for raises ``RuntimeError`` (any manager checks again when it is used).
    """
    lane = _check_lane(lane)
    manager = _manager
    if manager is not None and lane >= manager.num_lanes:
        raise RuntimeError(
            f"workspace lane {lane} is not configured: the workspace manager has {manager.num_lanes} "
            f"lane(s); init_workspace_manager(..., num_lanes={lane + 1}) to use it"
        )
    token = _lane_var.set(lane)
    try:
        yield lane
    finally:
        _lane_var.reset(token)


def current_workspace_lane() -> int:
    """The calling thread's workspace lane (0 unless inside ``use_workspace_lane``)."""
    return _lane_var.get()


# ---------------------------------------------------------------------- process-global singleton
#
# The one workspace manager of the process (with the registry, one of the project's two
# process-globals). Every thread sees the same manager. The observer list below belongs to it:
# observers that want every manager (the sanitizer) are attached to each live and future manager.

_manager: WorkspaceManager | None = None
_manager_lock = threading.Lock()
_registry_lock = threading.Lock()
_all_managers: "weakref.WeakSet[WorkspaceManager]" = weakref.WeakSet()
_global_observers: list[WorkspaceObserver] = []


def add_global_observer(observer: WorkspaceObserver) -> None:
    """Attach ``observer`` to every live manager and to every manager created later."""
    with _registry_lock:
        if observer not in _global_observers:
            _global_observers.append(observer)
        managers = list(_all_managers)
    for m in managers:
        m.add_observer(observer)


def remove_global_observer(observer: WorkspaceObserver) -> None:
    """Detach ``observer`` from every manager (no error if it was not attached)."""
    with _registry_lock:
        if observer in _global_observers:
            _global_observers.remove(observer)
        managers = list(_all_managers)
    for m in managers:
        m.remove_observer(observer)


def init_workspace_manager(
    device: str | torch.device,
    num_ubatches: int | None = None,
    *,
    growth: str | GrowthPolicy | None = None,
    num_lanes: int = 1,
) -> WorkspaceManager:
    """Create the process-global manager; warns (``UserWarning``) and replaces an existing one."""
    global _manager
    new = WorkspaceManager(device, num_ubatches, growth=growth, num_lanes=num_lanes)  # bad arguments raise here
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
