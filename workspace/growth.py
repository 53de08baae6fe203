"""The mechanics of growth: free a slot's buffer first, allocate the new one, follow the policy.

``GrowthMixin`` is one part of ``WorkspaceManager``. Every method here runs with the manager's
``_lock`` held (the caller takes it): two growths never interleave, so the slots of a lane stay in
lockstep and a thread never carves views from a buffer another thread is replacing.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from workspace.diagnostics import caller, logger, mib
from workspace.errors import BadAllocationError, ViewMetadataChangedError, WorkspaceLockedError
from workspace.layout import Plan, canonical_request, plan

__all__ = ["GrowthMixin"]

_Retired = list[tuple[int, weakref.ref, int]]


class GrowthMixin:
    """Slot growth, deferred reallocation, and the overridable allocation hooks of the manager."""

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

    # ------------------------------------------------------------------ growth

    def _drop(self, slot: int, retired: _Retired) -> None:
        """Drop a slot's cached views and buffer (free first)."""
        self._caches[slot] = {}
        buffer = self._buffers[slot]
        self._buffers[slot] = None
        self._sizes[slot] = 0
        if buffer is not None and buffer.numel() > 0:
            retired.append((slot, weakref.ref(buffer.untyped_storage()), buffer.numel()))
        del buffer

    def _after_drop(self, retired: _Retired) -> int:
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
            raise BadAllocationError(
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
        """Grow ``slot`` (and its siblings, as the policy says) to exactly ``required`` bytes."""
        current = self._capacity[slot]
        if self._locked:
            where = caller()
            ubatch, lane = self.owner_of(slot)
            raise WorkspaceLockedError(
                f"Workspace is locked, but {where} needs {mib(required)} ({required} bytes) in the slot "
                f"of {self._describe_slot(slot)}, which holds {mib(current)} ({current} bytes): growth is "
                "not allowed after locking. Warm up with the largest request before lock(), or unlock() to grow.",
                caller=where,
                ubatch_id=ubatch,
                lane=lane,
                required_bytes=required,
                current_bytes=current,
            )
        old_capacity = self._capacity[slot]
        policy = self._policy
        group = self._group(slot)
        now = list(group) if policy.grows_siblings_now else [slot]
        retired: _Retired = []
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
                caller(),
                self._describe_slot(slot),
                mib(old_capacity),
                mib(required),
                policy.name,
                self._num_slots,
                mib(sum(self._capacity)),
            )

    def _materialize(self, slot: int, when: str) -> None:
        """Give ``slot`` a buffer of its capacity (deferred growth)."""
        old = self._sizes[slot]
        target = self._capacity[slot]
        retired: _Retired = []
        self._drop(slot, retired)
        orphaned = self._after_drop(retired)
        del retired
        if orphaned and when == "lock":
            logger.warning(
                "lock(): the slot of %s grew while it held views and has not called since; its old "
                "buffer (%s) stays alive as long as those views do",
                self._describe_slot(slot),
                mib(orphaned),
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
                mib(old),
                mib(target),
            )

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
                raise ViewMetadataChangedError(
                    f"cached workspace view {i} of {self._describe_slot(slot)} was changed in place: expected "
                    f"{tuple(shape)} {dtype} at byte {offset}, found {tuple(view.shape)} {view.dtype} at byte "
                    f"{view.data_ptr() - base} (requires_grad={view.requires_grad}). Views are shared "
                    "handles: change their contents, never their metadata (resize_, set_, as_strided_, "
                    "unsqueeze_, requires_grad_...); use out-of-place .view()/.reshape() instead."
                )
