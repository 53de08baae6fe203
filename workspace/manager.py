"""WorkspaceManager: per-ubatch (and per-lane) scratch slots.

Each (ubatch, lane) owns one slot, a 1-D uint8 buffer; slot = ubatch * num_lanes + lane, where the
ubatch is ``dbo.registry.current_ubatch_id()`` and the lane comes from ``use_workspace_lane``.
``get_simultaneous`` carves a group of views out of the calling slot, each at a 256-byte aligned
offset. Treat it like a group of ``torch.empty`` calls whose results live until the same slot's
next ``get_simultaneous`` call. How sibling slots follow a growing slot is the growth policy
(``workspace.policy``); the mechanics are in ``workspace.growth``, persistent objects in
``workspace.persistent``, read-only state in ``workspace.introspection``, the process-global
singleton in ``workspace.singleton``.

Threading model:

* Growth, deferred reallocation, locking, persistent creation and view construction run under one
  ``threading.Lock``.
* The hot path (a request seen before, for the calling slot) is lock-free: the lane check, one
  dict lookup in the slot's cache and a fresh list of the cached view objects. No torch op, no
  allocation.
* A thread may read a cache entry just before another thread's growth replaces its slot's cache.
  It then returns views of the buffer it had. That is memory-safe: the views keep that storage
  alive. Under ``lockstep`` that buffer may just have been replaced (the views are orphaned);
  under ``deferred-lockstep`` and ``requester`` a sibling's buffer is never replaced by another
  thread, so the views are simply its current ones.

There is one ``get_simultaneous`` path for every manager: one lane or several, observed or not.
Observers (``add_observer``; the sanitizer, memory trackers) are told about buffer allocations
and retirements, persistent tensors and every hand-out of views; with none attached the hot path
pays one truthiness test of an empty tuple.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

from dbo.registry import current_ubatch_id
from workspace.diagnostics import DEBUG_ENV, debug_enabled, logger, mib
from workspace.errors import InvalidArgumentError, InvalidArgumentTypeError, NoSlotError
from workspace.growth import GrowthMixin
from workspace.introspection import IntrospectionMixin
from workspace.lanes import lane_not_configured, lane_var
from workspace.layout import canonical_request, carve, plan
from workspace.observers import WorkspaceObserver, track_manager
from workspace.persistent import Persistent, PersistentMixin
from workspace.policy import GrowthPolicy, get_policy

__all__ = ["CACHE_LIMIT", "DEBUG_ENV", "WorkspaceManager"]

CACHE_LIMIT = 1024
"""Most request signatures cached per slot; a slot's cache is cleared when it would exceed this."""

DEFAULT_NUM_UBATCHES = 2
_Size = torch.Size
_current_lane = lane_var.get


def _exact_ints(shapes_and_dtypes: tuple[Any, ...]) -> bool:
    """Whether every dim of a request that hit the cache is an exact int.

    Python says True == 1 == 1.0: a hit may come from a request with bool or float dims, which
    must be rejected exactly as on a cold manager.
    """
    for shape, _ in shapes_and_dtypes:
        kind = type(shape)
        if kind is int:
            continue
        if kind is not tuple and kind is not _Size:
            return False
        for dim in shape:
            if type(dim) is not int:
                return False
    return True


def _check_device(device: object) -> torch.device:
    if isinstance(device, torch.device):
        return device
    if isinstance(device, str):
        try:
            return torch.device(device)
        except RuntimeError as exc:
            raise InvalidArgumentError(f"not a valid torch device: {device!r} ({exc})") from None
    raise InvalidArgumentTypeError(f"device must be a str or torch.device, got {type(device).__name__}: {device!r}")


def _check_count(name: str, value: object, default: int | None) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if default is not None else "an int"
        raise InvalidArgumentTypeError(f"{name} must be {kind}, got {type(value).__name__}: {value!r}")
    if value < 1:
        raise InvalidArgumentError(f"{name} must be >= 1 (at least one), got {value}")
    return value


class WorkspaceManager(GrowthMixin, PersistentMixin, IntrospectionMixin):
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
        self._persistent: list[dict[Any, Persistent]] = [{} for _ in range(n)]
        self._locked = False
        self._lock = threading.Lock()
        self._debug = debug_enabled()
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
        for obs in track_manager(self):
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

    @property
    def observers(self) -> tuple[WorkspaceObserver, ...]:
        return self._observers

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
            f"growth={self._policy.name!r}, capacity={mib(max(self._capacity))}, {state})"
        )

    # ------------------------------------------------------------------ the API

    def get_simultaneous(self, *shapes_and_dtypes: Any) -> list[torch.Tensor]:
        """Views for each ``(shape, dtype)``, carved from the calling ubatch's slot in request order.

        Like a group of ``torch.empty`` calls (no zeroing) whose results live until this slot's next
        call. The returned tensors are shared handles: never change their metadata (``resize_``,
        ``set_``, ``as_strided_``, ``unsqueeze_``, ``requires_grad_``...), only their contents.
        A lane beyond ``num_lanes`` raises ``LaneNotConfiguredError``, whether or not the request
        was seen before and whether or not observers are attached.
        """
        lanes = self._num_lanes
        lane = _current_lane()
        if lane >= lanes:
            raise lane_not_configured(lane, lanes)
        slot = current_ubatch_id() * lanes + lane
        # The hit path of _get_at, inlined: this is the per-call cost of every model op.
        try:
            views = self._caches[slot].get(shapes_and_dtypes)
        except (IndexError, TypeError):  # slot beyond the slots, or an unhashable spec (list shape)
            views = None
        if views is not None:
            for shape, _ in shapes_and_dtypes:  # _exact_ints, inlined
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
        if views is not None:
            if self._debug:
                self._verify_views(slot, views, shapes_and_dtypes)
            out = list(views)
        else:
            out = self._get_slow(slot, shapes_and_dtypes)  # no cached view is referenced here
        if self._observers:
            for obs in self._observers:
                obs.views_handed_out(self, slot, out)
        return out

    def _get_at(self, slot: int, shapes_and_dtypes: tuple[Any, ...]) -> list[torch.Tensor]:
        """The views of ``shapes_and_dtypes`` in ``slot`` (no lane check, no observers)."""
        try:
            views = self._caches[slot].get(shapes_and_dtypes)
        except (IndexError, TypeError):
            views = None
        if views is not None and _exact_ints(shapes_and_dtypes):
            if self._debug:
                self._verify_views(slot, views, shapes_and_dtypes)
            return list(views)
        del views
        return self._get_slow(slot, shapes_and_dtypes)

    def _get_slow(self, slot: int, specs: tuple[Any, ...]) -> list[torch.Tensor]:
        self._checked_slot(slot)
        canon = canonical_request(specs)  # validates; raises before anything changes
        views = self._caches[slot].get(canon)
        if views is not None:  # e.g. list shapes: unhashable as given, cached under the canonical key
            if self._debug:
                self._verify_views(slot, views, canon)
            return list(views)
        layout = plan(canon)
        with self._lock:  # growth and carving never interleave with another thread's growth
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

    # ------------------------------------------------------------------ observers

    def add_observer(self, observer: WorkspaceObserver) -> None:
        """Attach ``observer``: it is told about the buffers and persistent tensors held now, then
        about every later event, including every ``get_simultaneous`` hand-out."""
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

    def remove_observer(self, observer: WorkspaceObserver) -> None:
        """Detach ``observer`` (no error if it is not attached)."""
        with self._lock:
            self._observers = tuple(o for o in self._observers if o is not observer)

    # ------------------------------------------------------------------ slots

    def _current_slot(self) -> int:
        """The calling thread's slot: its ubatch id * num_lanes + its lane."""
        lane = lane_var.get()
        if lane >= self._num_lanes:
            raise lane_not_configured(lane, self._num_lanes)
        return current_ubatch_id() * self._num_lanes + lane

    def _checked_slot(self, slot: int) -> int:
        if slot >= self._num_slots:
            ubatch, lane = self.owner_of(slot)
            where = f"ubatch id {ubatch}" + (f" (lane {lane})" if self._num_lanes > 1 else "")
            raise NoSlotError(
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

    def _describe_sizes(self) -> str:
        sizes = ", ".join(mib(s) for s in self._capacity)
        return f"{self._num_slots} slots [{sizes}], {mib(sum(self._capacity))} total"
